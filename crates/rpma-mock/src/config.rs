//! How a fabric executes work: the [`Mode`] (immediate or deferred), tearing of remote writes,
//! background progress and the CM timeout, with `RPMA_MOCK_MODE` read when a fabric is built.

use std::time::Duration;

use rpma_core::{Error, Result};

/// The environment variable naming the [`Mode`] of a fabric whose builder was not given one:
/// `immediate` or `deferred` (read once, when the fabric is built).
pub const MODE_ENV: &str = "RPMA_MOCK_MODE";

/// The environment variable naming the rendezvous directory of the cross-process mode, for a
/// fabric whose builder was not given one
/// ([`MockFabricBuilder::rendezvous`](crate::MockFabricBuilder::rendezvous)); unset: the fabric
/// reaches no other process.
pub const RENDEZVOUS_ENV: &str = "RPMA_MOCK_RENDEZVOUS";

/// A rendezvous directory private to this user: `$XDG_RUNTIME_DIR/rpma-mock` if the variable
/// names an absolute directory, else `/tmp/rpma-mock-<uid>` (created 0700 when first used, and
/// refused if another user owns it or it is open to others).
#[must_use]
pub fn default_rendezvous_dir() -> std::path::PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from) {
        Some(d) if d.is_absolute() && d.is_dir() => d.join("rpma-mock"),
        _ => std::env::temp_dir().join(format!("rpma-mock-{}", nix::unistd::getuid())),
    }
}

/// The directory [`RENDEZVOUS_ENV`] names, if it is set.
pub(crate) fn rendezvous_from_env() -> Result<Option<std::path::PathBuf>> {
    match std::env::var_os(RENDEZVOUS_ENV) {
        None => Ok(None),
        Some(v) if v.is_empty() => Err(Error::invalid_input(
            CONFIG_OP,
            &format!("{RENDEZVOUS_ENV} is empty (it names a directory, or is unset)"),
        )),
        Some(v) => Ok(Some(v.into())),
    }
}

/// The operation named by errors of the fabric's configuration.
pub(crate) const CONFIG_OP: &str = "MockFabricBuilder::build";

/// When a one-sided operation or a send executes on the mock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Inside `post`: the bytes have moved and the completion is queued when `post` returns (the
    /// fastest mode; what it cannot show is the subject of [`Mode::Deferred`]).
    #[default]
    Immediate,
    /// After `post`, asynchronously, as a NIC does: work requests wait in their send queue and
    /// execute in posting order when a CQ or a wait of either end of the connection is polled,
    /// when [`MockFabric::progress`](crate::MockFabric::progress) is called, or on the fabric's
    /// progress thread ([`MockFabricBuilder::background_progress`](crate::MockFabricBuilder::background_progress)).
    /// The source of a write or send is read when it executes; a buffer reused before its
    /// completion sends the new bytes, and a region read before the remote write's completion
    /// shows the old ones.
    Deferred,
}

impl Mode {
    /// The mode a value of [`MODE_ENV`] names.
    ///
    /// # Errors
    /// [`InvalidInput`](rpma_core::ErrorKind::InvalidInput) for anything but `immediate` or
    /// `deferred`.
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "immediate" => Ok(Self::Immediate),
            "deferred" => Ok(Self::Deferred),
            other => Err(Error::invalid_input(
                CONFIG_OP,
                &format!("{MODE_ENV}={other:?} is not a mock mode (expected \"immediate\" or \"deferred\")"),
            )),
        }
    }

    /// The mode [`MODE_ENV`] names, [`Mode::Immediate`] if it is unset.
    ///
    /// # Errors
    /// [`InvalidInput`](rpma_core::ErrorKind::InvalidInput) if it is set to anything else than
    /// `immediate` or `deferred` (or is not Unicode).
    pub fn from_env() -> Result<Self> {
        match std::env::var(MODE_ENV) {
            Ok(v) => Self::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(Self::Immediate),
            Err(std::env::VarError::NotUnicode(v)) => Err(Error::invalid_input(
                CONFIG_OP,
                &format!("{MODE_ENV}={v:?} is not a mock mode (expected \"immediate\" or \"deferred\")"),
            )),
        }
    }

    /// The name [`Mode::parse`] takes.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Immediate => "immediate",
            Self::Deferred => "deferred",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The default CM timeout: how long a side that disconnected first waits for its peer's answer
