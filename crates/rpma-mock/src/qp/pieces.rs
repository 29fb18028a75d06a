//! The local side of a work request as the mock keeps it: where a message lands ([`Dst`]),
//! where a message comes from ([`Source`]), and copying between pieces and a remote region.

use std::sync::Arc;

use rpma_core::transport::{Local, LocalBuf};

use crate::fabric::MockFabric;
use crate::mem::{copy, MrShared};
use crate::pd::MockMr;

/// One registered piece, kept alive while the work request is posted.
pub(super) type Piece = (Arc<MockMr>, usize, usize);

fn own(b: LocalBuf<'_, MockMr>) -> Piece {
    (Arc::clone(b.mr), b.offset, b.len)
}

/// Where a received message lands.
#[derive(Default)]
pub(super) enum Dst {
    /// A zero-length receive.
    #[default]
    None,
    /// One piece.
    One(Piece),
    /// Several pieces, filled in order.
    Sg(Box<[Piece]>),
}

impl Dst {
    /// The receive buffer of a validated receive work request.
    pub(super) fn of(local: &Local<'_, MockFabric>) -> Self {
        match local {
            Local::One(b) => Self::One(own(*b)),
            Local::Sg(_) => Self::Sg((0..local.pieces_len()).filter_map(|i| local.piece(i)).map(own).collect()),
            Local::None | Local::Inline(_) => Self::None,
        }
    }

    /// Bytes the buffer holds.
    pub(super) fn len(&self) -> usize {
        match self {
            Self::None => 0,
            Self::One((_, _, l)) => *l,
            Self::Sg(p) => p.iter().map(|(_, _, l)| l).sum(),
        }
    }

    /// Puts the first `len` bytes of `src` into the buffer (`len <= self.len()`).
    pub(super) fn fill(&self, src: &Source, len: usize) {
        let pieces: &[Piece] = match self {
            Self::None => return,
            Self::One(p) => std::slice::from_ref(p),
            Self::Sg(p) => p,
        };
        let mut done = 0;
        for (mr, off, plen) in pieces {
            let n = (*plen).min(len - done);
            if n == 0 {
                break;
            }
            match src {
                Source::None => return,
                Source::One(smr, soff) => copy(smr.shared(), soff + done, mr.shared(), *off, n),
                Source::Bytes(b) => {
                    mr.shared().bytes(*off, n).write(0, &b[done..done + n]).expect("inside the piece");
                }
            }
            done += n;
        }
    }
}

/// Where a sent message comes from: a registered piece read when the message is delivered, or
/// bytes gathered (scatter-gather) or copied (inline) when it was posted.
#[derive(Default)]
pub(super) enum Source {
    /// No bytes.
    #[default]
    None,
    /// One piece, from this offset.
    One(Arc<MockMr>, usize),
    /// Bytes taken at post time.
    Bytes(Box<[u8]>),
}

impl Source {
    /// The source of a validated send work request.
    pub(super) fn of(local: &Local<'_, MockFabric>, len: usize) -> Self {
        match local {
            Local::None => Self::None,
            Local::One(b) => Self::One(Arc::clone(b.mr), b.offset),
            Local::Inline(bytes) => Self::Bytes((*bytes).into()),
            Local::Sg(_) => Self::Bytes(gather_vec(local, len).into_boxed_slice()),
        }
    }
}

/// The `len` bytes of the local side of a write or send, gathered now.
pub(super) fn gather_vec(local: &Local<'_, MockFabric>, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    gather_append(local, len, &mut v);
    v
}

/// [`gather_vec`], appended to `out` (a frame being built: no copy of its own).
pub(super) fn gather_append(local: &Local<'_, MockFabric>, len: usize, out: &mut Vec<u8>) {
    if let Local::Inline(bytes) = local {
        out.extend_from_slice(bytes);
        return;
    }
    let mut at = out.len();
    out.resize(at + len, 0);
    for p in (0..local.pieces_len()).filter_map(|i| local.piece(i)) {
        p.mr.shared().bytes(p.offset, p.len).read(0, &mut out[at..at + p.len]).expect("inside the piece");
        at += p.len;
    }
}

