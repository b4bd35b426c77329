//! Vector clocks and epochs over "threads": the simulated cores (ids
//! `0..num_cores`, the global core id) and DMA slots after them.
//!
//! A thread's own component counts its memory accesses: each access ticks
//! it first, so the access is identified by its epoch (thread, value) and is
//! the `value`-th access of that thread.

/// A vector clock; missing trailing components are 0 (DMA slots are added
/// as DMAs start, so clocks grow lazily).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorClock(Vec<u32>);

impl VectorClock {
    pub fn new(len: usize) -> Self {
        VectorClock(vec![0; len])
    }

    #[inline]
    pub fn get(&self, thread: u32) -> u32 {
        self.0.get(thread as usize).copied().unwrap_or(0)
    }

    pub fn set(&mut self, thread: u32, value: u32) {
        let t = thread as usize;
        if t >= self.0.len() {
            self.0.resize(t + 1, 0);
        }
        self.0[t] = value;
    }

    /// Advances `thread`'s own component and returns the new epoch.
    pub fn tick(&mut self, thread: u32) -> Epoch {
        let value = self.get(thread) + 1;
        self.set(thread, value);
        Epoch { thread, value }
    }

    /// Pointwise maximum (`self := self join other`).
    pub fn join(&mut self, other: &VectorClock) {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, &theirs) in self.0.iter_mut().zip(&other.0) {
            *mine = (*mine).max(theirs);
        }
    }

    /// Whether the access `e` happened before the holder of this clock.
    #[inline]
    pub fn has_seen(&self, e: Epoch) -> bool {
        e.value <= self.get(e.thread)
    }

    /// Non-zero components as epochs.
    pub fn epochs(&self) -> impl Iterator<Item = Epoch> + '_ {
        self.0.iter().enumerate().filter(|(_, &v)| v > 0).map(|(t, &v)| Epoch { thread: t as u32, value: v })
    }
}

/// One access: the `value`-th access of `thread`. `value == 0` means none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epoch {
    pub thread: u32,
    pub value: u32,
}

impl Epoch {
    pub const NONE: Epoch = Epoch { thread: 0, value: 0 };

    pub fn is_none(self) -> bool {
        self.value == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_join_and_order() {
        let mut a = VectorClock::new(2);
        let e1 = a.tick(0);
        assert_eq!(e1, Epoch { thread: 0, value: 1 });
        let mut b = VectorClock::new(2);
        assert!(!b.has_seen(e1));
        b.join(&a);
        assert!(b.has_seen(e1));
        let e2 = a.tick(0);
        assert!(!b.has_seen(e2), "a later access of thread 0 is not seen");
        assert!(b.has_seen(Epoch::NONE));
    }

    #[test]
    fn clocks_grow_for_new_threads() {
        let mut dma = VectorClock::new(1);
        let e = dma.tick(5);
        assert_eq!(dma.get(5), 1);
        assert_eq!(dma.get(9), 0);
        let mut core = VectorClock::new(1);
        assert!(!core.has_seen(e));
        core.join(&dma);
        assert!(core.has_seen(e));
        assert_eq!(core.epochs().collect::<Vec<_>>(), vec![e]);
    }
}
