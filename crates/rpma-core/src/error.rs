//! Errors: what went wrong ([`ErrorKind`]), in which call, and why.
//!
//! Every fallible call returns [`Result<T>`]. An [`Error`] carries its [`ErrorKind`], the Rust
//! item the caller called ([`Error::op`], e.g. `"Conn::read"`), the provider call that failed
//! with its `errno` if one did ([`Error::failed_call`]; the `errno` as a [`std::io::Error`] is the
//! error's [`source`](std::error::Error::source)), and a detail naming the argument, the
//! numbers and the fix. librpma's C codes and function names for all of it are in
//! [`crate::librpma`].

use std::fmt;
use std::io;

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

/// An error of an rpma call: its [`ErrorKind`] plus context. `Send + Sync + 'static`, so it
/// converts into `Box<dyn std::error::Error + Send + Sync>`, `anyhow::Error` and
/// [`std::io::Error`].
///
/// [`Display`](fmt::Display) is one sentence: the Rust item called, the kind, the provider call
/// that failed, the detail (`Conn::write: invalid argument: offset 4090 + length 8 > the
/// region's 4096 bytes ...`). The provider's `errno` is not in it: it is the
/// [`source`](std::error::Error::source), an [`io::Error`], which reports such as `anyhow`'s
/// `{:#}` print after it. [`Debug`](fmt::Debug) lists the fields.
///
/// One pointer wide (the context is boxed, errors are the cold path): a `Result<()>` is
/// returned in a register, so a successful post or poll carries no error-sized copy.
pub struct Error(Box<Inner>);

struct Inner {
    kind: ErrorKind,
    /// The Rust item called (`Conn::read`), or the provider call while a backend reports it.
    op: &'static str,
    /// The provider call that failed (`Error::provider`, `Error::failed`), kept when `op` is
    /// replaced.
    call: Option<&'static str>,
    /// The `errno` of `call`, an OS error (`io::Error::from_raw_os_error`).
    source: Option<io::Error>,
    detail: Option<Box<str>>,
}

impl Error {
    /// A new error of `kind` raised by `op` (the Rust item called, e.g. `"Conn::read"`).
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn new(kind: ErrorKind, op: &'static str) -> Self {
        Self(Box::new(Inner { kind, op, call: None, source: None, detail: None }))
    }

    /// An [`ErrorKind::InvalidInput`] error with a detail saying which argument was wrong.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn invalid_input(op: &'static str, detail: &str) -> Self {
        Self::new(ErrorKind::InvalidInput, op).with_detail(detail)
    }

    /// An [`ErrorKind::Provider`] error: the provider call `call` failed with `errno`. Its
    /// operation is `call` until the public call that made it names itself ([`Error::in_op`]).
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn provider(call: &'static str, errno: i32) -> Self {
        Self::failed(ErrorKind::Provider, call, errno)
    }

    /// An error of `kind` because the provider call `call` failed with `errno` (e.g.
    /// `ibv_advise_mr` with `EOPNOTSUPP` is [`Unsupported`](ErrorKind::Unsupported)): librpma
    /// maps some errnos to kinds of their own, and still reports the failed call.
    #[must_use]
    #[cold]
    #[inline(never)]
    pub fn failed(kind: ErrorKind, call: &'static str, errno: i32) -> Self {
        Self(Box::new(Inner {
            kind,
            op: call,
            call: Some(call),
            source: Some(io::Error::from_raw_os_error(errno)),
            detail: None,
        }))
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

    /// Names the Rust item the caller called (`"Peer::alloc_mr"`), replacing the operation of
    /// a step it made (a backend's provider call, or another public call it is built on).
    #[must_use]
    pub fn in_op(mut self, op: &'static str) -> Self {
        self.0.op = op;
        self
    }

    /// The kind.
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The Rust item the caller called (e.g. `"Conn::flush"`, `"Peer::alloc_mr"`); its
    /// librpma function, if it has one, is [`crate::librpma::c_function`] of it.
    #[must_use]
    pub const fn op(&self) -> &'static str {
        self.0.op
    }

    /// The provider call that failed (`ibv_advise_mr`, `rdma_getaddrinfo`, ...), for an error
    /// made by [`Error::provider`] or [`Error::failed`], whichever operation reports it.
    #[must_use]
    pub const fn failed_call(&self) -> Option<&'static str> {
        self.0.call
    }

    /// The `errno` of the failed provider call ([`Error::failed_call`]): the raw OS error of
    /// the error's [`source`](std::error::Error::source).
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        self.0.source.as_ref().and_then(io::Error::raw_os_error)
    }

    /// The detail message, if any.
    #[must_use]
    pub fn detail(&self) -> Option<&str> {
        self.0.detail.as_deref()
    }
}

/// A copy; the `errno`'s [`io::Error`] is made again from its raw OS error.
impl Clone for Error {
    fn clone(&self) -> Self {
        let Inner { kind, op, call, ref source, ref detail } = *self.0;
        let source = source.as_ref().and_then(io::Error::raw_os_error).map(io::Error::from_raw_os_error);
        Self(Box::new(Inner { kind, op, call, source, detail: detail.clone() }))
    }
}

/// Equal kind, operation, failed call, `errno` and detail.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&*self.0, &*other.0);
        (a.kind, a.op, a.call, &a.detail) == (b.kind, b.op, b.call, &b.detail) && self.errno() == other.errno()
    }
}

