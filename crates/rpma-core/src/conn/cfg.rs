//! The connection configuration, with librpma's defaults (docs/semantics.md#defaults).

use std::fmt;
use std::time::Duration;

use crate::transport::Transport;

use super::srq::Srq;

/// A connection configuration (`struct rpma_conn_cfg`): a plain builder.
///
/// ```
/// # use rpma::ConnCfg;
/// # fn f<T: rpma::Transport>() {
/// let cfg = ConnCfg::<T>::new().with_sq_size(64).with_cq_size(64).with_timeout(std::time::Duration::from_secs(2));
/// assert_eq!(cfg.sq_size(), 64);
/// # }
/// ```
///
/// Read when a connection request is created ([`ConnReq::new`](crate::ConnReq::new),
/// [`Ep::next_conn_req`](crate::Ep::next_conn_req)), which also checks the sizes against the
/// device's limits; later changes do not affect existing requests or connections.
///
/// `Send + Sync` (it holds an [`Srq`] handle, which is both).
pub struct ConnCfg<T: Transport> {
    timeout: Duration,
    cq_size: u32,
    rcq_size: u32,
    sq_size: u32,
    rq_size: u32,
    max_sge: u32,
    max_inline: u32,
    retry_count: u8,
    ack_timeout: Option<u8>,
    shared: bool,
    srq: Option<Srq<T>>,
}

impl<T: Transport> fmt::Debug for ConnCfg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnCfg")
            .field("timeout", &self.timeout)
            .field("cq_size", &self.cq_size)
            .field("rcq_size", &self.rcq_size)
            .field("sq_size", &self.sq_size)
            .field("rq_size", &self.rq_size)
            .field("max_sge", &self.max_sge)
            .field("max_inline", &self.max_inline)
            .field("retry_count", &self.retry_count)
            .field("ack_timeout", &self.ack_timeout)
            .field("shared_channel", &self.shared)
            .field("srq", &self.srq.is_some())
            .finish()
    }
}

impl<T: Transport> Default for ConnCfg<T> {
    fn default() -> Self {
        Self {
            timeout: Self::DEFAULT_TIMEOUT,
            cq_size: Self::DEFAULT_CQ_SIZE,
            rcq_size: Self::DEFAULT_RCQ_SIZE,
            sq_size: Self::DEFAULT_SQ_SIZE,
            rq_size: Self::DEFAULT_RQ_SIZE,
            max_sge: 1,
            max_inline: 0,
            retry_count: Self::DEFAULT_RETRY_COUNT,
            ack_timeout: None,
            shared: false,
            srq: None,
        }
    }
}

impl<T: Transport> Clone for ConnCfg<T> {
    fn clone(&self) -> Self {
        Self { srq: self.srq.clone(), ..*self }
    }
}

