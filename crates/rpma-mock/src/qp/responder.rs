//! The responder's side of a work request: the completion opcodes, and the remote-memory part
//! checked and executed as hardware does.

use std::sync::atomic::Ordering;

use rpma_core::transport::{Local, RemoteBuf, SendOp, SendWr};
use rpma_core::{Capabilities, FlushType, WcOpcode, WcStatus};

use crate::fabric::MockFabric;
use crate::mem::{copy, MrShared};

use super::pieces::{gather_into, LocalSide};

/// The completion opcode of an operation on the sender, and whether it consumes a receive.
pub(super) fn opcodes(op: SendOp, caps: &Capabilities) -> (WcOpcode, bool) {
    match op {
        SendOp::Read => (WcOpcode::RdmaRead, false),
        SendOp::Write => (WcOpcode::RdmaWrite, false),
        SendOp::WriteImm(_) => (WcOpcode::RdmaWrite, true),
        SendOp::AtomicWrite(_) if caps.native_atomic_write => (WcOpcode::AtomicWrite, false),
        SendOp::AtomicWrite(_) => (WcOpcode::RdmaWrite, false),
        SendOp::Flush(_) if caps.native_flush => (WcOpcode::Flush, false),
        SendOp::Flush(_) => (WcOpcode::RdmaRead, false),
        SendOp::Send | SendOp::SendImm(_) => (WcOpcode::Send, true),
    }
}

/// [`execute`] of the commonest work request, a write of one registered piece, in a few
/// instructions; any other work request goes the general way.
#[inline(always)]
pub(super) fn execute_fast(wr: &SendWr<'_, MockFabric>, mr: &MrShared, caps: &Capabilities, from: u32) -> WcStatus {
    if let (SendOp::Write, Local::One(b), Some(rb)) = (wr.op, wr.local, wr.remote) {
        if mr.rkey == rb.rkey && mr.access.fast_write && mr.valid.load(Ordering::Acquire) {
            if let Some(off) = mr.offset_of(rb.addr, b.len) {
                copy(b.mr.shared(), b.offset, mr, off, b.len);
                return WcStatus::Success;
            }
        }
    }
    execute_slow(wr, mr, caps, from)
}

#[inline(never)]
fn execute_slow(wr: &SendWr<'_, MockFabric>, mr: &MrShared, caps: &Capabilities, from: u32) -> WcStatus {
    execute(wr, Some(mr), caps, from)
}

/// Executes the remote-memory part of a work request at the responder, checking rkey, bounds
/// and access rights as hardware does. `target` is the region the work request's rkey names in
/// the responder's table (`None`: no such remotely accessible region); the caller holds it for
/// the access, so a deregistration meanwhile returns only after it (and the region then
/// refuses every later access: `valid` is false). `from` names the connection (the persistence
/// model's APM read makes durable only its own connection's writes).
#[inline]
pub(super) fn execute(
    wr: &SendWr<'_, MockFabric>,
    target: Option<&MrShared>,
    caps: &Capabilities,
    from: u32,
) -> WcStatus {
    execute_op(wr.op, &wr.local, wr.remote, wr.len, target, caps, from)
}

/// Where a write of `len` bytes at `rb` lands in `mr`: its offset, if `mr` is the region the
/// rkey names, still registered, grants remote write access and holds the range.
pub(super) fn write_offset(mr: &MrShared, rb: RemoteBuf, len: usize) -> Option<usize> {
    if mr.rkey != rb.rkey || !mr.valid.load(Ordering::Acquire) || !mr.access.remote_write {
        return None;
    }
    mr.offset_of(rb.addr, len)
}

/// [`execute`] of an operation given by its parts (`local` borrowed from a work request being
/// posted, or owned by one that waited in a deferred send queue).
pub(super) fn execute_op<L: LocalSide>(
    op: SendOp,
    local: &L,
    remote: Option<RemoteBuf>,
    len: usize,
    target: Option<&MrShared>,
    caps: &Capabilities,
    from: u32,
) -> WcStatus {
    let Some(rb) = remote else {
        return WcStatus::Success;
    };
    let Some(mr) = target.filter(|m| m.rkey == rb.rkey && m.valid.load(Ordering::Acquire)) else {
        return WcStatus::RemAccessErr;
    };
    let a = mr.access;
    match op {
        SendOp::Read => {
            let (Some(off), true) = (mr.offset_of(rb.addr, len), a.remote_read) else {
                return WcStatus::RemAccessErr;
            };
            local.scatter_from(mr, off, len);
            mr.read_after_writes(from);
        }
        SendOp::Write | SendOp::WriteImm(_) => {
            let (Some(off), true) = (mr.offset_of(rb.addr, len), a.remote_write) else {
                return WcStatus::RemAccessErr;
            };
            gather_into(local, mr, off);
            mr.note_write(off, len, from);
        }
        SendOp::AtomicWrite(bytes) => {
            let (Some(off), true) = (mr.offset_of(rb.addr, 8), a.remote_write) else {
                return WcStatus::RemAccessErr;
            };
            if caps.native_atomic_write && rb.addr % 8 != 0 {
                return WcStatus::RemInvReqErr;
            }
            mr.bytes(off, 8).write(0, &bytes).expect("8 bytes inside the region");
            mr.note_write(off, 8, from);
        }
        SendOp::Flush(t) if caps.native_flush => {
            let allowed = match t {
                FlushType::Visibility => a.flush_global,
                FlushType::Persistent => a.flush_persistent,
            };
            let Some(off) = mr.offset_of(rb.addr, len).filter(|_| allowed) else {
                return WcStatus::RemAccessErr;
            };
            // A persistent flush makes the range durable (the persistence model), and writes a
            // file-backed region's range back to the file.
            if t == FlushType::Persistent {
                mr.make_durable(off, len);
                if mr.persist(off, len).is_err() {
                    return WcStatus::RemOpErr;
                }
            }
        }
        SendOp::Flush(t) => {
            // APM: an 8-byte RDMA Read at the flushed address, kept inside the region.
            let n = mr.len.min(8);
            let Some(off) = mr.offset_of(rb.addr, 0) else {
                return WcStatus::RemAccessErr;
            };
            if !a.remote_read {
                return WcStatus::RemAccessErr;
            }
            let mut sink = [0u8; 8];
            mr.bytes(off.min(mr.len - n), n).read(0, &mut sink[..n]).expect("inside the region");
            // APM: the read makes the writes before it durable on a target with direct write to
            // pmem (rpma-core refuses a persistent flush towards any other peer).
            if t == FlushType::Persistent {
                mr.make_durable(off, len);
                if mr.persist(off, len).is_err() {
                    return WcStatus::RemOpErr;
                }
            }
        }
        SendOp::Send | SendOp::SendImm(_) => {}
    }
    WcStatus::Success
}
