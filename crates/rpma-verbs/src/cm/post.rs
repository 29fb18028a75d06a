//! Posting: work requests (validated by rpma-core) turned into verbs work requests and chains,
//! one doorbell a chain, and recorded in the queue's slot ring once posted.
//!
//! A chain goes down in one `ibv_post_send` (or, when it holds a native flush or atomic write,
//! one `ibv_wr_start` .. `ibv_wr_complete` of the extended QP). Everything that could make a
//! provider refuse one of its work requests (queue room, scatter-gather entries, inline size)
//! was checked before, so a chain is posted whole; if a provider still stops in the middle
//! (`ibv_post_send` reports the first work request it refused), the ones before it are posted
//! and recorded, and the error says how many.

use std::mem::MaybeUninit;

use rdma_sys as ffi;
use rpma_core::transport::{Local, RecvWr, SendOp, SendWr};
use rpma_core::{Error, ErrorKind, FlushType, Result};

use crate::mr::VerbsMr;
use crate::native::Counted;
use crate::ring::{FifoRing, Ring, FLUSH_READ_BIT};
use crate::Verbs;

/// Reusable buffers of chains (owned by one queue; rule V6 or a lock).
#[derive(Default)]
pub(crate) struct Scratch {
    send: Vec<ffi::ibv_send_wr>,
    recv: Vec<ffi::ibv_recv_wr>,
    sges: Vec<ffi::ibv_sge>,
}

// SAFETY: [V6] the vectors hold pointers (chain links, SGE lists) only while a chain is posted
// by the thread that owns them; between posts those pointers are stale and never read.
unsafe impl Send for Scratch {}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").field("capacity", &self.send.capacity()).finish()
    }
}

/// Where a work request's data comes from or goes to.
#[derive(Clone, Copy)]
pub(super) enum Data {
    /// Nothing.
    None,
    /// The registered pieces of its local side.
    Local,
    /// The first `n` bytes of the connection's flush buffer (an emulated flush).
    FlushBuf(usize),
    /// Inline bytes (copied by the provider at post time).
    Inline(*const u8, usize),
}

/// A work request as verbs wants it.
#[derive(Clone, Copy)]
pub(super) struct VerbsWr {
    pub(super) opcode: ffi::ibv_wr_opcode::Type,
    pub(super) flags: u32,
    pub(super) imm: Option<u32>,
    pub(super) rkey: u32,
    pub(super) raddr: u64,
    /// Bits added to the verbs `wr_id`.
    pub(super) tag: u64,
    pub(super) data: Data,
    pub(super) native: Option<Native>,
    pub(super) counted: Option<Counted>,
}

/// A native operation of an extended QP.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Native {
    Flush(FlushType),
    AtomicWrite,
}

/// What the QP can do, for [`verbs_wr`].
#[derive(Clone, Copy)]
pub(super) struct QpOps<'a> {
    pub(super) native_flush: bool,
    pub(super) native_atomic_write: bool,
    pub(super) flush_mr: Option<&'a VerbsMr>,
}

/// The verbs opcode (and immediate data) of a read, write or send; `None` for the operations
/// that have their own paths (atomic write, flush).
#[inline(always)]
fn rw_send_opcode(op: &SendOp) -> Option<(ffi::ibv_wr_opcode::Type, Option<u32>)> {
    use ffi::ibv_wr_opcode as O;
    Some(match *op {
        SendOp::Read => (O::IBV_WR_RDMA_READ, None),
        SendOp::Write => (O::IBV_WR_RDMA_WRITE, None),
        SendOp::WriteImm(i) => (O::IBV_WR_RDMA_WRITE_WITH_IMM, Some(i)),
        SendOp::Send => (O::IBV_WR_SEND, None),
        SendOp::SendImm(i) => (O::IBV_WR_SEND_WITH_IMM, Some(i)),
        SendOp::AtomicWrite(_) | SendOp::Flush(_) => return None,
    })
}