impl Eq for Error {}

/// Structured: every field by name (for logs and test failures); [`Display`](fmt::Display) is the
/// sentence for people.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.0.kind).field("op", &self.0.op);
        if let Some(call) = self.0.call {
            d.field("call", &call);
        }
        if let Some(errno) = self.errno() {
            d.field("errno", &errno);
        }
        if let Some(detail) = &self.0.detail {
            d.field("detail", detail);
        }
        d.finish()
    }
}

/// `op: kind[: call failed][: detail]`, e.g. `Peer::alloc_mr: provider error: ibv_reg_mr
/// failed`; the `errno` is the [`source`](std::error::Error::source).
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0.op, self.0.kind)?;
        if let Some(call) = self.0.call.filter(|c| *c != self.0.op) {
            write!(f, ": {call} failed")?;
        }
        if let Some(d) = &self.0.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    /// The `errno` of the failed provider call, as an [`io::Error`].
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source.as_ref().map(|e| e as _)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        let kind = match e.0.kind {
            ErrorKind::InvalidInput => io::ErrorKind::InvalidInput,
            ErrorKind::Unsupported => io::ErrorKind::Unsupported,
            ErrorKind::OutOfMemory => io::ErrorKind::OutOfMemory,
            ErrorKind::NoCompletion | ErrorKind::NoEvent | ErrorKind::WouldBlock => io::ErrorKind::WouldBlock,
            ErrorKind::Provider | ErrorKind::SharedChannel | ErrorKind::NotSharedChannel | ErrorKind::Other => {
                io::ErrorKind::Other
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
    use std::error::Error as _;

    #[test]
    fn results_are_returned_in_registers() {
        // The data path returns these on every post and poll.
        assert_eq!(size_of::<Error>(), size_of::<usize>());
        assert_eq!(size_of::<Result<()>>(), size_of::<usize>());
        assert!(size_of::<Result<usize>>() <= 2 * size_of::<usize>());
    }

    #[test]
    fn errors_are_send_sync_static() {
        fn check<E: std::error::Error + Send + Sync + 'static>() {}
        check::<Error>();
    }

    #[test]
    fn display_names_the_item_the_kind_the_call_and_the_detail() {
        let e = Error::provider("ibv_post_send", 12).in_op("Conn::read").with_detail("post failed");
        assert_eq!(e.to_string(), "Conn::read: provider error: ibv_post_send failed: post failed");
        // Before a public call names itself, the provider call is the operation: not twice.
        assert_eq!(Error::provider("ibv_poll_cq", 5).to_string(), "ibv_poll_cq: provider error");
        let plain = Error::invalid_input("Offer::decode", "short");
        assert_eq!(plain.to_string(), "Offer::decode: invalid argument: short");
        assert_eq!(Error::new(ErrorKind::WouldBlock, "MrLocal::as_mut_slice").kind(), ErrorKind::WouldBlock);
    }

    #[test]
    fn the_errno_is_the_source_an_io_error() {
        let e = Error::provider("ibv_reg_mr", 5).in_op("Peer::alloc_mr");
        assert_eq!(e.errno(), Some(5));
        let source = e.source().expect("an errno is the source");
        let io = source.downcast_ref::<io::Error>().expect("an io::Error");
        assert_eq!(io.raw_os_error(), Some(5));
        assert_eq!(io.kind(), io::Error::from_raw_os_error(5).kind());
        // A kind of librpma's own for an errno keeps the errno too.
        let e = Error::failed(ErrorKind::Unsupported, "ibv_advise_mr", 95);
        assert_eq!(e.source().and_then(|s| s.downcast_ref::<io::Error>()).and_then(io::Error::raw_os_error), Some(95));
        // No errno, no source.
        assert!(Error::invalid_input("Conn::write", "len").source().is_none());
        assert_eq!(Error::invalid_input("Conn::write", "len").errno(), None);
    }

    #[test]
    fn a_clone_is_equal_and_keeps_the_source() {
        let e = Error::failed(ErrorKind::OutOfMemory, "ibv_alloc_pd", 12).in_op("Peer::new").with_detail("d");
        let c = e.clone();
        assert_eq!(c, e);
        assert_eq!(c.errno(), Some(12));
        assert_ne!(Error::provider("x", 5), Error::provider("x", 12));
    }

    #[test]
    fn debug_is_structured() {
        let e = Error::provider("ibv_post_send", 12).in_op("Conn::read").with_detail("post failed");
        assert_eq!(
            format!("{e:?}"),
            r#"Error { kind: Provider, op: "Conn::read", call: "ibv_post_send", errno: 12, detail: "post failed" }"#
        );
        assert_eq!(
            format!("{:?}", Error::new(ErrorKind::InvalidInput, "x")),
            r#"Error { kind: InvalidInput, op: "x" }"#
        );
    }

    #[test]
    fn io_errors_keep_the_kind_and_the_chain() {
        let io: io::Error = Error::invalid_input("Conn::write", "len").into();
        assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
        let io: io::Error = Error::provider("ibv_post_send", 12).in_op("Conn::write").into();
        let inner = io.get_ref().and_then(|e| e.downcast_ref::<Error>()).expect("the rpma error inside");
        assert_eq!(inner.errno(), Some(12));
        assert_eq!(io.kind(), io::ErrorKind::Other);
    }
}
