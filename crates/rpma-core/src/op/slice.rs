//! The sides of an operation: a range of a local region ([`LocalSlice`]), an offset or a range
//! of a remote one ([`RemoteAt`], [`RemoteSlice`]). Made without checks; checked when posted.

use std::fmt;
use std::ops::{Bound, RangeBounds};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::mr::{MrLocal, MrRemote};
use crate::peer::PeerInner;
use crate::transport::{LocalBuf, Transport};
use crate::validate;

/// Resolves a range against a length `len` as `(start, end)`; an inverted or overflowing range
/// comes out with `start > end`, which validation rejects.
#[inline]
pub(super) fn resolve(range: &impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => match e.checked_add(1) {
            Some(e) => e,
            None => return (usize::MAX, 0),
        },
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start, end)
}

/// Checks a resolved range and returns `(offset, len)`.
#[inline(always)]
pub(super) fn checked(op: &'static str, (start, end): (usize, usize)) -> Result<(usize, usize)> {
    if start > end {
        return Err(Error::invalid_input(op, "range start is past its end"));
    }
    Ok((start, end - start))
}

/// A range of a local region: the local side of an operation ([`MrLocal::slice`]).
///
/// Made without checks; the operation it is posted with checks it against the region and the
/// region's usage. `Copy`, `Send + Sync` (a borrow of the region).
pub struct LocalSlice<'a, T: Transport> {
    mr: &'a MrLocal<T>,
    start: usize,
    end: usize,
}

impl<T: Transport> Clone for LocalSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for LocalSlice<'_, T> {}

impl<T: Transport> fmt::Debug for LocalSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalSlice").field("start", &self.start).field("end", &self.end).finish_non_exhaustive()
    }
}

impl<'a, T: Transport> LocalSlice<'a, T> {
    /// The region.
    #[must_use]
    pub const fn mr(&self) -> &'a MrLocal<T> {
        self.mr
    }

    /// Bytes in the range (0 if it is inverted).
    #[must_use]
    pub const fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the range is empty.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Validates the range for `op` on a queue of `peer` (`device_writes`: the device writes
    /// into it).
    #[inline(always)]
    pub(super) fn buf(
        &self,
        op: &'static str,
        peer: &Arc<PeerInner<T>>,
        device_writes: bool,
    ) -> Result<LocalBuf<'a, T::Mr>> {
        if !self.mr.is_of(peer) {
            return Err(Error::invalid_input(
                op,
                "the local region was registered on another peer (protection domain)",
            ));
        }
        let (offset, len) = checked(op, (self.start, self.end))?;
        validate::local_buf(op, &self.mr.mr, self.mr.usage(), offset, len, device_writes)
    }

    /// The range as a backend sees it, once [`LocalSlice::buf`] accepted it.
    #[inline]
    pub(crate) fn checked_buf(&self) -> LocalBuf<'a, T::Mr> {
        LocalBuf { mr: &self.mr.mr, offset: self.start, len: self.len() }
    }
}

impl<T: Transport> MrLocal<T> {
    /// The bytes of `range` (`..` for the whole region) as the local side of an operation.
    /// Checked when the operation is posted.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> LocalSlice<'_, T> {
        let (start, end) = resolve(&range, self.len());
        LocalSlice { mr: self, start, end }
    }
}

/// An offset in a remote region: the remote side of a read, write or atomic write
/// ([`MrRemote::at`]). The length comes from the local side.
#[derive(Clone, Copy, Debug)]
pub struct RemoteAt<'a> {
    pub(super) mr: &'a MrRemote,
    pub(super) offset: usize,
}

/// A range of a remote region: what a flush covers ([`MrRemote::slice`]).
#[derive(Clone, Copy, Debug)]
pub struct RemoteSlice<'a> {
    pub(super) mr: &'a MrRemote,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl MrRemote {
    /// The remote side of a read, write or atomic write, at `offset`. Checked against the size
    /// the peer's descriptor claims when the operation is posted.
    #[must_use]
    pub const fn at(&self, offset: usize) -> RemoteAt<'_> {
        RemoteAt { mr: self, offset }
    }

    /// The bytes of `range` (`..` for the whole region, as the descriptor claims it) for a
    /// flush. Checked when the flush is posted.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> RemoteSlice<'_> {
        let (start, end) = resolve(&range, usize::try_from(self.len()).unwrap_or(usize::MAX));
        RemoteSlice { mr: self, start, end }
    }
}

#[cfg(test)]
mod tests {
    use super::{checked, resolve};

    #[test]
    fn ranges_resolve_and_reject_inversion_and_overflow() {
        assert_eq!(resolve(&(..), 10), (0, 10));
        assert_eq!(resolve(&(2..5), 10), (2, 5));
        assert_eq!(resolve(&(2..=5), 10), (2, 6));
        assert_eq!(resolve(&(3..), 10), (3, 10));
        assert_eq!(checked("x", resolve(&(2..5), 10)), Ok((2, 3)));
        assert!(checked("x", resolve(&(..=usize::MAX), 10)).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let inverted = resolve(&(5..2), 10);
        assert!(checked("x", inverted).is_err());
        assert_eq!(
            checked("x", resolve(&(usize::MAX..), 10)).map_err(|e| e.kind()),
            Err(crate::error::ErrorKind::InvalidInput)
        );
    }
}
