//! [`Backend`]: the backends by name, compiled in or not, and how one is chosen and opened.

use std::fmt;
use std::str::FromStr;

use super::{AnyTransport, Error, WithTransport};

/// The environment variable [`Backend::from_env`] reads: a backend's name.
pub const BACKEND_ENV: &str = "RPMA_BACKEND";

/// A backend, by name: one of those this library knows, compiled in or not
/// ([`Backend::is_compiled_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// The in-memory fabric (`rpma::mock`; cargo feature `mock`).
    Mock,
    /// RDMA devices over libibverbs + librdmacm (`rpma::verbs`; cargo feature `verbs`).
    Verbs,
}

impl Backend {
    /// Every backend this library knows, compiled in or not, in the order of
    /// [`Backend::default`]'s preference.
    pub const ALL: [Self; 2] = [Self::Mock, Self::Verbs];

    /// The backend's name (`"mock"`, `"verbs"`): what [`FromStr`] and [`BACKEND_ENV`] take.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Mock => "mock",
            Self::Verbs => "verbs",
        }
    }

    /// What the backend is, in a line (for help texts: the command line's `--backend`).
    #[must_use]
    pub const fn description(self) -> &'static str {
        match self {
            Self::Mock => {
                "the in-memory fabric: no hardware; processes of one host meet through its rendezvous directory"
            }
            Self::Verbs => "RDMA devices over libibverbs + librdmacm (a build with the cargo feature `verbs`)",
        }
    }

    /// The cargo feature of `rpma` that compiles the backend in (the same name as the backend).
    #[must_use]
    pub const fn feature(self) -> &'static str {
        self.name()
    }

    /// Whether this build has the backend (its cargo feature was on).
    #[must_use]
    pub const fn is_compiled_in(self) -> bool {
        match self {
            Self::Mock => cfg!(feature = "mock"),
            Self::Verbs => cfg!(feature = "verbs"),
        }
    }

    /// The backends compiled into this build, in [`Backend::ALL`]'s order.
    pub fn compiled_in() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(|b| b.is_compiled_in())
    }

    /// The backend [`BACKEND_ENV`] names; unset or empty, [`Backend::default`].
    ///
    /// # Errors
    /// [`Error::BadEnv`] if the variable names no backend (or is not UTF-8). A backend that
    /// is named but not compiled in is returned: [`Backend::open`] reports it.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_env_or(Self::default())
    }

    /// The backend [`BACKEND_ENV`] names; unset or empty, `default` (e.g. a C library whose
    /// users expect real devices unless told otherwise).
    ///
    /// # Errors
    /// As [`Backend::from_env`].
    pub fn from_env_or(default: Self) -> Result<Self, Error> {
        match std::env::var_os(BACKEND_ENV) {
            None => Ok(default),
            Some(v) if v.is_empty() => Ok(default),
            Some(v) => v.to_str().and_then(|s| s.parse().ok()).ok_or(Error::BadEnv { value: v }),
        }
    }

    /// Opens the backend's transport for this process: the mock, a fabric of its own
    /// (`MockFabric::try_new`, which reads `RPMA_MOCK_MODE` and `RPMA_MOCK_RENDEZVOUS`); verbs,
    /// the devices of the host.
    ///
    /// # Errors
    /// [`Error::NotCompiledIn`] naming the cargo feature; [`Error::Open`] if the transport
    /// refuses its configuration (the mock: a bad `RPMA_MOCK_MODE`, an empty
    /// `RPMA_MOCK_RENDEZVOUS`).
    pub fn open(self) -> Result<AnyTransport, Error> {
        match self {
            #[cfg(feature = "mock")]
            Self::Mock => crate::mock::MockFabric::try_new()
                .map(AnyTransport::Mock)
                .map_err(|source| Error::Open { backend: self, source }),
            #[cfg(feature = "verbs")]
            Self::Verbs => Ok(AnyTransport::Verbs(crate::verbs::Verbs::new())),
            #[allow(unreachable_patterns)] // every backend compiled in: no other
            _ => Err(Error::NotCompiledIn { backend: self }),
        }
    }

    /// [`Backend::open`] for one side of a connection between processes of this host: the
    /// mock's fabric reaches other processes through its rendezvous directory,
    /// `RPMA_MOCK_RENDEZVOUS` if set, else a private one of this user
    /// (`rpma::mock::default_rendezvous_dir`); verbs is the same as [`Backend::open`] (its
    /// devices reach other processes and hosts anyway).
    ///
    /// # Errors
    /// As [`Backend::open`].
    pub fn open_between_processes(self) -> Result<AnyTransport, Error> {
        match self {
            #[cfg(feature = "mock")]
            Self::Mock => {
                use crate::mock::{default_rendezvous_dir, MockFabric, RENDEZVOUS_ENV};
                let dir =
                    std::env::var_os(RENDEZVOUS_ENV).map_or_else(default_rendezvous_dir, std::path::PathBuf::from);
                MockFabric::builder()
                    .rendezvous(dir)
                    .try_build()
                    .map(AnyTransport::Mock)
                    .map_err(|source| Error::Open { backend: self, source })
            }
            _ => self.open(),
        }
    }

    /// Opens the backend ([`Backend::open`]) and runs `work` on its transport, statically
    /// dispatched.
    ///
    /// # Errors
    /// As [`Backend::open`]; what `work` returns is the `Ok` value (it may be a `Result` of its
    /// own).
    pub fn run<W: WithTransport>(self, work: W) -> Result<W::Output, Error> {
        Ok(self.open()?.run(work))
    }

    /// [`Backend::run`] on [`Backend::open_between_processes`]'s transport.
    ///
    /// # Errors
    /// As [`Backend::open_between_processes`].
    pub fn run_between_processes<W: WithTransport>(self, work: W) -> Result<W::Output, Error> {
        Ok(self.open_between_processes()?.run(work))
    }
}

