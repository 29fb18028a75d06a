//! Conformance cases: read, write, atomic write, flush, send, recv and the imm variants
//! (docs/semantics.md: completion opcodes, operations and work requests, flush, atomic write),
//! posted as builders (`conn.write(remote.at(o), src.slice(a..b)).flags(..).context(..).post()`),
//! plus zero-copy access to the regions they use.
//!
//! Type-enforced rules (no case): every `conn`, `dst`, `src` (atomic write), `op_context` NULL
//! rule of librpma; an unknown flush type (a closed enum here). Exactly one of `dst`/`src` given,
//! or no region with a non-zero offset or length: an operation takes both sides or neither
//! (`conn.read(dst.slice(..), src.at(..))` / `conn.read_empty()`, the same for write, write with
//! imm, send and recv), so `read__dst_NULL`, `read__src_NULL_dst_not_NULL`,
//! `read__src_NULL_dst_offset_not_NULL`, `read__src_NULL_src_offset_not_NULL`,
//! `read__src_NULL_len_not_NULL`, `read__src_NULL_dst_offsets_len_not_NULL` (and their `write__`
//! and `write_with_imm__` twins), `send__src_NULL_offset_not_NULL`, `send__src_NULL_len_not_NULL`,
//! `send__src_NULL_offset_len_not_NULL` (and their `send_with_imm__` twins),
//! `recv__dst_NULL_offset_not_NULL`, `recv__dst_NULL_len_not_NULL` and
//! `recv__dst_NULL_offset_len_not_NULL` cannot be written.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rpma::descriptor::MrDescriptor;
use rpma::op::{LocalSlice, RemoteAt};
use rpma::{
    CompletionFlags, Conn, ConnCfg, ErrorKind, FlushType, MrLocal, MrRemote, PeerCfg, Transport, Usage, Wc, WcOpcode,
    WcStatus,
};

use super::harness::{assert_kind, assert_no_wc, mr, next_wc, pair, pair_with, remote, Backend, Case, Pair};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        write__success_then_read_back,
        // read
        read__flags_0,
        read__zero_byte_success,
        read__local_range_out_of_bounds,
        read__range_inverted,
        read__remote_range_beyond_descriptor_size,
        read__remote_usage_missing,
        read__dst_not_locally_writable,
        read__success,
        read__COMPLETION_ON_ERROR_success,
        read__flags_4_means_on_error,
        read__untrusted_descriptor_wrong_rkey,
        read__proptest_bounds,
        read__zero_copy_destination_via_as_mut_slice,
        // write
        write__flags_0,
        write__zero_byte_success,
        write__local_range_out_of_bounds,
        write__range_inverted,
        write__remote_range_beyond_descriptor_size,
        write__remote_usage_missing,
        write__success,
        write__COMPLETION_ON_ERROR_success,
        write__flags_4_means_on_error,
        write__untrusted_descriptor_wrong_rkey,
        write__untrusted_descriptor_size_larger_than_registered,
        write__untrusted_descriptor_claims_WRITE_DST,
        write__COMPLETION_ON_ERROR_failure_completes,
        write__error_moves_qp_to_error_state,
        write__sq_size_exceeded,
        write__sq_slots_freed_by_signaled_completion,
        write__proptest_bounds,
        write__zero_copy_source_via_as_mut_slice,
        // write with imm
        write_with_imm__flags_0,
        write_with_imm__zero_byte_success,
        write_with_imm__local_range_out_of_bounds,
        write_with_imm__range_inverted,
        write_with_imm__remote_range_beyond_descriptor_size,
        write_with_imm__remote_usage_missing,
        write_with_imm__success,
        write_with_imm__COMPLETION_ON_ERROR_success,
        write_with_imm__flags_4_means_on_error,
        // atomic write
        atomic_write__flags_0,
        atomic_write__dst_offset_unaligned,
        atomic_write__beyond_region,
        atomic_write__dst_usage_missing,
        atomic_write__success,
        atomic_write__COMPLETION_ON_ERROR_success,
        atomic_write__proptest_bounds,
        // flush
        flush__flags_0,
        flush__FLUSH_PERSISTENT_NO_DIRECT_WRITE,
        flush__FLUSH_PERSISTENT_USAGE_EMPTY,
        flush__FLUSH_PERSISTENT_USAGE_VISIBILITY,
        flush__FLUSH_VISIBILITY_USAGE_EMPTY,
        flush__FLUSH_VISIBILITY_USAGE_PERSISTENT,
        flush__range_beyond_region,
        flush__range_inverted,
        flush__success_FLUSH_TYPE_VISIBILITY,
        flush__success_FLUSH_TYPE_PERSISTENT,
        flush__COMPLETION_ON_ERROR_success,
        flush__log_pattern_write_flush_atomic_write_flush,
        // send / send with imm / recv
        send__flags_0,
        send__src_range_out_of_bounds,
        send__src_range_inverted,
        send__zero_byte_success,
        send__success,
        send__COMPLETION_ON_ERROR_success,
        send__message_larger_than_recv_buffer,
        send__before_recv_posted_waits,
        send__zero_copy_source_via_as_mut_slice,
        send_with_imm__flags_0,
        send_with_imm__src_range_out_of_bounds,
        send_with_imm__src_range_inverted,
        send_with_imm__zero_byte_success,
        send_with_imm__success,
        recv__dst_range_out_of_bounds,
        recv__dst_range_inverted,
        recv__dst_not_locally_writable,
        recv__zero_length_success,
        recv__zero_length_buffer_refuses_a_longer_message_on_both_sides,
        recv__success,
        recv__unordered_set,
        recv__rq_size_exceeded,
        recv__zero_copy_read_via_as_mut_slice,
        // the memory of operations in flight
        as_mut_slice__recv_in_flight_E_AGAIN,
        as_mut_slice__send_in_flight_E_AGAIN,
        volatile__sees_remote_write_after_completion,
    ]
}

// ---------------------------------------------------------------------------------------------
// Shared fixtures and helpers
// ---------------------------------------------------------------------------------------------

/// Size of the regions most cases use.
const SZ: usize = 4096;
/// Immediate data the imm variants carry.
const IMM: u32 = 0xA1B2_C3D4;
/// Filler of regions whose untouched bytes a case checks.
const FILL: u8 = 0xEE;

/// A connected pair with a server region the client reads and writes, and a client region.
struct Rig<T: Transport> {
    p: Pair<T>,
    /// Server region (`READ_SRC | WRITE_DST`, [`SZ`] bytes).
    target: MrLocal<T>,
    /// Client region (`READ_DST | WRITE_SRC`, [`SZ`] bytes).
    local: MrLocal<T>,
    /// The client's view of `target`.
    r: MrRemote,
}

fn rig_from<T: Transport>(p: Pair<T>) -> Rig<T> {
    let target = mr(&p.speer, SZ, Usage::READ_SRC | Usage::WRITE_DST);
    let local = mr(&p.cpeer, SZ, Usage::READ_DST | Usage::WRITE_SRC);
    let r = remote(&target);
    Rig { p, target, local, r }
}

fn rig<B: Backend>(b: &B, t: &B::T) -> Rig<B::T> {
    rig_from(pair(b, t))
}

/// `n` bytes of a pattern that differs per `seed`.
fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The whole content of a region.
fn all<T: Transport>(m: &MrLocal<T>) -> Vec<u8> {
    m.to_vec(0, m.len()).unwrap()
}

/// A remote view of `m` with some descriptor fields replaced (an untrusted/lying peer).
fn lying<T: Transport>(m: &MrLocal<T>, f: impl FnOnce(MrDescriptor) -> MrDescriptor) -> MrRemote {
    let d = MrDescriptor::decode(&m.descriptor()).unwrap();
    MrRemote::from_descriptor(&f(d).encode()).unwrap()
}

/// Asserts `wc` is a successful completion of `wr_id` with `opcode`.
#[track_caller]
fn assert_ok_wc(wc: Wc, wr_id: u64, opcode: WcOpcode) {
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (wr_id, WcStatus::Success, opcode), "{wc:?}");
}

/// A connection configuration with the given queue sizes (`0`: keep the default).
fn conn_cfg<T: Transport>(sq: u32, rq: u32, cq: u32) -> ConnCfg<T> {
    let mut c = ConnCfg::new();
    if sq > 0 {
        c = c.with_sq_size(sq);
    }
    if rq > 0 {
        c = c.with_rq_size(rq);
    }
    if cq > 0 {
        c = c.with_cq_size(cq);
    }
    c
}

fn peer_cfg(direct_write: bool) -> PeerCfg {
    PeerCfg::new().with_direct_write_to_pmem(direct_write)
}

