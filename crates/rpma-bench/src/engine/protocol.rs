//! The benchmark's wire protocol and buffers: request private data, work request ids, slots
//! of the target region, the connection configuration and completion checks.

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rpma::{ConnCfg, MrLocal, MrRemote, Transport, Wc, WcStatus};

use crate::plan::{Retry, MAX_QD};
use crate::sizes::MAX_SIZE;

/// The immediate data of the message that ends a connection's service.
pub const STOP_IMM: u32 = u32::MAX;
/// The immediate data bit of the message that starts a `write-pingpong` phase (the low bits are
/// the message size).
pub const PINGPONG_BIT: u32 = 1 << 31;
/// The `wr_id` of the writes of a `write-pingpong`.
pub(super) const PP_ID: u64 = 1 << 59;
/// The `wr_id` of the message starting a `write-pingpong` phase.
pub(super) const PP_CTL_ID: u64 = SEND_TAG | (1 << 41);
/// Request private data: target size, queue depth, the client's inbox descriptor, the server's
/// receive size and source size.
pub(super) const REQUEST_LEN: usize = 12 + MrRemote::DESCRIPTOR_SIZE + 8;
// A request fits RDMA CM's private data of a connect (56 bytes).
const _: () = assert!(REQUEST_LEN <= 56);
pub(super) const RECV_TAG: u64 = 1 << 62;
pub(super) const SEND_TAG: u64 = 1 << 61;
pub(super) const STOP_ID: u64 = SEND_TAG | (1 << 40);
pub(super) const HIST_MAX_NS: u64 = 3_600_000_000_000;
pub(super) const WC_BATCH: usize = 32;
/// Empty polls a server thread spins through, then yields through, before it sleeps on its
/// completion channel (busy enough for ping-pong latency, polite to the client's threads).
pub(super) const SERVER_SPINS: u32 = 1024;
pub(super) const SERVER_YIELDS: u32 = 2_000;
/// Then the server sleeps in timed waits of this long for a completion, checking for a
/// connection event and the client's failure between two.
pub(super) const SERVER_IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

pub(super) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("constant histogram bounds are valid")
}

#[cfg(test)]
pub(super) use crate::footprint::MAX_REGION;
pub(super) use crate::footprint::{region_len, PLACEHOLDER};

/// The offset of `slot`'s buffer of `size` bytes in a region of `region` bytes (8-aligned when
/// `size` is).
pub(super) const fn slot_offset(slot: usize, size: usize, region: usize) -> usize {
    let off = slot * size;
    if off + size <= region {
        off
    } else {
        0
    }
}

/// What a client asks the server to register for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Request {
    /// The largest operation on the target region (0: none; a placeholder is registered).
    pub(super) target_max: usize,
    pub(super) qd: usize,
    /// The largest message the server receives (0: zero-length receives).
    pub(super) recv_max: usize,
    /// The largest echo or pong the server sends or writes (0: none).
    pub(super) source_max: usize,
}

pub(super) fn request_pdata(r: Request, inbox: &[u8]) -> [u8; REQUEST_LEN] {
    let mut p = [0u8; REQUEST_LEN];
    p[..8].copy_from_slice(&(r.target_max as u64).to_le_bytes());
    p[8..12].copy_from_slice(&(r.qd as u32).to_le_bytes());
    let n = inbox.len().min(MrRemote::DESCRIPTOR_SIZE);
    p[12..12 + n].copy_from_slice(&inbox[..n]);
    let at = 12 + MrRemote::DESCRIPTOR_SIZE;
    p[at..at + 4].copy_from_slice(&(r.recv_max as u32).to_le_bytes());
    p[at + 4..at + 8].copy_from_slice(&(r.source_max as u32).to_le_bytes());
    p
}

/// Reads a client's request (untrusted: bounded like the command line) and its inbox.
pub(super) fn parse_request(p: &[u8]) -> Result<(Request, MrRemote)> {
    let at = 12 + MrRemote::DESCRIPTOR_SIZE;
    let (Some(m), Some(q), Some(d), Some(r), Some(s)) =
        (p.get(..8), p.get(8..12), p.get(12..at), p.get(at..at + 4), p.get(at + 4..REQUEST_LEN))
    else {
        bail!("the client's private data is too short ({} bytes) for a benchmark request", p.len());
    };
    let inbox = MrRemote::from_descriptor(d).context("the client's inbox descriptor")?;
    let max = u64::from_le_bytes(m.try_into().expect("8 bytes"));
    let qd = u32::from_le_bytes(q.try_into().expect("4 bytes"));
    let recv = u32::from_le_bytes(r.try_into().expect("4 bytes"));
    let source = u32::from_le_bytes(s.try_into().expect("4 bytes"));
    let big = |n: u64| n > MAX_SIZE as u64;
    if big(max) || big(recv.into()) || big(source.into()) || qd == 0 || qd as usize > MAX_QD {
        bail!(
            "the client asks for sizes {max}, {recv}, {source} and queue depth {qd}: outside 0..=1G and 1..={MAX_QD}"
        );
    }
    Ok((
        Request { target_max: max as usize, qd: qd as usize, recv_max: recv as usize, source_max: source as usize },
        inbox,
    ))
}

pub(super) fn conn_cfg<T: Transport>(qd: usize, retry: Retry) -> ConnCfg<T> {
    let q = u32::try_from(qd).unwrap_or(u32::MAX);
    retry.apply(ConnCfg::new().with_sq_size(2 * q + 2).with_rq_size(q + 2).with_cq_size(4 * q + 8))
}

/// What sources hold: any bytes do, the same for every operation.
pub(super) const SOURCE_BYTE: u8 = 0x5A;

/// Fills a region that operations send or write from, once, in place (nothing is copied per
/// operation): through a plain slice when nothing else can reach its bytes (no remote access
/// granted, nothing in flight), else through its volatile view.
pub(super) fn fill_source<T: Transport>(mr: &mut MrLocal<T>) {
    match mr.as_mut_slice() {
        Ok(bytes) => bytes.fill(SOURCE_BYTE),
        Err(_) => mr.volatile().fill(SOURCE_BYTE),
    }
}

pub(super) fn check(wc: &Wc, who: &str) -> Result<()> {
    if wc.status() != WcStatus::Success {
        bail!("{who}: operation {:#x} completed with {:?} (vendor error {})", wc.wr_id(), wc.status(), wc.vendor_err());
    }
    Ok(())
}
