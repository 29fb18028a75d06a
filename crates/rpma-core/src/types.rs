//! Flags, enums and plain data types of the API (docs/api-mapping.md).

use std::fmt;

bitflags::bitflags! {
    /// `RPMA_MR_USAGE_*`: how a registered memory region may be used
    /// (docs/semantics.md#usages-and-access-rights).
    ///
    /// Stored in byte 20 of the memory-region descriptor. A value with bits outside
    /// [`Usage::all()`] can be built with [`Usage::from_bits_retain`]; registering with it fails
    /// with [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), as in librpma.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Usage: u32 {
        /// `RPMA_MR_USAGE_READ_SRC`: remote peers may RDMA-read the region.
        const READ_SRC = 1 << 0;
        /// `RPMA_MR_USAGE_READ_DST`: local destination of [`read`](crate::Conn::read).
        const READ_DST = 1 << 1;
        /// `RPMA_MR_USAGE_WRITE_SRC`: local source of [`write`](crate::Conn::write).
        const WRITE_SRC = 1 << 2;
        /// `RPMA_MR_USAGE_WRITE_DST`: remote peers may RDMA-write the region.
        const WRITE_DST = 1 << 3;
        /// `RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY`: target of [`FlushType::Visibility`].
        const FLUSH_TYPE_VISIBILITY = 1 << 4;
        /// `RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT`: target of [`FlushType::Persistent`].
        const FLUSH_TYPE_PERSISTENT = 1 << 5;
        /// `RPMA_MR_USAGE_SEND`: source of [`send`](crate::Conn::send).
        const SEND = 1 << 6;
        /// `RPMA_MR_USAGE_RECV`: destination of [`recv`](crate::Conn::recv).
        const RECV = 1 << 7;
    }
}

impl Usage {
    /// The two flush bits (`rpma_mr_remote_get_flush_type` returns `usage & FLUSH_TYPES`).
    pub const FLUSH_TYPES: Self =
        Self::from_bits_retain(Self::FLUSH_TYPE_VISIBILITY.bits() | Self::FLUSH_TYPE_PERSISTENT.bits());

    /// Whether a remote peer may access the region with RDMA Read (read or APM flush).
    #[must_use]
    pub const fn remote_readable(self) -> bool {
        self.intersects(Self::READ_SRC.union(Self::FLUSH_TYPE_VISIBILITY).union(Self::FLUSH_TYPE_PERSISTENT))
    }

    /// Whether a remote peer may access the region with RDMA Write (write, atomic write).
    #[must_use]
    pub const fn remote_writable(self) -> bool {
        self.contains(Self::WRITE_DST)
    }

    /// Whether the local device may write the region (read destination, receive buffer).
    #[must_use]
    pub const fn local_writable(self) -> bool {
        self.intersects(Self::READ_DST.union(Self::WRITE_DST).union(Self::RECV).union(Self::WRITE_SRC))
    }
}

bitflags::bitflags! {
    /// `RPMA_F_COMPLETION_*`: when an operation produces a completion.
    ///
    /// librpma's rule is kept: `0` is invalid; otherwise only [`CompletionFlags::ALWAYS`]'s
    /// second bit matters (a work request is signaled iff `flags & 2`), so any other non-zero
    /// value means "on error only".
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CompletionFlags: u32 {
        /// `RPMA_F_COMPLETION_ON_ERROR`: a completion appears only if the operation fails.
        const ON_ERROR = 1 << 0;
        /// `RPMA_F_COMPLETION_ALWAYS`: a completion always appears.
        const ALWAYS = (1 << 1) | (1 << 0);
    }
}

impl CompletionFlags {
    /// Whether the work request is posted signaled (`IBV_SEND_SIGNALED`).
    #[must_use]
    pub const fn signaled(self) -> bool {
        self.bits() & 2 != 0
    }
}

/// `enum rpma_flush_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushType {
    /// `RPMA_FLUSH_TYPE_PERSISTENT` (0): data reaches the persistence domain.
    Persistent = 0,
    /// `RPMA_FLUSH_TYPE_VISIBILITY` (1): data becomes globally visible.
    Visibility = 1,
}