impl<T: Transport> ConnCfg<T> {
    /// `RPMA_DEFAULT_TIMEOUT_MS`: the default connection-establishment timeout, 1000 ms.
    #[doc(alias = "RPMA_DEFAULT_TIMEOUT_MS")]
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1000);
    /// The default main CQ size, 10.
    pub const DEFAULT_CQ_SIZE: u32 = 10;
    /// The default receive CQ size, 0: no separate receive CQ.
    pub const DEFAULT_RCQ_SIZE: u32 = 0;
    /// The default send queue size, 10.
    pub const DEFAULT_SQ_SIZE: u32 = 10;
    /// The default receive queue size, 10.
    pub const DEFAULT_RQ_SIZE: u32 = 10;
    /// The default transport retry count of a connection's queue pair: 7, the most the 3-bit
    /// field holds, which librpma always uses.
    pub const DEFAULT_RETRY_COUNT: u8 = 7;

    /// `rpma_conn_cfg_new`: timeout 1000 ms, CQ 10, RCQ 0, SQ 10, RQ 10, channel not shared,
    /// no SRQ; and (beyond librpma) one scatter-gather piece per operation, no inline
    /// operations, transport retry count 7 ([`ConnCfg::DEFAULT_RETRY_COUNT`]) and the connection
    /// manager's ACK timeout, which are librpma's fixed values.
    #[doc(alias = "rpma_conn_cfg_new")]
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `rpma_conn_cfg_set_timeout`: the connection-establishment timeout of the active side
    /// (address and route resolution). A negative timeout, which librpma rejected, cannot be
    /// expressed; one above `i32::MAX` milliseconds is rejected with
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) when the request is created.
    #[doc(alias = "rpma_conn_cfg_set_timeout")]
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// `rpma_conn_cfg_get_timeout`.
    #[doc(alias = "rpma_conn_cfg_get_timeout")]
    #[must_use]
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `rpma_conn_cfg_set_cq_size`: entries of the main completion queue.
    #[doc(alias = "rpma_conn_cfg_set_cq_size")]
    #[must_use]
    pub const fn with_cq_size(mut self, cq_size: u32) -> Self {
        self.cq_size = cq_size;
        self
    }

    /// `rpma_conn_cfg_get_cq_size`.
    #[doc(alias = "rpma_conn_cfg_get_cq_size")]
    #[must_use]
    pub const fn cq_size(&self) -> u32 {
        self.cq_size
    }

    /// `rpma_conn_cfg_set_rcq_size`: a value > 0 creates a separate receive CQ.
    #[doc(alias = "rpma_conn_cfg_set_rcq_size")]
    #[must_use]
    pub const fn with_rcq_size(mut self, rcq_size: u32) -> Self {
        self.rcq_size = rcq_size;
        self
    }

    /// `rpma_conn_cfg_get_rcq_size`.
    #[doc(alias = "rpma_conn_cfg_get_rcq_size")]
    #[must_use]
    pub const fn rcq_size(&self) -> u32 {
        self.rcq_size
    }

    /// `rpma_conn_cfg_set_sq_size`: entries of the send queue.
    #[doc(alias = "rpma_conn_cfg_set_sq_size")]
    #[must_use]
    pub const fn with_sq_size(mut self, sq_size: u32) -> Self {
        self.sq_size = sq_size;
        self
    }

    /// `rpma_conn_cfg_get_sq_size`.
    #[doc(alias = "rpma_conn_cfg_get_sq_size")]
    #[must_use]
    pub const fn sq_size(&self) -> u32 {
        self.sq_size
    }

    /// `rpma_conn_cfg_set_rq_size`: entries of the receive queue (unused with an SRQ).
    #[doc(alias = "rpma_conn_cfg_set_rq_size")]
    #[must_use]
    pub const fn with_rq_size(mut self, rq_size: u32) -> Self {
        self.rq_size = rq_size;
        self
    }

    /// `rpma_conn_cfg_get_rq_size`.
    #[doc(alias = "rpma_conn_cfg_get_rq_size")]
    #[must_use]
    pub const fn rq_size(&self) -> u32 {
        self.rq_size
    }

    /// Scatter-gather pieces per operation and per receive (default 1): how many pieces
    /// [`Conn::write_sg`](crate::Conn::write_sg), [`Conn::send_sg`](crate::Conn::send_sg),
    /// [`Conn::read_sg`](crate::Conn::read_sg) and [`Conn::recv_sg`](crate::Conn::recv_sg) may
    /// take. A value of 0 or above the device's `max_sge` is rejected with
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) when the request is created; each piece
    /// costs 16 bytes in every work queue entry, so ask for what you use.
    #[must_use]
    pub const fn with_max_sge(mut self, max_sge: u32) -> Self {
        self.max_sge = max_sge;
        self
    }

    /// Scatter-gather pieces per operation ([`ConnCfg::with_max_sge`]).
    #[must_use]
    pub const fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Bytes an inline operation ([`Conn::write_inline`](crate::Conn::write_inline),
    /// [`Conn::send_inline`](crate::Conn::send_inline)) may carry (default 0: none). Above the
    /// device's `max_inline_data` it is rejected with
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) when the request is created.
    #[must_use]
    pub const fn with_max_inline(mut self, max_inline: u32) -> Self {
        self.max_inline = max_inline;
        self
    }

    /// Bytes an inline operation may carry ([`ConnCfg::with_max_inline`]).
    #[must_use]
    pub const fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// How many times the queue pair retransmits an operation the peer does not acknowledge (the
    /// transport retry count, `rdma_conn_param.retry_count`; default 7,
    /// [`ConnCfg::DEFAULT_RETRY_COUNT`], the value librpma always uses) before it gives up: the
    /// operation then completes with an error and the connection breaks. Together with
    /// [`ConnCfg::with_ack_timeout`] it bounds how long a connection to a dead or unreachable peer
    /// keeps retrying (docs/semantics.md#dead-peers-retry-count-and-ack-timeout). A value above 7
    /// (a 3-bit field) is rejected with [`InvalidInput`](crate::ErrorKind::InvalidInput) when the
    /// request is created.
    ///
    /// On IB and RoCE the connecting side's value is the one both queue pairs use: the
    /// connection manager carries it in its request, and the accepting side's is not sent.
    ///
    /// Soft-RoCE (rxe) retries a count of 7 for ever: its completer never counts 7 down (the
    /// specification gives 7 that meaning for the RNR retry count only). With the default, a
    /// queue pair on rxe never reports an unreachable peer and outlives a partition of any
    /// length; 6 or less has it reported.
    #[must_use]
    pub const fn with_retry_count(mut self, retry_count: u8) -> Self {
        self.retry_count = retry_count;
        self
    }

    /// The transport retry count ([`ConnCfg::with_retry_count`]).
    #[must_use]
    pub const fn retry_count(&self) -> u8 {
        self.retry_count
    }

    /// The local ACK timeout of the queue pair as an exponent: the queue pair waits about
    /// 4.096 us * 2^`ack_timeout` for an acknowledgement before it retransmits
    /// (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)` on the connection's CM id, before it
    /// connects or accepts). Unset by default: the connection manager's own value, which librpma
    /// always uses (on RoCE the kernel derives it from the CM's packet lifetime). A value
    /// outside 1..=31 (0 would mean no timeout at all) is rejected with
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) when the request is created.
    ///
    /// Each side sets its own queue pair's timeout: set it on both sides to bound both.
    #[must_use]
    pub const fn with_ack_timeout(mut self, ack_timeout: u8) -> Self {
        self.ack_timeout = Some(ack_timeout);
        self
    }

    /// The local ACK timeout exponent ([`ConnCfg::with_ack_timeout`]); `None`: the connection
    /// manager's default.
    #[must_use]
    pub const fn ack_timeout(&self) -> Option<u8> {
        self.ack_timeout
    }

    /// `rpma_conn_cfg_set_compl_channel`: one completion channel shared by the main CQ and the
    /// receive CQ (then use [`Conn::wait`](crate::Conn::wait)).
    #[doc(alias = "rpma_conn_cfg_set_compl_channel")]
    #[must_use]
    pub const fn with_shared_channel(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// `rpma_conn_cfg_get_compl_channel`.
    #[doc(alias = "rpma_conn_cfg_get_compl_channel")]
    #[must_use]
    pub const fn shared_channel(&self) -> bool {
        self.shared
    }

    /// `rpma_conn_cfg_set_srq`: connections made with this configuration receive through `srq`
    /// (`None` unsets it, which librpma could not do; its NULL-SRQ error cannot be expressed).
    /// The SRQ must be of the peer the request is made on ([`ConnReq::new`](crate::ConnReq::new))
    /// or the endpoint listens on ([`Ep::next_conn_req`](crate::Ep::next_conn_req)): one of
    /// another peer is [`InvalidInput`](crate::ErrorKind::InvalidInput) there.
    #[doc(alias = "rpma_conn_cfg_set_srq")]
    #[must_use]
    pub fn with_srq(mut self, srq: Option<&Srq<T>>) -> Self {
        self.srq = srq.cloned();
        self
    }

    /// `rpma_conn_cfg_get_srq`.
    #[doc(alias = "rpma_conn_cfg_get_srq")]
    #[must_use]
    pub const fn srq(&self) -> Option<&Srq<T>> {
        self.srq.as_ref()
    }
}
