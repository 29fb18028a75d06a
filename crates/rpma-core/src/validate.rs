//! Argument validation: every `RPMA_E_INVAL` / `RPMA_E_NOSUPP` rule that does not need a
//! provider, as pure functions run before any backend call (so no backend can disagree).

use std::sync::Arc;

use crate::descriptor::MrDescriptor;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{Capabilities, LocalBuf, RemoteBuf};
use crate::types::{CompletionFlags, FlushType, Usage};

/// A queue or CQ size against the device's limit (librpma passed it on and the provider failed;
/// rpma-rs refuses it first, so no backend tries to allocate an absurd queue).
///
/// # Errors
/// `InvalidInput`.
pub fn queue_size(op: &'static str, what: &'static str, size: u32, max: u32) -> Result<()> {
    if size > max {
        return Err(Error::invalid_input(op, &format!("{what} {size} exceeds the device's limit {max}")));
    }
    Ok(())
}

/// The largest transport retry count (`rdma_conn_param.retry_count`, a 3-bit field).
pub const MAX_RETRY_COUNT: u8 = 7;
/// The smallest local ACK timeout exponent (0 would mean an infinite timeout).
pub const MIN_ACK_TIMEOUT: u8 = 1;
/// The largest local ACK timeout exponent (a 5-bit field).
pub const MAX_ACK_TIMEOUT: u8 = 31;

/// A connection's transport retry count: 0..=7.
///
/// # Errors
/// `InvalidInput`.
pub fn retry_count(op: &'static str, retry_count: u8) -> Result<()> {
    if retry_count > MAX_RETRY_COUNT {
        return Err(Error::invalid_input(
            op,
            &format!(
                "retry_count {retry_count} is outside 0..={MAX_RETRY_COUNT} (the transport retry count of the queue pair)"
            ),
        ));
    }
    Ok(())
}

/// A connection's local ACK timeout exponent, if set: 1..=31.
///
/// # Errors
/// `InvalidInput`.
pub fn ack_timeout(op: &'static str, ack_timeout: Option<u8>) -> Result<()> {
    match ack_timeout {
        Some(n) if !(MIN_ACK_TIMEOUT..=MAX_ACK_TIMEOUT).contains(&n) => Err(Error::invalid_input(
            op,
            &format!(
                "ack_timeout {n} is outside {MIN_ACK_TIMEOUT}..={MAX_ACK_TIMEOUT} (the exponent of the local ACK timeout, \
                 4.096 us * 2^n; 0 would mean none)"
            ),
        )),
        _ => Ok(()),
    }
}

/// `rpma_mr_reg` usage rule: non-empty and only the eight known bits (docs/decisions.md #4).
///
/// # Errors
/// `InvalidInput`.
pub fn usage(op: &'static str, usage: Usage) -> Result<()> {
    if usage.is_empty() {
        return Err(Error::invalid_input(op, "usage is 0"));
    }
    if !Usage::all().contains(usage) {
        return Err(Error::invalid_input(op, "usage has unknown bits"));
    }
    Ok(())
}

/// Flags rule of every operation that takes flags: `0` is invalid. Returns whether the work
/// request is signaled.
///
/// # Errors
/// `InvalidInput`.
#[inline(always)]
pub fn flags(op: &'static str, flags: CompletionFlags) -> Result<bool> {
    if flags.is_empty() {
        return Err(Error::invalid_input(op, "flags are 0"));
    }
    Ok(flags.signaled())
}

/// A range `[offset, offset + len)` must lie inside `size` bytes.
///
/// # Errors
/// `InvalidInput`.
#[inline(always)]
pub fn local_range(op: &'static str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(local_range_error(op, offset, len, size)),
    }
}

/// The error of a range outside a local region, with its numbers (out of the hot path).
#[cold]
#[inline(never)]
fn local_range_error(op: &'static str, offset: usize, len: usize, size: usize) -> Error {
    Error::invalid_input(
        op,
        &format!("range outside the local memory region: offset {offset} + length {len} > the region's {size} bytes"),
    )
}

/// The largest length of one work request on a device: its `max_msg_size`, and at most
/// `u32::MAX` (the length field of a verbs scatter-gather entry).
#[must_use]
pub const fn msg_limit(caps: &Capabilities) -> u64 {
    if caps.max_msg_size < u32::MAX as u64 {
        caps.max_msg_size
    } else {
        u32::MAX as u64
    }
}

