//! What the local side of an operation may be: nothing, one registered piece, several
//! (scatter-gather), or inline bytes; and its validation into the backend's [`Local`].

use std::fmt;
use std::sync::Arc;

use crate::conn::{Conn, OpLimits};
use crate::error::{Error, Result};
use crate::peer::PeerInner;
use crate::transport::{Local, RemoteBuf, Transport};
use crate::validate::{self, RemoteAccess};

use super::slice::{LocalSlice, RemoteAt};

/// The local side of an operation, as given (unchecked).
pub(super) enum Src<'a, T: Transport> {
    /// No bytes (the zero-byte forms).
    None,
    /// One piece.
    One(LocalSlice<'a, T>),
    /// Several pieces, in order.
    Sg(&'a [LocalSlice<'a, T>]),
    /// Bytes copied at post time.
    Inline(&'a [u8]),
}

impl<T: Transport> Clone for Src<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Transport> Copy for Src<'_, T> {}

impl<T: Transport> fmt::Debug for Src<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::One(s) => f.debug_tuple("One").field(s).finish(),
            Self::Sg(s) => f.debug_tuple("Sg").field(s).finish(),
            Self::Inline(b) => f.debug_tuple("Inline").field(&b.len()).finish(),
        }
    }
}

/// `Debug` of an operation kind generic over its transport (which need not be `Debug`), field
/// by field.
macro_rules! debug_by_field {
    ($ty:ident { $($field:ident),* }) => {
        impl<T: Transport> std::fmt::Debug for $ty<'_, T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))$(.field(stringify!($field), &self.$field))*.finish()
            }
        }
    };
}
pub(super) use debug_by_field;

/// Where a validated local side goes: `device_writes` (read destinations, receives), and how
/// many pieces and inline bytes the connection allows.
#[derive(Clone, Copy)]
pub(super) struct Rules<'l> {
    pub(super) device_writes: bool,
    /// Whether the pieces are a read's (bounded by `max_sge_rd`, not `max_sge`).
    pub(super) read: bool,
    /// Read only on the paths that need them (several pieces, inline data): the common case
    /// of one registered piece loads nothing from here.
    pub(super) limits: &'l OpLimits,
}

impl Rules<'_> {
    fn max_pieces(&self) -> u32 {
        if self.read {
            self.limits.max_sge_rd
        } else {
            self.limits.max_sge
        }
    }
}

impl<'a, T: Transport> Src<'a, T> {
    /// Validates the local side for `op` and returns it with its length in bytes.
    ///
    /// One piece keeps librpma's rules (a zero-length range is a zero-byte transfer); several
    /// pieces must be 1 to `max_pieces` non-empty ranges; inline bytes 1 to `max_inline`.
    #[inline(always)]
    pub(super) fn validate(
        self,
        op: &'static str,
        peer: &Arc<PeerInner<T>>,
        rules: Rules<'_>,
    ) -> Result<(Local<'a, T>, usize)> {
        match self {
            Self::None => Ok((Local::None, 0)),
            Self::One(s) => {
                let b = s.buf(op, peer, rules.device_writes)?;
                Ok((Local::One(b), b.len))
            }
            Self::Sg(pieces) => {
                if pieces.is_empty() {
                    return Err(Error::invalid_input(op, "no scatter-gather pieces"));
                }
                if pieces.len() > rules.max_pieces() as usize {
                    return Err(Error::invalid_input(op, "more scatter-gather pieces than the connection's max_sge")
                        .with_detail(&format!(
                            "{} pieces, max_sge {} (ConnCfg::with_max_sge, bounded by the device)",
                            pieces.len(),
                            rules.max_pieces()
                        )));
                }
                let mut total = 0usize;
                for p in pieces {
                    let b = p.buf(op, peer, rules.device_writes)?;
                    if b.len == 0 {
                        return Err(Error::invalid_input(op, "a scatter-gather piece is empty"));
                    }
                    total =
                        total.checked_add(b.len).ok_or_else(|| Error::invalid_input(op, "total length overflows"))?;
                }
                Ok((Local::Sg(pieces), total))
            }
            Self::Inline(bytes) => {
                if bytes.is_empty() {
                    return Err(Error::invalid_input(op, "inline data is empty"));
                }
                if bytes.len() > rules.limits.max_inline as usize {
                    return Err(Error::invalid_input(op, "inline data exceeds the connection's max_inline")
                        .with_detail(&format!(
                            "{} bytes, max_inline {} (ConnCfg::with_max_inline, bounded by the device)",
                            bytes.len(),
                            rules.limits.max_inline
                        )));
                }
                Ok((Local::Inline(bytes), bytes.len()))
            }
        }
    }
}

/// Validates both sides of a read (`read`) or a write by `op` on `conn`: the local side, and
/// the remote one if there is one (not in the zero-byte forms) for as many bytes. Returns the
/// local side, the remote one and the length.
#[inline(always)]
pub(super) fn one_sided<'a, T: Transport>(
    op: &'static str,
    conn: &Conn<T>,
    local: Src<'a, T>,
    remote: Option<RemoteAt<'_>>,
    read: bool,
) -> Result<(Local<'a, T>, Option<RemoteBuf>, usize)> {
    let rules = Rules { device_writes: read, read, limits: conn.limits() };
    let (local, len) = local.validate(op, &conn.peer().inner, rules)?;
    let remote = match remote {
        None => None,
        Some(at) => {
            validate::msg_len(op, conn.limits().max_msg, len)?;
            let access = if read { RemoteAccess::Read } else { RemoteAccess::Write };
            Some(validate::remote_buf(op, at.mr.descriptor(), at.offset, len, access)?)
        }
    };
    Ok((local, remote, len))
}
