//! The log on tokio (feature `tokio`): [`Log`], an async writer.
//!
//! The async [`Log`] is the writer ([`crate::Log`]) itself, driven from the task that owns it:
//!
//! - [`Log::append`] and [`Log::read`] never wait (an append only copies the entry into the
//!   writer's ring), so they are plain calls.
//! - [`Log::sync`] posts each replica's batch as the sync API does, then polls the replicas'
//!   completion queues; while a quorum has not completed, the task awaits the readiness of
//!   their completion channels' fds through the runtime's reactor (the writer sleeps as with
//!   [`Wait::Sleep`]: events taken, queues re-armed, polled again before each await), until the
//!   timeout ([`LogOptions::timeout`]). No runtime thread blocks, and no thread of the log's own
//!   is involved: a sync costs about what it costs on the sync API.
//! - The rest, whose waits are of other kinds (the recovery's reads and repairs and the
//!   connection handshakes of [`Log::open`], a truncation's header writes, `maintain`'s
//!   reconnects), runs on the runtime's blocking pool ([`Log::blocking`]): the writer moves
//!   there and back.
//!
//! The writer's state machine (appends, group commit, recovery, repair, fencing) is the sync
//! one, proven by the crash tests and the simulator; only a sync's waiting differs. Its methods
//! take `&mut self`: tasks that share a log share it behind a lock (or send their entries to the
//! task that owns it). docs/log.md, "The tokio face", has the figures
//! (`examples/tokio_face.rs`).
//!
//! The runtime needs its IO driver (`enable_io`, or `enable_all` as `#[tokio::main]` does).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rpma::mock::{Device, MockFabric, Peer};
//! use rpma::{ContextType, Memory};
//! use rpma_log::{LogOptions, Quorum, Replica, ReplicaAddr};
//!
//! let fabric = MockFabric::new();
//! let rpeer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
//! let replica = Replica::format(&rpeer, Memory::page_aligned(64 * 1024)?, 42)?.listen("127.0.0.1", "7410")?.spawn();
//!
//! let wpeer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
//! let opts = LogOptions::new(42).quorum(Quorum::All);
//! let (mut log, report) = rpma_log::tokio::Log::open(&wpeer, &[ReplicaAddr::new("127.0.0.1", "7410")], opts).await?;
//! assert_eq!(report.next_lsn, 0);
//! // Two appends, one commit for both.
//! assert_eq!((log.append(b"first")?, log.append(b"second")?), (0, 1));
//! assert_eq!(log.sync_all().await?, 2);
//! assert_eq!(log.read(1)?, b"second");
//! // What waits otherwise runs on the blocking pool.
//! log.truncate_prefix(1).await?;
//! let health = log.blocking(|l| { l.maintain(); l.health() }).await?;
//! assert_eq!(health.len(), 1);
//! log.close().await?;
//! replica.stop()?;
//! # Ok(()) }
//! ```

use std::future::poll_fn;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Poll;
use std::time::Instant;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use rpma::{Peer, Transport};

use crate::error::{LogError, Lsn, Result};
use crate::writer::Begun;
use crate::writer::{LogOptions, RecoveryReport, ReplicaAddr, Wait};

/// An async writer of a replicated log: [`crate::Log`] driven from its task (module docs).
pub struct Log<T: Transport> {
    /// The writer; `None` once a blocking call that held it was dropped before it finished.
    log: Option<crate::writer::Log<T>>,
}

impl<T: Transport> std::fmt::Debug for Log<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("writer", &self.log).finish()
    }
}

fn gone() -> LogError {
    LogError::Closed("the writer was lost: a blocking call on it was dropped before it finished".into())
}

fn join_error(e: &::tokio::task::JoinError) -> LogError {
    LogError::Closed(format!("the blocking call on the writer ended without an answer: {e}"))
}