/// The local side of a work request as the responder copies it: registered pieces, in order,
/// or inline bytes. Implemented by the borrowed side of a work request being posted and by the
/// owned side of one waiting in a deferred send queue.
pub(super) trait LocalSide {
    /// The inline bytes, if the side is inline.
    fn inline(&self) -> Option<&[u8]>;
    /// How many registered pieces.
    fn pieces(&self) -> usize;
    /// The `i`-th piece: its region, offset and length (validated by rpma-core).
    fn piece_at(&self, i: usize) -> Option<(&MrShared, usize, usize)>;
    /// Reads `len` bytes of `src` at `off` into the side (a read's destination): piece after
    /// piece.
    #[inline]
    fn scatter_from(&self, src: &MrShared, off: usize, len: usize) {
        let _ = len;
        scatter_from(src, off, self);
    }
}

impl LocalSide for Local<'_, MockFabric> {
    #[inline]
    fn inline(&self) -> Option<&[u8]> {
        match self {
            Local::Inline(b) => Some(b),
            _ => None,
        }
    }

    #[inline]
    fn pieces(&self) -> usize {
        self.pieces_len()
    }

    #[inline]
    fn piece_at(&self, i: usize) -> Option<(&MrShared, usize, usize)> {
        self.piece(i).map(|b| (&**b.mr.shared(), b.offset, b.len))
    }
}

/// A local side made of bytes: what a write carries (as inline bytes), or the buffer a read
/// fills (a request from another process, or a read whose data lands later).
pub(super) struct ByteSide<'a> {
    data: &'a [u8],
    read: std::cell::RefCell<Vec<u8>>,
}

impl<'a> ByteSide<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        Self { data, read: std::cell::RefCell::new(Vec::new()) }
    }

    /// What a read put into the side.
    pub(super) fn into_read(self) -> Vec<u8> {
        self.read.into_inner()
    }
}

impl LocalSide for ByteSide<'_> {
    fn inline(&self) -> Option<&[u8]> {
        Some(self.data)
    }

    fn pieces(&self) -> usize {
        0
    }

    fn piece_at(&self, _i: usize) -> Option<(&MrShared, usize, usize)> {
        None
    }

    fn scatter_from(&self, src: &MrShared, off: usize, len: usize) {
        let mut v = vec![0u8; len];
        src.bytes(off, len).read(0, &mut v).expect("a range checked against the region");
        *self.read.borrow_mut() = v;
    }
}

/// Writes the local side of a write (`len` bytes in all) into `dst` at `off`.
#[inline]
pub(super) fn gather_into<L: LocalSide>(local: &L, dst: &MrShared, off: usize) {
    if let Some(bytes) = local.inline() {
        dst.bytes(off, bytes.len()).write(0, bytes).expect("inside the region");
        return;
    }
    let mut at = off;
    for i in 0..local.pieces() {
        if let Some((mr, o, l)) = local.piece_at(i) {
            copy(mr, o, dst, at, l);
            at += l;
        }
    }
}

/// Writes bytes `from..from + len` of the local side of a write (its pieces one after the
/// other) into `dst` at `dst_off`: one piece of a torn write.
pub(super) fn gather_range<L: LocalSide>(local: &L, from: usize, len: usize, dst: &MrShared, dst_off: usize) {
    if let Some(bytes) = local.inline() {
        dst.bytes(dst_off, len).write(0, &bytes[from..from + len]).expect("inside the region");
        return;
    }
    let (end, mut at) = (from + len, 0);
    for i in 0..local.pieces() {
        let Some((mr, o, l)) = local.piece_at(i) else { continue };
        // The overlap of this piece, [at, at + l), with [from, end).
        let (lo, hi) = (at.max(from), (at + l).min(end));
        if lo < hi {
            copy(mr, o + (lo - at), dst, dst_off + (lo - from), hi - lo);
        }
        at += l;
    }
}

/// Reads `src` at `off` into the local side of a read, piece after piece.
#[inline]
pub(super) fn scatter_from<L: LocalSide + ?Sized>(src: &MrShared, off: usize, local: &L) {
    let mut at = off;
    for i in 0..local.pieces() {
        if let Some((mr, o, l)) = local.piece_at(i) {
            copy(src, at, mr, o, l);
            at += l;
        }
    }
}
