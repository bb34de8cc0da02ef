//! Scratch buffers that start on a 64-byte cache line. The register tiles load 32- or 64-byte
//! vectors from rows a whole number of lines apart; from the allocator's 16-byte alignment,
//! every row's vectors would straddle lines, and each such load costs two.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Element types for which every bit pattern, zero included, is a value.
pub trait Plain: Copy {}
impl Plain for f32 {}
impl Plain for u16 {}

/// A growable buffer of `E` whose first element starts a cache line.
pub struct Lines<E> {
    raw: Vec<Line>,
    len: usize,
    _element: PhantomData<E>,
}

impl<E> Default for Lines<E> {
    fn default() -> Self {
        Lines { raw: Vec::new(), len: 0, _element: PhantomData }
    }
}

impl<E: Plain> Lines<E> {
    /// `len` elements: those kept from before, then `value`.
    pub fn resize(&mut self, len: usize, value: E) {
        let lines = (len * size_of::<E>()).div_ceil(size_of::<Line>());
        if lines > self.raw.len() {
            self.raw.resize(lines, Line([0; 64]));
        }
        let old = self.len;
        self.len = len;
        if len > old {
            self[old..].fill(value);
        }
    }

    /// `len` elements, all `value`.
    pub fn reset(&mut self, len: usize, value: E) {
        self.len = 0;
        self.resize(len, value);
    }
}

impl<E: Plain> Deref for Lines<E> {
    type Target = [E];
    fn deref(&self) -> &[E] {
        // SAFETY: `raw` holds at least `len` elements' bytes, all initialized (zeroed lines), at
        // an alignment of 64 that covers `E`'s, and every bit pattern is an `E` (`Plain`).
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr().cast::<E>(), self.len) }
    }
}

impl<E: Plain> DerefMut for Lines<E> {
    fn deref_mut(&mut self) -> &mut [E] {
        // SAFETY: as in `deref`; `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.raw.as_mut_ptr().cast::<E>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::Lines;

    #[test]
    fn starts_on_a_line_keeps_old_elements_and_fills_new_ones() {
        let mut buf = Lines::<f32>::default();
        buf.resize(5, 1.5);
        assert_eq!(buf.as_ptr() as usize % 64, 0);
        buf[4] = 3.0;
        buf.resize(40, -2.0);
        assert_eq!(buf.as_ptr() as usize % 64, 0);
        assert_eq!(&buf[..5], &[1.5, 1.5, 1.5, 1.5, 3.0]);
        assert!(buf[5..].iter().all(|&x| x == -2.0));
        buf.reset(3, 7.0);
        assert_eq!(&buf[..], &[7.0; 3]);
        let mut half = Lines::<u16>::default();
        half.reset(33, 9);
        assert_eq!((half.len(), half.as_ptr() as usize % 64), (33, 0));
        assert!(half.iter().all(|&x| x == 9));
    }
}
