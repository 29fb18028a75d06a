//! The log on tokio (feature `tokio`): [`Log`], an async writer.
//!
//! The writer ([`crate::Log`]) runs on a thread of its own and the async [`Log`] talks to it
//! through channels: each call sends the thread a command and awaits its answer on a tokio
//! `oneshot` channel, so no runtime thread ever blocks or spins, whether the writer waits for a
//! quorum's completions, reads the replicas at recovery or connects to them. That is a choice:
//!
//! - The writer is one state machine (appends, group commit, recovery, repair, full copy,
//!   fencing) proven by the crash tests; a second, async copy of it would need the same proof.
//! - Its waits are many and of several kinds (a sync waits for the fastest `q` of `n`
//!   replicas' completion queues, recovery for reads of each replica, a repair for its writes,
//!   a reconnect for the connection handshake); awaiting each one's readiness through
//!   `rpma::tokio` would be a second implementation of every one of them. On its own thread the
//!   writer busy-polls them as the sync API does, and the runtime's threads only await answers.
//! - The writer is not `Sync` and owns its connections; on a thread of its own it needs no lock.
//!
//! The cost is a channel round trip per call (a command, a wake-up of the writer's thread, an
//! answer, a wake-up of the task): several microseconds, many times an append on the mock. A
//! hot path runs a whole group on the writer's thread in one call, [`Log::with`]`(|log| { ...
//! log.append(..)?; ... log.sync_all() })`, which costs the same as the sync API.
//! docs/log.md, "The tokio face", has the figures (`examples/tokio_face.rs`).
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
//! let (log, report) = rpma_log::tokio::Log::open(&wpeer, &[ReplicaAddr::new("127.0.0.1", "7410")], opts).await?;
//! assert_eq!(report.next_lsn, 0);
//! // Two appends in flight, one commit for both.
//! let (a, b) = tokio::join!(log.append(b"first".to_vec()), log.append(b"second".to_vec()));
//! assert_eq!((a?, b?), (0, 1));
//! assert_eq!(log.sync_all().await?, 2);
//! assert_eq!(log.read(1).await?, b"second");
//! // A group on the writer's thread in one call: one channel round trip.
//! let durable = log.with(|l| { l.append(b"third")?; l.sync_all() }).await??;
//! assert_eq!(durable, 3);
//! log.close().await?;
//! replica.stop()?;
//! # Ok(()) }
//! ```

use std::sync::mpsc;

use ::tokio::sync::oneshot;
use rpma::{Peer, Transport};

use crate::{LogError, LogOptions, Lsn, RecoveryReport, ReplicaAddr, Result};

type Command<T> = Box<dyn FnOnce(&mut crate::Log<T>) + Send>;

/// An async writer of a replicated log: [`crate::Log`] on a thread of its own (module docs).
///
/// Its methods take `&self`: several tasks may use one `Log` (in an `Arc`); the writer takes
/// their commands one at a time, in the order they were sent. Dropping it ends the writer's
/// thread once the commands sent before are done ([`Log::close`] waits for that).
pub struct Log<T: Transport> {
    commands: Option<mpsc::Sender<Command<T>>>,
    done: Option<oneshot::Receiver<()>>,
}

impl<T: Transport> std::fmt::Debug for Log<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("open", &self.commands.is_some()).finish_non_exhaustive()
    }
}

fn gone() -> LogError {
    LogError::Closed("the writer's thread ended (it panicked, or the log was closed)".into())
}

impl<T: Transport> Log<T> {
    /// [`crate::Log::open`] on a new thread, which then serves this `Log`'s commands.
    ///
    /// # Errors
    /// As [`crate::Log::open`]; [`LogError::Closed`] if the thread could not be started or
    /// ended without an answer.
    pub async fn open(peer: &Peer<T>, replicas: &[ReplicaAddr], opts: LogOptions) -> Result<(Self, RecoveryReport)> {
        let (opened_tx, opened) = oneshot::channel();
        let (commands, rx) = mpsc::channel::<Command<T>>();
        let (done_tx, done) = oneshot::channel();
        let peer = peer.clone();
        let replicas = replicas.to_vec();
        std::thread::Builder::new()
            .name("rpma-log-writer".into())
            .spawn(move || {
                let mut log = match crate::Log::open(&peer, &replicas, opts) {
                    Ok((log, report)) => {
                        if opened_tx.send(Ok(report)).is_err() {
                            return;
                        }
                        log
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(command) = rx.recv() {
                    command(&mut log);
                }
                drop(log);
                let _ = done_tx.send(());
            })
            .map_err(|e| LogError::Closed(format!("starting the writer's thread: {e}")))?;
        let report = opened.await.map_err(|_| gone())??;
        Ok((Self { commands: Some(commands), done: Some(done) }, report))
    }

    /// Runs `f` on the writer's thread with the writer, and returns what it returns: for
    /// everything the async face does not wrap ([`crate::Log::health`],
    /// [`crate::Log::maintain`], [`crate::Log::durable_on`], ...). `f` runs after the commands
    /// sent before it, and must not block for long: the other commands wait for it.
    ///
    /// # Errors
    /// [`LogError::Closed`] if the writer's thread ended (it panicked).
    pub async fn with<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut crate::Log<T>) -> R + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let command: Command<T> = Box::new(move |log| {
            let _ = tx.send(f(log));
        });
        self.commands.as_ref().ok_or_else(gone)?.send(command).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())
    }

    /// [`crate::Log::append`]: the entry's lsn once the writer posted it to every replica up.
    ///
    /// # Errors
    /// As [`crate::Log::append`]; [`LogError::Closed`] as [`Log::with`].
    pub async fn append(&self, data: impl Into<Vec<u8>>) -> Result<Lsn> {
        let data = data.into();
        self.with(move |log| log.append(&data)).await?
    }

    /// [`crate::Log::sync`]: the durable position once a quorum has everything appended up to
    /// `upto` (and before this call) persistent.
    ///
    /// # Errors
    /// As [`crate::Log::sync`]; [`LogError::Closed`] as [`Log::with`].
    pub async fn sync(&self, upto: Lsn) -> Result<Lsn> {
        self.with(move |log| log.sync(upto)).await?
    }

    /// [`crate::Log::sync_all`].
    ///
    /// # Errors
    /// As [`crate::Log::sync_all`]; [`LogError::Closed`] as [`Log::with`].
    pub async fn sync_all(&self) -> Result<Lsn> {
        self.with(crate::Log::sync_all).await?
    }

    /// [`crate::Log::read`]: entry `lsn` from the writer's copy.
    ///
    /// # Errors
    /// As [`crate::Log::read`]; [`LogError::Closed`] as [`Log::with`].
    pub async fn read(&self, lsn: Lsn) -> Result<Vec<u8>> {
        self.with(move |log| log.read(lsn)).await?
    }

    /// [`crate::Log::truncate_prefix`].
    ///
    /// # Errors
    /// As [`crate::Log::truncate_prefix`]; [`LogError::Closed`] as [`Log::with`].
    pub async fn truncate_prefix(&self, lsn: Lsn) -> Result<()> {
        self.with(move |log| log.truncate_prefix(lsn)).await?
    }

    /// Ends the writer's thread after the commands sent before, and waits until it has dropped
    /// the writer (its connections closed).
    ///
    /// # Errors
    /// [`LogError::Closed`] if the thread ended otherwise (it panicked).
    pub async fn close(mut self) -> Result<()> {
        self.commands = None;
        let done = self.done.take().ok_or_else(gone)?;
        done.await.map_err(|_| gone())
    }
}
