//! What a writer is told (where its replicas are, its quorum, what "durable" means) and what it
//! reports (health, recovery).

use std::fmt;
use std::time::Duration;

use crate::error::{LogError, Lsn, Result};

/// Where a replica listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaAddr {
    /// Its address.
    pub addr: String,
    /// Its port (service).
    pub port: String,
}

impl ReplicaAddr {
    /// A replica at `addr`:`port`.
    #[must_use]
    pub fn new(addr: &str, port: &str) -> Self {
        Self { addr: addr.to_owned(), port: port.to_owned() }
    }
}

impl fmt::Display for ReplicaAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.addr, self.port)
    }
}

/// How many replicas must hold an entry before [`Log::sync`](crate::Log::sync) reports it durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Quorum {
    /// Every replica of the set.
    All,
    /// More than half of the set.
    Majority,
    /// `n` replicas (1 to the set's size).
    K(usize),
}

impl Quorum {
    pub(super) fn of(self, replicas: usize) -> Result<usize> {
        let n = match self {
            Self::All => replicas,
            Self::Majority => replicas / 2 + 1,
            Self::K(k) => k,
        };
        if n == 0 || n > replicas {
            return Err(LogError::Invalid(format!("a quorum of {n} out of {replicas} replicas")));
        }
        Ok(n)
    }
}

/// What "durable" means on the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushMode {
    /// In the persistence domain of each replica of the quorum (persistent flushes; each replica
    /// must announce direct write to pmem): survives a power cut of every replica.
    Persistent,
    /// In the memory of each replica of the quorum (flushes to visibility; DRAM replicas):
    /// survives the loss of a minority of replicas' processes, not a power cut.
    Visibility,
}

/// How the writer waits for its replicas' completions (of a sync, a read at recovery, a
/// truncation's head) when a poll of their completion queues found nothing yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Busy polling: the writer polls again at once, yielding the core between polls
    /// ([`rpma::runtime::Runtime::pause`]). The lowest latency; a writer waiting holds a core
    /// at 100 %.
    #[default]
    Spin,
    /// Sleeping on the completion channels: the writer sleeps in `poll(2)` on the channels' fds
    /// of the replicas it waits for, until one signals a completion or the wait's deadline
    /// passes, then takes the event (which re-arms the queue) only once that queue is drained,
    /// as the C librpma's sleeping servers do: one event per wake-up. A wait for a connection
    /// handed over by the reconnect thread parks until the thread hands it over. A waiting
    /// writer costs no CPU; each wake-up costs the scheduler's latency. The timeouts are the
    /// same: a replica that never answers is marked down at the deadline.
    ///
    /// Under a simulated runtime (one whose clock is not the real one, `rpma_mock::sim`) a thread
    /// must not block in a system call: the writer then looks at the fds without blocking and
    /// waits in the runtime's [`pause`](rpma::runtime::Runtime::pause) between looks, until an
    /// fd is readable or the deadline passes (the same events, on the simulation's clock).
    Sleep,
}

/// How a writer opens the log.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LogOptions {
    /// The log's id: replicas of another log refuse the writer.
    pub log_id: u64,
    /// The quorum of [`Log::sync`](crate::Log::sync) and of recovery.
    pub quorum: Quorum,
    /// What durable means.
    pub flush: FlushMode,
    /// The writer's identity, with which it reconnects to a replica it took over (random if
    /// `None`). Ids need not be unique: each `open` takes an epoch above every one its replicas
    /// promised, whatever its id.
    pub writer_id: Option<u64>,
    /// An epoch the open's first round asks to go above ([`LogOptions::after_epoch`]; 0: none,
    /// the first round asks for epoch 1).
    pub after_epoch: u64,
    /// The longest wait for a replica: connection, a read at recovery, a sync's completions.
    pub timeout: Duration,
    /// Whether a thread of the log's own reconnects the replicas that are down
    /// ([`LogOptions::reconnect_in_background`]).
    pub reconnect_in_background: bool,
    /// The wait after a failed reconnect of a replica, doubled after each failure, and its
    /// longest ([`LogOptions::reconnect_backoff`]).
    pub backoff: (Duration, Duration),
    /// The local ACK timeout exponent of the writer's connections
    /// ([`rpma::ConnCfg::with_ack_timeout`]; `None`: the connection manager's).
    pub ack_timeout: Option<u8>,
    /// The transport retry count of the writer's connections
    /// ([`rpma::ConnCfg::with_retry_count`]; `None`: 7).
    pub retry_count: Option<u8>,
    /// How the writer waits for completions ([`LogOptions::wait`]).
    pub wait: Wait,
    /// Tests only (feature `testing`): rules of the protocol switched off.
    #[cfg(feature = "testing")]
    pub broken: crate::broken::Broken,
}