/// Maps one validated work request to verbs.
///
/// # Errors
/// `NoSupp` for an operation the native-only policy forbids to emulate, or a flush without a
/// flush buffer.
#[inline]
pub(super) fn verbs_wr(
    wr: &SendWr<'_, Verbs>,
    ops: QpOps<'_>,
    no_native: impl Fn(&'static str, &'static str) -> Error,
) -> Result<VerbsWr> {
    use ffi::ibv_send_flags as F;
    use ffi::ibv_wr_opcode as O;
    let (rkey, raddr) = wr.remote.map_or((0, 0), |r| (r.rkey, r.addr));
    let mut p = VerbsWr {
        opcode: O::IBV_WR_RDMA_WRITE,
        flags: if wr.signaled { F::IBV_SEND_SIGNALED.0 } else { 0 },
        imm: None,
        rkey,
        raddr,
        tag: 0,
        data: Data::Local,
        native: None,
        counted: None,
    };
    if let Local::Inline(b) = wr.local {
        p.flags |= F::IBV_SEND_INLINE.0;
        p.data = Data::Inline(b.as_ptr(), b.len());
    }
    if let Some((opcode, imm)) = rw_send_opcode(&wr.op) {
        p.opcode = opcode;
        p.imm = imm;
        return Ok(p);
    }
    match &wr.op {
        SendOp::Read | SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_) => {}
        SendOp::AtomicWrite(bytes) => {
            if ops.native_atomic_write {
                p.native = Some(Native::AtomicWrite);
                p.data = Data::Inline(bytes.as_ptr(), 8);
                p.counted = Some(Counted::AtomicWriteNative);
            } else {
                if crate::native::native_only().atomic_write {
                    return Err(no_native("rpma_atomic_write", "atomic write"));
                }
                // A fenced inline 8-byte write (docs/semantics.md#atomic-write): not executed
                // before preceding reads (flushes) complete; inline data is copied at post time.
                p.flags |= F::IBV_SEND_INLINE.0 | F::IBV_SEND_FENCE.0;
                p.data = Data::Inline(bytes.as_ptr(), 8);
                p.counted = Some(Counted::AtomicWriteEmulated);
            }
        }
        SendOp::Flush(t) if ops.native_flush && (*t == FlushType::Visibility || !crate::native::persistent_read()) => {
            // docs/native-ops.md, "The persistent flush rule": native to visibility, and to
            // persistence unless the process chose the RDMA Read (a target region on DRAM has no
            // IBV_ACCESS_FLUSH_PERSISTENT: the flush then completes with a remote access error)
            p.native = Some(Native::Flush(*t));
            p.data = Data::None;
            p.counted =
                Some(if *t == FlushType::Persistent { Counted::FlushPersistentNative } else { Counted::FlushNative });
        }
        SendOp::Flush(t) => {
            // A persistent flush on a native-flush QP is an RDMA Read only by the process's
            // explicit choice (PersistentFlush::Read); any other emulated flush obeys the
            // native-only policy.
            let by_rule = *t == FlushType::Persistent && ops.native_flush;
            if !by_rule && crate::native::native_only().flush {
                return Err(no_native("rpma_flush", "flush"));
            }
            if ops.flush_mr.is_none() {
                return Err(Error::new(ErrorKind::NoSupp, "ibv_post_send").with_detail("no flush buffer"));
            }
            // APM (docs/semantics.md#flush): an 8-byte RDMA Read at the flushed address into
            // the connection's private buffer (no more than the region is described to hold).
            p.opcode = O::IBV_WR_RDMA_READ;
            p.data = Data::FlushBuf(wr.remote.map_or(0, |r| r.described_len.min(8)) as usize);
            if by_rule {
                p.tag = FLUSH_READ_BIT;
                p.counted = Some(Counted::FlushPersistentRead);
            } else {
                p.counted = Some(Counted::FlushEmulated);
            }
        }
    }
    Ok(p)
}

/// A verbs work request that links into a chain (`ibv_send_wr`, `ibv_recv_wr`).
trait Linked: Sized {
    fn num_sge(&self) -> i32;
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, next: *mut Self);
}

impl Linked for ffi::ibv_send_wr {
    fn num_sge(&self) -> i32 {
        self.num_sge
    }
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, next: *mut Self) {
        self.sg_list = sg_list;
        self.next = next;
    }
}

