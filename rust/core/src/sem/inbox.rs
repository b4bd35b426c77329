//! A core's inbox: work another thread hands to the core, run on the core's
//! own thread at its next synchronisation point (a wait, a semaphore read,
//! a grid step's block copies, a buffer free, the end of its program).
//!
//! Under `dma_execution_mode="tpu"` a DMA to another core lands here: its
//! bytes reach the destination's memory when the destination next
//! synchronises, never between two of its loads or stores (see `dma`).
//!
//! First in, first out. Closed when the core's program ends: after that
//! nothing is queued any more and the sender runs the work itself (the
//! core runs nothing that could observe the order). Work queued before the
//! close is run by whoever closed the inbox.
//!
//! Waking: a sender publishes the entry (the count, under the lock) and
//! then wakes the core's parker; a parker re-checks [`Inbox::has_work`]
//! after announcing itself (the protocol of `park`).

use crate::sync::{lock, AtomicUsize, Mutex, Ordering};
use std::collections::VecDeque;

pub(crate) struct Inbox<T> {
    /// Entries queued now: read without the lock (an inbox is nearly
    /// always empty, and every wait looks).
    queued: AtomicUsize,
    state: Mutex<InboxState<T>>,
}

struct InboxState<T> {
    closed: bool,
    queue: VecDeque<T>,
}

impl<T> Inbox<T> {
    pub fn new() -> Self {
        Inbox { queued: AtomicUsize::new(0), state: Mutex::new(InboxState { closed: false, queue: VecDeque::new() }) }
    }

    /// Queues `task`; gives it back if the inbox is closed (the sender then
    /// runs it). The caller wakes the core after a successful push.
    pub fn push(&self, task: T) -> Result<(), T> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(task);
        }
        st.queue.push_back(task);
        self.queued.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The oldest entry, if any.
    pub fn pop(&self) -> Option<T> {
        if !self.has_work() {
            return None;
        }
        let mut st = lock(&self.state);
        let task = st.queue.pop_front();
        if task.is_some() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
        }
        task
    }

    #[inline]
    pub fn has_work(&self) -> bool {
        self.queued.load(Ordering::SeqCst) > 0
    }

    /// No more entries: later pushes give their task back. Entries queued
    /// already stay, for the closer to run.
    pub fn close(&self) {
        lock(&self.state).closed = true;
    }

    /// `f` of each queued entry, oldest first (reports).
    pub fn each(&self, mut f: impl FnMut(&T)) {
        lock(&self.state).queue.iter().for_each(&mut f);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Inbox;

    #[test]
    fn first_in_first_out_until_closed() {
        let inbox = Inbox::new();
        assert!(!inbox.has_work());
        assert_eq!(inbox.pop(), None);
        inbox.push(1).unwrap();
        inbox.push(2).unwrap();
        assert!(inbox.has_work());
        let mut seen = Vec::new();
        inbox.each(|&t| seen.push(t));
        assert_eq!(seen, [1, 2]);
        assert_eq!(inbox.pop(), Some(1));
        inbox.close();
        // Queued before the close: still there for the closer.
        assert_eq!(inbox.push(3), Err(3));
        assert_eq!(inbox.pop(), Some(2));
        assert_eq!(inbox.pop(), None);
        assert!(!inbox.has_work());
    }
}
