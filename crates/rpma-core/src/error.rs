//! Errors: what went wrong ([`ErrorKind`]), in which call, and why.
//!
//! Every fallible call returns [`Result<T>`]. On top of its [`ErrorKind`], an [`Error`] carries
//! the operation that failed (the name of the librpma function it corresponds to, e.g.
//! `"rpma_read"`), the provider `errno` for [`ErrorKind::Provider`] errors (librpma only logged
//! it), and a short human-readable detail. librpma's codes and strings for the kinds are in
//! [`crate::librpma`].

use std::fmt;

/// The kind of an error: what the caller can do about it.
///
/// Each kind is one of librpma's ten `RPMA_E_*` codes ([`crate::librpma::code`]). New kinds may
/// be added, hence `#[non_exhaustive]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument is not valid for the call (a range outside its region, a size over the
    /// device's limit, a descriptor of the wrong length, ...): the detail names it. Fix the
    /// call. (librpma: `RPMA_E_INVAL`.)
    InvalidInput,
    /// The call cannot be done here: the device, the peer's configuration or the region's
    /// usage does not allow it (a persistent flush the peer did not promise, advice without
    /// on-demand paging, ...). (librpma: `RPMA_E_NOSUPP`.)
    Unsupported,
    /// Memory could not be allocated. (librpma: `RPMA_E_NOMEM`.)
    OutOfMemory,
    /// A call of the provider (libibverbs or librdmacm, or the mock fabric standing in for
    /// them) failed: [`Error::failed_call`] names it and the error's source is its `errno`.
    /// (librpma: `RPMA_E_PROVIDER`.)
    Provider,
    /// No completion is available: the completion channel's fd is non-blocking and nothing is
    /// pending, or a wait with a deadline timed out. Poll or wait again. (librpma:
    /// `RPMA_E_NO_COMPLETION`.)
    NoCompletion,
    /// No connection event or connection request is available: the fd is non-blocking and
    /// nothing is pending, or a wait with a deadline timed out. Wait again. (librpma:
    /// `RPMA_E_NO_EVENT`.)
    NoEvent,
    /// The call cannot proceed now but may later: an operation in flight still holds the
    /// region, or the send queue is full. Try again after a completion. (librpma:
    /// `RPMA_E_AGAIN`.)
    WouldBlock,
    /// The connection's completion channel is shared by its CQs: wait on the connection
    /// (`Conn::wait`), not on one CQ. (librpma: `RPMA_E_SHARED_CHANNEL`.)
    SharedChannel,
    /// The connection's completion channel is not shared: wait on each CQ (`Cq::wait`), not on
    /// the connection. (librpma: `RPMA_E_NOT_SHARED_CHNL`.)
    NotSharedChannel,
    /// Something the call did not expect happened (an unknown connection event, an event of a
    /// CQ the connection does not have, a provider failing without an `errno`): the detail says
    /// what. (librpma: `RPMA_E_UNKNOWN`.)
    Other,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [Self; 10] = [
        Self::InvalidInput,
        Self::Unsupported,
        Self::OutOfMemory,
        Self::Provider,
        Self::NoCompletion,
        Self::NoEvent,
        Self::WouldBlock,
        Self::SharedChannel,
        Self::NotSharedChannel,
        Self::Other,
    ];

    /// What the kind means, in a few words (its [`Display`](fmt::Display)).
    #[must_use]
    pub const fn description(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid argument",
            Self::Unsupported => "not supported",
            Self::OutOfMemory => "out of memory",
            Self::Provider => "provider error",
            Self::NoCompletion => "no completion available",
            Self::NoEvent => "no event available",
            Self::WouldBlock => "temporarily unavailable, try again",
            Self::SharedChannel => "the completion channel is shared",
            Self::NotSharedChannel => "the completion channel is not shared",
            Self::Other => "unexpected error",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// An error of an rpma operation: its [`ErrorKind`] plus context. `Send + Sync + 'static`, so
/// it converts into `Box<dyn std::error::Error + Send + Sync>` and `std::io::Error`.
///
/// One pointer wide (the context is boxed, errors are the cold path): a `Result<()>` is
/// returned in a register, so a successful post or poll carries no error-sized copy.
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    kind: ErrorKind,
    op: &'static str,
    errno: Option<i32>,
    detail: Option<Box<str>>,
    /// The provider call that failed (`Error::provider`), kept when `op` is replaced.
    call: Option<&'static str>,
    /// The Rust call the user made, when it is not the one `rust_name(op)` gives.
    called_as: Option<&'static str>,
}

impl Error {
    /// A new error of `kind` raised by operation `op` (a librpma function name).
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn new(kind: ErrorKind, op: &'static str) -> Self {
        Self(Box::new(Inner { kind, op, errno: None, detail: None, call: None, called_as: None }))
    }