/// Two bounds of a range, in the order given (a case that inverts them reads as `lo..hi` with
/// `lo > hi`, which no lint objects to).
fn bounds(a: usize, b: usize) -> (usize, usize) {
    (a, b)
}

/// `64..8` of `m`: a range whose start is past its end.
fn inverted<T: Transport>(m: &MrLocal<T>) -> LocalSlice<'_, T> {
    let (lo, hi) = bounds(64, 8);
    m.slice(lo..hi)
}

// ---------------------------------------------------------------------------------------------
// read / write / write_with_imm, shared by a generic helper per behaviour
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rw {
    Read,
    Write,
    WriteImm,
}

impl Rw {
    /// The completion opcode on the posting side.
    const fn opcode(self) -> WcOpcode {
        match self {
            Self::Read => WcOpcode::RdmaRead,
            Self::Write | Self::WriteImm => WcOpcode::RdmaWrite,
        }
    }

    /// The operation's name in errors (librpma's function name).
    const fn name(self) -> &'static str {
        match self {
            Self::Read => "Conn::read",
            Self::Write => "Conn::write",
            Self::WriteImm => "Conn::write(..).imm",
        }
    }
}

/// Posts `op` between the local slice `l` and the remote offset `r` (for read the local side is
/// the destination, for write the source).
fn rw<T: Transport>(
    c: &Conn<T>,
    op: Rw,
    l: LocalSlice<'_, T>,
    r: RemoteAt<'_>,
    flags: CompletionFlags,
    id: u64,
) -> rpma::Result<()> {
    match op {
        Rw::Read => c.read(l, r).flags(flags).context(id).post(),
        Rw::Write => c.write(r, l).flags(flags).context(id).post(),
        Rw::WriteImm => c.write(r, l).imm(IMM).flags(flags).context(id).post(),
    }
}

/// The zero-byte form of `op` (no regions).
fn rw_empty<T: Transport>(c: &Conn<T>, op: Rw, flags: CompletionFlags, id: u64) -> rpma::Result<()> {
    match op {
        Rw::Read => c.read_empty().flags(flags).context(id).post(),
        Rw::Write => c.write_empty().flags(flags).context(id).post(),
        Rw::WriteImm => c.write_empty().imm(IMM).flags(flags).context(id).post(),
    }
}

/// Posts `op` with `len` bytes of the local region at `loff` and the remote region at `roff`
/// (librpma's argument terms). An end past `usize::MAX` saturates: such a range is outside the
/// region either way.
#[allow(clippy::too_many_arguments)]
fn rw_post<T: Transport>(
    c: &Conn<T>,
    op: Rw,
    local: &MrLocal<T>,
    loff: usize,
    remote: &MrRemote,
    roff: usize,
    len: usize,
    flags: CompletionFlags,
    id: u64,
) -> rpma::Result<()> {
    rw(c, op, local.slice(loff..loff.saturating_add(len)), remote.at(roff), flags, id)
}

fn rw_flags_0<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let e = rw_post(c, op, &x.local, 0, &x.r, 0, 8, CompletionFlags::empty(), 1).expect_err("flags 0");
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, op.name()), "{e}");
    // The zero-byte form is no exception.
    assert_kind(rw_empty(c, op, CompletionFlags::empty(), 1), ErrorKind::InvalidInput);
    assert_no_wc(c.cq());
}

/// The zero-byte form (no regions) posts a work request that completes.
fn rw_zero_byte<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    if op == Rw::WriteImm {
        x.p.server.recv_empty().context(77).post().unwrap();
    }
    rw_empty(&x.p.client, op, CompletionFlags::ALWAYS, 5).unwrap();
    assert_ok_wc(next_wc(x.p.client.cq()), 5, op.opcode());
    if op == Rw::WriteImm {
        let wc = next_wc(x.p.server.cq());
        assert_ok_wc(wc, 77, WcOpcode::RecvRdmaWithImm);
        assert_eq!((wc.imm_data(), wc.byte_len()), (Some(IMM), 0));
    }
    assert_eq!(all(&x.target), vec![0; SZ]);
    assert_eq!(all(&x.local), vec![0; SZ]);
}

fn rw_local_range<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let a = CompletionFlags::ALWAYS;
    let l = &x.local;
    for bad in [l.slice(SZ - 4..SZ + 4), l.slice(SZ + 1..SZ + 1), l.slice(SZ + 1..), l.slice(0..SZ + 1)] {
        assert_kind(rw(c, op, bad, x.r.at(0), a, 1), ErrorKind::InvalidInput);
    }
    // A start at usize::MAX (librpma's offset + len overflowing) is past the end, not wrapped.
    assert_kind(rw(c, op, l.slice(usize::MAX..), x.r.at(0), a, 1), ErrorKind::InvalidInput);
    assert_kind(rw(c, op, l.slice(usize::MAX - 1..usize::MAX), x.r.at(0), a, 1), ErrorKind::InvalidInput);
    assert_no_wc(c.cq());
    // The exact end is in bounds.
    if op == Rw::WriteImm {
        x.p.server.recv_empty().context(77).post().unwrap();
    }
    rw(c, op, l.slice(SZ - 8..), x.r.at(0), a, 2).unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, op.opcode());
    assert_no_wc(c.cq());
}

/// An inverted range, and one ending at `usize::MAX` inclusive (its end does not fit), are
/// `InvalidInput` when posted; nothing is posted.
fn rw_range_inverted<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let l = &x.local;
    let (lo, hi) = bounds(64, 8);
    for bad in [l.slice(lo..hi), l.slice(lo..=hi), l.slice(..=usize::MAX), l.slice(8..=usize::MAX)] {
        let e = rw(c, op, bad, x.r.at(0), CompletionFlags::ALWAYS, 1).expect_err("an inverted range");
        assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, op.name()), "{bad:?}: {e}");
    }
    assert_no_wc(c.cq());
    // The same bounds the right way round are fine.
    if op == Rw::WriteImm {
        x.p.server.recv_empty().context(77).post().unwrap();
    }
    rw(c, op, l.slice(hi..lo), x.r.at(0), CompletionFlags::ALWAYS, 2).unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, op.opcode());
    assert_no_wc(c.cq());
}

fn rw_remote_range<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let a = CompletionFlags::ALWAYS;
    let l = &x.local;
    assert_kind(rw(c, op, l.slice(0..8), x.r.at(SZ - 4), a, 1), ErrorKind::InvalidInput);
    assert_kind(rw(c, op, l.slice(0..0), x.r.at(SZ + 1), a, 1), ErrorKind::InvalidInput);
    // offset + len overflowing is out of range, not wrapped.
    assert_kind(rw(c, op, l.slice(0..2), x.r.at(usize::MAX), a, 1), ErrorKind::InvalidInput);
    assert_kind(rw(c, op, l.slice(0..8), x.r.at(usize::MAX - 3), a, 1), ErrorKind::InvalidInput);
    // Checked against the size the descriptor claims: a smaller claim is enforced.
    let small = lying(&x.target, |d| MrDescriptor { len: 64, ..d });
    assert_kind(rw(c, op, l.slice(0..8), small.at(60), a, 1), ErrorKind::InvalidInput);
    assert_no_wc(c.cq());
    if op == Rw::WriteImm {
        x.p.server.recv_empty().context(77).post().unwrap();
    }
    rw(c, op, l.slice(0..8), x.r.at(SZ - 8), a, 2).unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, op.opcode());
    assert_no_wc(c.cq());
}

/// Read needs a remote region registered `READ_SRC`, write one registered `WRITE_DST`.
fn rw_remote_usage<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    let wrong = match op {
        Rw::Read => Usage::WRITE_DST,
        Rw::Write | Rw::WriteImm => Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY,
    };
    let other = mr(&x.p.speer, SZ, wrong);
    let r = remote(&other);
    let e = rw_post(&x.p.client, op, &x.local, 0, &r, 0, 8, CompletionFlags::ALWAYS, 1);
    assert_kind(e, ErrorKind::InvalidInput);
    assert_no_wc(x.p.client.cq());
}

const LOFF: usize = 1000;
const ROFF: usize = 100;
const RW_LEN: usize = 200;

