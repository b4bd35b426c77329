//! Copying N-d blocks between strided byte layouts. Adjacent dims that are
//! contiguous on both sides are merged, so a contiguous block is a single
//! memcpy and a strided block is one memcpy per innermost contiguous run.

use super::dims::Dims;

/// Where element (i0, .., in) lives: `offset + sum(i_k * strides[k])` bytes.
#[derive(Clone, Debug)]
pub(crate) struct StridedLayout {
    pub offset: usize,
    pub strides: Dims<usize>,
}

impl StridedLayout {
    /// A dense C-order array of `shape` starting at byte 0.
    pub fn dense(shape: &[usize], itemsize: usize) -> StridedLayout {
        let mut strides = Dims::filled(shape.len(), 0usize);
        let mut acc = itemsize;
        for k in (0..shape.len()).rev() {
            strides[k] = acc;
            acc *= shape[k];
        }
        StridedLayout { offset: 0, strides }
    }
}

/// One merged loop dim: count, source and destination byte strides.
#[derive(Clone, Copy, Debug, Default)]
struct Loop {
    count: usize,
    src: usize,
    dst: usize,
}

/// Merges dims that are contiguous on both sides, from the innermost out:
/// returns the bytes per memcpy and the remaining loops (innermost first).
/// Size-1 dims vanish.
fn merge_dims(s: &StridedLayout, d: &StridedLayout, counts: &[usize], itemsize: usize) -> (usize, Dims<Loop>) {
    let mut loops: Dims<Loop> = Dims::new();
    let mut run = itemsize;
    for k in (0..counts.len()).rev() {
        let (n, ss, ds) = (counts[k], s.strides[k], d.strides[k]);
        if n == 1 {
            continue;
        }
        if loops.is_empty() && ss == run && ds == run {
            run *= n;
            continue;
        }
        if let Some(last) = loops.last_mut() {
            if ss == last.src * last.count && ds == last.dst * last.count {
                last.count *= n;
                continue;
            }
        }
        loops.push(Loop { count: n, src: ss, dst: ds });
    }
    (run, loops)
}

/// The byte offset of the `counts`-shaped block at `l` when it is one
/// contiguous run in C order (a single memcpy's worth), else `None`.
pub(crate) fn contiguous_offset(l: &StridedLayout, counts: &[usize], itemsize: usize) -> Option<usize> {
    let dense = StridedLayout::dense(counts, itemsize);
    let same = counts.iter().zip(l.strides.iter().zip(dense.strides.iter())).all(|(&n, (a, b))| n <= 1 || a == b);
    same.then_some(l.offset)
}

/// Copies the `counts`-shaped block at `s` in `src` to `d` in `dst`.
/// Panics (never UB) if a layout points outside its slice: callers check bounds.
pub(crate) fn copy_block(
    src: &[u8],
    s: &StridedLayout,
    dst: &mut [u8],
    d: &StridedLayout,
    counts: &[usize],
    itemsize: usize,
) {
    if counts.contains(&0) {
        return;
    }
    let (run, loops) = merge_dims(s, d, counts, itemsize);
    // `loops` is innermost-first; walk it with an odometer, the innermost
    // loop as a tight inner `for`.
    let (so, dof) = (s.offset, d.offset);
    let Some((inner, outer)) = loops.split_first() else {
        dst[dof..dof + run].copy_from_slice(&src[so..so + run]);
        return;
    };
    let mut idx: Dims<usize> = Dims::filled(outer.len(), 0);
    let (mut so, mut dof) = (so, dof);
    loop {
        let (mut si, mut di) = (so, dof);
        for _ in 0..inner.count {
            dst[di..di + run].copy_from_slice(&src[si..si + run]);
            si += inner.src;
            di += inner.dst;
        }
        // Advance the outer odometer (outer[0] is the fastest).
        let mut k = 0;
        loop {
            if k == outer.len() {
                return;
            }
            let l = outer[k];
            idx[k] += 1;
            so += l.src;
            dof += l.dst;
            if idx[k] < l.count {
                break;
            }
            so -= l.src * l.count;
            dof -= l.dst * l.count;
            idx[k] = 0;
            k += 1;
        }
    }
}

/// Calls `f(a_offset, b_offset)` for every element of the `counts` block,
/// in C order, with byte offsets in layouts `a` and `b`.
pub(crate) fn for_each_element(
    counts: &[usize],
    a: &StridedLayout,
    b: &StridedLayout,
    mut f: impl FnMut(usize, usize),
) {
    if counts.contains(&0) {
        return;
    }
    let n = counts.len();
    let mut idx: Dims<usize> = Dims::filled(n, 0);
    let (mut ao, mut bo) = (a.offset, b.offset);
    loop {
        f(ao, bo);
        let mut k = n;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            ao += a.strides[k];
            bo += b.strides[k];
            if idx[k] < counts[k] {
                break;
            }
            ao -= a.strides[k] * counts[k];
            bo -= b.strides[k] * counts[k];
            idx[k] = 0;
        }
    }
}