impl Linked for ffi::ibv_recv_wr {
    fn num_sge(&self) -> i32 {
        self.num_sge
    }
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, next: *mut Self) {
        self.sg_list = sg_list;
        self.next = next;
    }
}

/// Links `wrs` into a chain, each to its run of `sges` (pushed in the same order, `num_sge` of
/// them each), posts it with one `post` call and returns the call's result and how many work
/// requests the provider took (all, or those before the one it points `bad` at).
fn post_linked<W: Linked>(
    wrs: &mut [W],
    sges: &mut [ffi::ibv_sge],
    post: impl FnOnce(*mut W, *mut *mut W) -> i32,
) -> (i32, usize) {
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    let sg = sges.as_mut_ptr();
    let mut at = 0usize;
    for i in 0..n {
        // SAFETY: [V2] `i < n` and `at + num_sge <= sges.len()` (the entries were pushed in this
        // order), so every pointer stays inside its slice; both slices are borrowed, unmoved,
        // until the post below has returned.
        unsafe {
            let w = &mut *base.add(i);
            let list = if w.num_sge() > 0 { sg.add(at) } else { std::ptr::null_mut() };
            at += w.num_sge() as usize;
            w.link(list, if i + 1 < n { base.add(i + 1) } else { std::ptr::null_mut() });
        }
    }
    let mut bad: *mut W = std::ptr::null_mut();
    let r = post(base, &mut bad);
    let posted = if r == 0 {
        n
    } else if bad.is_null() {
        0
    } else {
        // SAFETY: [V2] the provider points `bad` at the element of this chain it refused.
        usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0).min(n)
    };
    (r, posted)
}

/// Appends the scatter-gather entries of `wr` (with `p`) to `sges`; returns how many.
#[inline]
fn push_sges(wr: &SendWr<'_, Verbs>, p: &VerbsWr, flush_mr: Option<&VerbsMr>, sges: &mut Vec<ffi::ibv_sge>) -> i32 {
    match p.data {
        Data::None => 0,
        Data::Local => {
            let n = wr.local.pieces_len();
            sges.extend((0..n).filter_map(|i| wr.local.piece(i)).map(|b| b.mr.sge(b.offset, b.len)));
            n as i32
        }
        Data::FlushBuf(n) => match flush_mr {
            Some(fm) => {
                sges.push(fm.sge(0, n));
                1
            }
            None => 0,
        },
        Data::Inline(ptr, len) => {
            sges.push(ffi::ibv_sge { addr: ptr as u64, length: len as u32, lkey: 0 });
            1
        }
    }
}

/// The regions a work request uses (what its slot pins).
#[inline]
pub(super) fn regions<'m>(local: &Local<'m, Verbs>) -> impl Iterator<Item = &'m VerbsMr> + 'm {
    let l = *local;
    (0..l.pieces_len()).filter_map(move |i| l.piece(i)).map(|b| &**b.mr)
}

/// A zeroed verbs send work request filled from `p`.
#[inline]
fn send_wr(p: &VerbsWr, id: u64) -> ffi::ibv_send_wr {
    // SAFETY: [V2] zeroed is a valid `ibv_send_wr` (null pointers, zero fields).
    let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
    w.wr_id = id | p.tag;
    w.opcode = p.opcode;
    w.send_flags = p.flags;
    if let Some(i) = p.imm {
        w.imm_data_invalidated_rkey_union.imm_data = i.to_be();
    }
    w.wr.rdma = ffi::rdma_t { remote_addr: p.raddr, rkey: p.rkey };
    w
}

/// A read, write or send of at most one registered piece, or an emulated flush: what the fast
/// paths post without [`verbs_wr`].
struct FastWr<'m> {
    opcode: ffi::ibv_wr_opcode::Type,
    imm: Option<u32>,
    sge: Option<ffi::ibv_sge>,
    /// The region the slot pins (none for a flush: its buffer is the connection's own).
    mr: Option<&'m VerbsMr>,
}