    /// An [`ErrorKind::InvalidInput`] error with a detail saying which argument was wrong.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn invalid_input(op: &'static str, detail: &str) -> Self {
        Self::new(ErrorKind::InvalidInput, op).with_detail(detail)
    }

    /// An [`ErrorKind::Provider`] error carrying the provider's `errno`.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn provider(op: &'static str, errno: i32) -> Self {
        Self(Box::new(Inner {
            kind: ErrorKind::Provider,
            op,
            errno: Some(errno),
            detail: None,
            call: Some(op),
            called_as: None,
        }))
    }

    /// An error of `kind` because the provider call `call` failed with `errno` (e.g.
    /// `ibv_advise_mr` with `EOPNOTSUPP` is [`Unsupported`](ErrorKind::Unsupported)): librpma maps
    /// some errnos to kinds of their own, and still reports the failed call.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn failed(kind: ErrorKind, call: &'static str, errno: i32) -> Self {
        Self(Box::new(Inner { kind, op: call, errno: Some(errno), detail: None, call: Some(call), called_as: None }))
    }

    /// The [`ErrorKind::Provider`] error (`ENOMEM`, a provider's answer to a full queue) of a
    /// post of `posted` work requests to a send queue of `sq_size` entries, `in_flight` of them
    /// taken: names the queue's size and the fix. Built only when a post fails.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn send_queue_full(op: &'static str, sq_size: u64, in_flight: u64, posted: u64) -> Self {
        const ENOMEM: i32 = 12;
        Self::provider(op, ENOMEM).with_detail(&format!(
            "send queue is full: {in_flight} of its sq_size {sq_size} entries in flight, {posted} more posted; \
             raise sq_size in ConnCfg (ConnCfg::with_sq_size), or signal operations and poll their completions \
             (a polled completion frees its entry and those of the unsignaled operations posted before it)"
        ))
    }

    /// The [`ErrorKind::Provider`] error (`ENODEV`) of the provider call `call` of a device
    /// lookup of `addr` that no device owns: names the address and the addresses the devices
    /// own (`owned`), one of which the lookup needs.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn no_device(call: &'static str, addr: &str, owned: &[&str]) -> Self {
        const ENODEV: i32 = 19;
        let detail = if owned.is_empty() {
            format!("no device owns {addr}, and no device owns any address")
        } else {
            format!("no device owns {addr}; the devices own {}: use one of them", owned.join(", "))
        };
        Self::provider(call, ENODEV).with_detail(&detail)
    }

    /// Adds a human-readable detail.
    #[must_use]
    #[cold]
    pub fn with_detail(mut self, detail: &str) -> Self {
        self.0.detail = Some(detail.into());
        self
    }

    /// Puts `context` (what the call was given, e.g. `127.0.0.1:7204`) before the detail:
    /// `context: detail`, or `context` alone if there was none.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn with_context(mut self, context: &str) -> Self {
        let detail = match self.0.detail.take() {
            Some(d) => format!("{context}: {d}"),
            None => context.to_owned(),
        };
        self.0.detail = Some(detail.into());
        self
    }

    /// Names the Rust call the user made (e.g. `Peer::alloc_mr`, which registers through
    /// `rpma_mr_reg`): the message shows it in place of the Rust item of [`Error::op`], which
    /// stays the librpma function.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn called_as(mut self, rust: &'static str) -> Self {
        self.0.called_as = Some(rust);
        self
    }

    /// Replaces the operation name (used when one public call reports a backend step's error).
    #[must_use]
    pub fn in_op(mut self, op: &'static str) -> Self {
        self.0.op = op;
        self.0.called_as = None;
        self
    }

    /// The provider call that failed (`ibv_advise_mr`, `rdma_getaddrinfo`, ...), for an error
    /// made by [`Error::provider`] or [`Error::failed`], whichever operation reports it.
    #[must_use]
    pub const fn failed_call(&self) -> Option<&'static str> {
        self.0.call
    }

    /// The kind (`RPMA_E_*`).
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The operation that failed (a librpma function name, e.g. `"rpma_flush"`).
    #[must_use]
    pub const fn op(&self) -> &'static str {
        self.0.op
    }

    /// The provider's `errno`, for [`ErrorKind::Provider`] errors.
    #[must_use]
    pub const fn errno(&self) -> Option<i32> {
        self.0.errno
    }

    /// The detail message, if any.
    #[must_use]
    pub fn detail(&self) -> Option<&str> {
        self.0.detail.as_deref()
    }
}

/// Structured: every field by name (for logs and test failures); [`Display`](fmt::Display) is the
/// sentence for people.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.0.kind).field("op", &self.0.op);
        if let Some(rust) = self.0.called_as {
            d.field("called_as", &rust);
        }
        if let Some(errno) = self.0.errno {
            d.field("errno", &errno);
        }
        if let Some(detail) = &self.0.detail {
            d.field("detail", detail);
        }
        d.finish()
    }
}

