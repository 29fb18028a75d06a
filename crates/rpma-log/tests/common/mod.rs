//! A mock cluster for the log's tests: a writer node and replica nodes, each a mock device.
#![allow(dead_code)]

use std::time::Duration;

use rpma::mock::{Device, MockFabric, MockFabricBuilder, MrLocal, Peer};
use rpma::{ContextType, Memory};
use rpma_log::{Replica, ReplicaAddr, ReplicaHandle, ReplicaOptions};

pub const LOG_ID: u64 = 0x5EED_0001;
pub const WRITER: &str = "10.0.0.1";
pub const PORT: &str = "7500";

/// The address of replica `i` (its node is the device named `r{i}`).
pub fn replica_ip(i: usize) -> String {
    format!("10.0.1.{}", i + 1)
}

pub fn addrs(n: usize) -> Vec<ReplicaAddr> {
    (0..n).map(|i| ReplicaAddr::new(&replica_ip(i), PORT)).collect()
}

/// A fabric with a writer node and `n` replica nodes.
pub fn builder(n: usize) -> MockFabricBuilder {
    let mut b = MockFabric::builder().device("writer", &[WRITER]);
    for i in 0..n {
        let ip = replica_ip(i);
        b = b.device(&format!("r{i}"), &[ip.as_str()]);
    }
    b
}

pub fn peer(fabric: &MockFabric, ip: &str) -> Peer {
    Peer::new(&Device::lookup(fabric, ip, ContextType::Local).expect("device")).expect("peer")
}

pub fn writer_peer(fabric: &MockFabric) -> Peer {
    peer(fabric, WRITER)
}

pub fn fast() -> ReplicaOptions {
    ReplicaOptions::default().with_poll_interval(Duration::from_millis(1))
}

/// Replica `i` serving a fresh log of `len` bytes (formatted), or `memory` (opened).
pub fn start(fabric: &MockFabric, i: usize, memory: Option<Memory>, len: usize) -> rpma_log::Result<ReplicaHandle> {
    let p = peer(fabric, &replica_ip(i));
    let r = match memory {
        None => Replica::format(&p, Memory::page_aligned(len)?, LOG_ID)?,
        Some(m) => Replica::open(&p, m, LOG_ID)?,
    };
    Ok(r.with_options(fast()).listen(&replica_ip(i), PORT)?.spawn())
}

/// Replica `i` restarting without its region: a blank replacement of `len` bytes
/// (`Replica::format_replacement`), which votes once a writer repaired it.
pub fn start_replacement(fabric: &MockFabric, i: usize, len: usize) -> rpma_log::Result<ReplicaHandle> {
    let p = peer(fabric, &replica_ip(i));
    let r = Replica::format_replacement(&p, Memory::page_aligned(len)?, LOG_ID)?;
    Ok(r.with_options(fast()).listen(&replica_ip(i), PORT)?.spawn())
}

/// The payload of entry `lsn` (its size varies, so entries wrap the ring at odd places).
pub fn payload(lsn: u64) -> Vec<u8> {
    let len = 8 + (lsn as usize * 13) % 90;
    (0..len).map(|k| (lsn as u8).wrapping_mul(31).wrapping_add(k as u8)).collect()
}

/// A small region registered on replica `i`'s node beside the replica's, so that the node keeps
/// memory while its replica is stopped (a power cut then is a cut too).
pub fn bystander(fabric: &MockFabric, i: usize) -> Option<MrLocal> {
    peer(fabric, &replica_ip(i)).alloc_mr(64, rpma::Usage::WRITE_DST).ok()
}

/// Stops the replicas `which` (each becomes unreachable) and gives back their regions as they
/// are; `None` if one was not serving.
pub fn stop_replicas(handles: &mut [Option<ReplicaHandle>], which: &[usize]) -> Option<Vec<Memory>> {
    which.iter().map(|&i| handles.get_mut(i)?.take()?.stop().ok()).collect()
}

/// Starts the replicas `which` again on `memories` (theirs, as [`stop_replicas`] gave them back);
/// false if one could not start.
pub fn restart_replicas(
    fabric: &MockFabric,
    handles: &mut [Option<ReplicaHandle>],
    which: &[usize],
    memories: Vec<Memory>,
    len: usize,
) -> bool {
    for (&i, m) in which.iter().zip(memories) {
        match start(fabric, i, Some(m), len) {
            Ok(h) => handles[i] = Some(h),
            Err(_) => return false,
        }
    }
    true
}