/// `wr` as a [`FastWr`] work request; `None` for any other (the general path's). `flush` gives
/// the flush buffer only when flushes are emulated and the native-only policy allows it.
#[inline(always)]
fn fast_wr<'m>(wr: &SendWr<'m, Verbs>, flush: impl FnOnce() -> Option<&'m VerbsMr>) -> Option<FastWr<'m>> {
    use ffi::ibv_wr_opcode as O;
    let piece = match wr.local {
        Local::One(b) => Some(b),
        Local::None => None,
        Local::Sg(_) | Local::Inline(_) => return None,
    };
    Some(match wr.op {
        SendOp::Read | SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_) => {
            let (opcode, imm) = rw_send_opcode(&wr.op)?;
            FastWr { opcode, imm, sge: piece.map(|b| b.mr.sge(b.offset, b.len)), mr: piece.map(|b| &**b.mr) }
        }
        // An emulated flush: an 8-byte RDMA Read at the flushed address into the connection's
        // flush buffer (docs/semantics.md#flush).
        SendOp::Flush(_) => {
            let fm = flush()?;
            let len = wr.remote.map_or(0, |r| r.described_len.min(8)) as usize;
            FastWr { opcode: O::IBV_WR_RDMA_READ, imm: None, sge: Some(fm.sge(0, len)), mr: None }
        }
        SendOp::AtomicWrite(_) => return None,
    })
}

/// The verbs work request `id` of `wr` made [`FastWr`] as `p`, without its SGE list and link.
#[inline(always)]
fn fast_ibv_wr(wr: &SendWr<'_, Verbs>, p: &FastWr<'_>, id: u64) -> ffi::ibv_send_wr {
    let (raddr, rkey) = wr.remote.map_or((0, 0), |r| (r.addr, r.rkey));
    // SAFETY: [V2] zeroed is a valid `ibv_send_wr` (null pointers, zero fields).
    let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
    w.wr_id = id;
    w.opcode = p.opcode;
    w.send_flags = if wr.signaled { ffi::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
    if let Some(i) = p.imm {
        w.imm_data_invalidated_rkey_union.imm_data = i.to_be();
    }
    w.wr.rdma = ffi::rdma_t { remote_addr: raddr, rkey };
    w
}

/// Posts one read, write or send of at most one registered piece, or an emulated flush (the
/// common cases), straight from the work request through `post` (`ibv_post_send`) and records
/// it in `ring`; `None` for any other work request (the general path handles it, and a full
/// queue too, which it reports).
#[inline(always)]
pub(super) fn post_one<'f>(
    ring: &mut FifoRing,
    wr: &SendWr<'f, Verbs>,
    flush: impl FnOnce() -> Option<&'f VerbsMr>,
    post: impl FnOnce(*mut ffi::ibv_send_wr, *mut *mut ffi::ibv_send_wr) -> i32,
) -> Option<Result<()>> {
    let n = ring.next()?;
    let p = fast_wr(wr, flush)?;
    let mut w = fast_ibv_wr(wr, &p, n);
    let mut sge = p.sge;
    if let Some(s) = sge.as_mut() {
        w.sg_list = s;
        w.num_sge = 1;
    }
    let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
    let r = post(&mut w, &mut bad);
    if r != 0 {
        return Some(Err(post_failed("ibv_post_send", r)));
    }
    ring.push_one(n, wr.wr_id, p.mr);
    if matches!(wr.op, SendOp::Flush(_)) {
        crate::native::count(Counted::FlushEmulated);
    }
    Some(Ok(()))
}