/// Posts `op` twice (`first`, then `ALWAYS` 1 KiB further on) and checks the completions and
/// that both moved exactly their bytes.
fn rw_success<B: Backend>(b: &B, op: Rw, first: CompletionFlags) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let (src_mr, src_off, dst_mr, dst_off) = match op {
        Rw::Read => (&x.target, ROFF, &x.local, LOFF),
        Rw::Write | Rw::WriteImm => (&x.local, LOFF, &x.target, ROFF),
    };
    let d1 = pattern(1, RW_LEN);
    let d2 = pattern(2, RW_LEN);
    src_mr.write(src_off, &d1).unwrap();
    src_mr.write(src_off + 1024, &d2).unwrap();
    dst_mr.write(0, &[FILL; SZ]).unwrap();
    if op == Rw::WriteImm {
        x.p.server.recv_empty().context(501).post().unwrap();
        x.p.server.recv_empty().context(502).post().unwrap();
    }
    rw_post(c, op, &x.local, LOFF, &x.r, ROFF, RW_LEN, first, 1).unwrap();
    if first.signaled() {
        assert_ok_wc(next_wc(c.cq()), 1, op.opcode());
    } else {
        assert_no_wc(c.cq());
    }
    rw_post(c, op, &x.local, LOFF + 1024, &x.r, ROFF + 1024, RW_LEN, CompletionFlags::ALWAYS, 2).unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, op.opcode());
    assert_no_wc(c.cq());
    let mut want = vec![FILL; SZ];
    want[dst_off..dst_off + RW_LEN].copy_from_slice(&d1);
    want[dst_off + 1024..dst_off + 1024 + RW_LEN].copy_from_slice(&d2);
    assert!(all(dst_mr) == want, "destination bytes differ from the expected ones");
    if op == Rw::WriteImm {
        let mut ids = BTreeSet::new();
        for _ in 0..2 {
            let wc = next_wc(x.p.server.cq());
            assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, WcOpcode::RecvRdmaWithImm), "{wc:?}");
            assert_eq!((wc.imm_data(), wc.byte_len()), (Some(IMM), RW_LEN as u32));
            ids.insert(wc.wr_id());
        }
        assert_eq!(ids, BTreeSet::from([501, 502]));
    }
    assert_no_wc(x.p.server.cq());
}

/// Generates `read__X`, `write__X` and `write_with_imm__X` from one helper.
macro_rules! per_rw_op {
    ($helper:ident $(, $arg:expr)* => $read:ident, $write:ident, $wimm:ident) => {
        fn $read<B: Backend>(b: &B) {
            $helper(b, Rw::Read $(, $arg)*);
        }
        fn $write<B: Backend>(b: &B) {
            $helper(b, Rw::Write $(, $arg)*);
        }
        fn $wimm<B: Backend>(b: &B) {
            $helper(b, Rw::WriteImm $(, $arg)*);
        }
    };
}

per_rw_op!(rw_flags_0 => read__flags_0, write__flags_0, write_with_imm__flags_0);
per_rw_op!(rw_zero_byte => read__zero_byte_success, write__zero_byte_success, write_with_imm__zero_byte_success);
per_rw_op!(rw_local_range =>
    read__local_range_out_of_bounds, write__local_range_out_of_bounds, write_with_imm__local_range_out_of_bounds);
per_rw_op!(rw_range_inverted => read__range_inverted, write__range_inverted, write_with_imm__range_inverted);
per_rw_op!(rw_remote_range =>
    read__remote_range_beyond_descriptor_size, write__remote_range_beyond_descriptor_size,
    write_with_imm__remote_range_beyond_descriptor_size);
per_rw_op!(rw_remote_usage =>
    read__remote_usage_missing, write__remote_usage_missing, write_with_imm__remote_usage_missing);
per_rw_op!(rw_success, CompletionFlags::ALWAYS => read__success, write__success, write_with_imm__success);
per_rw_op!(rw_success, CompletionFlags::ON_ERROR =>
    read__COMPLETION_ON_ERROR_success, write__COMPLETION_ON_ERROR_success,
    write_with_imm__COMPLETION_ON_ERROR_success);
per_rw_op!(rw_success, CompletionFlags::from_bits_retain(4) =>
    read__flags_4_means_on_error, write__flags_4_means_on_error, write_with_imm__flags_4_means_on_error);

fn write__success_then_read_back<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let target = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::READ_SRC);
    let local = mr(&p.cpeer, 4096, Usage::WRITE_SRC | Usage::READ_DST);
    let r = remote(&target);
    local.write(0, b"0123456789").unwrap();
    p.client.write(r.at(100), local.slice(0..10)).context(7).post().unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (7, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(target.to_vec(100, 10).unwrap(), b"0123456789");
    p.client.read(local.slice(1000..1010), r.at(100)).context(8).post().unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (8, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(local.to_vec(1000, 10).unwrap(), b"0123456789");
}

/// A read destination the device may not write (only `SEND` usage) is rejected.
fn read__dst_not_locally_writable<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let send_only = mr(&x.p.cpeer, SZ, Usage::SEND);
    let e = x.p.client.read(send_only.slice(0..8), x.r.at(0)).context(1).post();
    assert_kind(e, ErrorKind::InvalidInput);
    assert_no_wc(x.p.client.cq());
}

// ---------------------------------------------------------------------------------------------
// Responder checks with untrusted descriptors
// ---------------------------------------------------------------------------------------------

fn wrong_rkey(d: MrDescriptor) -> MrDescriptor {
    MrDescriptor { rkey: d.rkey ^ 0x8000_0000, ..d }
}

fn read__untrusted_descriptor_wrong_rkey<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    x.target.write(0, &pattern(3, SZ)).unwrap();
    x.local.write(0, &[FILL; SZ]).unwrap();
    let bad = lying(&x.target, wrong_rkey);
    x.p.client.read(x.local.slice(0..64), bad.at(0)).context(9).post().unwrap();
    let wc = next_wc(x.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::RemAccessErr), "{wc:?}");
    assert_eq!(all(&x.local), vec![FILL; SZ]);
}

fn write__untrusted_descriptor_wrong_rkey<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    x.target.write(0, &[FILL; SZ]).unwrap();
    x.local.write(0, &pattern(4, SZ)).unwrap();
    let bad = lying(&x.target, wrong_rkey);
    x.p.client.write(bad.at(0), x.local.slice(0..64)).context(9).post().unwrap();
    let wc = next_wc(x.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::RemAccessErr), "{wc:?}");
    assert_eq!(all(&x.target), vec![FILL; SZ]);
}

/// A descriptor claiming more bytes than were registered passes the local check; the responder
/// refuses the part past the real end and touches nothing.
fn write__untrusted_descriptor_size_larger_than_registered<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let neighbour = mr(&x.p.speer, SZ, Usage::READ_SRC | Usage::WRITE_DST);
    x.target.write(0, &[FILL; SZ]).unwrap();
    neighbour.write(0, &[FILL; SZ]).unwrap();
    x.local.write(0, &pattern(5, SZ)).unwrap();
    let big = lying(&x.target, |d| MrDescriptor { len: 2 * SZ as u64, ..d });
    x.p.client.write(big.at(SZ - 8), x.local.slice(0..16)).context(9).post().unwrap();
    let wc = next_wc(x.p.client.cq());
    assert_eq!(wc.wr_id(), 9);
    assert_ne!(wc.status(), WcStatus::Success, "{wc:?}");
    assert_eq!(all(&x.target), vec![FILL; SZ]);
    assert_eq!(all(&neighbour), vec![FILL; SZ]);
}

/// A descriptor claiming `WRITE_DST` for a region registered `READ_SRC` only: the responder
/// enforces the real registration.
fn write__untrusted_descriptor_claims_WRITE_DST<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let ro = mr(&x.p.speer, SZ, Usage::READ_SRC);
    ro.write(0, &[FILL; SZ]).unwrap();
    x.local.write(0, &pattern(6, SZ)).unwrap();
    let liar = lying(&ro, |d| MrDescriptor { usage: (Usage::READ_SRC | Usage::WRITE_DST).bits() as u8, ..d });
    x.p.client.write(liar.at(0), x.local.slice(0..64)).context(9).post().unwrap();
    let wc = next_wc(x.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (9, WcStatus::RemAccessErr), "{wc:?}");
    assert_eq!(all(&ro), vec![FILL; SZ]);
}

/// `ON_ERROR` means a failed operation still produces a completion.
fn write__COMPLETION_ON_ERROR_failure_completes<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let bad = lying(&x.target, wrong_rkey);
    x.p.client.write(bad.at(0), x.local.slice(0..64)).flags(CompletionFlags::ON_ERROR).context(11).post().unwrap();
    let wc = next_wc(x.p.client.cq());
    assert_eq!(wc.wr_id(), 11);
    assert_ne!(wc.status(), WcStatus::Success, "{wc:?}");
}

/// After an error completion the QP is in the error state: later work is flushed.
fn write__error_moves_qp_to_error_state<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    x.target.write(0, &[FILL; SZ]).unwrap();
    x.local.write(0, &pattern(7, SZ)).unwrap();
    let bad = lying(&x.target, wrong_rkey);
    x.p.client.write(bad.at(0), x.local.slice(0..64)).context(1).post().unwrap();
    assert_eq!(next_wc(x.p.client.cq()).status(), WcStatus::RemAccessErr);
    x.p.client.write(x.r.at(0), x.local.slice(0..64)).context(2).post().unwrap();
    let wc = next_wc(x.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::WrFlushErr), "{wc:?}");
    assert_eq!(all(&x.target), vec![FILL; SZ]);
}

