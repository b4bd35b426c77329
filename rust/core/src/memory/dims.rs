//! A short list of per-dimension values kept inline (no heap allocation) for
//! ranks up to `INLINE`, which covers every real TPU buffer: loads and stores
//! are on the interpreter's hot path.

use std::ops::{Deref, DerefMut};

const INLINE: usize = 8;

#[derive(Clone, Debug)]
pub(crate) struct Dims<T: Copy + Default> {
    len: usize,
    inline: [T; INLINE],
    /// Used instead of `inline` only above `INLINE` dims (`Vec::new` does not allocate).
    spill: Vec<T>,
}

impl<T: Copy + Default> Dims<T> {
    pub fn new() -> Self {
        Dims { len: 0, inline: [T::default(); INLINE], spill: Vec::new() }
    }

    pub fn filled(n: usize, value: T) -> Self {
        let mut d = Dims::new();
        for _ in 0..n {
            d.push(value);
        }
        d
    }

    pub fn push(&mut self, value: T) {
        if self.len < INLINE {
            self.inline[self.len] = value;
        } else {
            if self.len == INLINE {
                self.spill.extend_from_slice(&self.inline);
            }
            self.spill.push(value);
        }
        self.len += 1;
    }
}

impl<T: Copy + Default> Deref for Dims<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        if self.len <= INLINE {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }
}

impl<T: Copy + Default> DerefMut for Dims<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.len <= INLINE {
            &mut self.inline[..self.len]
        } else {
            &mut self.spill
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Dims;

    #[test]
    fn inline_and_spilled() {
        let mut d = Dims::new();
        for i in 0..20usize {
            d.push(i);
            assert_eq!(d.len(), i + 1);
            assert_eq!(d[i], i);
            assert_eq!(d.iter().sum::<usize>(), i * (i + 1) / 2);
        }
        d[12] = 7;
        assert_eq!(d[12], 7);
        assert_eq!(&*Dims::filled(3, 1u8), &[1, 1, 1]);
    }
}