/// Posts a chain of [`FastWr`] work requests (reads, writes and sends of at most one piece,
/// emulated flushes: the common chains) with one `post` call (`ibv_post_send`), made in one
/// pass into `sc`, and records what was posted in `ring`; `None` if the chain holds any other
/// work request or does not fit the queue (the general path handles it, and reports a full
/// queue).
#[inline]
pub(super) fn post_chain_fast<'f>(
    ring: &mut FifoRing,
    sc: &mut Scratch,
    wrs: &[SendWr<'f, Verbs>],
    flush: impl Fn() -> Option<&'f VerbsMr>,
    post: impl FnOnce(*mut ffi::ibv_send_wr, *mut *mut ffi::ibv_send_wr) -> i32,
) -> Option<Result<()>> {
    if wrs.is_empty() || wrs.len() as u64 > ring.free() {
        return None;
    }
    sc.send.clear();
    sc.sges.clear();
    for (k, wr) in wrs.iter().enumerate() {
        let p = fast_wr(wr, &flush)?;
        let mut w = fast_ibv_wr(wr, &p, ring.id(k));
        if let Some(s) = p.sge {
            w.num_sge = 1;
            sc.sges.push(s);
        }
        sc.send.push(w);
    }
    let (r, posted) = post_linked(&mut sc.send, &mut sc.sges, post);
    for wr in &wrs[..posted] {
        let mr = match wr.local {
            Local::One(b) => Some(&**b.mr),
            _ => None,
        };
        // Room for the whole chain was checked above: there is a next slot.
        if let Some(n) = ring.next() {
            ring.push_one(n, wr.wr_id, mr);
        }
        if matches!(wr.op, SendOp::Flush(_)) {
            crate::native::count(Counted::FlushEmulated);
        }
    }
    if r == 0 {
        return Some(Ok(()));
    }
    let e = post_failed("ibv_post_send", r);
    Some(Err(if posted > 0 {
        e.with_detail(&format!("{posted} of {} work requests were posted", wrs.len()))
    } else {
        e
    }))
}

/// Posts one receive of at most one piece (the common case) through `post` (`ibv_post_recv`)
/// and records it in `ring`; `None` for any other (the general path handles it, and a full
/// queue too).
#[inline(always)]
pub(super) fn post_recv_one(
    ring: &mut FifoRing,
    wr: &RecvWr<'_, Verbs>,
    post: impl FnOnce(*mut ffi::ibv_recv_wr, *mut *mut ffi::ibv_recv_wr) -> i32,
) -> Option<Result<()>> {
    let id = ring.next()?;
    // One straight path per shape (a piece, or none): no optional SGE to select between.
    let (r, mr) = match wr.local {
        Local::One(b) => {
            let mut sge = b.mr.sge(b.offset, b.len);
            (post_one_recv(ring.id(0), &mut sge, 1, post), Some(&**b.mr))
        }
        Local::None => (post_one_recv(ring.id(0), std::ptr::null_mut(), 0, post), None),
        Local::Sg(_) | Local::Inline(_) => return None,
    };
    if r != 0 {
        return Some(Err(post_failed("ibv_post_recv", r)));
    }
    ring.push_one(id, wr.wr_id, mr);
    Some(Ok(()))
}

/// `post` of one receive work request with verbs `wr_id` and `num_sge` entries at `sg_list`.
#[inline(always)]
fn post_one_recv(
    wr_id: u64,
    sg_list: *mut ffi::ibv_sge,
    num_sge: i32,
    post: impl FnOnce(*mut ffi::ibv_recv_wr, *mut *mut ffi::ibv_recv_wr) -> i32,
) -> i32 {
    let mut w = ffi::ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list, num_sge };
    let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
    post(&mut w, &mut bad)
}

#[cold]
#[inline(never)]
fn post_failed(op: &'static str, r: i32) -> Error {
    Error::provider(op, crate::sys::ret_errno(r))
}

