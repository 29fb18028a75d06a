//! A remote log written the way librpma's example 07 writes it, proven against power cuts of
//! the node that holds it, at every crash point, on the mock's persistence model
//! (docs/persistence.md).
//!
//! Each append: an RDMA Write of a 64-byte record (sequence number, payload, checksum), a
//! persistent flush of the record, an 8-byte atomic write of the log's tail (the commit record),
//! a persistent flush of the tail. The append is acknowledged when that last flush completes.
//! After every power cut the check reads what the log's region kept: every acknowledged record
//! is committed (tail at least its number) and every committed record passes its checksum.
//!
//! `cargo run -p rpma-examples --example crash_consistency` checks every crash point with the unflushed bytes
//! lost, then torn (per 64-byte line, several seeds), and ends with
//! `crash points: N, violations: 0`. With `--buggy visibility` (the tail flushed to visibility
//! instead of persistence) or `--buggy no-data-flush` (the record's flush left out) it finds
//! violations, prints the first (its crash point and seed) and exits with status 1.

use std::process::ExitCode;

use rpma::descriptor::Offer;
use rpma::mock::{ConnReq, CrashFailure, CrashPoints, Device, Ep, MockFabric, Peer, Reboot, Unflushed};
use rpma::{CompletionFlags, ConnEvent, ContextType, FlushType, PeerCfg, Usage};

const WRITER: &str = "10.0.0.1";
const REPLICA: &str = "10.0.0.2";
const PORT: &str = "7207";
const RECORDS: u64 = 6;
const RECORD: usize = 64;
const LOG: usize = RECORD * (RECORDS as usize + 1);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// The tail is flushed to visibility: acknowledged, never durable.
    Visibility,
    /// The record is not flushed before the tail commits it.
    NoDataFlush,
}

/// Record `i`: its number, a payload, and a checksum of both.
fn record(i: u64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..8].copy_from_slice(&(i + 1).to_le_bytes());
    for (k, b) in r[8..56].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(k as u8);
    }
    let sum = checksum(&r[..56]);
    r[56..].copy_from_slice(&sum.to_le_bytes());
    r
}

/// FNV-1a, offset so that a record of zeroes does not pass.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The scenario: a replica with the log, a writer appending `RECORDS` records. Returns how
/// many appends were acknowledged before anything failed (the power cut).
fn scenario(fabric: &MockFabric, bug: Option<Bug>) -> u64 {
    append_all(fabric, bug).unwrap_or_else(|acked| acked)
}

fn append_all(fabric: &MockFabric, bug: Option<Bug>) -> Result<u64, u64> {
    let fail = |_| 0u64;
    let rpeer = Peer::new(&Device::lookup(fabric, REPLICA, ContextType::Local).map_err(fail)?).map_err(fail)?;
    let log = rpeer.alloc_mr(LOG, Usage::WRITE_DST | Usage::FLUSH_TYPES).map_err(fail)?;
    let ep = Ep::listen(&rpeer, REPLICA, PORT).map_err(fail)?;
    let wpeer = Peer::new(&Device::lookup(fabric, REPLICA, ContextType::Remote).map_err(fail)?).map_err(fail)?;
    let mut src = wpeer.alloc_mr(LOG, Usage::WRITE_SRC).map_err(fail)?;
    let writer = ConnReq::new(&wpeer, REPLICA, PORT, None).map_err(fail)?.connect(None).map_err(fail)?;
    let pdata = Offer::encode(&log, &PeerCfg::new().with_direct_write_to_pmem(true));
    let replica = ep.next_conn_req(None).map_err(fail)?.connect(Some(&pdata)).map_err(fail)?;
    if writer.next_event().map_err(fail)? != ConnEvent::Established {
        return Err(0);
    }
    let remote = Offer::decode(writer.private_data()).map_err(fail)?.apply_to(&writer);
    for i in 0..RECORDS {
        let acked = i;
        let at = RECORD * (i as usize + 1);
        src.as_mut_slice().map_err(|_| acked)?[at..at + RECORD].copy_from_slice(&record(i));
        let quiet = CompletionFlags::ON_ERROR;
        writer.write(remote.at(at), src.slice(at..at + RECORD)).flags(quiet).post().map_err(|_| acked)?;
        if bug != Some(Bug::NoDataFlush) {
            writer
                .flush(remote.slice(at..at + RECORD), FlushType::Persistent)
                .flags(quiet)
                .post()
                .map_err(|_| acked)?;
        }
        writer.atomic_write(remote.at(0), (i + 1).to_le_bytes()).flags(quiet).post().map_err(|_| acked)?;
        let tail_flush = if bug == Some(Bug::Visibility) { FlushType::Visibility } else { FlushType::Persistent };
        writer.flush(remote.slice(0..8), tail_flush).context(i).post().map_err(|_| acked)?;
        // Acknowledged when the tail's flush completes.
        loop {
            match writer.cq().next_wc() {
                Ok(Some(wc)) if wc.is_success() && wc.wr_id() == i => break,
                Ok(None) => {}
                _ => return Err(acked),
            }
        }
    }
    drop(replica);
    Ok(RECORDS)
}

/// After a power cut of the replica: the log's tail covers every acknowledged append, and every
/// committed record passes its checksum.
fn check(reboot: Reboot, acked: u64) -> Result<(), String> {
    let log = reboot.cut.regions().first().ok_or("the replica's log region did not come back")?.memory();
    let mut tail = [0u8; 8];
    log.volatile().read(0, &mut tail).map_err(|e| e.to_string())?;
    let tail = u64::from_le_bytes(tail);
    if tail < acked {
        return Err(format!("{acked} appends were acknowledged, the recovered tail commits {tail}"));
    }
    for i in 0..tail.min(RECORDS) {
        let mut r = [0u8; RECORD];
        log.volatile().read(RECORD * (i as usize + 1), &mut r).map_err(|e| e.to_string())?;
        if checksum(&r[..56]).to_le_bytes() != r[56..] || r[..8] != (i + 1).to_le_bytes() {
            return Err(format!("record {i} is committed (tail {tail}) but its bytes do not pass the checksum"));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bug = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => None,
        ["--buggy"] | ["--buggy", "visibility"] => Some(Bug::Visibility),
        ["--buggy", "no-data-flush"] => Some(Bug::NoDataFlush),
        _ => {
            eprintln!("usage: crash_consistency [--buggy [visibility|no-data-flush]]");
            return ExitCode::from(2);
        }
    };
    let fabric = || MockFabric::builder().device("writer", &[WRITER]).device("replica", &[REPLICA]);
    let policies = [(Unflushed::Lost, 1), (Unflushed::Kept, 1), (Unflushed::Torn { seed: 0x0C0F_FEE0 }, 8)];
    let mut points = 0;
    let mut violations: Vec<CrashFailure> = Vec::new();
    for (policy, seeds) in policies {
        let explore = CrashPoints::new(fabric().unflushed(policy), "replica").seeds(seeds);
        let report = explore.run_all(|f| scenario(f, bug), check);
        match report {
            Ok(r) => {
                points += r.points;
                violations.extend(r.violations);
            }
            Err(e) => {
                eprintln!("crash_consistency: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(first) = violations.first() {
        println!("first violation: {first}");
    }
    println!("crash points: {points}, violations: {}", violations.len());
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