impl Default for Backend {
    /// The first backend compiled in, in [`Backend::ALL`]'s order: the mock if this build has
    /// it, else verbs (the mock when neither is: opening it then says which feature is missing).
    fn default() -> Self {
        Self::compiled_in().next().unwrap_or(Self::Mock)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// A backend by its [`name`](Backend::name) (exact, lower case).
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL.into_iter().find(|b| b.name() == s).ok_or_else(|| Error::Unknown { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transport's backend, by its type.
    struct Which;

    impl WithTransport for Which {
        type Output = &'static str;
        fn run<T: crate::Transport>(self, _: T) -> &'static str {
            std::any::type_name::<T>()
        }
    }

    #[test]
    fn names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
            assert_eq!(b.to_string(), b.name());
        }
        let e = "Mock".parse::<Backend>().unwrap_err();
        assert!(matches!(&e, Error::Unknown { name } if name == "Mock"), "{e:?}");
        assert_eq!(e.to_string(), "unknown backend `Mock` (known: mock, verbs)");
        assert_eq!("".parse::<Backend>().unwrap_err().to_string(), "unknown backend `` (known: mock, verbs)");
    }

    #[test]
    fn the_default_is_compiled_in_when_one_is() {
        let d = Backend::default();
        if cfg!(feature = "mock") {
            assert_eq!(d, Backend::Mock);
        } else if cfg!(feature = "verbs") {
            assert_eq!(d, Backend::Verbs);
        }
        assert_eq!(
            Backend::compiled_in().count(),
            usize::from(cfg!(feature = "mock")) + usize::from(cfg!(feature = "verbs"))
        );
    }

    #[test]
    fn each_backend_runs_or_names_its_feature() {
        for b in Backend::ALL {
            match b.run(Which) {
                Ok(name) => {
                    assert!(b.is_compiled_in());
                    assert!(name.to_lowercase().contains(b.name()), "{b} ran on {name}");
                }
                Err(e) => {
                    assert!(!b.is_compiled_in(), "{b}: {e}");
                    assert_eq!(e.backend(), Some(b));
                    assert!(e.to_string().contains(&format!("cargo feature `{}`", b.feature())), "{e}");
                }
            }
        }
    }
}
