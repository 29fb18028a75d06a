//! The backend chosen at run time: from a name (`"mock"`, `"verbs"`) or the environment
//! ([`BACKEND_ENV`], `RPMA_BACKEND`), among the backends compiled in, dispatched once to code
//! generic over the [`Transport`](crate::Transport).
//!
//! The generic API (`rpma::Conn<T>`, ... with `T: rpma::Transport`) stays the fast path: the
//! choice is made once, by a `match` on [`Backend`], and below it everything is monomorphized
//! for the chosen transport (no boxing, no dynamic dispatch per operation). Write the code once
//! as a [`WithTransport`] and hand it to [`Backend::run`]; or [`Backend::open`] the transport
//! as an [`AnyTransport`] and match it where the objects must outlive one call (a C ABI whose
//! handles keep their backend's objects, say).
//!
//! A name of a backend that was not compiled in parses (it names one), and opening it fails
//! with [`Error::NotCompiledIn`] naming the cargo feature that builds it: features stay
//! additive, and a build without one says so instead of calling the name unknown.
//!
//! ```
//! use rpma::any::{Backend, WithTransport};
//! use rpma::{ContextType, Device, Transport};
//!
//! /// Code for any transport: the name of the device that owns an address.
//! struct DeviceName<'a>(&'a str);
//!
//! impl WithTransport for DeviceName<'_> {
//!     type Output = rpma::Result<String>;
//!     fn run<T: Transport>(self, transport: T) -> rpma::Result<String> {
//!         Ok(Device::lookup(&transport, self.0, ContextType::Local)?.name())
//!     }
//! }
//!
//! let backend: Backend = "mock".parse()?;
//! assert_eq!(backend.to_string(), "mock");
//! // The outer `?`: the backend could not be opened; the inner one: what the code returns.
//! assert_eq!(backend.run(DeviceName("127.0.0.1"))??, "mock0");
//!
//! // Unknown names are refused with the list of known ones.
//! let err = "rxe".parse::<Backend>().unwrap_err();
//! assert_eq!(err.to_string(), "unknown backend `rxe` (known: mock, verbs)");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Reading the environment (`RPMA_BACKEND=verbs`, unset: [`Backend::default`]):
//!
//! ```
//! # fn f() -> Result<(), Box<dyn std::error::Error>> {
//! # struct Work;
//! # impl rpma::any::WithTransport for Work {
//! #     type Output = ();
//! #     fn run<T: rpma::Transport>(self, _: T) {}
//! # }
//! let backend = rpma::any::Backend::from_env()?;
//! eprintln!("running on {backend}");
//! backend.run(Work)?;
//! # Ok(()) }
//! ```

use std::ffi::OsString;
use std::fmt;
use std::str::FromStr;

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

/// Code generic over the transport, run by [`Backend::run`] (or [`AnyTransport::run`]) on the
/// transport chosen at run time.
pub trait WithTransport {
    /// What the code returns (a `Result` if it can fail).
    type Output;
    /// Runs the code on `transport`.
    fn run<T: crate::Transport>(self, transport: T) -> Self::Output;
}

/// An opened transport of one of the backends compiled in ([`Backend::open`]).
///
/// Its variants follow the cargo features, so a `match` on it names the backends of this
/// build; [`AnyTransport::run`] is the way that compiles in every build.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyTransport {
    /// The in-memory fabric.
    #[cfg(feature = "mock")]
    Mock(crate::mock::MockFabric),
    /// RDMA devices over libibverbs + librdmacm.
    #[cfg(feature = "verbs")]
    Verbs(crate::verbs::Verbs),
}

impl AnyTransport {
    /// The backend of the transport.
    #[must_use]
    pub const fn backend(&self) -> Backend {
        match *self {
            #[cfg(feature = "mock")]
            Self::Mock(_) => Backend::Mock,
            #[cfg(feature = "verbs")]
            Self::Verbs(_) => Backend::Verbs,
        }
    }

    /// Runs `work` on the transport, statically dispatched.
    // Without a backend there is no transport to run on (and this type has no value).
    #[cfg_attr(not(any(feature = "mock", feature = "verbs")), allow(unused_variables))]
    pub fn run<W: WithTransport>(self, work: W) -> W::Output {
        match self {
            #[cfg(feature = "mock")]
            Self::Mock(t) => work.run(t),
            #[cfg(feature = "verbs")]
            Self::Verbs(t) => work.run(t),
        }
    }
}

/// Why a backend could not be chosen or opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A name that names no backend ([`FromStr`]).
    #[non_exhaustive]
    Unknown {
        /// The name given.
        name: String,
    },
    /// [`BACKEND_ENV`] names no backend, or is not UTF-8.
    #[non_exhaustive]
    BadEnv {
        /// The variable's value.
        value: OsString,
    },
    /// The backend is not compiled into this build.
    #[non_exhaustive]
    NotCompiledIn {
        /// The backend.
        backend: Backend,
    },
    /// The backend's transport refused to open.
    #[non_exhaustive]
    Open {
        /// The backend.
        backend: Backend,
        /// What the transport said.
        source: crate::Error,
    },
}

impl Error {
    /// The backend the error is about, if it names one.
    #[must_use]
    pub const fn backend(&self) -> Option<Backend> {
        match self {
            Self::NotCompiledIn { backend } | Self::Open { backend, .. } => Some(*backend),
            Self::Unknown { .. } | Self::BadEnv { .. } => None,
        }
    }
}

/// `mock, verbs`: the known names, for messages.
struct Known;

impl fmt::Display for Known {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in Backend::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(b.name())?;
        }
        Ok(())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown { name } => write!(f, "unknown backend `{name}` (known: {Known})"),
            Self::BadEnv { value } => match value.to_str() {
                Some(v) => write!(f, "{BACKEND_ENV}={v}: unknown backend (known: {Known})"),
                None => write!(f, "{BACKEND_ENV} is not UTF-8: unknown backend (known: {Known})"),
            },
            Self::NotCompiledIn { backend: b @ Backend::Verbs } => write!(
                f,
                "the {b} backend is not compiled into this build: rebuild with the cargo feature `{0}` \
                 (`--features {0}`; needs libibverbs-dev, librdmacm-dev and libclang-dev)",
                b.feature()
            ),
            Self::NotCompiledIn { backend: b } => write!(
                f,
                "the {b} backend is not compiled into this build: rebuild with the cargo feature `{0}` (`--features {0}`)",
                b.feature()
            ),
            Self::Open { backend, source } => write!(f, "the {backend} backend: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open { source, .. } => Some(source),
            _ => None,
        }
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

    #[test]
    fn bad_env_values_say_what_they_were() {
        let e = Error::BadEnv { value: "rxe0".into() };
        assert_eq!(e.to_string(), "RPMA_BACKEND=rxe0: unknown backend (known: mock, verbs)");
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            let e = Error::BadEnv { value: OsString::from_vec(vec![0xff]) };
            assert_eq!(e.to_string(), "RPMA_BACKEND is not UTF-8: unknown backend (known: mock, verbs)");
        }
    }

    #[cfg(feature = "mock")]
    #[test]
    fn a_refused_configuration_names_the_backend_and_the_cause() {
        // The mock refuses an empty rendezvous directory; the error keeps the transport's.
        let e = crate::mock::MockFabric::builder().rendezvous("").try_build().unwrap_err();
        let e = Error::Open { backend: Backend::Mock, source: e };
        assert!(e.to_string().starts_with("the mock backend: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }
}
