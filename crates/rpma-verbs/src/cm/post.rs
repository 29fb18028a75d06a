//! Posting's pure part: work requests (validated by rpma-core) turned into verbs work requests,
//! linked into chains in a queue's scratch buffers, and what a provider's answer means for the
//! slot ring. The queues post (`SendQueue`, `RecvQueue`, `VerbsSrq`): each calls its provider
//! function itself.
//!
//! A chain goes down in one `ibv_post_send` (or, when it holds a native flush or atomic write,
//! one `ibv_wr_start` .. `ibv_wr_complete` of the extended QP). Everything that could make a
//! provider refuse one of its work requests (queue room, scatter-gather entries, inline size)
//! was checked before, so a chain is posted whole; if a provider still stops in the middle
//! (`ibv_post_send` reports the first work request it refused), the ones before it are posted
//! and recorded, and the error says how many.

use rdma_sys as ffi;
use rpma_core::transport::{Local, RecvWr, SendOp, SendWr};
use rpma_core::{Error, ErrorKind, FlushType, Result};

use crate::mr::VerbsMr;
use crate::native::Counted;
use crate::ring::{Ring, FLUSH_READ_BIT};
use crate::{Verbs, VerbsPd};

/// Reusable buffers of a send queue's chains (owned by the queue; rule V6).
#[derive(Default)]
pub(super) struct SendScratch {
    pub(super) send: Vec<ffi::ibv_send_wr>,
    pub(super) sges: Vec<ffi::ibv_sge>,
    /// The verbs form of a chain's work requests.
    pub(super) verbs_wrs: Vec<VerbsWr>,
}

// SAFETY: [V6] the vectors hold pointers (chain links, SGE lists, inline data) only while a
// chain is posted by the thread that owns them; between posts those pointers are stale and
// never read.
unsafe impl Send for SendScratch {}

impl std::fmt::Debug for SendScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendScratch").field("capacity", &self.send.capacity()).finish()
    }
}

/// Reusable buffers of a receive queue's chains (owned by one queue; rule V6 or a lock).
#[derive(Default)]
pub(crate) struct RecvScratch {
    recv: Vec<ffi::ibv_recv_wr>,
    sges: Vec<ffi::ibv_sge>,
}

// SAFETY: [V6] as `SendScratch`.
unsafe impl Send for RecvScratch {}

impl std::fmt::Debug for RecvScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvScratch").field("capacity", &self.recv.capacity()).finish()
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
    /// Its protection domain (the device's capabilities and name, for a refusal).
    pub(super) pd: &'a VerbsPd,
}

/// The `Unsupported` of a native-only operation (`what`) that would be emulated on a QP of `pd`.
#[cold]
#[inline(never)]
fn no_native(pd: &VerbsPd, op: &'static str, what: &str) -> Error {
    let caps = pd.caps();
    let device_has_it = if what == "flush" { caps.native_flush } else { caps.native_atomic_write };
    let dev = pd.device().name();
    let why = if device_has_it {
        format!("this connection's QP on {dev} has no native {what}")
    } else {
        format!("device {dev} has no native {what} (kernel capability bits or provider support missing)")
    };
    Error::new(ErrorKind::Unsupported, op).with_detail(&format!(
        "native {what} required (rpma_verbs::set_native_only / RPMA_VERBS_NATIVE_ONLY) but {why}; not emulated"
    ))
}

