//! One connection's requests in arrival order, and how far each has come.
//!
//! The queue is what gives a session ZooKeeper's ordering: replies leave
//! strictly in request order; a read is answered only once it reaches the
//! front, so it sees every earlier write of its session; writes and syncs
//! pipeline, each starting as soon as only writes and syncs are ahead of it,
//! and the leader commits them in the order they started.
//!
//! `E` is whatever the front end wants back with the reply; the queue only
//! carries it.

use crate::error::ZkError;
use crate::ids::Zxid;
use crate::op::{Op, OpResult, Reply};
use std::collections::VecDeque;

#[derive(Debug)]
enum Progress {
    /// Not started (a read waits to reach the front, a write for its turn).
    New,
    /// A write or sync on its way to the leader, tagged `cxid`.
    Started(i32),
    /// A sync the leader answered: done once the tree reaches this zxid.
    WaitApplied(Zxid),
    /// Answered, waiting for its turn to be sent.
    Done(Reply),
}

#[derive(Debug)]
struct Pending<E> {
    xid: i32,
    echo: E,
    op: Op,
    progress: Progress,
}

impl<E> Pending<E> {
    /// Writes and syncs go to the leader and may overlap; everything else is
    /// answered here, at the front.
    fn pipelines(&self) -> bool {
        self.op.is_write() || matches!(self.op, Op::Sync { .. })
    }
}

/// A write or sync to start now.
#[derive(Debug)]
pub struct Start {
    /// The tag its outcome will carry.
    pub cxid: i32,
    /// The request (a copy: the queue keeps the original to shape the reply).
    pub op: Op,
}

/// A request whose reply may go out now.
#[derive(Debug)]
pub struct Answered<E> {
    /// The client's xid.
    pub xid: i32,
    /// What the front end handed in.
    pub echo: E,
    /// The request.
    pub op: Op,
    /// The outcome.
    pub reply: Reply,
}

/// One connection's requests, oldest first.
#[derive(Debug)]
pub struct RequestQueue<E> {
    items: VecDeque<Pending<E>>,
}

impl<E> Default for RequestQueue<E> {
    fn default() -> Self {
        RequestQueue { items: VecDeque::new() }
    }
}

impl<E> RequestQueue<E> {
    /// Requests not yet replied to.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether every request was replied to.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends a request. `refused` answers it at once (a request that
    /// failed validation); the reply still waits for its turn.
    pub fn push(&mut self, xid: i32, echo: E, op: Op, refused: Option<ZkError>) {
        let progress = match refused {
            Some(e) => Progress::Done(Err(e)),
            None => Progress::New,
        };
        self.items.push_back(Pending { xid, echo, op, progress });
    }

    /// Starts every write and sync that may start now, tagging each with a
    /// fresh `cxid()`, and returns them in order.
    pub fn start(&mut self, mut cxid: impl FnMut() -> i32) -> Vec<Start> {
        let mut started = Vec::new();
        for p in self.items.iter_mut() {
            let new = matches!(p.progress, Progress::New);
            if !p.pipelines() {
                if new {
                    // A read not yet answered holds back everything behind it.
                    break;
                }
                continue;
            }
            if new {
                let cxid = cxid();
                p.progress = Progress::Started(cxid);
                started.push(Start { cxid, op: p.op.clone() });
            }
        }
        started
    }

    /// The request at the front if it is one to answer here (a read, an auth)
    /// and not yet answered.
    pub fn read_at_front(&self) -> Option<&Op> {
        let front = self.items.front()?;
        (matches!(front.progress, Progress::New) && !front.pipelines()).then_some(&front.op)
    }

    /// Answers the request [`read_at_front`](Self::read_at_front) returned.
    pub fn answer_front(&mut self, reply: Reply) {
        if let Some(front) = self.items.front_mut() {
            debug_assert!(matches!(front.progress, Progress::New) && !front.pipelines());
            front.progress = Progress::Done(reply);
        }
    }

    /// Completes the started request tagged `cxid` with the reply `shape`
    /// makes of it; false when no request carries that tag.
    pub fn complete(&mut self, cxid: i32, shape: impl FnOnce(&Op) -> Reply) -> bool {
        let Some(p) = self.started(cxid) else { return false };
        p.progress = Progress::Done(shape(&p.op));
        true
    }

    /// The started sync tagged `cxid` was answered by the leader: it is done
    /// once the tree has applied `zxid`. False when no request carries that tag.
    pub fn sync_answered(&mut self, cxid: i32, zxid: Zxid) -> bool {
        let Some(p) = self.started(cxid) else { return false };
        p.progress = Progress::WaitApplied(zxid);
        true
    }

    /// The started request tagged `cxid`.
    fn started(&mut self, cxid: i32) -> Option<&mut Pending<E>> {
        self.items.iter_mut().find(|p| matches!(p.progress, Progress::Started(c) if c == cxid))
    }

