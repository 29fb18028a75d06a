//! [`Error`]: why a backend could not be chosen or opened.

use std::ffi::OsString;
use std::fmt;

use super::{Backend, BACKEND_ENV};

/// Why a backend could not be chosen or opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A name that names no backend ([`FromStr`](std::str::FromStr)).
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
            // The cause is the source (printed once by whoever walks the chain).
            Self::Open { backend, .. } => write!(f, "opening the {backend} backend failed"),
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
        let cause = e.to_string();
        let e = Error::Open { backend: Backend::Mock, source: e };
        assert_eq!(e.to_string(), "opening the mock backend failed");
        // The cause once, as the source: a chain printed whole names it once.
        assert_eq!(std::error::Error::source(&e).map(ToString::to_string), Some(cause.clone()));
        assert!(!e.to_string().contains(&cause));
    }
}