impl LogOptions {
    /// Log `log_id` with a majority quorum, persistent, a 5 s timeout.
    #[must_use]
    pub fn new(log_id: u64) -> Self {
        Self {
            log_id,
            quorum: Quorum::Majority,
            flush: FlushMode::Persistent,
            writer_id: None,
            after_epoch: 0,
            timeout: Duration::from_secs(5),
            reconnect_in_background: false,
            backoff: (Duration::from_millis(10), Duration::from_secs(2)),
            ack_timeout: None,
            retry_count: None,
            wait: Wait::Spin,
            #[cfg(feature = "testing")]
            broken: crate::broken::Broken::none(),
        }
    }

    /// Sets the quorum.
    #[must_use]
    pub const fn quorum(mut self, quorum: Quorum) -> Self {
        self.quorum = quorum;
        self
    }

    /// Sets how the writer waits for its replicas' completions: [`Wait::Spin`] (the default)
    /// or [`Wait::Sleep`]. `rpma log bench --wait spin|sleep` reports the writer's CPU time per
    /// synced append beside the latency (docs/log.md, "Waiting: spinning or sleeping", has the
    /// figures on the mock).
    #[must_use]
    pub const fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the flush mode.
    #[must_use]
    pub const fn flush(mut self, flush: FlushMode) -> Self {
        self.flush = flush;
        self
    }

    /// Sets the writer's identity.
    #[must_use]
    pub const fn writer_id(mut self, id: u64) -> Self {
        self.writer_id = Some(id);
        self
    }

    /// Sets the epoch the open's first round goes above: a writer that knows the epoch of the
    /// writer it takes over from (a standby following it, [`Log::epoch`](crate::Log::epoch))
    /// asks for the next one at once. Without it the first round asks for epoch 1, every
    /// replica of a log already written refuses it naming its promise, and a second round of
    /// connections asks above that. Safe whatever the value: a replica takes an open only above
    /// its own promise, and a refused round is answered with it.
    #[must_use]
    pub const fn after_epoch(mut self, epoch: u64) -> Self {
        self.after_epoch = epoch;
        self
    }

    /// With `true`, [`Log::open`](crate::Log::open) starts a thread of the log's own that
    /// connects again each replica that goes down, with the backoff of
    /// [`Log::maintain`](crate::Log::maintain) (10 ms doubled up to 2 s, reset when it
    /// rejoins), and hands each new connection over to the writer through a channel; the writer
    /// catches the replica up (full copy included) in its next [`Log::sync`](crate::Log::sync),
    /// [`Log::truncate_prefix`](crate::Log::truncate_prefix) or `maintain`. The thread never
    /// touches the writer's connections or ring, and ends when the log is dropped. Off by
    /// default (the user calls `maintain`).
    #[must_use]
    pub const fn reconnect_in_background(mut self, on: bool) -> Self {
        self.reconnect_in_background = on;
        self
    }

    /// Tests only (feature `testing`): switches rules of the protocol off.
    #[cfg(feature = "testing")]
    #[must_use]
    pub const fn broken(mut self, broken: crate::broken::Broken) -> Self {
        self.broken = broken;
        self
    }

    /// The rules switched off: none, unless a test says so.
    #[allow(clippy::missing_const_for_fn)]
    pub(crate) fn rules_off(&self) -> crate::broken::Broken {
        #[cfg(feature = "testing")]
        return self.broken;
        #[cfg(not(feature = "testing"))]
        crate::broken::Broken::none()
    }

