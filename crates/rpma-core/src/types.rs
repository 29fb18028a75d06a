//! Flags, enums and plain data types of the API (docs/api-mapping.md).

use std::fmt;

bitflags::bitflags! {
    /// `RPMA_MR_USAGE_*`: how a registered memory region may be used
    /// (docs/semantics.md#usages-and-access-rights).
    ///
    /// Stored in byte 20 of the memory-region descriptor. A value with bits outside
    /// [`Usage::all()`] can be built with [`Usage::from_bits_retain`]; registering with it fails
    /// with [`ErrorKind::Inval`](crate::ErrorKind::Inval), as in librpma.
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

/// `enum ibv_wc_status`: the status of a completion (values as in libibverbs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS` (0).
    Success,
    /// `IBV_WC_LOC_LEN_ERR` (1): a receive buffer was too small for the message.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR` (2).
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR` (4): a local buffer was outside its registration or lacked access.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR` (5): flushed because the QP went to the error state.
    WrFlushErr,
    /// `IBV_WC_REM_INV_REQ_ERR` (9): the responder found the request invalid (e.g. too long).
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR` (10): rkey, bounds or access rights violated at the responder.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR` (11).
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR` (12): the peer did not answer (link lost).
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR` (13).
    RnrRetryExcErr,
    /// `IBV_WC_GENERAL_ERR` (21).
    GeneralErr,
    /// Any other raw status value.
    Other(u32),
}

impl WcStatus {
    /// Whether the operation succeeded (`IBV_WC_SUCCESS`).
    #[must_use]
    pub const fn is_success(self) -> bool {
        matches!(self, Self::Success)
    }

    /// The raw `enum ibv_wc_status` value.
    #[must_use]
    pub const fn raw(self) -> u32 {
        match self {
            Self::Success => 0,
            Self::LocLenErr => 1,
            Self::LocQpOpErr => 2,
            Self::LocProtErr => 4,
            Self::WrFlushErr => 5,
            Self::RemInvReqErr => 9,
            Self::RemAccessErr => 10,
            Self::RemOpErr => 11,
            Self::RetryExcErr => 12,
            Self::RnrRetryExcErr => 13,
            Self::GeneralErr => 21,
            Self::Other(v) => v,
        }
    }

    /// The status of a raw `enum ibv_wc_status` value.
    #[must_use]
    pub const fn from_raw(v: u32) -> Self {
        match v {
            0 => Self::Success,
            1 => Self::LocLenErr,
            2 => Self::LocQpOpErr,
            4 => Self::LocProtErr,
            5 => Self::WrFlushErr,
            9 => Self::RemInvReqErr,
            10 => Self::RemAccessErr,
            11 => Self::RemOpErr,
            12 => Self::RetryExcErr,
            13 => Self::RnrRetryExcErr,
            21 => Self::GeneralErr,
            v => Self::Other(v),
        }
    }
}

/// `enum ibv_wc_opcode`: what produced a completion (docs/semantics.md#completion-opcodes).
///
/// Emulated and native flush / atomic write report different opcodes (docs/decisions.md #23):
/// callers must not switch on the opcode to tell a flush from a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// `IBV_WC_SEND` (0): send, send with imm.
    Send,
    /// `IBV_WC_RDMA_WRITE` (1): write, write with imm, emulated atomic write.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ` (2): read, APM flush.
    RdmaRead,
    /// `IBV_WC_FLUSH` (8): native flush.
    Flush,
    /// `IBV_WC_ATOMIC_WRITE` (9): native atomic write.
    AtomicWrite,
    /// `IBV_WC_RECV` (128): a received message.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM` (129): a write with immediate data consumed a receive.
    RecvRdmaWithImm,
    /// Any other raw opcode.
    Other(u32),
}

impl WcOpcode {
    /// The raw `enum ibv_wc_opcode` value.
    #[must_use]
    pub const fn raw(self) -> u32 {
        match self {
            Self::Send => 0,
            Self::RdmaWrite => 1,
            Self::RdmaRead => 2,
            Self::Flush => 8,
            Self::AtomicWrite => 9,
            Self::Recv => 128,
            Self::RecvRdmaWithImm => 129,
            Self::Other(v) => v,
        }
    }

    /// The opcode of a raw `enum ibv_wc_opcode` value.
    #[must_use]
    pub const fn from_raw(v: u32) -> Self {
        match v {
            0 => Self::Send,
            1 => Self::RdmaWrite,
            2 => Self::RdmaRead,
            8 => Self::Flush,
            9 => Self::AtomicWrite,
            128 => Self::Recv,
            129 => Self::RecvRdmaWithImm,
            v => Self::Other(v),
        }
    }

    /// Whether this is a receive-side completion.
    #[must_use]
    pub const fn is_recv(self) -> bool {
        matches!(self, Self::Recv | Self::RecvRdmaWithImm)
    }
}

/// A work completion: the fields of `struct ibv_wc` librpma users read.
///
/// If `status` is not [`WcStatus::Success`], only `wr_id`, `status`, `qp_num` and `vendor_err`
/// are meaningful (as in libibverbs). Plain data: `Copy`, `Send + Sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The operation context given when the operation was posted (librpma's `op_context`).
    pub wr_id: u64,
    /// Completion status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Provider-specific error detail.
    pub vendor_err: u32,
    /// Bytes received (receive completions).
    pub byte_len: u32,
    /// Immediate data in host byte order, if the message carried some (`IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
}

impl Wc {
    /// A zeroed completion, to fill arrays handed to [`Cq::poll`](crate::Cq::poll).
    pub const EMPTY: Self = Self {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
    };
}

impl Default for Wc {
    fn default() -> Self {
        Self::EMPTY
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

/// `IBV_ADVISE_MR_FLAG_FLUSH`: a flag of [`MrLocal::advise`](crate::MrLocal::advise).
pub const ADVISE_FLAG_FLUSH: u32 = 1;

/// `RPMA_DEFAULT_TIMEOUT_MS`: the default connection-establishment timeout, 1000 ms.
#[doc(alias = "RPMA_DEFAULT_TIMEOUT_MS")]
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1000);
/// `RPMA_ATOMIC_WRITE_ALIGNMENT`: alignment and size of [`Conn::atomic_write`](crate::Conn::atomic_write).
pub const ATOMIC_WRITE_ALIGNMENT: usize = 8;

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

    #[test]
    fn wc_raw_round_trip() {
        for v in 0..300 {
            assert_eq!(WcStatus::from_raw(v).raw(), v);
            assert_eq!(WcOpcode::from_raw(v).raw(), v);
        }
    }
}
