//! What can go wrong in the log, and the names every module shares ([`Lsn`], [`Result`]).

/// An entry's log sequence number: 0 for the first entry ever appended, then one more per entry.
pub type Lsn = u64;

/// What can go wrong in the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// An rpma operation failed.
    #[error("rpma: {0}")]
    Rpma(#[from] rpma::Error),
    /// Memory could not be allocated or reached.
    #[error("memory: {0}")]
    Memory(#[from] rpma::mem::MemError),
    /// An argument is invalid (the message says which and why).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The entry cannot fit the log even when it is empty.
    #[error("an entry of {len} bytes takes {needed} bytes of ring, the log's capacity is {capacity}")]
    EntryTooLarge {
        /// The payload's bytes.
        len: usize,
        /// The ring bytes it would take.
        needed: u64,
        /// The ring's bytes.
        capacity: u64,
    },
    /// The ring has no room for the entry until a prefix is truncated ([`Log::truncate_prefix`](crate::Log::truncate_prefix)).
    #[error("the log is full: {needed} bytes needed, {free} free (truncate a prefix)")]
    Full {
        /// The ring bytes the entry needs.
        needed: u64,
        /// The ring bytes free.
        free: u64,
    },
    /// A replica region's header is not a valid rpma-log header.
    #[error("replica {replica}: corrupt header: {detail}")]
    CorruptHeader {
        /// The replica (its address, or "local").
        replica: String,
        /// What is wrong.
        detail: String,
    },
    /// A replica holds another log.
    #[error("replica {replica} holds log {found}, not log {expected}")]
    WrongLogId {
        /// The replica.
        replica: String,
        /// The log id asked for.
        expected: u64,
        /// The log id it holds.
        found: u64,
    },
    /// A replica region's committed records fail their checks (checksum, position, lsn): the
    /// protocol that wrote them, or the memory that kept them, lost bytes it had committed.
    #[error("replica {replica}: corrupt committed entries: {detail}")]
    CorruptEntries {
        /// The replica (or "region").
        replica: String,
        /// The first record that fails, and why.
        detail: String,
    },
    /// A replica region is too small, or replicas disagree on the capacity.
    #[error("replica {replica}: {detail}")]
    Capacity {
        /// The replica.
        replica: String,
        /// What is wrong.
        detail: String,
    },
    /// Fewer replicas than the quorum are up (or could be taken over, or answered in time).
    #[error("no quorum: {up} replicas up, {needed} needed ({detail})")]
    NoQuorum {
        /// Replicas up.
        up: usize,
        /// The quorum.
        needed: usize,
        /// Why the others are not (each replica's reason).
        detail: String,
    },
    /// The entry was truncated ([`Log::truncate_prefix`](crate::Log::truncate_prefix)) or never appended.
    #[error("lsn {lsn} is not in the log (entries {first}..{next})")]
    NoEntry {
        /// The lsn asked for.
        lsn: Lsn,
        /// The first lsn held.
        first: Lsn,
        /// The next lsn to append.
        next: Lsn,
    },
    /// [`Log::truncate_prefix`](crate::Log::truncate_prefix) of an lsn whose entries before it were appended but are not
    /// all durable yet: [`Log::sync`](crate::Log::sync) them first.
    #[error(
        "lsn {lsn} is not durable yet (durable entries {first}..{durable}, appended {durable}..{next}): \
         sync first (Log::sync({last}) or Log::sync_all), then truncate",
        last = .lsn.saturating_sub(1)
    )]
    NotDurable {
        /// The lsn asked for.
        lsn: Lsn,
        /// The first lsn held.
        first: Lsn,
        /// The durable position: every entry below it is durable.
        durable: Lsn,
        /// The next lsn to append.
        next: Lsn,
    },
    /// The async writer (`rpma_log::tokio::Log`, on the `tokio` feature) cannot go on: a
    /// blocking call on it panicked or was dropped before it finished (the writer is lost), or
    /// a sync could not await the completion channels (the runtime has no IO driver).
    #[error("closed: {0}")]
    Closed(String),
    /// The replica's serving thread panicked or failed.
    #[error("replica: {0}")]
    Replica(String),
}

/// The crate's result type.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