/// A length must fit one work request of the device: at most `limit`, its
/// [`msg_limit`].
///
/// # Errors
/// `InvalidInput`.
#[inline(always)]
pub fn msg_len(op: &'static str, limit: u64, len: usize) -> Result<()> {
    if len as u64 > limit {
        return Err(Error::invalid_input(op, "len exceeds the device's maximum message size"));
    }
    Ok(())
}

/// A local buffer of an operation: in bounds, and writable by the device if it is a destination
/// (the access rights librpma's usage → access mapping grants,
/// docs/semantics.md#usages-and-access-rights).
///
/// # Errors
/// `InvalidInput`.
#[inline(always)]
pub fn local_buf<'a, M: crate::transport::MrBackend>(
    op: &'static str,
    mr: &'a Arc<M>,
    usage: Usage,
    offset: usize,
    len: usize,
    destination: bool,
) -> Result<LocalBuf<'a, M>> {
    local_range(op, mr.len(), offset, len)?;
    if destination && !usage.local_writable() {
        return Err(Error::invalid_input(op, "local region is not registered for the device to write it"));
    }
    Ok(LocalBuf { mr, offset, len })
}

/// What an operation needs of a remote region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAccess {
    /// RDMA Read (read).
    Read,
    /// RDMA Write (write, write with imm, atomic write).
    Write,
    /// Flush of a type.
    Flush(FlushType),
}

/// A remote target: in bounds of the size the descriptor claims and with the access the
/// descriptor claims to grant (`desc`: the remote region's,
/// [`MrRemote::descriptor`](crate::MrRemote::descriptor)).
///
/// # Errors
/// `InvalidInput` for a range outside the region or a missing read/write usage; `Unsupported` for a
/// missing flush usage (librpma's rule).
#[inline(always)]
pub fn remote_buf(
    op: &'static str,
    desc: &MrDescriptor,
    offset: usize,
    len: usize,
    access: RemoteAccess,
) -> Result<RemoteBuf> {
    let usage = desc.usage();
    match access {
        RemoteAccess::Read if !usage.remote_readable() => {
            return Err(Error::invalid_input(op, "remote region is not registered for remote reads"));
        }
        RemoteAccess::Write if !usage.remote_writable() => {
            return Err(Error::invalid_input(op, "remote region is not registered for remote writes"));
        }
        RemoteAccess::Flush(t) if !usage.contains(t.required_usage()) => {
            return Err(Error::new(ErrorKind::Unsupported, op).with_detail(match t {
                FlushType::Persistent => {
                    "remote region is not registered for persistent flush (its owner registers it with \
                     Usage::FLUSH_TYPE_PERSISTENT)"
                }
                FlushType::Visibility => {
                    "remote region is not registered for visibility flush (its owner registers it with \
                     Usage::FLUSH_TYPE_VISIBILITY)"
                }
            }));
        }
        _ => {}
    }
    let end = (offset as u64).checked_add(len as u64);
    match end {
        Some(end) if end <= desc.len => {}
        _ => return Err(remote_range_error(op, offset, len, desc.len)),
    }
    let addr =
        desc.addr.checked_add(offset as u64).ok_or_else(|| Error::invalid_input(op, "remote address overflows"))?;
    Ok(RemoteBuf { addr, rkey: desc.rkey, described_len: desc.len - offset as u64 })
}

/// The error of a range outside a remote region, with its numbers (out of the hot path).
#[cold]
#[inline(never)]
fn remote_range_error(op: &'static str, offset: usize, len: usize, size: u64) -> Error {
    Error::invalid_input(
        op,
        &format!(
            "range outside the remote memory region: offset {offset} + length {len} > the region's {size} bytes \
             (as its descriptor says)"
        ),
    )
}

/// `RPMA_ATOMIC_WRITE_ALIGNMENT`: the alignment and size of an atomic write into a remote region,
/// public as [`MrRemote::ATOMIC_WRITE_ALIGNMENT`](crate::MrRemote::ATOMIC_WRITE_ALIGNMENT).
pub const ATOMIC_WRITE_ALIGNMENT: usize = 8;

/// The atomic-write offset must be a multiple of 8.
///
/// # Errors
/// `InvalidInput`.
#[inline(always)]
pub fn atomic_offset(op: &'static str, offset: usize) -> Result<()> {
    if offset % ATOMIC_WRITE_ALIGNMENT != 0 {
        return Err(atomic_offset_error(op, offset));
    }
    Ok(())
}