// ---------------------------------------------------------------------------------------------
// Queue depth
// ---------------------------------------------------------------------------------------------

/// Unsignaled work requests keep their send-queue slots until a later signaled completion is
/// polled: with `sq_size` 4, a 5th post fails.
fn write__sq_size_exceeded<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig_from(pair_with(b, &t, Some(&conn_cfg(4, 0, 0)), None, None, None));
    let c = &x.p.client;
    for i in 0..4 {
        c.write(x.r.at(8 * i), x.local.slice(0..8)).flags(CompletionFlags::ON_ERROR).context(i as u64).post().unwrap();
    }
    assert_kind(
        c.write(x.r.at(64), x.local.slice(0..8)).flags(CompletionFlags::ON_ERROR).context(4).post(),
        ErrorKind::Provider,
    );
    assert_kind(c.write(x.r.at(64), x.local.slice(0..8)).context(5).post(), ErrorKind::Provider);
    assert_no_wc(c.cq());
}

fn write__sq_slots_freed_by_signaled_completion<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig_from(pair_with(b, &t, Some(&conn_cfg(4, 0, 0)), None, None, None));
    let c = &x.p.client;
    for round in 0..3u64 {
        for i in 0..3 {
            c.write(x.r.at(8 * i), x.local.slice(0..8))
                .flags(CompletionFlags::ON_ERROR)
                .context(10 * round + i as u64)
                .post()
                .unwrap();
        }
        c.write(x.r.at(24), x.local.slice(0..8)).context(10 * round + 3).post().unwrap();
        let e = c.write(x.r.at(32), x.local.slice(0..8)).context(99).post();
        assert_kind(e, ErrorKind::Provider);
        assert_ok_wc(next_wc(c.cq()), 10 * round + 3, WcOpcode::RdmaWrite);
        assert_no_wc(c.cq());
    }
}

fn recv__rq_size_exceeded<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair_with(b, &t, None, Some(&conn_cfg(0, 4, 0)), None, None);
    let buf = mr(&p.speer, SZ, Usage::RECV);
    for i in 0..4 {
        p.server.recv(buf.slice(64 * i..64 * i + 64)).context(i as u64).post().unwrap();
    }
    assert_kind(p.server.recv(buf.slice(256..320)).context(4).post(), ErrorKind::Provider);
    assert_kind(p.server.recv_empty().context(5).post(), ErrorKind::Provider);
    // A message consumes one buffer; the freed entry can be posted again.
    p.client.send_empty().context(6).post().unwrap();
    assert_ok_wc(next_wc(p.client.cq()), 6, WcOpcode::Send);
    let wc = next_wc(p.server.cq());
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::Success, WcOpcode::Recv, 0));
    assert!(wc.wr_id() < 4, "{wc:?}");
    p.server.recv(buf.slice(256..320)).context(7).post().unwrap();
    assert_kind(p.server.recv(buf.slice(320..384)).context(8).post(), ErrorKind::Provider);
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: 64, failure_persistence: None, max_shrink_iters: 32, ..Config::default() })
}

/// Offsets and lengths around a 4 KiB region, plus arbitrary (overflowing) values.
fn offset_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..=SZ, 2 => (SZ - 16)..=(SZ + 16), 1 => any::<usize>()]
}

fn len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..=64, 2 => 0usize..=SZ, 1 => (SZ - 8)..=(SZ + 8), 1 => any::<usize>()]
}

fn in_bounds(offset: usize, len: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= SZ)
}

/// `op` with arbitrary `(dst_offset, src_offset, len)` against 4 KiB regions is accepted iff
/// both ranges are in bounds; every accepted call completes with the bytes moved exactly
/// (the whole destination is compared with a model).
fn rw_proptest<B: Backend>(b: &B, op: Rw) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let (src_mr, dst_mr) = match op {
        Rw::Read => (&x.target, &x.local),
        Rw::Write | Rw::WriteImm => (&x.local, &x.target),
    };
    let model = RefCell::new(all(dst_mr));
    let n = Cell::new(0u64);
    let accepted = Cell::new(0u32);
    let r = runner().run(&(offset_strategy(), offset_strategy(), len_strategy()), |(dst_off, src_off, len)| {
        let id = n.get() + 1;
        n.set(id);
        let ok = in_bounds(dst_off, len) && in_bounds(src_off, len);
        if ok {
            src_mr.write(src_off, &pattern(id, len)).unwrap();
        }
        let (loff, roff) = if op == Rw::Read { (dst_off, src_off) } else { (src_off, dst_off) };
        let res = rw_post(c, op, &x.local, loff, &x.r, roff, len, CompletionFlags::ALWAYS, id);
        if !ok {
            let e = res.err().ok_or_else(|| TestCaseError::fail("out-of-bounds call accepted"))?;
            prop_assert_eq!(e.kind(), ErrorKind::InvalidInput);
            return Ok(());
        }
        prop_assert!(res.is_ok(), "in-bounds call rejected: {:?}", res);
        let wc = next_wc(c.cq());
        prop_assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (id, WcStatus::Success, op.opcode()));
        accepted.set(accepted.get() + 1);
        let mut m = model.borrow_mut();
        m[dst_off..dst_off + len].copy_from_slice(&pattern(id, len));
        prop_assert!(all(dst_mr) == *m, "destination differs from the model");
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
    assert!(accepted.get() > 0, "no accepted case was generated");
    assert_no_wc(c.cq());
}

fn read__proptest_bounds<B: Backend>(b: &B) {
    rw_proptest(b, Rw::Read);
}

fn write__proptest_bounds<B: Backend>(b: &B) {
    rw_proptest(b, Rw::Write);
}

/// Atomic write with an arbitrary offset is accepted iff aligned and in bounds; every accepted
/// call writes exactly its 8 bytes.
fn atomic_write__proptest_bounds<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let model = RefCell::new(all(&x.target));
    let n = Cell::new(0u64);
    let accepted = Cell::new(0u32);
    let strategy =
        prop_oneof![4 => (0usize..=SZ / 8).prop_map(|i| i * 8), 2 => 0usize..=(SZ + 16), 1 => any::<usize>()];
    let r = runner().run(&strategy, |off| {
        let id = n.get() + 1;
        n.set(id);
        let bytes: [u8; 8] = pattern(id, 8).try_into().unwrap();
        let ok = off % 8 == 0 && in_bounds(off, 8);
        let res = c.atomic_write(x.r.at(off), bytes).context(id).post();
        if !ok {
            let e = res.err().ok_or_else(|| TestCaseError::fail("invalid atomic write accepted"))?;
            prop_assert_eq!(e.kind(), ErrorKind::InvalidInput);
            return Ok(());
        }
        prop_assert!(res.is_ok(), "valid atomic write rejected: {:?}", res);
        let wc = next_wc(c.cq());
        prop_assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (id, WcStatus::Success, atomic_opcode(b)));
        accepted.set(accepted.get() + 1);
        let mut m = model.borrow_mut();
        m[off..off + 8].copy_from_slice(&bytes);
        prop_assert!(all(&x.target) == *m, "target differs from the model");
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
    assert!(accepted.get() > 0, "no accepted case was generated");
    assert_no_wc(c.cq());
}

// ---------------------------------------------------------------------------------------------
// atomic_write
// ---------------------------------------------------------------------------------------------

fn atomic_opcode<B: Backend>(b: &B) -> WcOpcode {
    if b.caps().native_atomic_write {
        WcOpcode::AtomicWrite
    } else {
        WcOpcode::RdmaWrite
    }
}

const WORD: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn atomic_write__flags_0<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    assert_kind(
        x.p.client.atomic_write(x.r.at(0), WORD).flags(CompletionFlags::empty()).context(1).post(),
        ErrorKind::InvalidInput,
    );
    assert_no_wc(x.p.client.cq());
}

fn atomic_write__dst_offset_unaligned<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    for off in [1, 4, 7, 9, 4092] {
        assert_kind(x.p.client.atomic_write(x.r.at(off), WORD).context(1).post(), ErrorKind::InvalidInput);
    }
    assert_no_wc(x.p.client.cq());
}

fn atomic_write__beyond_region<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    for off in [SZ, SZ + 8, usize::MAX - 7] {
        assert_kind(c.atomic_write(x.r.at(off), WORD).context(1).post(), ErrorKind::InvalidInput);
    }
    let small = lying(&x.target, |d| MrDescriptor { len: 12, ..d });
    assert_kind(c.atomic_write(small.at(8), WORD).context(1).post(), ErrorKind::InvalidInput);
    assert_no_wc(c.cq());
    // The last word is in bounds.
    c.atomic_write(x.r.at(SZ - 8), WORD).context(2).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, atomic_opcode(b));
    assert_eq!(x.target.to_vec(SZ - 8, 8).unwrap(), WORD);
}