/// Registers a duplicate of a completion channel's fd with the runtime's reactor, for
/// readability. The duplicate shares the channel's file description (epoll reports its
/// readiness) and is owned by the registration, so it stays open while the reactor watches it,
/// whatever happens to the connection.
///
/// # Errors
/// What failed: the fd could not be duplicated or registered, or the runtime has no IO driver
/// (where tokio panics: caught).
fn watch(fd: BorrowedFd<'_>) -> std::result::Result<AsyncFd<OwnedFd>, String> {
    let owned = fd.try_clone_to_owned().map_err(|e| format!("duplicating a completion channel's fd: {e}"))?;
    // `AsyncFd::with_interest` is deprecated because a generic inner value may close its fd
    // while tokio watches it; an `OwnedFd` closes it only when the `AsyncFd` drops it, after
    // deregistering: the I/O safety the deprecation asks for.
    #[allow(deprecated)]
    let registered = catch_unwind(AssertUnwindSafe(|| AsyncFd::with_interest(owned, Interest::READABLE)));
    match registered {
        Ok(r) => r.map_err(|e| format!("registering a completion channel with the reactor: {e}")),
        Err(_) => Err("the tokio runtime has IO disabled (build it with enable_io or enable_all)".into()),
    }
}

impl<T: Transport> Log<T>
where
    crate::writer::Log<T>: Send + 'static,
{
    /// [`crate::writer::Log::open`] on the runtime's blocking pool, the writer waiting as
    /// [`Wait::Sleep`] (whatever `opts` says: the channels' fds are what a sync awaits).
    ///
    /// # Errors
    /// As [`crate::writer::Log::open`]; [`LogError::Closed`] if the blocking task ended without an
    /// answer (it panicked, or the runtime shut down).
    pub async fn open(peer: &Peer<T>, replicas: &[ReplicaAddr], opts: LogOptions) -> Result<(Self, RecoveryReport)>
    where
        Peer<T>: Send + 'static,
    {
        let (peer, replicas, opts) = (peer.clone(), replicas.to_vec(), opts.wait(Wait::Sleep));
        let (log, report) = ::tokio::task::spawn_blocking(move || crate::writer::Log::open(&peer, &replicas, opts))
            .await
            .map_err(|e| join_error(&e))??;
        Ok((Self { log: Some(log) }, report))
    }

    /// The writer, for what does not wait ([`crate::Log::health`],
    /// [`crate::Log::durable_lsn`], ...).
    ///
    /// # Errors
    /// [`LogError::Closed`] if the writer was lost (a [`Log::blocking`] call dropped before it
    /// finished).
    pub fn writer(&self) -> Result<&crate::writer::Log<T>> {
        self.log.as_ref().ok_or_else(gone)
    }

    fn writer_mut(&mut self) -> Result<&mut crate::writer::Log<T>> {
        self.log.as_mut().ok_or_else(gone)
    }

    /// [`crate::Log::append`]: copies the entry into the writer's ring (it never waits).
    ///
    /// # Errors
    /// As [`crate::Log::append`]; [`LogError::Closed`] as [`Log::writer`].
    pub fn append(&mut self, data: &[u8]) -> Result<Lsn> {
        self.writer_mut()?.append(data)
    }

    /// [`crate::Log::read`]: entry `lsn` from the writer's copy (it never waits).
    ///
    /// # Errors
    /// As [`crate::Log::read`]; [`LogError::Closed`] as [`Log::writer`].
    pub fn read(&self, lsn: Lsn) -> Result<Vec<u8>> {
        self.writer()?.read(lsn)
    }

    /// [`crate::Log::sync`]: the durable position once a quorum has everything appended up to
    /// `upto` (and before this call) persistent. Awaits the replicas' completion channels (module
    /// docs). Should a replica's send queue be full (it lags about 128 syncs behind), the post
    /// waits for it in place, as the sync API does, up to the timeout.
    ///
    /// # Errors
    /// As [`crate::Log::sync`]; [`LogError::Closed`] as [`Log::writer`].
    pub async fn sync(&mut self, upto: Lsn) -> Result<Lsn> {
        let log = self.writer_mut()?;
        let pending = match log.begin_sync(upto)? {
            Begun::Done(lsn) => return Ok(lsn),
            Begun::Pending(p) => p,
        };
        loop {
            if let Some(r) = log.poll_sync(&pending) {
                return r;
            }
            if !log.take_events(None) {
                readiness(log, pending.deadline).await.map_err(LogError::Closed)?;
            }
        }
    }

    /// [`crate::Log::sync_all`], as [`Log::sync`].
    ///
    /// # Errors
    /// As [`crate::Log::sync_all`]; [`LogError::Closed`] as [`Log::writer`].
    pub async fn sync_all(&mut self) -> Result<Lsn> {
        let log = self.writer()?;
        if log.next_lsn() == log.durable_lsn() {
            return Ok(log.durable_lsn());
        }
        let upto = log.next_lsn() - 1;
        self.sync(upto).await
    }

    /// [`crate::Log::truncate_prefix`], on the blocking pool ([`Log::blocking`]).
    ///
    /// # Errors
    /// As [`crate::Log::truncate_prefix`] and [`Log::blocking`].
    pub async fn truncate_prefix(&mut self, lsn: Lsn) -> Result<()> {
        self.blocking(move |log| log.truncate_prefix(lsn)).await?
    }

    /// Runs `f` with the writer on the runtime's blocking pool and returns what it returns: for
    /// what waits otherwise ([`crate::Log::maintain`], [`crate::Log::refresh_health`], a whole
    /// group on the sync API, ...). The writer moves to the blocking thread and back.
    ///
    /// # Errors
    /// [`LogError::Closed`] if the writer was lost before, or is now: `f` panicked, or this
    /// future was dropped before `f` returned (the writer is dropped on the blocking thread).
    pub async fn blocking<R, F>(&mut self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut crate::writer::Log<T>) -> R + Send + 'static,
    {
        let mut log = self.log.take().ok_or_else(gone)?;
        let (log, r) = ::tokio::task::spawn_blocking(move || {
            let r = f(&mut log);
            (log, r)
        })
        .await
        .map_err(|e| join_error(&e))?;
        self.log = Some(log);
        Ok(r)
    }

    /// The writer, for the sync API.
    ///
    /// # Errors
    /// [`LogError::Closed`] as [`Log::writer`].
    pub fn into_inner(self) -> Result<crate::writer::Log<T>> {
        self.log.ok_or_else(gone)
    }

    /// Drops the writer (its connections closed) on the blocking pool.
    ///
    /// # Errors
    /// As [`Log::blocking`].
    pub async fn close(mut self) -> Result<()> {
        self.blocking(|_| ()).await?;
        let log = self.log.take();
        ::tokio::task::spawn_blocking(move || drop(log)).await.map_err(|e| join_error(&e))
    }
}

