//! Backend selection on the command line (`--backend mock|verbs`), shared by every subcommand
//! (and the benchmark).
//!
//! The choice itself is rpma's ([`rpma::any`]): [`BackendKind`] is the command line's value
//! type, converted into an [`rpma::any::Backend`]; code that works on any transport implements
//! [`rpma::any::WithTransport`] with a [`Result`] output and is handed to [`dispatch`] (or
//! [`dispatch_between_processes`]), which runs it on the chosen transport with static
//! dispatch and reports both ways of failing as one error.

use anyhow::Result;
use rpma::any::{Backend, WithTransport};

/// The transports the command can use (the command line's spelling of [`rpma::any::Backend`]).
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
    /// The name used on the command line (the backend's name).
    #[must_use]
    pub const fn name(self) -> &'static str {
        self.backend().name()
    }

    /// The backend.
    #[must_use]
    pub const fn backend(self) -> Backend {
        match self {
            Self::Mock => Backend::Mock,
            Self::Verbs => Backend::Verbs,
        }
    }
}

impl From<BackendKind> for Backend {
    fn from(kind: BackendKind) -> Self {
        kind.backend()
    }
}

/// Runs `work` on the transport `kind` names, opened for this process ([`Backend::run`]).
///
/// # Errors
/// If the backend was not compiled in or cannot be opened, or what `work` returns.
pub fn dispatch<O, W: WithTransport<Output = Result<O>>>(kind: BackendKind, work: W) -> Result<O> {
    kind.backend().run(work)?
}

/// [`dispatch`] for one side of a connection between processes (`rpma server`, `rpma client`,
/// `rpma bench --server`/`--connect`): on the mock, the fabric reaches other processes through
/// the rendezvous directory named by `RPMA_MOCK_RENDEZVOUS`, else a private one of this user
/// ([`Backend::run_between_processes`]).
///
/// # Errors
/// As [`dispatch`].
pub fn dispatch_between_processes<O, W: WithTransport<Output = Result<O>>>(kind: BackendKind, work: W) -> Result<O> {
    kind.backend().run_between_processes(work)?
}