fn atomic_write__dst_usage_missing<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let ro = mr(&x.p.speer, SZ, Usage::READ_SRC);
    let r = remote(&ro);
    assert_kind(x.p.client.atomic_write(r.at(0), WORD).context(1).post(), ErrorKind::InvalidInput);
    assert_no_wc(x.p.client.cq());
}

fn atomic_write__success<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    x.target.write(0, &[FILL; SZ]).unwrap();
    x.p.client.atomic_write(x.r.at(64), WORD).context(3).post().unwrap();
    assert_ok_wc(next_wc(x.p.client.cq()), 3, atomic_opcode(b));
    let mut want = vec![FILL; SZ];
    want[64..72].copy_from_slice(&WORD);
    assert!(all(&x.target) == want, "atomic write did not write exactly its 8 bytes");
    assert_no_wc(x.p.client.cq());
}

fn atomic_write__COMPLETION_ON_ERROR_success<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    c.atomic_write(x.r.at(0), WORD).flags(CompletionFlags::ON_ERROR).context(1).post().unwrap();
    assert_no_wc(c.cq());
    let w2 = 0x1122_3344_5566_7788u64.to_le_bytes();
    c.atomic_write(x.r.at(8), w2).context(2).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, atomic_opcode(b));
    assert_no_wc(c.cq());
    assert_eq!(x.target.to_vec(0, 8).unwrap(), WORD);
    assert_eq!(x.target.to_vec(8, 8).unwrap(), w2);
}

// ---------------------------------------------------------------------------------------------
// flush
// ---------------------------------------------------------------------------------------------

fn flush_opcode<B: Backend>(b: &B) -> WcOpcode {
    if b.caps().native_flush {
        WcOpcode::Flush
    } else {
        WcOpcode::RdmaRead
    }
}

/// A pair plus a server region registered `WRITE_DST | usage`; `direct_write` is applied to the
/// client as the remote peer's configuration.
fn flush_rig<B: Backend>(b: &B, t: &B::T, usage: Usage, direct_write: bool) -> (Rig<B::T>, MrLocal<B::T>) {
    let x = rig(b, t);
    x.p.client.apply_remote_peer_cfg(&peer_cfg(direct_write));
    let m = mr(&x.p.speer, SZ, Usage::WRITE_DST | usage);
    (x, m)
}

fn flush_nosupp<B: Backend>(b: &B, usage: Usage, direct_write: bool, ty: FlushType) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, usage, direct_write);
    let r = remote(&m);
    assert_kind(x.p.client.flush(r.slice(0..64), ty).context(1).post(), ErrorKind::Unsupported);
    assert_no_wc(x.p.client.cq());
}

fn flush__flags_0<B: Backend>(b: &B) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, Usage::FLUSH_TYPES, true);
    let r = remote(&m);
    for ty in [FlushType::Visibility, FlushType::Persistent] {
        assert_kind(
            x.p.client.flush(r.slice(0..64), ty).flags(CompletionFlags::empty()).context(1).post(),
            ErrorKind::InvalidInput,
        );
    }
    assert_no_wc(x.p.client.cq());
}

fn flush__FLUSH_PERSISTENT_NO_DIRECT_WRITE<B: Backend>(b: &B) {
    flush_nosupp(b, Usage::FLUSH_TYPES, false, FlushType::Persistent);
    // Also when the peer configuration was never applied at all.
    let t = b.transport();
    let x = rig(b, &t);
    let m = mr(&x.p.speer, SZ, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT);
    let r = remote(&m);
    let e = x.p.client.flush(r.slice(0..64), FlushType::Persistent).context(1).post();
    assert_kind(e, ErrorKind::Unsupported);
}

fn flush__FLUSH_PERSISTENT_USAGE_EMPTY<B: Backend>(b: &B) {
    flush_nosupp(b, Usage::READ_SRC, true, FlushType::Persistent);
}

fn flush__FLUSH_PERSISTENT_USAGE_VISIBILITY<B: Backend>(b: &B) {
    flush_nosupp(b, Usage::FLUSH_TYPE_VISIBILITY, true, FlushType::Persistent);
}

fn flush__FLUSH_VISIBILITY_USAGE_EMPTY<B: Backend>(b: &B) {
    flush_nosupp(b, Usage::READ_SRC, true, FlushType::Visibility);
}

fn flush__FLUSH_VISIBILITY_USAGE_PERSISTENT<B: Backend>(b: &B) {
    flush_nosupp(b, Usage::FLUSH_TYPE_PERSISTENT, true, FlushType::Visibility);
}

fn flush__range_beyond_region<B: Backend>(b: &B) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, Usage::FLUSH_TYPES, true);
    let r = remote(&m);
    let c = &x.p.client;
    for ty in [FlushType::Visibility, FlushType::Persistent] {
        for bad in [r.slice(SZ - 100..SZ + 100), r.slice(SZ + 1..SZ + 1), r.slice(0..SZ + 1), r.slice(SZ + 1..)] {
            assert_kind(c.flush(bad, ty).context(1).post(), ErrorKind::InvalidInput);
        }
        // librpma's offset + len overflowing: a start at usize::MAX is past the end, not wrapped.
        assert_kind(c.flush(r.slice(usize::MAX..), ty).context(1).post(), ErrorKind::InvalidInput);
        assert_kind(c.flush(r.slice(usize::MAX - 1..usize::MAX), ty).context(1).post(), ErrorKind::InvalidInput);
    }
    assert_no_wc(c.cq());
}

/// An inverted range, and one ending at `usize::MAX` inclusive, are `InvalidInput` when posted.
fn flush__range_inverted<B: Backend>(b: &B) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, Usage::FLUSH_TYPES, true);
    let r = remote(&m);
    let c = &x.p.client;
    let (lo, hi) = bounds(128, 64);
    for ty in [FlushType::Visibility, FlushType::Persistent] {
        for bad in [r.slice(lo..hi), r.slice(lo..=hi), r.slice(..=usize::MAX), r.slice(64..=usize::MAX)] {
            let e = c.flush(bad, ty).context(1).post().expect_err("an inverted range");
            assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Conn::flush"), "{bad:?}: {e}");
        }
    }
    assert_no_wc(c.cq());
    c.flush(r.slice(hi..lo), FlushType::Visibility).context(2).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, flush_opcode(b));
    assert_no_wc(c.cq());
}

fn flush_success<B: Backend>(b: &B, ty: FlushType) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, ty.required_usage(), ty == FlushType::Persistent);
    let r = remote(&m);
    let c = &x.p.client;
    let data = pattern(8, 256);
    x.local.write(0, &data).unwrap();
    c.write(r.at(512), x.local.slice(0..256)).flags(CompletionFlags::ON_ERROR).context(1).post().unwrap();
    c.flush(r.slice(512..768), ty).context(2).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, flush_opcode(b));
    assert_no_wc(c.cq());
    assert_eq!(m.to_vec(512, 256).unwrap(), data);
}

fn flush__success_FLUSH_TYPE_VISIBILITY<B: Backend>(b: &B) {
    flush_success(b, FlushType::Visibility);
}

fn flush__success_FLUSH_TYPE_PERSISTENT<B: Backend>(b: &B) {
    flush_success(b, FlushType::Persistent);
}

fn flush__COMPLETION_ON_ERROR_success<B: Backend>(b: &B) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, Usage::FLUSH_TYPE_VISIBILITY, false);
    let r = remote(&m);
    let c = &x.p.client;
    c.flush(r.slice(0..64), FlushType::Visibility).flags(CompletionFlags::ON_ERROR).context(1).post().unwrap();
    assert_no_wc(c.cq());
    c.flush(r.slice(64..128), FlushType::Visibility).context(2).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, flush_opcode(b));
    assert_no_wc(c.cq());
}

