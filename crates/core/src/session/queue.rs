//! One connection's requests in arrival order, and how far each has come.
//!
//! The queue is what gives a session ZooKeeper's ordering: replies leave
//! strictly in request order; a read is answered only once it reaches the
//! front, so it sees every earlier write of its session; writes and syncs
//! pipeline, each starting as soon as only writes and syncs are ahead of it,
//! and the leader commits them in the order they started.
//!
//! A linearizable read starts a barrier as a sync does, as soon as it
//! arrives (reads ahead of it hold back what follows them, never its
//! barrier): it is answered at the front, once the tree has reached the
//! point the leader confirmed after the read arrived.
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
    /// A sync (or a linearizable read's barrier) the leader answered: done
    /// (or cleared) once the tree reaches this zxid.
    WaitApplied(Zxid),
    /// A linearizable read whose barrier the tree has passed: answered at the front.
    Cleared,
    /// Answered, waiting for its turn to be sent.
    Done(Reply),
}

#[derive(Debug)]
struct Pending<E> {
    xid: i32,
    echo: E,
    op: Op,
    progress: Progress,
    /// A read that waits for a barrier before it is answered.
    linearizable: bool,
}

impl<E> Pending<E> {
    /// Writes and syncs go to the leader and may overlap; everything else is
    /// answered here, at the front.
    fn pipelines(&self) -> bool {
        self.op.is_write() || matches!(self.op, Op::Sync { .. })
    }
}

/// A write, sync or read barrier to start now.
#[derive(Debug)]
pub struct Start {
    /// The tag its outcome will carry.
    pub cxid: i32,
    /// What starts.
    pub what: Starting,
}

/// What a [`Start`] sends on its way.
#[derive(Debug)]
pub enum Starting {
    /// A write or sync (a copy: the queue keeps the original to shape the reply).
    Request(Op),
    /// A linearizable read's barrier, answered as a sync is (the read stays here).
    Barrier,
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
    /// Linearizable reads whose barrier has not started (while none is,
    /// [`start`](Self::start) stops at the first unanswered read).
    unstarted_barriers: usize,
}

