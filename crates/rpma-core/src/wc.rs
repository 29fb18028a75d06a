//! Work completions: what a completion queue reports.

use std::fmt;

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

/// What the status means, then its libibverbs name, e.g. `remote access error
/// (IBV_WC_REM_ACCESS_ERR)` (the words of `ibv_wc_status_str`); a status without a variant of
/// its own is `status 17 (WcStatus::Other)`.
impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (words, name) = match self {
            Self::Success => ("success", "IBV_WC_SUCCESS"),
            Self::LocLenErr => ("local length error", "IBV_WC_LOC_LEN_ERR"),
            Self::LocQpOpErr => ("local QP operation error", "IBV_WC_LOC_QP_OP_ERR"),
            Self::LocProtErr => ("local protection error", "IBV_WC_LOC_PROT_ERR"),
            Self::WrFlushErr => ("work request flushed", "IBV_WC_WR_FLUSH_ERR"),
            Self::RemInvReqErr => ("remote invalid request error", "IBV_WC_REM_INV_REQ_ERR"),
            Self::RemAccessErr => ("remote access error", "IBV_WC_REM_ACCESS_ERR"),
            Self::RemOpErr => ("remote operation error", "IBV_WC_REM_OP_ERR"),
            Self::RetryExcErr => ("transport retry counter exceeded", "IBV_WC_RETRY_EXC_ERR"),
            Self::RnrRetryExcErr => ("RNR retry counter exceeded", "IBV_WC_RNR_RETRY_EXC_ERR"),
            Self::GeneralErr => ("general error", "IBV_WC_GENERAL_ERR"),
            Self::Other(v) => return write!(f, "status {v} (WcStatus::Other)"),
        };
        write!(f, "{words} ({name})")
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

/// A work completion, laid out as libibverbs' `struct ibv_wc` (`#[repr(C)]`, 48 bytes), so a
/// device's completions are written straight into the caller's array (no copy, no translation
/// of fields nobody reads); the accessors decode on demand.
///
/// If [`status`](Wc::status) is not [`WcStatus::Success`], only `wr_id`, `status`, `qp_num` and
/// `vendor_err` are meaningful (as in libibverbs). Plain data: `Copy`, `Send + Sync`; every bit
/// pattern is a valid `Wc` (all fields are integers), which is what lets a backend hand the
/// array to the device. Equality compares every field, the reserved ones included.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Wc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    /// Network byte order, valid with `WC_WITH_IMM` in `wc_flags`.
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

/// `IBV_WC_WITH_IMM` in `ibv_wc.wc_flags`.
const WC_WITH_IMM: u32 = 1 << 1;

/// Byte offsets of the fields of [`Wc`] in declaration order (`wr_id`, `status`, `opcode`,
/// `vendor_err`, `byte_len`, `imm_data`, `qp_num`, `src_qp`, `wc_flags`, `pkey_index`, `slid`,
/// `sl`, `dlid_path_bits`), and its size: a backend that lets a device write completions into
/// `&mut [Wc]` asserts at compile time that they equal its `struct ibv_wc`'s.
#[doc(hidden)]
pub const WC_LAYOUT: ([usize; 13], usize) = (
    [
        std::mem::offset_of!(Wc, wr_id),
        std::mem::offset_of!(Wc, status),
        std::mem::offset_of!(Wc, opcode),
        std::mem::offset_of!(Wc, vendor_err),
        std::mem::offset_of!(Wc, byte_len),
        std::mem::offset_of!(Wc, imm_data),
        std::mem::offset_of!(Wc, qp_num),
        std::mem::offset_of!(Wc, src_qp),
        std::mem::offset_of!(Wc, wc_flags),
        std::mem::offset_of!(Wc, pkey_index),
        std::mem::offset_of!(Wc, slid),
        std::mem::offset_of!(Wc, sl),
        std::mem::offset_of!(Wc, dlid_path_bits),
    ],
    size_of::<Wc>(),
);

impl Wc {
    /// A zeroed completion (`wr_id` 0, [`WcStatus::Success`], [`WcOpcode::Send`]), to fill
    /// arrays handed to [`Cq::poll`](crate::Cq::poll).
    pub const EMPTY: Self = Self::new(0, WcStatus::Success, WcOpcode::Send);