/// Example 07's log pattern: "write data; flush; atomic-write the commit pointer; flush", only
/// the last signaled; the bytes are in place when its completion arrives.
fn flush__log_pattern_write_flush_atomic_write_flush<B: Backend>(b: &B) {
    let t = b.transport();
    let (x, m) = flush_rig(b, &t, Usage::FLUSH_TYPE_VISIBILITY, false);
    m.write(0, &[FILL; SZ]).unwrap();
    let r = remote(&m);
    let c = &x.p.client;
    let e = CompletionFlags::ON_ERROR;
    let data = pattern(9, 1024);
    x.local.write(0, &data).unwrap();
    let commit = 1024u64.to_le_bytes();
    c.write(r.at(8), x.local.slice(0..1024)).flags(e).context(1).post().unwrap();
    c.flush(r.slice(8..1032), FlushType::Visibility).flags(e).context(2).post().unwrap();
    c.atomic_write(r.at(0), commit).flags(e).context(3).post().unwrap();
    c.flush(r.slice(0..8), FlushType::Visibility).context(4).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 4, flush_opcode(b));
    assert_no_wc(c.cq());
    let mut want = vec![FILL; SZ];
    want[..8].copy_from_slice(&commit);
    want[8..1032].copy_from_slice(&data);
    assert!(all(&m) == want, "log region differs from the expected bytes");
}

// ---------------------------------------------------------------------------------------------
// send / send_with_imm / recv
// ---------------------------------------------------------------------------------------------

/// Sends `src` (`None`: the zero-byte form), with `imm` if given.
fn send_post<T: Transport>(
    c: &Conn<T>,
    imm: Option<u32>,
    src: Option<LocalSlice<'_, T>>,
    flags: CompletionFlags,
    id: u64,
) -> rpma::Result<()> {
    let op = match src {
        Some(s) => c.send(s),
        None => c.send_empty(),
    };
    match imm {
        Some(i) => op.imm(i).flags(flags).context(id).post(),
        None => op.flags(flags).context(id).post(),
    }
}

/// The name of a send in errors.
const fn send_name(imm: Option<u32>) -> &'static str {
    if imm.is_some() {
        "Conn::send(..).imm"
    } else {
        "Conn::send"
    }
}

/// A pair with a client send region (`SEND`) and a server receive region (`RECV`).
struct Msgs<T: Transport> {
    p: Pair<T>,
    src: MrLocal<T>,
    dst: MrLocal<T>,
}

fn msgs<B: Backend>(b: &B, t: &B::T) -> Msgs<B::T> {
    let p = pair(b, t);
    let src = mr(&p.cpeer, SZ, Usage::SEND);
    let dst = mr(&p.speer, SZ, Usage::RECV);
    Msgs { p, src, dst }
}

/// Posts a send of the range `pick` chooses of the source region: refused with `InvalidInput`, and
/// nothing is sent.
fn send_inval<B: Backend>(
    b: &B,
    imm: Option<u32>,
    pick: impl Fn(&MrLocal<B::T>) -> LocalSlice<'_, B::T>,
    flags: CompletionFlags,
) {
    let t = b.transport();
    let x = msgs(b, &t);
    x.p.server.recv(x.dst.slice(..)).context(50).post().unwrap();
    let e = send_post(&x.p.client, imm, Some(pick(&x.src)), flags, 1).expect_err("an invalid send");
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, send_name(imm)), "{e}");
    assert_no_wc(x.p.client.cq());
    assert_no_wc(x.p.server.cq());
}

/// Sends `len` bytes (`None`: the zero-byte form) and checks both completions and the bytes.
fn send_success<B: Backend>(b: &B, imm: Option<u32>, len: Option<usize>, first: CompletionFlags) {
    let t = b.transport();
    let x = msgs(b, &t);
    x.dst.write(0, &[FILL; SZ]).unwrap();
    let data = pattern(10, len.unwrap_or(0));
    x.src.write(32, &data).unwrap();
    x.p.server.recv(x.dst.slice(..SZ)).context(50).post().unwrap();
    let n = data.len();
    let src = len.map(|_| x.src.slice(32..32 + n));
    send_post(&x.p.client, imm, src, first, 1).unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_ok_wc(wc, 50, WcOpcode::Recv);
    assert_eq!((wc.byte_len(), wc.imm_data()), (n as u32, imm), "{wc:?}");
    if first.signaled() {
        assert_ok_wc(next_wc(x.p.client.cq()), 1, WcOpcode::Send);
    }
    assert_no_wc(x.p.client.cq());
    let mut want = vec![FILL; SZ];
    want[..n].copy_from_slice(&data);
    assert!(all(&x.dst) == want, "received bytes differ from the sent ones");
}

fn send__flags_0<B: Backend>(b: &B) {
    send_inval(b, None, |m| m.slice(0..8), CompletionFlags::empty());
}

fn send__src_range_out_of_bounds<B: Backend>(b: &B) {
    send_inval(b, None, |m| m.slice(SZ - 4..SZ + 4), CompletionFlags::ALWAYS);
    send_inval(b, None, |m| m.slice(usize::MAX..), CompletionFlags::ALWAYS);
}

/// An inverted range, and one ending at `usize::MAX` inclusive, are `InvalidInput` when posted.
fn send__src_range_inverted<B: Backend>(b: &B) {
    send_inval(b, None, inverted, CompletionFlags::ALWAYS);
    send_inval(b, None, |m| m.slice(..=usize::MAX), CompletionFlags::ALWAYS);
}

fn send__zero_byte_success<B: Backend>(b: &B) {
    send_success(b, None, None, CompletionFlags::ALWAYS);
}

fn send__success<B: Backend>(b: &B) {
    send_success(b, None, Some(300), CompletionFlags::ALWAYS);
}

fn send__COMPLETION_ON_ERROR_success<B: Backend>(b: &B) {
    send_success(b, None, Some(300), CompletionFlags::ON_ERROR);
}

fn send_with_imm__flags_0<B: Backend>(b: &B) {
    send_inval(b, Some(IMM), |m| m.slice(0..8), CompletionFlags::empty());
}

fn send_with_imm__src_range_out_of_bounds<B: Backend>(b: &B) {
    send_inval(b, Some(IMM), |m| m.slice(SZ - 4..SZ + 4), CompletionFlags::ALWAYS);
    send_inval(b, Some(IMM), |m| m.slice(usize::MAX..), CompletionFlags::ALWAYS);
}

fn send_with_imm__src_range_inverted<B: Backend>(b: &B) {
    send_inval(b, Some(IMM), inverted, CompletionFlags::ALWAYS);
    send_inval(b, Some(IMM), |m| m.slice(8..=usize::MAX), CompletionFlags::ALWAYS);
}

fn send_with_imm__zero_byte_success<B: Backend>(b: &B) {
    send_success(b, Some(IMM), None, CompletionFlags::ALWAYS);
}

fn send_with_imm__success<B: Backend>(b: &B) {
    send_success(b, Some(IMM), Some(300), CompletionFlags::ALWAYS);
}

/// A message longer than the receive buffer: the receiver gets `LocLenErr`, the sender an error.
fn send__message_larger_than_recv_buffer<B: Backend>(b: &B) {
    let t = b.transport();
    let x = msgs(b, &t);
    x.dst.write(0, &[FILL; SZ]).unwrap();
    x.p.server.recv(x.dst.slice(0..8)).context(50).post().unwrap();
    x.p.client.send(x.src.slice(0..16)).context(1).post().unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_eq!(wc.wr_id(), 50, "{wc:?}");
    // IBTA says Local Length Error; Soft-RoCE (rxe, Linux 6.1) reports the receive as
    // IBV_WC_LOC_QP_OP_ERR instead. Gated by backend: the mock must report LocLenErr.
    if t.name() == "verbs" {
        assert!(matches!(wc.status(), WcStatus::LocLenErr | WcStatus::LocQpOpErr), "{wc:?}");
    } else {
        assert_eq!(wc.status(), WcStatus::LocLenErr, "{wc:?}");
    }
    let wc = next_wc(x.p.client.cq());
    assert_eq!(wc.wr_id(), 1);
    assert_ne!(wc.status(), WcStatus::Success, "{wc:?}");
    assert_eq!(x.dst.to_vec(8, SZ - 8).unwrap(), vec![FILL; SZ - 8]);
}

/// A send posted before the peer posts a receive waits (receiver-not-ready retry) and completes
/// once the receive is posted.
fn send__before_recv_posted_waits<B: Backend>(b: &B) {
    let t = b.transport();
    let x = msgs(b, &t);
    let data = pattern(11, 100);
    x.src.write(0, &data).unwrap();
    x.p.client.send(x.src.slice(0..100)).context(1).post().unwrap();
    assert_no_wc(x.p.client.cq());
    assert_no_wc(x.p.server.cq());
    x.p.server.recv(x.dst.slice(200..300)).context(50).post().unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_ok_wc(wc, 50, WcOpcode::Recv);
    assert_eq!(wc.byte_len(), 100);
    assert_ok_wc(next_wc(x.p.client.cq()), 1, WcOpcode::Send);
    assert_eq!(x.dst.to_vec(200, 100).unwrap(), data);
}