/// The error of a misaligned atomic write, with its number (out of the hot path).
#[cold]
#[inline(never)]
fn atomic_offset_error(op: &'static str, offset: usize) -> Error {
    Error::invalid_input(
        op,
        &format!(
            "dst_offset {offset} is not a multiple of RPMA_ATOMIC_WRITE_ALIGNMENT ({}): an atomic \
             write covers one aligned 8-byte word",
            ATOMIC_WRITE_ALIGNMENT
        ),
    )
}

/// The zero-byte form rule of receives: without a buffer, offset and len must be 0.
///
/// # Errors
/// `InvalidInput`.
#[inline]
pub fn zero_form(op: &'static str, has_buf: bool, offsets_and_len: &[usize]) -> Result<()> {
    if !has_buf && offsets_and_len.iter().any(|v| *v != 0) {
        return Err(Error::invalid_input(op, "no memory region given but an offset or length is not 0"));
    }
    Ok(())
}

/// Private data sent with connect or accept: if given, non-empty and within the transport's limit
/// (librpma left the limit to librdmacm, which failed with `EINVAL`;
/// docs/semantics.md#private-data).
///
/// # Errors
/// `InvalidInput`.
pub fn private_data(op: &'static str, pdata: Option<&[u8]>, limit: usize) -> Result<()> {
    if let Some(p) = pdata {
        if p.is_empty() {
            return Err(Error::invalid_input(op, "private data is empty"));
        }
        if p.len() > usize::from(u8::MAX) || p.len() > limit {
            return Err(Error::invalid_input(op, "private data is longer than the transport allows"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::MrRemote;
    use proptest::prelude::*;

    fn remote(len: u64, usage: Usage) -> MrRemote {
        MrRemote::from_descriptor(&MrDescriptor { addr: 0x1000, len, rkey: 7, usage: usage.bits() as u8 }.encode())
            .unwrap()
    }

    #[test]
    fn usage_rules() {
        assert_eq!(usage("t", Usage::empty()).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(usage("t", Usage::from_bits_retain(0x100)).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert!(usage("t", Usage::all()).is_ok());
    }

    #[test]
    fn flush_usage_is_nosupp() {
        let r = remote(64, Usage::FLUSH_TYPE_VISIBILITY);
        let e = remote_buf("f", r.descriptor(), 0, 8, RemoteAccess::Flush(FlushType::Persistent)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(remote_buf("f", r.descriptor(), 0, 8, RemoteAccess::Flush(FlushType::Visibility)).is_ok());
    }

    proptest! {
        #[test]
        fn local_range_matches_arithmetic(size in 0usize..4096, offset: usize, len: usize) {
            let ok = local_range("t", size, offset, len).is_ok();
            prop_assert_eq!(ok, (offset as u128 + len as u128) <= size as u128);
        }

        #[test]
        fn remote_range_matches_arithmetic(size in 0u64..1<<40, offset in 0usize..1<<41, len in 0usize..1<<41) {
            let r = remote(size, Usage::all());
            let res = remote_buf("t", r.descriptor(), offset, len, RemoteAccess::Write);
            prop_assert_eq!(res.is_ok(), offset as u128 + len as u128 <= size as u128);
            if let Ok(b) = res {
                prop_assert_eq!(b.addr, 0x1000 + offset as u64);
                prop_assert_eq!(b.rkey, 7);
            }
        }

        #[test]
        fn flags_rule(bits: u32) {
            let f = CompletionFlags::from_bits_retain(bits);
            match flags("t", f) {
                Ok(s) => { prop_assert!(bits != 0); prop_assert_eq!(s, bits & 2 != 0); }
                Err(e) => { prop_assert_eq!(bits, 0); prop_assert_eq!(e.kind(), ErrorKind::InvalidInput); }
            }
        }

        #[test]
        fn atomic_offset_rule(offset: usize) {
            prop_assert_eq!(atomic_offset("t", offset).is_ok(), offset % 8 == 0);
        }

        #[test]
        fn usage_rule(bits: u32) {
            prop_assert_eq!(usage("t", Usage::from_bits_retain(bits)).is_ok(), bits != 0 && bits & !0xFF == 0);
        }

        #[test]
        fn private_data_rule(len in 0usize..300, limit in 0usize..300, given: bool) {
            let p = vec![1u8; len];
            let r = private_data("t", given.then_some(&p[..]), limit);
            prop_assert_eq!(r.is_ok(), !given || (len > 0 && len <= 255 && len <= limit));
        }
    }
}