    /// A completion of the operation with context `wr_id` (what backends report; users read
    /// completions from [`Cq::poll`](crate::Cq::poll)). The other fields are zero.
    #[must_use]
    pub const fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode) -> Self {
        Self {
            wr_id,
            status: status.raw(),
            opcode: opcode.raw(),
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }

    /// With the number of bytes received.
    #[must_use]
    pub const fn with_byte_len(mut self, byte_len: u32) -> Self {
        self.byte_len = byte_len;
        self
    }

    /// With (or without) immediate data, given in host byte order.
    #[must_use]
    pub const fn with_imm(mut self, imm: Option<u32>) -> Self {
        match imm {
            Some(v) => {
                self.imm_data = v.to_be();
                self.wc_flags |= WC_WITH_IMM;
            }
            None => {
                self.imm_data = 0;
                self.wc_flags &= !WC_WITH_IMM;
            }
        }
        self
    }

    /// With the local QP number.
    #[must_use]
    pub const fn with_qp_num(mut self, qp_num: u32) -> Self {
        self.qp_num = qp_num;
        self
    }

    /// With a provider-specific error detail.
    #[must_use]
    pub const fn with_vendor_err(mut self, vendor_err: u32) -> Self {
        self.vendor_err = vendor_err;
        self
    }

    /// With another operation context (backends: the user's context in place of their own
    /// work request id).
    #[must_use]
    pub const fn with_wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = wr_id;
        self
    }

    /// With another opcode.
    #[must_use]
    pub const fn with_opcode(mut self, opcode: WcOpcode) -> Self {
        self.opcode = opcode.raw();
        self
    }

    /// Replaces the operation context in place (backends: the user's context in place of their
    /// own work request id, in the array the device wrote).
    #[doc(hidden)]
    #[inline(always)]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr_id = wr_id;
    }

    /// Replaces the opcode in place (backends).
    #[doc(hidden)]
    #[inline(always)]
    pub fn set_opcode(&mut self, opcode: WcOpcode) {
        self.opcode = opcode.raw();
    }

    /// The operation context given when the operation was posted (librpma's `op_context`).
    #[must_use]
    #[inline]
    pub const fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The completion status.
    #[must_use]
    #[inline]
    pub const fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.status)
    }

    /// The status as the provider wrote it (`enum ibv_wc_status`; 0 is success): what
    /// [`Wc::status`] decodes.
    #[must_use]
    #[inline]
    pub const fn status_raw(&self) -> u32 {
        self.status
    }

    /// Whether the operation succeeded (cheaper than comparing [`Wc::status`]).
    #[must_use]
    #[inline]
    pub const fn is_success(&self) -> bool {
        self.status == 0
    }

    /// What completed (meaningful only on success).
    #[must_use]
    #[inline]
    pub const fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.opcode)
    }

    /// The provider-specific error detail.
    #[must_use]
    #[inline]
    pub const fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    /// Bytes received (receive completions).
    #[must_use]
    #[inline]
    pub const fn byte_len(&self) -> u32 {
        self.byte_len
    }

    /// Immediate data in host byte order, if the message carried some (`IBV_WC_WITH_IMM`).
    #[must_use]
    #[inline]
    pub const fn imm_data(&self) -> Option<u32> {
        if self.wc_flags & WC_WITH_IMM != 0 {
            Some(u32::from_be(self.imm_data))
        } else {
            None
        }
    }

    /// The local QP number.
    #[must_use]
    #[inline]
    pub const fn qp_num(&self) -> u32 {
        self.qp_num
    }
}

impl Default for Wc {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Debug for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wc")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("vendor_err", &self.vendor_err)
            .field("byte_len", &self.byte_len)
            .field("imm_data", &self.imm_data())
            .field("qp_num", &self.qp_num)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wc_status_display_says_what_and_names_it() {
        assert_eq!(WcStatus::RemAccessErr.to_string(), "remote access error (IBV_WC_REM_ACCESS_ERR)");
        assert_eq!(WcStatus::Success.to_string(), "success (IBV_WC_SUCCESS)");
        assert_eq!(WcStatus::WrFlushErr.to_string(), "work request flushed (IBV_WC_WR_FLUSH_ERR)");
        assert_eq!(WcStatus::Other(17).to_string(), "status 17 (WcStatus::Other)");
        // Every named status: words, then its libibverbs name.
        for v in 0..32 {
            let s = WcStatus::from_raw(v);
            let t = s.to_string();
            match s {
                WcStatus::Other(_) => assert_eq!(t, format!("status {v} (WcStatus::Other)")),
                _ => assert!(t.ends_with("_ERR)") || t.ends_with("IBV_WC_SUCCESS)"), "{t}"),
            }
        }
    }

    #[test]
    fn wc_raw_round_trip() {
        for v in 0..300 {
            assert_eq!(WcStatus::from_raw(v).raw(), v);
            assert_eq!(WcOpcode::from_raw(v).raw(), v);
        }
    }

    #[test]
    fn wc_layout_is_ibv_wc() {
        assert_eq!(WC_LAYOUT, ([0, 8, 12, 16, 20, 24, 28, 32, 36, 40, 42, 44, 45], 48));
        assert_eq!(align_of::<Wc>(), 8);
    }

    #[test]
    fn wc_accessors_decode() {
        let wc = Wc::new(7, WcStatus::RemAccessErr, WcOpcode::RecvRdmaWithImm)
            .with_byte_len(9)
            .with_imm(Some(0x0102_0304))
            .with_qp_num(3)
            .with_vendor_err(4);
        assert_eq!(
            (wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len(), wc.imm_data(), wc.qp_num(), wc.vendor_err()),
            (7, WcStatus::RemAccessErr, WcOpcode::RecvRdmaWithImm, 9, Some(0x0102_0304), 3, 4)
        );
        assert_eq!(wc.imm_data, 0x0102_0304u32.to_be(), "stored in network byte order, as ibv_wc");
        assert!(!wc.is_success());
        assert_eq!(wc.with_imm(None).imm_data(), None);
        assert_eq!(Wc::new(1, WcStatus::Other(99), WcOpcode::Other(77)).status(), WcStatus::Other(99));
        assert!(format!("{wc:?}").contains("RemAccessErr"));
    }
}