/// Posts a receive of the range `pick` chooses of the receive region: refused with `InvalidInput`,
/// and nothing is posted (a message then waits instead of landing).
fn recv_inval<B: Backend>(b: &B, pick: impl Fn(&MrLocal<B::T>) -> LocalSlice<'_, B::T>) {
    let t = b.transport();
    let x = msgs(b, &t);
    let e = x.p.server.recv(pick(&x.dst)).context(1).post().expect_err("an invalid receive");
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Conn::recv"), "{e}");
    x.p.client.send_empty().context(2).post().unwrap();
    assert_no_wc(x.p.server.cq());
    assert_no_wc(x.p.client.cq());
}

fn recv__dst_range_out_of_bounds<B: Backend>(b: &B) {
    recv_inval(b, |m| m.slice(SZ - 4..SZ + 4));
}

/// An inverted range, and one ending at `usize::MAX` inclusive, are `InvalidInput` when posted.
fn recv__dst_range_inverted<B: Backend>(b: &B) {
    recv_inval(b, inverted);
    recv_inval(b, |m| m.slice(..=usize::MAX));
}

/// A receive buffer the device may not write (only `SEND` usage) is rejected.
fn recv__dst_not_locally_writable<B: Backend>(b: &B) {
    let t = b.transport();
    let x = msgs(b, &t);
    let send_only = mr(&x.p.speer, SZ, Usage::SEND);
    assert_kind(x.p.server.recv(send_only.slice(0..64)).context(1).post(), ErrorKind::InvalidInput);
}

/// A zero-length receive (`recv_empty`) takes an empty message.
fn recv__zero_length_success<B: Backend>(b: &B) {
    let t = b.transport();
    let x = msgs(b, &t);
    x.p.server.recv_empty().context(50).post().unwrap();
    x.p.client.send_empty().context(1).post().unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_ok_wc(wc, 50, WcOpcode::Recv);
    assert_eq!((wc.byte_len(), wc.imm_data()), (0, None));
    assert_ok_wc(next_wc(x.p.client.cq()), 1, WcOpcode::Send);
}

/// A buffer of 0 bytes (an empty slice, as the zero-byte form) takes only a message of 0 bytes:
/// a longer one fails on both sides (the receive with a local error, the send an error), the queue pair
/// enters the error state, and no connection event comes of it (as on hardware): the
/// completions say what happened (`Conn::recv`'s doc).
fn recv__zero_length_buffer_refuses_a_longer_message_on_both_sides<B: Backend>(b: &B) {
    let t = b.transport();
    let x = msgs(b, &t);
    x.p.server.recv(x.dst.slice(8..8)).context(51).post().unwrap();
    x.p.client.send(x.src.slice(0..16)).context(2).post().unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_eq!(wc.wr_id(), 51);
    // The mock says LocLenErr; rxe LocQpOpErr.
    assert!(matches!(wc.status(), WcStatus::LocLenErr | WcStatus::LocQpOpErr), "{:?}", wc.status());
    let wc = next_wc(x.p.client.cq());
    assert_eq!(wc.wr_id(), 2);
    assert_ne!(wc.status(), WcStatus::Success);
    x.p.server.set_nonblocking(true).unwrap();
    assert_eq!(x.p.server.next_event().unwrap_err().kind(), ErrorKind::NoEvent, "no connection event");
}

/// A receive at an offset: the message lands there and nowhere else.
fn recv__success<B: Backend>(b: &B) {
    let t = b.transport();
    let x = msgs(b, &t);
    x.dst.write(0, &[FILL; SZ]).unwrap();
    let data = pattern(12, 64);
    x.src.write(0, &data).unwrap();
    x.p.server.recv(x.dst.slice(1000..1128)).context(50).post().unwrap();
    x.p.client.send(x.src.slice(0..64)).context(1).post().unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_ok_wc(wc, 50, WcOpcode::Recv);
    assert_eq!(wc.byte_len(), 64);
    assert_ok_wc(next_wc(x.p.client.cq()), 1, WcOpcode::Send);
    let mut want = vec![FILL; SZ];
    want[1000..1064].copy_from_slice(&data);
    assert!(all(&x.dst) == want, "received bytes misplaced");
}

/// Receives are an unordered set: every message lands exactly once, in some buffer, and the
/// completion's `wr_id` names that buffer (no order is asserted).
fn recv__unordered_set<B: Backend>(b: &B) {
    const N: usize = 16;
    const SLOT: usize = 64;
    let t = b.transport();
    let ccfg = conn_cfg(N as u32, 0, 2 * N as u32);
    let scfg = conn_cfg(0, N as u32, 2 * N as u32);
    let p = pair_with(b, &t, Some(&ccfg), Some(&scfg), None, None);
    let src = mr(&p.cpeer, N * SLOT, Usage::SEND);
    let dst = mr(&p.speer, N * SLOT, Usage::RECV);
    dst.write(0, &vec![FILL; N * SLOT]).unwrap();
    let messages: Vec<Vec<u8>> = (0..N).map(|i| pattern(100 + i as u64, 8 + i)).collect();
    for i in 0..N {
        p.server.recv(dst.slice(i * SLOT..i * SLOT + SLOT)).context(100 + i as u64).post().unwrap();
    }
    for (i, m) in messages.iter().enumerate() {
        src.write(i * SLOT, m).unwrap();
        p.client.send(src.slice(i * SLOT..i * SLOT + m.len())).context(i as u64).post().unwrap();
    }
    let mut sent = BTreeSet::new();
    for _ in 0..N {
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, WcOpcode::Send), "{wc:?}");
        sent.insert(wc.wr_id());
    }
    assert_eq!(sent, (0..N as u64).collect());
    let mut seen_msgs = BTreeSet::new();
    let mut seen_bufs = BTreeSet::new();
    for _ in 0..N {
        let wc = next_wc(p.server.cq());
        assert_eq!((wc.status(), wc.opcode()), (WcStatus::Success, WcOpcode::Recv), "{wc:?}");
        assert!((100..100 + N as u64).contains(&wc.wr_id()), "{wc:?}");
        let slot = (wc.wr_id() - 100) as usize;
        assert!(seen_bufs.insert(slot), "buffer {slot} completed twice");
        let got = dst.to_vec(slot * SLOT, wc.byte_len() as usize).unwrap();
        let which = messages.iter().position(|m| *m == got).expect("a buffer holds no sent message");
        assert!(seen_msgs.insert(which), "message {which} arrived twice");
        let rest = dst.to_vec(slot * SLOT + got.len(), SLOT - got.len()).unwrap();
        assert!(rest.iter().all(|&v| v == FILL), "bytes past the message in buffer {slot} changed");
    }
    assert_eq!(seen_msgs.len(), N);
    assert_no_wc(p.server.cq());
    assert_no_wc(p.client.cq());
}

// ---------------------------------------------------------------------------------------------
// The memory of operations: zero copy through `as_mut_slice`, regions held by operations in
// flight, the volatile view of remotely written bytes
// ---------------------------------------------------------------------------------------------

/// A source filled in place through `as_mut_slice` (no copy) is what the peer's region gets; the
/// same source is refilled for the next write once the completion of the last one was polled.
fn write__zero_copy_source_via_as_mut_slice<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let target = mr(&p.speer, SZ, Usage::WRITE_DST);
    let r = remote(&target);
    let mut src = mr(&p.cpeer, SZ, Usage::WRITE_SRC);
    let c = &p.client;
    for round in 0..3u64 {
        let data = pattern(30 + round, 700);
        let s = src.as_mut_slice().expect("no operation holds the source");
        s[..700].copy_from_slice(&data);
        c.write(r.at(round as usize * 1024), src.slice(..700)).context(round).post().unwrap();
        assert_ok_wc(next_wc(c.cq()), round, WcOpcode::RdmaWrite);
        assert_eq!(target.to_vec(round as usize * 1024, 700).unwrap(), data, "round {round}");
    }
    assert_no_wc(c.cq());
}

/// A message composed in place through `as_mut_slice` is what the peer receives.
fn send__zero_copy_source_via_as_mut_slice<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let dst = mr(&p.speer, SZ, Usage::RECV);
    let mut src = mr(&p.cpeer, SZ, Usage::SEND);
    for round in 0..3u64 {
        let data = pattern(40 + round, 100 + round as usize);
        src.as_mut_slice().expect("no operation holds the source")[..data.len()].copy_from_slice(&data);
        p.server.recv(dst.slice(..)).context(100 + round).post().unwrap();
        p.client.send(src.slice(..data.len())).context(round).post().unwrap();
        assert_ok_wc(next_wc(p.client.cq()), round, WcOpcode::Send);
        let wc = next_wc(p.server.cq());
        assert_ok_wc(wc, 100 + round, WcOpcode::Recv);
        assert_eq!(wc.byte_len() as usize, data.len());
        assert_eq!(dst.to_vec(0, data.len()).unwrap(), data, "round {round}");
    }
}