impl FlushType {
    /// The usage bit a remote region needs to be the target of this flush type.
    #[must_use]
    pub const fn required_usage(self) -> Usage {
        match self {
            Self::Persistent => Usage::FLUSH_TYPE_PERSISTENT,
            Self::Visibility => Usage::FLUSH_TYPE_VISIBILITY,
        }
    }
}

/// `enum rpma_util_ibv_context_type`: how [`Device::lookup`](crate::Device::lookup) finds a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContextType {
    /// `RPMA_UTIL_IBV_CONTEXT_LOCAL`: the device owning a local address (bind).
    Local = 0,
    /// `RPMA_UTIL_IBV_CONTEXT_REMOTE`: the device routing to a remote address (resolve).
    Remote = 1,
}

/// `enum rpma_conn_event`: connection events returned by
/// [`Conn::next_event`](crate::Conn::next_event).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnEvent {
    /// `RPMA_CONN_UNDEFINED` (-1): never returned; an initial value for callers.
    Undefined = -1,
    /// `RPMA_CONN_ESTABLISHED` (0).
    Established = 0,
    /// `RPMA_CONN_CLOSED` (1).
    Closed = 1,
    /// `RPMA_CONN_LOST` (2).
    Lost = 2,
    /// `RPMA_CONN_REJECTED` (3).
    Rejected = 3,
    /// `RPMA_CONN_UNREACHABLE` (4).
    Unreachable = 4,
}

impl ConnEvent {
    /// `rpma_utils_conn_event_2str()`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Undefined => "Undefined connection event",
            Self::Established => "Connection established",
            Self::Closed => "Connection closed",
            Self::Lost => "Connection lost",
            Self::Rejected => "Connection rejected",
            Self::Unreachable => "Connection unreachable",
        }
    }
}

impl fmt::Display for ConnEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ConnEvent {
    /// The string librpma's `rpma_utils_conn_event_2str()` gives for a raw
    /// `enum rpma_conn_event` value (`"Unsupported connection event"` for any other integer).
    #[doc(alias = "rpma_utils_conn_event_2str")]
    #[must_use]
    pub const fn describe_code(event: i32) -> &'static str {
        match event {
            -1 => ConnEvent::Undefined.as_str(),
            0 => ConnEvent::Established.as_str(),
            1 => ConnEvent::Closed.as_str(),
            2 => ConnEvent::Lost.as_str(),
            3 => ConnEvent::Rejected.as_str(),
            4 => ConnEvent::Unreachable.as_str(),
            _ => "Unsupported connection event",
        }
    }
}

/// `enum ibv_advise_mr_advice` for [`MrLocal::advise`](crate::MrLocal::advise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH` (0).
    Prefetch,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE` (1).
    PrefetchWrite,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT` (2).
    PrefetchNoFault,
}

impl Advice {
    /// `IBV_ADVISE_MR_FLAG_FLUSH`: a flag of [`MrLocal::advise`](crate::MrLocal::advise).
    pub const FLAG_FLUSH: u32 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_values() {
        assert_eq!(Usage::all().bits(), 0xFF);
        assert_eq!(Usage::FLUSH_TYPES.bits(), 0x30);
        assert_eq!(CompletionFlags::ALWAYS.bits(), 3);
        assert!(CompletionFlags::ALWAYS.signaled());
        assert!(!CompletionFlags::ON_ERROR.signaled());
        assert!(!CompletionFlags::from_bits_retain(4).signaled());
    }

    #[test]
    fn conn_event_strings() {
        assert_eq!(ConnEvent::describe_code(-1), "Undefined connection event");
        assert_eq!(ConnEvent::describe_code(0), "Connection established");
        assert_eq!(ConnEvent::describe_code(1), "Connection closed");
        assert_eq!(ConnEvent::describe_code(2), "Connection lost");
        assert_eq!(ConnEvent::describe_code(3), "Connection rejected");
        assert_eq!(ConnEvent::describe_code(4), "Connection unreachable");
        assert_eq!(ConnEvent::describe_code(5), "Unsupported connection event");
        assert_eq!(ConnEvent::Lost.to_string(), "Connection lost");
    }
}