/// before it sees CLOSED anyway (RDMA CM's DREQ timeout, shortened for tests).
pub const DEFAULT_CM_TIMEOUT: Duration = Duration::from_secs(1);

/// The default delay of the background progress of [`Mode::Deferred`].
pub const DEFAULT_PROGRESS_DELAY: Duration = Duration::from_millis(2);

/// A fabric's execution settings, as built (see [`crate::MockFabricBuilder`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExecutionSettings {
    pub(crate) mode: Mode,
    /// Remote writes land in pieces of this many bytes, one piece per progress step.
    pub(crate) tearing: Option<usize>,
    /// Deferred work left pending this long runs on the fabric's progress thread (`None`: only
    /// polls, waits and `MockFabric::progress` run it).
    pub(crate) background: Option<Duration>,
    pub(crate) cm_timeout: Duration,
}

impl ExecutionSettings {
    /// Settings from the builder's choices, the mode from the environment if none was chosen.
    ///
    /// # Errors
    /// [`InvalidInput`](rpma_core::ErrorKind::InvalidInput) for a bad `RPMA_MOCK_MODE`, tearing
    /// outside the deferred mode or in pieces of 0 bytes, or a zero CM timeout.
    pub(crate) fn resolve(
        mode: Option<Mode>,
        tearing: Option<usize>,
        background: Option<Duration>,
        cm_timeout: Duration,
    ) -> Result<Self> {
        let mode = match mode {
            Some(m) => m,
            None => Mode::from_env()?,
        };
        match tearing {
            Some(0) => return Err(Error::invalid_input(CONFIG_OP, "tearing in pieces of 0 bytes")),
            Some(_) if mode != Mode::Deferred => {
                return Err(Error::invalid_input(
                    CONFIG_OP,
                    &format!("tearing needs the deferred mode (the fabric's mode is {mode})"),
                ))
            }
            _ => {}
        }
        if cm_timeout.is_zero() {
            return Err(Error::invalid_input(CONFIG_OP, "a CM timeout of zero"));
        }
        Ok(Self { mode, tearing, background, cm_timeout })
    }

    /// What a fabric whose configuration is bad runs with (it reports the error at its first
    /// use, see `FabricInner::config_error`).
    pub(crate) const fn fallback() -> Self {
        Self { mode: Mode::Immediate, tearing: None, background: None, cm_timeout: DEFAULT_CM_TIMEOUT }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpma_core::ErrorKind;

    #[test]
    fn parse_names_both_modes_and_refuses_others() {
        assert_eq!(Mode::parse("immediate").unwrap(), Mode::Immediate);
        assert_eq!(Mode::parse("deferred").unwrap(), Mode::Deferred);
        for bad in ["", "Deferred", "defer", "immediate ", "async"] {
            let e = Mode::parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
            assert!(e.to_string().contains(MODE_ENV), "{e}");
            assert!(e.to_string().contains("expected \"immediate\" or \"deferred\""), "{e}");
        }
        assert_eq!(Mode::Deferred.to_string(), "deferred");
    }

    #[test]
    fn resolve_checks_tearing_and_timeout() {
        let t = DEFAULT_CM_TIMEOUT;
        assert!(ExecutionSettings::resolve(Some(Mode::Deferred), Some(8), None, t).is_ok());
        let e = ExecutionSettings::resolve(Some(Mode::Immediate), Some(8), None, t).unwrap_err();
        assert!(e.to_string().contains("tearing needs the deferred mode"), "{e}");
        let e = ExecutionSettings::resolve(Some(Mode::Deferred), Some(0), None, t).unwrap_err();
        assert!(e.to_string().contains("0 bytes"), "{e}");
        let e = ExecutionSettings::resolve(Some(Mode::Immediate), None, None, Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("CM timeout"), "{e}");
    }
}