    /// Sets the reconnects' backoff (of [`Log::maintain`](crate::Log::maintain) and of the
    /// reconnect thread): after a failed attempt the next one to the same replica waits `first`,
    /// doubled after each failure up to `most`, and back to `first` once the replica rejoins.
    /// Default 10 ms and 2 s.
    #[must_use]
    pub const fn reconnect_backoff(mut self, first: Duration, most: Duration) -> Self {
        self.backoff = (first, most);
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the local ACK timeout exponent of the writer's connections: each unacknowledged
    /// operation is sent again after about 4.096 us * 2^`exponent`. On a link that loses packets
    /// a lost one costs that long; the connection manager's own value on rxe is 2.1 s (kernel
    /// 6.1) or 0.54 s (6.12) (docs/semantics.md, "Dead peers"). A value outside 1..=31 makes
    /// [`Log::open`](crate::Log::open) fail with the connection's `InvalidInput`.
    #[must_use]
    pub const fn ack_timeout(mut self, exponent: u8) -> Self {
        self.ack_timeout = Some(exponent);
        self
    }

    /// Sets the transport retry count of the writer's connections (0..=7; above 7
    /// [`Log::open`](crate::Log::open) fails with the connection's `InvalidInput`).
    #[must_use]
    pub const fn retry_count(mut self, count: u8) -> Self {
        self.retry_count = Some(count);
        self
    }
}

/// A replica's health, as the writer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Connected, and in the quorum of the last sync.
    Up,
    /// Connected, but its sync was not complete when the last sync returned.
    Lagging,
    /// Not connected (it failed, refused, or was never reached); [`Log::reconnect`](crate::Log::reconnect) tries again.
    Down,
    /// Being repaired ([`Log::reconnect`](crate::Log::reconnect)).
    CatchingUp,
}

/// A change of a replica's health.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthEvent {
    /// The replica's index in the set given to [`Log::open`](crate::Log::open).
    pub replica: usize,
    /// Its health now.
    pub health: Health,
    /// Why (for [`Health::Down`]).
    pub reason: Option<String>,
    /// When, on the transport's clock ([`rpma::runtime::Runtime::now`]).
    pub at: std::time::Instant,
}

/// What [`Log::open`](crate::Log::open) found and did.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The writer's epoch (higher than any before it on the replicas it took over).
    pub epoch: u64,
    /// The first lsn held.
    pub head_lsn: Lsn,
    /// The next lsn to append: every entry before it is in the history recovered, kept.
    pub next_lsn: Lsn,
    /// The end of the history recovered (bytes of the ring since the log began).
    pub committed: u64,
    /// The replica whose history was taken.
    pub source: Option<usize>,
    /// The replicas brought to that history (the source included).
    pub repaired: Vec<usize>,
    /// Those of [`RecoveryReport::repaired`] that needed a full copy (their head was beyond
    /// the history's: another writer truncated further there).
    pub full_copies: Vec<usize>,
    /// The replicas not taken over or repaired, and why.
    pub down: Vec<(usize, String)>,
    /// The replicas whose committed entries (below their commit word) failed validation
    /// (checksum, position, lsn).
    pub rejected: Vec<(usize, String)>,
    /// How long each phase of the open took.
    pub phases: OpenPhases,
}

/// How long each phase of [`Log::open`](crate::Log::open) took, on the transport's clock
/// ([`rpma::runtime::Runtime::now`]): a takeover's cost, phase by phase
/// (`rpma log bench --mode failover`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenPhases {
    /// Connecting to every replica, each one fencing the previous writer (the replica's part of
    /// the handshake) and promising the new epoch.
    pub connect: Duration,
    /// Allocating and registering the writer's two buffers of the ring's size (its copy of the
    /// ring, and the one histories are read into).
    pub buffers: Duration,
    /// Reading the replicas' headers.
    pub headers: Duration,
    /// Finding and reading the history: the tails' scans and the chosen history's read.
    pub history: Duration,
    /// Repairing the replicas: each one brought to that history (what differs rewritten; the
    /// others' histories read to compare) and the new epoch installed.
    pub repair: Duration,
}

impl OpenPhases {
    /// The phases' sum: the open from its first connection request to its return.
    #[must_use]
    pub fn total(&self) -> Duration {
        self.connect + self.buffers + self.headers + self.history + self.repair
    }
}