/// The Rust item of this API that a librpma function's error comes from, for messages: a Rust
/// caller reads `Device::lookup (rpma_utils_get_ibv_context): ...`, the C name following.
#[must_use]
pub fn rust_name(op: &str) -> Option<&'static str> {
    Some(match op {
        "rpma_utils_get_ibv_context" => "Device::lookup",
        "rpma_utils_ibv_context_is_odp_capable" => "Device::is_odp_capable",
        "rpma_peer_new" => "Peer::new",
        "rpma_peer_delete" => "Peer::delete",
        "rpma_peer_cfg_from_descriptor" => "PeerCfg::from_descriptor",
        "rpma_mr_reg" => "Peer::reg_mr",
        "rpma_mr_dereg" => "MrLocal::dereg",
        "rpma_mr_advise" => "MrLocal::advise",
        "rpma_mr_remote_from_descriptor" => "MrRemote::from_descriptor",
        "rpma_ep_listen" => "Ep::listen",
        "rpma_ep_next_conn_req" => "Ep::next_conn_req",
        "rpma_ep_shutdown" => "Ep::shutdown",
        "rpma_conn_req_new" => "ConnReq::new",
        "rpma_conn_req_connect" => "ConnReq::connect",
        "rpma_conn_req_delete" => "ConnReq::delete",
        "rpma_conn_req_recv" => "ConnReq::recv",
        "rpma_conn_next_event" => "Conn::next_event",
        "rpma_conn_disconnect" => "Conn::disconnect",
        "rpma_conn_delete" => "Conn::delete",
        "rpma_conn_wait" => "Conn::wait",
        "rpma_conn_get_compl_fd" => "Conn::compl_fd",
        "rpma_read" => "Conn::read",
        "rpma_write" => "Conn::write",
        "rpma_write_with_imm" => "Conn::write(..).imm",
        "rpma_atomic_write" => "Conn::atomic_write",
        "rpma_flush" => "Conn::flush",
        "rpma_send" => "Conn::send",
        "rpma_send_with_imm" => "Conn::send(..).imm",
        "rpma_recv" => "Conn::recv",
        "rpma_cq_wait" => "Cq::wait",
        "rpma_cq_get_wc" => "Cq::poll",
        "rpma_srq_new" => "Srq::new",
        "rpma_srq_delete" => "Srq::delete",
        "rpma_srq_recv" => "Srq::recv",
        "rpma_log_set_threshold" => "logging::set_threshold",
        _ => return None,
    })
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(rust) = self.0.called_as.or_else(|| rust_name(self.0.op)) {
            write!(f, "{rust} ({}): ", self.0.op)?;
        } else {
            write!(f, "{}: ", self.0.op)?;
        }
        let kind = crate::librpma::err_2str(crate::librpma::code(self.0.kind));
        write!(f, "{} ({})", kind.to_string_lossy(), crate::librpma::macro_name(self.0.kind))?;
        if let Some(errno) = self.0.errno {
            write!(f, ", errno {errno} ({})", std::io::Error::from_raw_os_error(errno))?;
        }
        if let Some(d) = &self.0.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = match e.0.kind {
            ErrorKind::InvalidInput => std::io::ErrorKind::InvalidInput,
            ErrorKind::Unsupported => std::io::ErrorKind::Unsupported,
            ErrorKind::OutOfMemory => std::io::ErrorKind::OutOfMemory,
            ErrorKind::NoCompletion | ErrorKind::NoEvent | ErrorKind::WouldBlock => std::io::ErrorKind::WouldBlock,
            ErrorKind::Provider | ErrorKind::SharedChannel | ErrorKind::NotSharedChannel | ErrorKind::Other => {
                std::io::ErrorKind::Other
            }
        };
        Self::new(kind, e)
    }
}

/// The result type of every fallible rpma call.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_returned_in_registers() {
        // The data path returns these on every post and poll.
        assert_eq!(size_of::<Error>(), size_of::<usize>());
        assert_eq!(size_of::<Result<()>>(), size_of::<usize>());
        assert!(size_of::<Result<usize>>() <= 2 * size_of::<usize>());
    }

    #[test]
    fn display_carries_context() {
        let e = Error::provider("rpma_read", 12).with_detail("post failed");
        let s = e.to_string();
        assert!(s.starts_with("Conn::read (rpma_read): Provider error occurred (RPMA_E_PROVIDER), errno 12"), "{s}");
        let plain = Error::invalid_input("Offer::decode", "short");
        assert!(plain.to_string().starts_with("Offer::decode: Invalid argument"), "{plain}");
        assert_eq!(rust_name("rpma_utils_get_ibv_context"), Some("Device::lookup"));
        assert!(s.ends_with(": post failed"), "{s}");
        assert_eq!(e.errno(), Some(12));
        assert_eq!(Error::invalid_input("x", "y").kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn debug_is_structured() {
        let e = Error::provider("rpma_read", 12).with_detail("post failed");
        assert_eq!(format!("{e:?}"), r#"Error { kind: Provider, op: "rpma_read", errno: 12, detail: "post failed" }"#);
        assert_eq!(
            format!("{:?}", Error::new(ErrorKind::InvalidInput, "x")),
            r#"Error { kind: InvalidInput, op: "x" }"#
        );
    }
}
