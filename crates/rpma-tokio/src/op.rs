//! What an awaited operation does: an [`Op`] names the operation and its memory, as rpma-core's
//! builders do (`conn.write(dst, src)` ↔ `Op::write(dst, src)`); [`AsyncConn::post`] posts it
//! with a context and flags of its own and awaits its completion.
//!
//! [`AsyncConn::post`]: crate::AsyncConn::post

use std::fmt;

use rpma_core::{CompletionFlags, Conn, Error, FlushType, LocalSlice, RemoteAt, RemoteSlice, Result, Transport};

/// The local side of a write, send, read or receive.
enum Local<'a, T: Transport> {
    /// One registered piece.
    One(LocalSlice<'a, T>),
    /// Several pieces, in order (scatter-gather).
    Sg(&'a [LocalSlice<'a, T>]),
    /// Plain bytes copied into the work request when it is posted.
    Inline(&'a [u8]),
    /// No bytes.
    Empty,
}

impl<T: Transport> Clone for Local<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for Local<'_, T> {}

enum Kind<'a, T: Transport> {
    Read { dst: Local<'a, T>, src: Option<RemoteAt<'a>> },
    Write { dst: Option<RemoteAt<'a>>, src: Local<'a, T> },
    AtomicWrite { dst: RemoteAt<'a>, value: [u8; 8] },
    Flush { dst: RemoteSlice<'a>, flush_type: FlushType },
    Send { src: Local<'a, T> },
    Recv { dst: Local<'a, T> },
}

/// An operation to post through an [`AsyncConn`](crate::AsyncConn) and await.
///
/// Made without checks, like rpma-core's builders; [`AsyncConn::post`](crate::AsyncConn::post)
/// validates every argument when it posts (the same rules and errors as
/// [`Post::post`](rpma_core::Post::post) and [`Recv::post`](rpma_core::Recv::post)). It borrows
/// its regions for as long as it lives, and the future posting it for as long as that lives:
/// a region cannot be changed through `&mut` or deregistered while its operation is awaited.
///
/// `conn.post(Op::write(remote.at(0), src.slice(0..8))).await?`,
/// `conn.post(Op::send_inline(b"hello").imm(7)).await?` (the crate docs have a whole example).
pub struct Op<'a, T: Transport> {
    kind: Kind<'a, T>,
    imm: Option<u32>,
}

impl<T: Transport> fmt::Debug for Op<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op").field("op", &self.name()).field("imm", &self.imm).finish_non_exhaustive()
    }
}

impl<'a, T: Transport> Op<'a, T> {
    const fn new(kind: Kind<'a, T>) -> Self {
        Self { kind, imm: None }
    }

    /// `rpma_read`: RDMA Read of `dst.len()` bytes at `src` into `dst` ([`Conn::read`]).
    pub const fn read(dst: LocalSlice<'a, T>, src: RemoteAt<'a>) -> Self {
        Self::new(Kind::Read { dst: Local::One(dst), src: Some(src) })
    }