/// A local-only receive buffer is read in place once its completion was polled, and reused.
/// (On iWARP a receive buffer needs remote write access: it is never a plain slice.)
fn recv__zero_copy_read_via_as_mut_slice<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let mut dst = mr(&p.speer, SZ, Usage::RECV);
    let src = mr(&p.cpeer, SZ, Usage::SEND);
    if b.caps().iwarp {
        assert_kind(dst.as_mut_slice().map(|s| s.len()), ErrorKind::InvalidInput);
        return;
    }
    for round in 0..2u64 {
        let data = pattern(50 + round, 300);
        src.write(0, &data).unwrap();
        p.server.recv(dst.slice(SZ / 2..)).context(round).post().unwrap();
        p.client.send(src.slice(..300)).context(10 + round).post().unwrap();
        let wc = next_wc(p.server.cq());
        assert_ok_wc(wc, round, WcOpcode::Recv);
        let s = dst.as_mut_slice().expect("the receive was retired by polling its completion");
        assert_eq!(&s[SZ / 2..SZ / 2 + wc.byte_len() as usize], &data[..], "round {round}");
        assert!(s[..SZ / 2].iter().all(|&v| v == 0), "bytes before the buffer changed");
        s.fill(0);
        assert_ok_wc(next_wc(p.client.cq()), 10 + round, WcOpcode::Send);
    }
}

/// A local-only read destination holds the bytes read, in place, once the read's completion
/// was polled. (On iWARP a read destination needs remote write access: never a plain slice.)
fn read__zero_copy_destination_via_as_mut_slice<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let target = mr(&p.speer, SZ, Usage::READ_SRC);
    let data = pattern(21, 512);
    target.write(100, &data).unwrap();
    let mut dst = mr(&p.cpeer, SZ, Usage::READ_DST);
    p.client.read(dst.slice(1000..1512), remote(&target).at(100)).context(1).post().unwrap();
    assert_ok_wc(next_wc(p.client.cq()), 1, WcOpcode::RdmaRead);
    if b.caps().iwarp {
        assert_kind(dst.as_mut_slice().map(|s| s.len()), ErrorKind::InvalidInput);
        assert_eq!(dst.to_vec(1000, 512).unwrap(), data);
        return;
    }
    let s = dst.as_mut_slice().expect("the read was retired by polling its completion");
    assert_eq!(&s[1000..1512], &data[..]);
    assert!(s[..1000].iter().chain(&s[1512..]).all(|&v| v == 0), "bytes outside the destination changed");
}

/// A receive posted on a region holds it: `as_mut_slice` is `WouldBlock` until a message arrived
/// and its completion was polled (the receive stays posted until then, on every backend), then Ok
/// and the message is in place. With two receives posted, one retired is not enough.
fn as_mut_slice__recv_in_flight_E_AGAIN<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let mut dst = mr(&p.speer, SZ, Usage::RECV);
    let src = mr(&p.cpeer, SZ, Usage::SEND);
    if b.caps().iwarp {
        // A receive buffer grants remote write on iWARP: InvalidInput, whatever is in flight (the
        // send-side case covers WouldBlock there).
        assert_kind(dst.as_mut_slice().map(|s| s.len()), ErrorKind::InvalidInput);
        return;
    }
    dst.as_mut_slice().expect("nothing posted yet")[..4].copy_from_slice(b"init");
    p.server.recv(dst.slice(..64)).context(1).post().unwrap();
    let e = dst.as_mut_slice().map(|s| s.len()).expect_err("a posted receive holds the region");
    assert_eq!((e.kind(), e.op()), (ErrorKind::WouldBlock, "MrLocal::as_mut_slice"), "{e}");
    // It stays held while nothing arrives; copies still work.
    assert_no_wc(p.server.cq());
    assert_kind(dst.as_mut_slice().map(|s| s.len()), ErrorKind::WouldBlock);
    assert_eq!(dst.to_vec(0, 4).unwrap(), b"init");
    src.write(0, b"hello").unwrap();
    p.client.send(src.slice(..5)).context(2).post().unwrap();
    assert_ok_wc(next_wc(p.client.cq()), 2, WcOpcode::Send);
    assert_ok_wc(next_wc(p.server.cq()), 1, WcOpcode::Recv);
    assert_eq!(&dst.as_mut_slice().expect("the receive was retired")[..5], b"hello");

    // Two receives on the region: one message retires one of them only.
    p.server.recv(dst.slice(..64)).context(3).post().unwrap();
    p.server.recv(dst.slice(64..128)).context(4).post().unwrap();
    p.client.send(src.slice(..5)).context(5).post().unwrap();
    assert_ok_wc(next_wc(p.client.cq()), 5, WcOpcode::Send);
    let first = next_wc(p.server.cq());
    assert!(first.wr_id() == 3 || first.wr_id() == 4, "{first:?}");
    assert_kind(dst.as_mut_slice().map(|s| s.len()), ErrorKind::WouldBlock);
    p.client.send_empty().context(6).post().unwrap();
    assert_ok_wc(next_wc(p.client.cq()), 6, WcOpcode::Send);
    let second = next_wc(p.server.cq());
    assert_eq!(first.wr_id() + second.wr_id(), 7, "{first:?} {second:?}");
    dst.as_mut_slice().expect("both receives were retired");
}

/// A send waiting for the peer's receive (receiver not ready) holds its source: `WouldBlock` until
/// its completion was polled, and what arrives is what was in the source when it was posted.
fn as_mut_slice__send_in_flight_E_AGAIN<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let dst = mr(&p.speer, SZ, Usage::RECV);
    let mut src = mr(&p.cpeer, SZ, Usage::SEND);
    src.as_mut_slice().expect("nothing posted yet")[..6].copy_from_slice(b"queued");
    p.client.send(src.slice(..6)).context(1).post().unwrap();
    assert_no_wc(p.client.cq());
    let e = src.as_mut_slice().map(|s| s.len()).expect_err("a send in flight holds its source");
    assert_eq!((e.kind(), e.op()), (ErrorKind::WouldBlock, "MrLocal::as_mut_slice"), "{e}");
    p.server.recv(dst.slice(..64)).context(2).post().unwrap();
    let wc = next_wc(p.server.cq());
    assert_ok_wc(wc, 2, WcOpcode::Recv);
    assert_eq!(dst.to_vec(0, wc.byte_len() as usize).unwrap(), b"queued");
    assert_ok_wc(next_wc(p.client.cq()), 1, WcOpcode::Send);
    src.as_mut_slice().expect("the send was retired")[..6].copy_from_slice(b"reused");
    assert_eq!(src.to_vec(0, 6).unwrap(), b"reused");
}

/// The target's volatile view sees what a remote write, atomic write or write with imm placed,
/// once its completion arrived (the requester's, or the receiver's for the imm variant).
fn volatile__sees_remote_write_after_completion<B: Backend>(b: &B) {
    let t = b.transport();
    let x = rig(b, &t);
    let c = &x.p.client;
    let v = x.target.volatile();
    assert_eq!(v.load_u8(100).unwrap(), 0);
    let data = pattern(60, 256);
    x.local.write(0, &data).unwrap();
    c.write(x.r.at(100), x.local.slice(..256)).context(1).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 1, WcOpcode::RdmaWrite);
    assert_eq!(v.subslice(100, 256).unwrap().to_vec(), data);
    assert_eq!(v.load_u8(100).unwrap(), data[0]);
    let mut back = [0u8; 256];
    v.read(100, &mut back).unwrap();
    assert_eq!(back[..], data[..]);

    // A commit word, read with an acquire load.
    let word = 0x0123_4567_89AB_CDEFu64;
    c.atomic_write(x.r.at(512), word.to_ne_bytes()).context(2).post().unwrap();
    assert_ok_wc(next_wc(c.cq()), 2, atomic_opcode(b));
    assert_eq!(v.load_u64(512, Ordering::Acquire).unwrap(), word);

    // The receiver learns of a write with imm from its own completion.
    let data2 = pattern(61, 128);
    x.local.write(1024, &data2).unwrap();
    x.p.server.recv_empty().context(3).post().unwrap();
    c.write(x.r.at(2048), x.local.slice(1024..1152)).imm(IMM).context(4).post().unwrap();
    let wc = next_wc(x.p.server.cq());
    assert_ok_wc(wc, 3, WcOpcode::RecvRdmaWithImm);
    assert_eq!(v.subslice(2048, 128).unwrap().to_vec(), data2);
    assert_ok_wc(next_wc(c.cq()), 4, WcOpcode::RdmaWrite);
    // Untouched bytes stay zero.
    assert!(v.subslice(0, 100).unwrap().to_vec().iter().all(|&b| b == 0));
}
