//! Typed views of byte and word buffers (the one place that reinterprets
//! memory: operands arrive as bytes, scratch is `u64` words).

use super::elem::Pod;
use std::mem::{align_of, size_of};

/// `bytes` as `T`s, when they are aligned for `T` and a whole number of them.
pub fn try_cast<T: Pod>(bytes: &[u8]) -> Option<&[T]> {
    if bytes.is_empty() {
        return Some(&[]);
    }
    if bytes.as_ptr() as usize % align_of::<T>() != 0 || bytes.len() % size_of::<T>() != 0 {
        return None;
    }
    // SAFETY: the pointer is non-null (a non-empty slice), aligned for `T`
    // (checked), and covers `len / size_of::<T>()` whole `T`s of initialized
    // bytes, each a valid `T` (`Pod`); the view borrows `bytes`.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size_of::<T>()) })
}

/// `u64` words needed for `len` elements of `size` bytes.
#[inline]
pub fn words_for(len: usize, size: usize) -> usize {
    (len * size).div_ceil(8)
}

/// The first `len` `T`s stored in `words`.
#[inline]
pub fn words_as<T: Pod>(words: &[u64], len: usize) -> &[T] {
    assert!(len * size_of::<T>() <= words.len() * 8, "scratch too short");
    // SAFETY: `words` is aligned for any `Pod` (alignment <= 8) and covers
    // `len` `T`s (asserted); every bit pattern is a valid `T` (`Pod`); the
    // view borrows `words`.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const T, len) }
}

/// The first `len` `T`s stored in `words`, writable.
#[inline]
pub fn words_as_mut<T: Pod>(words: &mut [u64], len: usize) -> &mut [T] {
    assert!(len * size_of::<T>() <= words.len() * 8, "scratch too short");
    // SAFETY: as `words_as`; the view borrows `words` mutably, so it is the
    // only reference to that memory while it lives.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut T, len) }
}

/// The bytes of `words`.
#[inline]
pub fn words_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    words_as_mut::<u8>(words, words.len() * 8)
}

/// The bytes of `T`s.
#[inline]
pub fn bytes_of<T: Pod>(s: &[T]) -> &[u8] {
    // SAFETY: `Pod` types have no padding, so all `size_of_val(s)` bytes
    // are initialized; `u8` needs no alignment; the view borrows `s`.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_need_alignment_and_whole_elements() {
        let words = [1u64, 2];
        let bytes = bytes_of(&words[..]);
        assert_eq!(try_cast::<u32>(bytes).map(|s| s.len()), Some(4));
        assert!(try_cast::<u32>(&bytes[1..5]).is_none(), "misaligned");
        assert!(try_cast::<u32>(&bytes[..6]).is_none(), "not whole");
        assert_eq!(try_cast::<f64>(&[]).map(|s| s.len()), Some(0));
        assert_eq!(words_as::<u16>(&words, 5)[4], 2u16.to_le() * (cfg!(target_endian = "little") as u16));
        assert_eq!(words_for(3, 4), 2);
        assert_eq!(words_for(0, 8), 0);
    }
}
