//! The in-flight requests of one session, in the order they were sent: the
//! server answers in that order, so every response must match the head.

use std::collections::VecDeque;

/// A response that does not fit the queue: the connection cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FifoError {
    /// A response arrived while nothing was in flight.
    #[error("response with xid {got} while no request is in flight")]
    Unexpected {
        /// The response's xid.
        got: i32,
    },
    /// A response arrived out of order.
    #[error("response with xid {got} while the oldest request in flight has xid {expected}")]
    OutOfOrder {
        /// The head's xid.
        expected: i32,
        /// The response's xid.
        got: i32,
    },
}

/// Requests in flight, oldest first, each under the xid it was sent with.
pub(crate) struct Fifo<T> {
    queue: VecDeque<(i32, T)>,
    next_xid: i32,
}

impl<T> Fifo<T> {
    /// An empty queue; xids start at 1.
    pub(crate) fn new() -> Fifo<T> {
        Fifo { queue: VecDeque::new(), next_xid: 1 }
    }

    /// Queues a request and returns the xid to send it with. Xids wrap from
    /// `i32::MAX` back to 1 (negative xids are ZooKeeper's special ones).
    pub(crate) fn push(&mut self, item: T) -> i32 {
        let xid = self.next_xid;
        self.next_xid = if xid == i32::MAX { 1 } else { xid + 1 };
        self.queue.push_back((xid, item));
        xid
    }

    /// Removes the head if the response's `xid` is its own.
    pub(crate) fn complete(&mut self, xid: i32) -> Result<T, FifoError> {
        match self.queue.front() {
            None => Err(FifoError::Unexpected { got: xid }),
            Some((expected, _)) if *expected != xid => Err(FifoError::OutOfOrder { expected: *expected, got: xid }),
            Some(_) => self.queue.pop_front().map(|(_, item)| item).ok_or(FifoError::Unexpected { got: xid }),
        }
    }

    /// Takes every request still in flight, oldest first.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.queue.drain(..).map(|(_, item)| item).collect()
    }

    /// Number in flight.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is in flight.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    #[cfg(test)]
    fn set_next_xid(&mut self, xid: i32) {
        self.next_xid = xid;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_complete_requests_in_order() {
        let mut fifo = Fifo::new();
        let a = fifo.push("a");
        let b = fifo.push("b");
        assert_eq!((a, b), (1, 2));
        assert_eq!(fifo.complete(1), Ok("a"));
        assert_eq!(fifo.complete(2), Ok("b"));
        assert!(fifo.is_empty());
    }

    #[test]
    fn an_out_of_order_or_unexpected_response_is_refused_and_keeps_the_queue() {
        let mut fifo = Fifo::new();
        fifo.push("a");
        fifo.push("b");
        assert_eq!(fifo.complete(2), Err(FifoError::OutOfOrder { expected: 1, got: 2 }));
        assert_eq!(fifo.len(), 2);
        assert_eq!(fifo.drain(), vec!["a", "b"]);
        assert_eq!(fifo.complete(3), Err(FifoError::Unexpected { got: 3 }));
    }

    #[test]
    fn xids_wrap_to_one_and_stay_positive() {
        let mut fifo = Fifo::new();
        fifo.set_next_xid(i32::MAX);
        assert_eq!(fifo.push(()), i32::MAX);
        assert_eq!(fifo.push(()), 1);
        assert_eq!(fifo.complete(i32::MAX), Ok(()));
        assert_eq!(fifo.complete(1), Ok(()));
    }
}