/// Posts a chain of send work requests without native operations through `post`
/// (`ibv_post_send`), and records what was posted in `ring`.
///
/// # Errors
/// As [`verbs_wr`]; `Provider` if posting fails.
pub(super) fn post_send_chain(
    ring: &mut FifoRing,
    sc: &mut Scratch,
    wrs: &[SendWr<'_, Verbs>],
    all: &[VerbsWr],
    flush_mr: Option<&VerbsMr>,
    post: impl FnOnce(*mut ffi::ibv_send_wr, *mut *mut ffi::ibv_send_wr) -> i32,
) -> Result<()> {
    const OP: &str = "ibv_post_send";
    let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
    let (r, posted) = if let ([wr], [p]) = (wrs, all) {
        // One work request of at most one piece: on the stack.
        let mut w = send_wr(p, ring.id(0));
        let mut sge = MaybeUninit::<ffi::ibv_sge>::uninit();
        let n = if wr.local.pieces_len() > 1 {
            sc.sges.clear();
            let n = push_sges(wr, p, flush_mr, &mut sc.sges);
            w.sg_list = sc.sges.as_mut_ptr();
            n
        } else {
            let s = match p.data {
                Data::None => None,
                Data::Local => wr.local.piece(0).map(|b| b.mr.sge(b.offset, b.len)),
                Data::FlushBuf(n) => flush_mr.map(|fm| fm.sge(0, n)),
                Data::Inline(ptr, len) => Some(ffi::ibv_sge { addr: ptr as u64, length: len as u32, lkey: 0 }),
            };
            match s {
                Some(s) => {
                    w.sg_list = sge.write(s);
                    1
                }
                None => 0,
            }
        };
        w.num_sge = n;
        let r = post(&mut w, &mut bad);
        (r, usize::from(r == 0))
    } else {
        sc.send.clear();
        sc.sges.clear();
        for (k, (wr, p)) in wrs.iter().zip(all).enumerate() {
            let mut w = send_wr(p, ring.id(k));
            w.num_sge = push_sges(wr, p, flush_mr, &mut sc.sges);
            sc.send.push(w);
        }
        post_linked(&mut sc.send, &mut sc.sges, post)
    };
    for wr in &wrs[..posted] {
        ring.push(wr.wr_id, regions(&wr.local));
    }
    for p in &all[..posted] {
        if let Some(c) = p.counted {
            crate::native::count(c);
        }
    }
    if r == 0 {
        return Ok(());
    }
    let e = Error::provider(OP, crate::sys::ret_errno(r));
    Err(if posted > 0 { e.with_detail(&format!("{posted} of {} work requests were posted", wrs.len())) } else { e })
}

/// Posts a chain of receives through `post` (`ibv_post_recv` or `ibv_post_srq_recv`) and
/// records what was posted in `ring`.
///
/// # Errors
/// `Provider` with `ENOMEM` if the queue has fewer free entries than `wrs` (nothing posted), or
/// if posting fails.
pub(crate) fn post_recv_chain(
    ring: &mut impl Ring,
    sc: &mut Scratch,
    wrs: &[RecvWr<'_, Verbs>],
    op: &'static str,
    post: impl FnOnce(*mut ffi::ibv_recv_wr, *mut *mut ffi::ibv_recv_wr) -> i32,
) -> Result<()> {
    ring.check(op, wrs.len())?;
    let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
    let (r, posted) = if let [wr] = wrs {
        let mut sge = MaybeUninit::<ffi::ibv_sge>::uninit();
        let mut w = ffi::ibv_recv_wr {
            wr_id: ring.id(0),
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        };
        if wr.local.pieces_len() > 1 {
            sc.sges.clear();
            sc.sges.extend(regions_sges(&wr.local));
            w.sg_list = sc.sges.as_mut_ptr();
            w.num_sge = sc.sges.len() as i32;
        } else if let Some(b) = wr.local.piece(0) {
            w.sg_list = sge.write(b.mr.sge(b.offset, b.len));
            w.num_sge = 1;
        }
        let r = post(&mut w, &mut bad);
        (r, usize::from(r == 0))
    } else {
        sc.recv.clear();
        sc.sges.clear();
        for (k, wr) in wrs.iter().enumerate() {
            let before = sc.sges.len();
            sc.sges.extend(regions_sges(&wr.local));
            let num_sge = (sc.sges.len() - before) as i32;
            sc.recv.push(ffi::ibv_recv_wr {
                wr_id: ring.id(k),
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge,
            });
        }
        post_linked(&mut sc.recv, &mut sc.sges, post)
    };
    for wr in &wrs[..posted] {
        ring.push(wr.wr_id, regions(&wr.local));
    }
    if r == 0 {
        return Ok(());
    }
    let e = Error::provider(op, crate::sys::ret_errno(r));
    Err(if posted > 0 { e.with_detail(&format!("{posted} of {} receives were posted", wrs.len())) } else { e })
}

fn regions_sges<'m>(local: &Local<'m, Verbs>) -> impl Iterator<Item = ffi::ibv_sge> + 'm {
    let l = *local;
    (0..l.pieces_len()).filter_map(move |i| l.piece(i)).map(|b| b.mr.sge(b.offset, b.len))
}