/// Fills `dst` with repetitions of the element `pattern` at memcpy speed:
/// one element, then copies of the filled prefix doubling in size (a copy
/// per element costs a `memcpy` call each).
pub(crate) fn fill_pattern(dst: &mut [u8], pattern: &[u8]) {
    if pattern.is_empty() || dst.is_empty() {
        return;
    }
    if pattern.iter().all(|&b| b == pattern[0]) {
        dst.fill(pattern[0]);
        return;
    }
    let p = pattern.len().min(dst.len());
    dst[..p].copy_from_slice(&pattern[..p]);
    let mut filled = p;
    while filled < dst.len() {
        let m = filled.min(dst.len() - filled);
        dst.copy_within(..m, filled);
        filled += m;
    }
}

/// Appends `n` bytes of repetitions of `pattern` to `v` in one pass (no
/// zeroing first; reserve the capacity before).
pub(crate) fn extend_with_pattern(v: &mut Vec<u8>, n: usize, pattern: &[u8]) {
    let start = v.len();
    if pattern.is_empty() || pattern.iter().all(|&b| b == pattern[0]) {
        v.resize(start + n, pattern.first().copied().unwrap_or(0));
        return;
    }
    v.extend_from_slice(&pattern[..pattern.len().min(n)]);
    while v.len() - start < n {
        let filled = v.len() - start;
        v.extend_from_within(start..start + filled.min(n - filled));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strided(offset: usize, strides: &[usize]) -> StridedLayout {
        let mut s = Dims::new();
        strides.iter().for_each(|&x| s.push(x));
        StridedLayout { offset, strides: s }
    }

    #[test]
    fn contiguous_blocks_are_one_memcpy() {
        let dense = StridedLayout::dense(&[8, 1, 128], 4);
        let (run, loops) = merge_dims(&dense, &dense, &[8, 1, 128], 4);
        assert_eq!((run, loops.len()), (8 * 128 * 4, 0));
    }

    #[test]
    fn windows_copy_one_run_per_row() {
        // An (8, 128) f32 window of a (256, 1024) buffer into a dense block.
        let src = strided(0, &[4096, 4]);
        let dst = StridedLayout::dense(&[8, 128], 4);
        let (run, loops) = merge_dims(&src, &dst, &[8, 128], 4);
        assert_eq!(run, 512);
        assert_eq!(loops.iter().map(|l| (l.count, l.src, l.dst)).collect::<Vec<_>>(), [(8, 4096, 512)]);
        // Strided innermost dim: element-sized runs; rows that continue the
        // same stride merge into one loop.
        let (run, loops) = merge_dims(&strided(0, &[16, 8]), &StridedLayout::dense(&[3, 2], 4), &[3, 2], 4);
        assert_eq!(run, 4);
        assert_eq!(loops.iter().map(|l| (l.count, l.src, l.dst)).collect::<Vec<_>>(), [(6, 8, 4)]);
    }

    fn naive_fill(n: usize, pattern: &[u8]) -> Vec<u8> {
        (0..n).map(|i| pattern[i % pattern.len()]).collect()
    }

    #[test]
    fn fills_repeat_the_pattern() {
        for pattern in
            [&[1u8, 2, 3, 4][..], &[7, 7], &[0xff, 0x7f], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]
        {
            for n in [0usize, 1, 3, 4, 5, 16, 17, 64, 1000, 4096, 4100] {
                let mut dst = vec![0u8; n];
                fill_pattern(&mut dst, pattern);
                assert_eq!(dst, naive_fill(n, pattern), "{pattern:?} {n}");
                let mut v = vec![9u8; 3];
                extend_with_pattern(&mut v, n, pattern);
                assert_eq!(&v[..3], &[9, 9, 9]);
                assert_eq!(&v[3..], &naive_fill(n, pattern)[..], "{pattern:?} {n}");
            }
        }
    }

    #[test]
    fn copy_block_matches_naive_gather() {
        let src: Vec<u8> = (0..=255).collect();
        let mut dst = vec![0u8; 12];
        // Rows 1, 3, 5 (stride 2 of a (8, 32)-byte buffer), bytes 4..8 of each.
        copy_block(&src, &strided(32 + 4, &[64, 1]), &mut dst, &StridedLayout::dense(&[3, 4], 1), &[3, 4], 1);
        assert_eq!(dst, [36, 37, 38, 39, 100, 101, 102, 103, 164, 165, 166, 167]);
    }
}
