//! The work queued on one (semaphore, global core): a stack (stock runs the
//! most recently queued DMA first) whose first entry is stored inline.
//! Semaphore blocks are made anew by every launch and a semaphore mostly
//! carries one DMA at a time, so a `Vec` per queue cost an allocation per DMA.

pub(crate) struct TaskQueue<T> {
    /// The bottom entry; `None` exactly when the queue is empty.
    first: Option<T>,
    /// The entries above it, bottom to top.
    rest: Vec<T>,
}

impl<T> Default for TaskQueue<T> {
    fn default() -> Self {
        TaskQueue { first: None, rest: Vec::new() }
    }
}

impl<T> TaskQueue<T> {
    pub fn push(&mut self, task: T) {
        if self.first.is_none() {
            self.first = Some(task);
        } else {
            self.rest.push(task);
        }
    }

    /// The most recently pushed entry.
    pub fn pop(&mut self) -> Option<T> {
        self.rest.pop().or_else(|| self.first.take())
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Bottom to top.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.rest.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::TaskQueue;

    #[test]
    fn pops_most_recent_first_and_iterates_bottom_up() {
        let mut q = TaskQueue::default();
        assert!(q.is_empty());
        q.push(1);
        q.push(2);
        q.push(3);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(q.pop(), Some(3));
        q.push(4);
        assert_eq!(q.pop(), Some(4));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(1));
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        q.push(5);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), [5]);
    }
}
