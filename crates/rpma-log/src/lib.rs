//! # rpma-log: a replicated persistent log on rpma
//!
//! A writer ([`Log`]) appends entries into its own copy of the ring; [`Log::sync`] posts to each
//! replica ([`Replica`]) one batch (one doorbell) with the one-sided RDMA writes of everything
//! appended since the last sync and their persistent flush, and returns once a quorum of replicas
//! completed the flush: the floor of a persistent replicated write (group commit: appends between
//! two syncs share it). A replica's history is its committed records and the tail beyond its
//! commit word (the records of its commit epoch that follow): the commit word is written now and
//! then, off the critical path.
//!
//! Replicas stay out of the data path: they take part in connection setup, where a new writer
//! takes the log over with a higher epoch and each replica takes the old writer's connection
//! down (its queue pair: fencing), and nowhere else. A new writer recovers the log from a quorum's
//! headers and tails (RDMA Reads), keeps the longest history of the highest commit epoch,
//! validates every entry by checksum, and repairs the other replicas to the same history.
//!
//! A replica that fails is marked down and the writer goes on while a quorum is up;
//! [`Log::maintain`] (or, with [`LogOptions::reconnect_in_background`], a thread of the log's
//! own) connects it again, and the writer catches it up: what it lacks of the history, or a full
//! copy of the writer's live range if its head is beyond the writer's. On the `tokio` feature,
//! `rpma_log::tokio::Log` is the async writer (a sync awaits the replicas' completion channels
//! on tokio's reactor).
//!
//! The API is generic over [`rpma::Transport`]: it runs on the mock and on verbs. The exact
//! guarantees (what is durable when `sync` returns, what a reader after recovery may see, what a
//! minority failure costs) are in `docs/log.md`.
//!
//! Depend on it beside `rpma` (whose mock this example runs on; `features = ["verbs"]` on
//! `rpma` for RDMA devices), from a checkout of rpma-rs:
//!
//! ```toml
//! [dependencies]
//! rpma = { path = "../rpma-rs" }
//! rpma-log = { path = "../rpma-rs/crates/rpma-log" }
//! ```
//!
//! ```
//! use rpma::mock::{Device, MockFabric, Peer};
//! use rpma::{ContextType, Memory};
//! use rpma_log::{FlushMode, Log, LogOptions, Quorum, Replica, ReplicaAddr};
//!
//! let fabric = MockFabric::new();
//! let rpeer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
//! let memory = Memory::page_aligned(64 * 1024)?;
//! let replica = Replica::format(&rpeer, memory, 42)?.listen("127.0.0.1", "7400")?.spawn();
//!
//! let wpeer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
//! let opts = LogOptions::new(42).quorum(Quorum::All).flush(FlushMode::Persistent);
//! let (mut log, report) = Log::open(&wpeer, &[ReplicaAddr::new("127.0.0.1", "7400")], opts)?;
//! assert_eq!(report.next_lsn, 0);
//! let lsn = log.append(b"first")?;
//! assert_eq!(log.sync(lsn)?, lsn + 1);
//! assert_eq!(log.read(lsn)?, b"first");
//! drop(log);
//! replica.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod broken;
mod check;
mod error;
mod format;
mod replica;
#[cfg(feature = "tokio")]
pub mod tokio;
mod writer;

#[cfg(feature = "testing")]
pub use broken::Broken;
pub use check::{check_region, RegionCheck};
pub use error::{LogError, Lsn, Result};
pub use replica::{Replica, ReplicaHandle, ReplicaOptions, ReplicaState};
pub use writer::{
    FlushMode, Health, HealthEvent, Log, LogOptions, OpenPhases, Quorum, RecoveryReport, ReplicaAddr, Standby, Wait,
};

/// The bytes of a replica region's header; the entry area (the ring) follows it.
pub const HEADER_SIZE: usize = format::HEADER;

/// The smallest entry area (ring) a replica region may have.
pub const MIN_CAPACITY: u64 = format::MIN_CAPACITY;

/// The bytes an entry of `len` payload bytes takes in the ring (its 40-byte header, the payload,
/// padding to 8 bytes).
#[must_use]
pub const fn record_size(len: usize) -> u64 {
    format::record_size(len as u64)
}
