//! Backend selection (`--backend mock|verbs`), shared by every subcommand (and the benchmark).
//!
//! Code that works on any transport implements [`WithTransport`] and is handed to [`dispatch`],
//! which builds the selected transport and calls it with static dispatch.

#[cfg(feature = "mock")]
use anyhow::Context as _;
use anyhow::Result;

/// The transports the command can use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The in-memory mock fabric (no hardware needed; `rpma server`/`rpma client` on it reach
    /// each other across processes through its rendezvous directory).
    #[default]
    Mock,
    /// RDMA over libibverbs + librdmacm (needs a build with the `verbs` feature and a device).
    Verbs,
}

impl BackendKind {
    /// The name used on the command line.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Mock => "mock",
            Self::Verbs => "verbs",
        }
    }
}

/// Code generic over the transport, run by [`dispatch`].
pub trait WithTransport {
    /// What the code returns.
    type Output;
    /// Runs the code on `transport`.
    ///
    /// # Errors
    /// Whatever the code reports.
    fn run<T: rpma::Transport>(self, transport: T) -> Result<Self::Output>;
}

/// Builds the transport `kind` names and runs `work` on it.
///
/// # Errors
/// If the backend was not compiled in or cannot be opened, or what `work` returns.
pub fn dispatch<W: WithTransport>(kind: BackendKind, work: W) -> Result<W::Output> {
    match kind {
        BackendKind::Mock => mock(work),
        BackendKind::Verbs => verbs(work),
    }
}

/// [`dispatch`] for one side of a connection between processes (`rpma server`, `rpma client`):
/// on the mock, the fabric reaches other processes through the rendezvous directory named by
/// `RPMA_MOCK_RENDEZVOUS`, else a private one of this user
/// ([`rpma::mock::default_rendezvous_dir`]).
///
/// # Errors
/// As [`dispatch`].
pub fn dispatch_between_processes<W: WithTransport>(kind: BackendKind, work: W) -> Result<W::Output> {
    match kind {
        BackendKind::Mock => mock_between_processes(work),
        BackendKind::Verbs => verbs(work),
    }
}

#[cfg(feature = "mock")]
fn mock_between_processes<W: WithTransport>(work: W) -> Result<W::Output> {
    use rpma::mock::{default_rendezvous_dir, MockFabric, RENDEZVOUS_ENV};
    let dir = std::env::var_os(RENDEZVOUS_ENV).map_or_else(default_rendezvous_dir, std::path::PathBuf::from);
    work.run(MockFabric::builder().rendezvous(dir).try_build().context("the mock backend")?)
}

#[cfg(not(feature = "mock"))]
fn mock_between_processes<W: WithTransport>(work: W) -> Result<W::Output> {
    mock(work)
}

#[cfg(feature = "mock")]
fn mock<W: WithTransport>(work: W) -> Result<W::Output> {
    // A bad RPMA_MOCK_MODE is reported here, before any work.
    work.run(rpma::mock::MockFabric::try_new().context("the mock backend")?)
}

#[cfg(not(feature = "mock"))]
fn mock<W: WithTransport>(_work: W) -> Result<W::Output> {
    anyhow::bail!("this rpma was built without the mock backend (cargo feature `mock`)")
}

#[cfg(feature = "verbs")]
fn verbs<W: WithTransport>(work: W) -> Result<W::Output> {
    work.run(rpma::verbs::Verbs::new())
}

#[cfg(not(feature = "verbs"))]
fn verbs<W: WithTransport>(_work: W) -> Result<W::Output> {
    anyhow::bail!(
        "this rpma was built without the verbs backend: rebuild with `--features verbs` \
         (needs libibverbs-dev, librdmacm-dev, libclang-dev)"
    )
}

/// Sets rpma-verbs' persistent flush rule (`rpma bench --persistent-flush`) when `T` is the
/// verbs transport; any other transport has no such rule (nothing to set).
pub fn set_persistent_flush<T: rpma::Transport>(rule: crate::bench::FlushRule) {
    #[cfg(feature = "verbs")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<rpma::verbs::Verbs>() {
        rpma::verbs::set_persistent_flush(match rule {
            crate::bench::FlushRule::Native => rpma::verbs::PersistentFlush::Native,
            crate::bench::FlushRule::Read => rpma::verbs::PersistentFlush::Read,
        });
        return;
    }
    let _ = rule;
}

/// The per-backend hook of [`crate::native`]: the process-wide counts of flushes and atomic
/// writes by path, on a backend that counts them (verbs: `rpma::verbs::op_counts()`), or `None`
/// on one whose path follows the device's capabilities alone (the mock).
#[must_use]
pub fn op_counts<T: rpma::Transport>() -> Option<crate::native::OpCounts> {
    #[cfg(feature = "verbs")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<rpma::verbs::Verbs>() {
        let c = rpma::verbs::op_counts();
        return Some(crate::native::OpCounts {
            flush_native: c.flush_native,
            flush_emulated: c.flush_emulated,
            flush_persistent_read: c.flush_persistent_read,
            atomic_write_native: c.atomic_write_native,
            atomic_write_emulated: c.atomic_write_emulated,
        });
    }
    None
}