/// The verbs opcode (and immediate data) of a read, write or send; `None` for the operations
/// that have their own paths (atomic write, flush).
#[inline(always)]
pub(super) fn rw_send_opcode(op: &SendOp) -> Option<(ffi::ibv_wr_opcode::Type, Option<u32>)> {
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
/// `Unsupported` for an operation the native-only policy forbids to emulate, or a flush without a
/// flush buffer.
#[inline]
pub(super) fn verbs_wr(wr: &SendWr<'_, Verbs>, ops: QpOps<'_>) -> Result<VerbsWr> {
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
                    return Err(no_native(ops.pd, "Conn::atomic_write", "atomic write"));
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
                return Err(no_native(ops.pd, "Conn::flush", "flush"));
            }
            if ops.flush_mr.is_none() {
                return Err(Error::new(ErrorKind::Unsupported, "ibv_post_send").with_detail("no flush buffer"));
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
pub(super) trait Linked: Sized {
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
/// them each); returns its first work request. The chain stays valid while neither vector
/// changes.
pub(super) fn link<W: Linked>(wrs: &mut [W], sges: &mut [ffi::ibv_sge]) -> *mut W {
    let n = wrs.len();
    let base = wrs.as_mut_ptr();
    let sg = sges.as_mut_ptr();
    let mut at = 0usize;
    for i in 0..n {
        // SAFETY: [V2] `i < n` and `at + num_sge <= sges.len()` (the entries were pushed in this
        // order), so every pointer stays inside its slice.
        unsafe {
            let w = &mut *base.add(i);
            let list = if w.num_sge() > 0 { sg.add(at) } else { std::ptr::null_mut() };
            at += w.num_sge() as usize;
            w.link(list, if i + 1 < n { base.add(i + 1) } else { std::ptr::null_mut() });
        }
    }
    base
}

/// How many of the `n` work requests of the chain at `base` a provider took: all if it
/// returned 0, else those before the one it pointed `bad` at (none if it pointed at none).
pub(super) fn posted<W>(r: i32, base: *mut W, bad: *mut W, n: usize) -> usize {
    if r == 0 {
        n
    } else if bad.is_null() {
        0
    } else {
        // SAFETY: [V2] the provider points `bad` at the element of the chain it refused.
        usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0).min(n)
    }
}

/// Appends the scatter-gather entries of `wr` (with `p`) to `sges`; returns how many.
#[inline]
pub(super) fn push_sges(
    wr: &SendWr<'_, Verbs>,
    p: &VerbsWr,
    flush_mr: Option<&VerbsMr>,
    sges: &mut Vec<ffi::ibv_sge>,
) -> i32 {
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
pub(super) fn send_wr(p: &VerbsWr, id: u64) -> ffi::ibv_send_wr {
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
#[cold]
#[inline(never)]
pub(super) fn post_failed(op: &'static str, r: i32) -> Error {
    Error::provider(op, crate::sys::ret_errno(r))
}

/// The error of a chain of `n` work requests (`what`) whose post returned `r` after `posted`
/// of them were taken.
#[cold]
#[inline(never)]
pub(super) fn chain_failed(op: &'static str, r: i32, posted: usize, n: usize, what: &str) -> Error {
    let e = post_failed(op, r);
    if posted > 0 {
        e.with_detail(&format!("{posted} of {n} {what} were posted"))
    } else {
        e
    }
}

/// Builds the chain of receives `wrs` in `sc`, numbered by `ring` (after [`Ring::check`]);
/// returns its first receive, valid while `sc` is not changed.
pub(crate) fn recv_chain(ring: &impl Ring, sc: &mut RecvScratch, wrs: &[RecvWr<'_, Verbs>]) -> *mut ffi::ibv_recv_wr {
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
    link(&mut sc.recv, &mut sc.sges)
}

/// Records in `ring` the receives of `wrs` that a post of their chain at `head` (from
/// [`recv_chain`]) took, the provider having returned `r` and pointed `bad`.
///
/// # Errors
/// `Provider` (`op`) if the post failed, saying how many were posted.
pub(crate) fn recvs_posted(
    ring: &mut impl Ring,
    wrs: &[RecvWr<'_, Verbs>],
    op: &'static str,
    head: *mut ffi::ibv_recv_wr,
    r: i32,
    bad: *mut ffi::ibv_recv_wr,
) -> Result<()> {
    let n = posted(r, head, bad, wrs.len());
    for wr in &wrs[..n] {
        ring.push(wr.wr_id, regions(&wr.local));
    }
    if r == 0 {
        return Ok(());
    }
    Err(chain_failed(op, r, n, wrs.len(), "receives"))
}

fn regions_sges<'m>(local: &Local<'m, Verbs>) -> impl Iterator<Item = ffi::ibv_sge> + 'm {
    let l = *local;
    (0..l.pieces_len()).filter_map(move |i| l.piece(i)).map(|b| b.mr.sge(b.offset, b.len))
}