/// Posts a chain holding native operations through the extended QP's builder (one
/// `ibv_wr_start` .. `ibv_wr_complete`: posted whole or not at all), and records it in `ring`.
///
/// # Errors
/// `Provider` if `ibv_wr_complete` fails (nothing was posted).
///
/// # Safety
/// `q` is the live extended QP of this ring's queue pair, created with the send-ops flags of
/// every native operation in `all`; the caller is its owner's thread (rule V6).
pub(super) unsafe fn post_send_ex(
    q: *mut ffi::ibv_qp_ex,
    ring: &mut FifoRing,
    sc: &mut Scratch,
    wrs: &[SendWr<'_, Verbs>],
    all: &[VerbsWr],
    flush_mr: Option<&VerbsMr>,
) -> Result<()> {
    use ffi::ibv_wr_opcode as O;
    // SAFETY: [V2, V6] per the contract; every builder call is made between `ibv_wr_start` and
    // `ibv_wr_complete` on this thread; the data pointers (pieces, inline bytes, the atomic
    // value inside `wrs`) live across the calls, which copy them into the work queue.
    let r = unsafe {
        ffi::ibv_wr_start(q);
        for (k, (wr, p)) in wrs.iter().zip(all).enumerate() {
            (*q).wr_id = ring.id(k) | p.tag;
            (*q).wr_flags = p.flags;
            match p.native {
                Some(Native::AtomicWrite) => {
                    let Some(aw) = (*q).wr_atomic_write else {
                        ffi::ibv_wr_abort(q);
                        return Err(Error::new(ErrorKind::NoSupp, "ibv_wr_atomic_write"));
                    };
                    let Data::Inline(ptr, _) = p.data else { unreachable!("an atomic write carries its value") };
                    aw(q, p.rkey, p.raddr, ptr.cast());
                    continue;
                }
                Some(Native::Flush(t)) => {
                    let Some(fl) = crate::native::wr_flush(q) else {
                        ffi::ibv_wr_abort(q);
                        return Err(Error::new(ErrorKind::NoSupp, "ibv_wr_flush"));
                    };
                    let ptype = match t {
                        FlushType::Visibility => 1, // IBV_FLUSH_GLOBAL
                        FlushType::Persistent => 2, // IBV_FLUSH_PERSISTENT
                    };
                    fl(q, p.rkey, p.raddr, wr.len, ptype, 0 /* IBV_FLUSH_RANGE */);
                    continue;
                }
                None => {}
            }
            match p.opcode {
                O::IBV_WR_RDMA_READ => ffi::ibv_wr_rdma_read(q, p.rkey, p.raddr),
                O::IBV_WR_RDMA_WRITE_WITH_IMM => {
                    ffi::ibv_wr_rdma_write_imm(q, p.rkey, p.raddr, p.imm.unwrap_or(0).to_be())
                }
                O::IBV_WR_SEND => ffi::ibv_wr_send(q),
                O::IBV_WR_SEND_WITH_IMM => ffi::ibv_wr_send_imm(q, p.imm.unwrap_or(0).to_be()),
                _ => ffi::ibv_wr_rdma_write(q, p.rkey, p.raddr),
            }
            match p.data {
                Data::Inline(ptr, len) => ffi::ibv_wr_set_inline_data(q, ptr.cast_mut().cast(), len),
                _ => {
                    sc.sges.clear();
                    let n = push_sges(wr, p, flush_mr, &mut sc.sges);
                    ffi::ibv_wr_set_sge_list(q, n as usize, sc.sges.as_ptr());
                }
            }
        }
        ffi::ibv_wr_complete(q)
    };
    if r != 0 {
        return Err(Error::provider("ibv_wr_complete", crate::sys::ret_errno(r)));
    }
    for wr in wrs {
        ring.push(wr.wr_id, regions(&wr.local));
    }
    for p in all {
        if let Some(c) = p.counted {
            crate::native::count(c);
        }
    }
    Ok(())
}
