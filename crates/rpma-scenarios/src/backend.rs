//! Backend selection on the command line (`--backend mock|verbs`), shared by every subcommand
//! (and the benchmark).
//!
//! The backends and the choice are rpma's ([`rpma::any`]): a `--backend` argument is an
//! [`rpma::any::Backend`], parsed by [`parser`]; code that works on any transport implements
//! [`rpma::any::WithTransport`] with a [`Result`] output and is handed to [`dispatch`] (or
//! [`dispatch_between_processes`]), which runs it on the chosen transport with static
//! dispatch and reports both ways of failing as one error.

use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use rpma::any::{Backend, WithTransport};

/// The parser of a `--backend` argument: the name of one of [`Backend::ALL`] (its help lists
/// each with its [`Backend::description`]), compiled in or not ([`dispatch`] says which cargo
/// feature a missing one needs). An argument reads `#[arg(long, value_parser =
/// backend::parser(), default_value_t = Backend::Mock)] backend: Backend`.
#[must_use]
pub fn parser() -> impl TypedValueParser<Value = Backend> {
    PossibleValuesParser::new(Backend::ALL.map(|b| PossibleValue::new(b.name()).help(b.description())))
        .try_map(|name| name.parse::<Backend>())
}

/// Runs `work` on the transport of `backend`, opened for this process ([`Backend::run`]).
///
/// # Errors
/// If the backend was not compiled in or cannot be opened, or what `work` returns.
pub fn dispatch<O, W: WithTransport<Output = Result<O>>>(backend: Backend, work: W) -> Result<O> {
    backend.run(work)?
}

/// [`dispatch`] for one side of a connection between processes (`rpma server`, `rpma client`,
/// `rpma bench --server`/`--connect`): on the mock, the fabric reaches other processes through
/// the rendezvous directory named by `RPMA_MOCK_RENDEZVOUS`, else a private one of this user
/// ([`Backend::run_between_processes`]).
///
/// # Errors
/// As [`dispatch`].
pub fn dispatch_between_processes<O, W: WithTransport<Output = Result<O>>>(backend: Backend, work: W) -> Result<O> {
    backend.run_between_processes(work)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Args {
        #[arg(long, value_parser = parser(), default_value_t = Backend::Mock)]
        backend: Backend,
    }

    #[test]
    fn every_backend_parses_by_its_name_and_nothing_else() {
        assert_eq!(Args::try_parse_from(["t"]).unwrap().backend, Backend::Mock);
        for b in Backend::ALL {
            assert_eq!(Args::try_parse_from(["t", "--backend", b.name()]).unwrap().backend, b);
        }
        let e = Args::try_parse_from(["t", "--backend", "rxe"]).unwrap_err().to_string();
        assert!(e.contains("[possible values: mock, verbs]"), "{e}");
    }
}