impl<E> Default for RequestQueue<E> {
    fn default() -> Self {
        RequestQueue { items: VecDeque::new(), unstarted_barriers: 0 }
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
    /// failed validation); the reply still waits for its turn. A
    /// `linearizable` read waits for a barrier (ignored for other ops).
    pub fn push(&mut self, xid: i32, echo: E, op: Op, refused: Option<ZkError>, linearizable: bool) {
        let progress = match refused {
            Some(e) => Progress::Done(Err(e)),
            None => Progress::New,
        };
        let linearizable = linearizable && op.reads_tree();
        if linearizable && matches!(progress, Progress::New) {
            self.unstarted_barriers += 1;
        }
        self.items.push_back(Pending { xid, echo, op, progress, linearizable });
    }

    /// Starts every write and sync that may start now, tagging each with a
    /// fresh `cxid()`, and returns them in order.
    pub fn start(&mut self, mut cxid: impl FnMut() -> i32) -> Vec<Start> {
        let mut started = Vec::new();
        let mut blocked = false;
        for p in self.items.iter_mut() {
            if blocked && self.unstarted_barriers == 0 {
                break;
            }
            let new = matches!(p.progress, Progress::New);
            if p.pipelines() {
                if new && !blocked {
                    let cxid = cxid();
                    p.progress = Progress::Started(cxid);
                    started.push(Start { cxid, what: Starting::Request(p.op.clone()) });
                }
                continue;
            }
            if new && p.linearizable {
                let cxid = cxid();
                p.progress = Progress::Started(cxid);
                self.unstarted_barriers -= 1;
                started.push(Start { cxid, what: Starting::Barrier });
            }
            // A read not yet answered holds back every write and sync behind it.
            blocked |= !matches!(p.progress, Progress::Done(_));
        }
        started
    }

    /// The request at the front if it is one to answer here (a read, an auth)
    /// and not yet answered (a linearizable read once its barrier cleared).
    pub fn read_at_front(&self) -> Option<&Op> {
        let front = self.items.front()?;
        let ready = match front.progress {
            Progress::New => !front.linearizable,
            Progress::Cleared => true,
            _ => false,
        };
        (ready && !front.pipelines()).then_some(&front.op)
    }

    /// Answers the request [`read_at_front`](Self::read_at_front) returned.
    pub fn answer_front(&mut self, reply: Reply) {
        if let Some(front) = self.items.front_mut() {
            debug_assert!(matches!(front.progress, Progress::New | Progress::Cleared) && !front.pipelines());
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

    /// Completes the syncs (and clears the barriers) the tree has caught up
    /// with; true while another still waits.
    pub fn applied(&mut self, applied: Zxid) -> bool {
        let mut waiting = false;
        for p in self.items.iter_mut() {
            if let Progress::WaitApplied(z) = p.progress {
                if applied >= z && p.linearizable {
                    p.progress = Progress::Cleared;
                } else if applied >= z {
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
        q.push(1, (), set("/a"), None, false);
        q.push(2, (), Op::Sync { path: "/".into() }, None, false);
        q.push(3, (), get("/a"), None, false);
        q.push(4, (), set("/b"), None, false);
        let mut cxid = counter();
        let started: Vec<i32> = q.start(&mut cxid).iter().map(|s| s.cxid).collect();
        assert_eq!(started, vec![1, 2], "the read holds back the write behind it");
        assert!(q.start(&mut cxid).is_empty(), "nothing starts twice");
        assert!(q.read_at_front().is_none(), "the read is not at the front yet");
    }

    #[test]
    fn replies_leave_in_request_order() {
        let mut q = RequestQueue::default();
        q.push(1, "a", set("/a"), None, false);
        q.push(2, "b", set("/b"), None, false);
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
        q.push(1, (), get("/a"), None, false);
        q.push(2, (), set("/a"), None, false);
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
        q.push(1, (), set("/a"), None, false);
        q.push(2, (), set("bad"), Some(ZkError::new(ErrorCode::BadArguments, "bad")), false);
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
        q.push(7, (), Op::Sync { path: "/x".into() }, None, false);
        let started = q.start(counter());
        assert!(q.sync_answered(started[0].cxid, Zxid(5)));
        assert!(q.applied(Zxid(4)), "still waiting");
        assert!(q.pop_answered().is_none());
        assert!(!q.applied(Zxid(5)));
        let answered = q.pop_answered().map(|a| a.reply);
        assert_eq!(answered, Some(Ok(OpResult::Synced("/x".into()))));
    }

    #[test]
    fn a_linearizable_read_waits_for_its_barrier_then_the_front() {
        let mut q = RequestQueue::default();
        q.push(1, (), get("/a"), None, false);
        q.push(2, (), get("/b"), None, true);
        q.push(3, (), set("/c"), None, false);
        let mut cxid = counter();
        let started = q.start(&mut cxid);
        assert_eq!(started.len(), 1, "the barrier starts behind a plain read; the write behind both waits");
        assert!(matches!(started[0].what, Starting::Barrier));
        assert!(q.start(&mut cxid).is_empty(), "nothing starts twice");
        assert_eq!(q.read_at_front(), Some(&get("/a")));
        q.answer_front(Ok(OpResult::Empty));
        assert_eq!(q.pop_answered().map(|a| a.xid), Some(1));
        assert!(q.read_at_front().is_none(), "its barrier is not answered yet");
        assert!(q.sync_answered(started[0].cxid, Zxid(9)));
        assert!(q.applied(Zxid(8)), "still waiting for the tree");
        assert!(q.read_at_front().is_none());
        assert!(q.start(&mut cxid).is_empty(), "the write waits for the read");
        assert!(!q.applied(Zxid(9)));
        assert_eq!(q.read_at_front(), Some(&get("/b")), "cleared, at the front");
        q.answer_front(Ok(OpResult::Empty));
        assert_eq!(q.pop_answered().map(|a| a.xid), Some(2));
        assert_eq!(q.start(&mut cxid).len(), 1, "now the write starts");
    }

    #[test]
    fn a_failed_barrier_fails_its_read_and_only_reads_take_one() {
        let mut q = RequestQueue::default();
        q.push(1, (), Op::WhoAmI, None, true);
        q.push(2, (), get("/b"), None, true);
        let started = q.start(counter());
        assert_eq!(started.len(), 1, "whoAmI reads no tree: only the read behind it has a barrier");
        assert_eq!(q.read_at_front(), Some(&Op::WhoAmI), "answered at once");
        q.answer_front(Ok(OpResult::Empty));
        assert!(q.pop_answered().is_some());
        assert!(q.complete(started[0].cxid, |_| Err(ZkError::new(ErrorCode::ConnectionLoss, ""))));
        let failed = q.pop_answered().map(|a| a.reply.map_err(|e| e.code));
        assert_eq!(failed, Some(Err(ErrorCode::ConnectionLoss)));
    }
}