    /// A scattering read ([`Conn::read_sg`]).
    pub const fn read_sg(dst: &'a [LocalSlice<'a, T>], src: RemoteAt<'a>) -> Self {
        Self::new(Kind::Read { dst: Local::Sg(dst), src: Some(src) })
    }

    /// The zero-byte read ([`Conn::read_empty`]): completes after the earlier writes are
    /// placed.
    pub const fn read_empty() -> Self {
        Self::new(Kind::Read { dst: Local::Empty, src: None })
    }

    /// `rpma_write`: RDMA Write of `src` at `dst` ([`Conn::write`]).
    pub const fn write(dst: RemoteAt<'a>, src: LocalSlice<'a, T>) -> Self {
        Self::new(Kind::Write { dst: Some(dst), src: Local::One(src) })
    }

    /// A gathering write ([`Conn::write_sg`]).
    pub const fn write_sg(dst: RemoteAt<'a>, src: &'a [LocalSlice<'a, T>]) -> Self {
        Self::new(Kind::Write { dst: Some(dst), src: Local::Sg(src) })
    }

    /// An inline write of plain bytes, copied when the operation is posted
    /// ([`Conn::write_inline`]; at most the connection's `max_inline` bytes).
    pub const fn write_inline(dst: RemoteAt<'a>, src: &'a [u8]) -> Self {
        Self::new(Kind::Write { dst: Some(dst), src: Local::Inline(src) })
    }

    /// The zero-byte write ([`Conn::write_empty`]), e.g. to carry an immediate value alone.
    pub const fn write_empty() -> Self {
        Self::new(Kind::Write { dst: None, src: Local::Empty })
    }

    /// `rpma_atomic_write`: the 8 bytes `value` written atomically at `dst`
    /// ([`Conn::atomic_write`]).
    pub const fn atomic_write(dst: RemoteAt<'a>, value: [u8; 8]) -> Self {
        Self::new(Kind::AtomicWrite { dst, value })
    }

    /// `rpma_flush`: makes the data written to `dst` visible or persistent ([`Conn::flush`]).
    pub const fn flush(dst: RemoteSlice<'a>, flush_type: FlushType) -> Self {
        Self::new(Kind::Flush { dst, flush_type })
    }

    /// `rpma_send`: sends `src` ([`Conn::send`]); the peer must have a receive posted.
    pub const fn send(src: LocalSlice<'a, T>) -> Self {
        Self::new(Kind::Send { src: Local::One(src) })
    }

    /// A gathering send ([`Conn::send_sg`]).
    pub const fn send_sg(src: &'a [LocalSlice<'a, T>]) -> Self {
        Self::new(Kind::Send { src: Local::Sg(src) })
    }

    /// An inline send of plain bytes, copied when the operation is posted
    /// ([`Conn::send_inline`]).
    pub const fn send_inline(src: &'a [u8]) -> Self {
        Self::new(Kind::Send { src: Local::Inline(src) })
    }

    /// An empty message ([`Conn::send_empty`]).
    pub const fn send_empty() -> Self {
        Self::new(Kind::Send { src: Local::Empty })
    }

    /// `rpma_recv`: a receive buffer on the connection's receive queue ([`Conn::recv`]). Its
    /// completion is the message's: [`Wc::byte_len`](rpma_core::Wc::byte_len) bytes landed in
    /// `dst`.
    pub const fn recv(dst: LocalSlice<'a, T>) -> Self {
        Self::new(Kind::Recv { dst: Local::One(dst) })
    }

    /// A scattering receive ([`Conn::recv_sg`]).
    pub const fn recv_sg(dst: &'a [LocalSlice<'a, T>]) -> Self {
        Self::new(Kind::Recv { dst: Local::Sg(dst) })
    }

    /// A zero-length receive buffer ([`Conn::recv_empty`]).
    pub const fn recv_empty() -> Self {
        Self::new(Kind::Recv { dst: Local::Empty })
    }

    /// Carries the immediate value `imm` (host order): a write becomes `rpma_write_with_imm`, a
    /// send `rpma_send_with_imm`. Posting any other operation with one is
    /// [`Inval`](rpma_core::ErrorKind::Inval).
    #[must_use]
    pub const fn imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }

    /// Whether the operation takes a send-queue slot (all but a receive).
    pub(crate) const fn uses_send_queue(&self) -> bool {
        !matches!(self.kind, Kind::Recv { .. })
    }

    /// The name of the librpma function the operation is.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match (&self.kind, self.imm.is_some()) {
            (Kind::Read { .. }, _) => "rpma_read",
            (Kind::Write { .. }, false) => "rpma_write",
            (Kind::Write { .. }, true) => "rpma_write_with_imm",
            (Kind::AtomicWrite { .. }, _) => "rpma_atomic_write",
            (Kind::Flush { .. }, _) => "rpma_flush",
            (Kind::Send { .. }, false) => "rpma_send",
            (Kind::Send { .. }, true) => "rpma_send_with_imm",
            (Kind::Recv { .. }, _) => "rpma_recv",
        }
    }

    /// Validates and posts the operation on `conn` with `flags` and `context` (receives have
    /// no flags: a receive always completes).
    ///
    /// # Errors
    /// As [`Post::post`](rpma_core::Post::post) and [`Recv::post`](rpma_core::Recv::post);
    /// [`Inval`](rpma_core::ErrorKind::Inval) for an immediate value on an operation other
    /// than a write or a send.
    #[inline]
    pub(crate) fn post_on(self, conn: &Conn<T>, flags: CompletionFlags, context: u64) -> Result<()> {
        let imm = self.imm;
        macro_rules! post {
            ($p:expr) => {{
                let p = $p.flags(flags).context(context);
                match imm {
                    Some(v) => p.imm(v).post(),
                    None => p.post(),
                }
            }};
        }
        let no_imm = |name: &'static str| -> Result<()> {
            match imm {
                Some(_) => Err(Error::inval(name, "an immediate value applies to writes and sends only")),
                None => Ok(()),
            }
        };
        match self.kind {
            Kind::Read { dst, src } => {
                no_imm("rpma_read")?;
                let p = match (dst, src) {
                    (Local::One(d), Some(s)) => conn.read(d, s),
                    (Local::Sg(d), Some(s)) => conn.read_sg(d, s),
                    _ => conn.read_empty(),
                };
                p.flags(flags).context(context).post()
            }
            Kind::Write { dst, src } => match (dst, src) {
                (Some(d), Local::One(s)) => post!(conn.write(d, s)),
                (Some(d), Local::Sg(s)) => post!(conn.write_sg(d, s)),
                (Some(d), Local::Inline(s)) => post!(conn.write_inline(d, s)),
                _ => post!(conn.write_empty()),
            },
            Kind::AtomicWrite { dst, value } => {
                no_imm("rpma_atomic_write")?;
                conn.atomic_write(dst, value).flags(flags).context(context).post()
            }
            Kind::Flush { dst, flush_type } => {
                no_imm("rpma_flush")?;
                conn.flush(dst, flush_type).flags(flags).context(context).post()
            }
            Kind::Send { src } => match src {
                Local::One(s) => post!(conn.send(s)),
                Local::Sg(s) => post!(conn.send_sg(s)),
                Local::Inline(s) => post!(conn.send_inline(s)),
                Local::Empty => post!(conn.send_empty()),
            },
            Kind::Recv { dst } => {
                no_imm("rpma_recv")?;
                match dst {
                    Local::One(d) => conn.recv(d),
                    Local::Sg(d) => conn.recv_sg(d),
                    Local::Inline(_) | Local::Empty => conn.recv_empty(),
                }
                .context(context)
                .post()
            }
        }
    }
}