/// Awaits until a channel of a replica the sync waits on is readable (its event noted for the
/// writer's next [`crate::Log::take_events`]) or `deadline`. Each wait registers the channels
/// anew, so a replica reconnected meanwhile (another channel) is never missed, and a
/// registration reports a channel readable already.
///
/// # Errors
/// What [`watch`] says.
async fn readiness<T: Transport>(
    log: &mut crate::writer::Log<T>,
    deadline: Instant,
) -> std::result::Result<(), String> {
    let mut fds: Vec<(usize, AsyncFd<OwnedFd>)> = Vec::new();
    for i in log.waited(None) {
        if let Some(fd) = log.channel_fd(i) {
            fds.push((i, watch(fd)?));
        }
    }
    let until = ::tokio::time::Instant::from_std(deadline);
    if fds.is_empty() {
        // No replica with work in flight: the next look decides (the sync fails if the
        // quorum cannot be reached, or at the deadline).
        ::tokio::time::sleep_until(until).await;
        return Ok(());
    }
    let ready = poll_fn(|cx| {
        let mut ready = Vec::new();
        for (i, a) in &fds {
            match a.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    // The event is taken (and the queue re-armed and polled) before the next
                    // await, whose registration is new.
                    guard.clear_ready();
                    ready.push(*i);
                }
                // The writer's poll of that queue finds the failure.
                Poll::Ready(Err(_)) => ready.push(*i),
                Poll::Pending => {}
            }
        }
        if ready.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(ready)
        }
    });
    if let Ok(ready) = ::tokio::time::timeout_at(until, ready).await {
        for i in ready {
            log.saw_event(i);
        }
    }
    Ok(())
}