    /// Completes the syncs the tree has caught up with; true while another
    /// still waits.
    pub fn applied(&mut self, applied: Zxid) -> bool {
        let mut waiting = false;
        for p in self.items.iter_mut() {
            if let Progress::WaitApplied(z) = p.progress {
                if applied >= z {
                    let path = match &p.op {
                        Op::Sync { path } => path.clone(),
                        _ => String::new(),
                    };
                    p.progress = Progress::Done(Ok(OpResult::Synced(path)));
                } else {
                    waiting = true;
                }
            }
        }
        waiting
    }

    /// Takes the front request once it is answered.
    pub fn pop_answered(&mut self) -> Option<Answered<E>> {
        if !matches!(self.items.front()?.progress, Progress::Done(_)) {
            return None;
        }
        let p = self.items.pop_front()?;
        let Progress::Done(reply) = p.progress else {
            unreachable!("the front was just seen answered");
        };
        Some(Answered { xid: p.xid, echo: p.echo, op: p.op, reply })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn set(path: &str) -> Op {
        Op::SetData { path: path.into(), data: Default::default(), version: -1 }
    }

    fn get(path: &str) -> Op {
        Op::GetData { path: path.into(), watch: false }
    }

    fn counter() -> impl FnMut() -> i32 {
        let mut n = 0;
        move || {
            n += 1;
            n
        }
    }

    #[test]
    fn writes_pipeline_until_a_read() {
        let mut q = RequestQueue::default();
        q.push(1, (), set("/a"), None);
        q.push(2, (), Op::Sync { path: "/".into() }, None);
        q.push(3, (), get("/a"), None);
        q.push(4, (), set("/b"), None);
        let mut cxid = counter();
        let started: Vec<i32> = q.start(&mut cxid).iter().map(|s| s.cxid).collect();
        assert_eq!(started, vec![1, 2], "the read holds back the write behind it");
        assert!(q.start(&mut cxid).is_empty(), "nothing starts twice");
        assert!(q.read_at_front().is_none(), "the read is not at the front yet");
    }

    #[test]
    fn replies_leave_in_request_order() {
        let mut q = RequestQueue::default();
        q.push(1, "a", set("/a"), None);
        q.push(2, "b", set("/b"), None);
        let mut cxid = counter();
        assert_eq!(q.start(&mut cxid).len(), 2);
        assert!(q.complete(2, |_| Ok(OpResult::Empty)));
        assert!(q.pop_answered().is_none(), "the second may not overtake the first");
        assert!(q.complete(1, |_| Ok(OpResult::Empty)));
        let order: Vec<(i32, &str)> = std::iter::from_fn(|| q.pop_answered()).map(|a| (a.xid, a.echo)).collect();
        assert_eq!(order, vec![(1, "a"), (2, "b")]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_read_is_answered_at_the_front_then_unblocks_writes() {
        let mut q = RequestQueue::default();
        q.push(1, (), get("/a"), None);
        q.push(2, (), set("/a"), None);
        let mut cxid = counter();
        assert!(q.start(&mut cxid).is_empty());
        assert_eq!(q.read_at_front(), Some(&get("/a")));
        q.answer_front(Ok(OpResult::Empty));
        assert_eq!(q.pop_answered().map(|a| a.xid), Some(1));
        assert_eq!(q.start(&mut cxid).len(), 1);
    }

    #[test]
    fn a_refused_request_keeps_its_turn() {
        let mut q = RequestQueue::default();
        q.push(1, (), set("/a"), None);
        q.push(2, (), set("bad"), Some(ZkError::new(ErrorCode::BadArguments, "bad")));
        let mut cxid = counter();
        assert_eq!(q.start(&mut cxid).len(), 1, "the refused one is not started");
        assert!(q.pop_answered().is_none());
        assert!(q.complete(1, |_| Ok(OpResult::Empty)));
        assert_eq!(q.pop_answered().map(|a| a.xid), Some(1));
        let refused = q.pop_answered().map(|a| a.reply.map_err(|e| e.code));
        assert_eq!(refused.map(|r| r.err()), Some(Some(ErrorCode::BadArguments)));
    }

    #[test]
    fn a_sync_completes_once_the_tree_reaches_the_leaders_zxid() {
        let mut q = RequestQueue::default();
        q.push(7, (), Op::Sync { path: "/x".into() }, None);
        let started = q.start(counter());
        assert!(q.sync_answered(started[0].cxid, Zxid(5)));
        assert!(q.applied(Zxid(4)), "still waiting");
        assert!(q.pop_answered().is_none());
        assert!(!q.applied(Zxid(5)));
        let answered = q.pop_answered().map(|a| a.reply);
        assert_eq!(answered, Some(Ok(OpResult::Synced("/x".into()))));
    }
}
