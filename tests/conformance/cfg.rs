//! Conformance cases: connection, shared-RQ and peer configurations (docs/semantics.md: defaults,
//! descriptors, queues of a connection).
//!
//! The configurations are plain builders taken by value (`ConnCfg::new().with_sq_size(n)`).
//!
//! Type-enforced (no case): every `*_NULL` rule of `rpma_conn_cfg_*`, `rpma_srq_cfg_*` and
//! `rpma_peer_cfg_*` (a configuration, out-pointer or descriptor pointer cannot be NULL), the
//! `malloc_ERRNO` rules (allocation failure aborts in Rust), `rpma_conn_cfg_set_srq(cfg, NULL)`
//! (`with_srq(Option<&Srq>)`: `None` unsets), `rpma_conn_cfg_set_timeout` with a negative timeout
//! (`conn_cfg_set_timeout__timeout_negative`: a `Duration` cannot be negative; a timeout above
//! `i32::MAX` ms is refused by `ConnReq::new`, conn.rs: `conn_req_new__timeout_above_i32_max_ms`).

use std::time::Duration;

use rpma::{ConnCfg, ErrorKind, PeerCfg, Srq, SrqCfg};

use super::harness::{assert_kind, peer, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        conn_cfg_new__success,
        conn_cfg_timeout__lifecycle,
        conn_cfg_cq_size__lifecycle,
        conn_cfg_cqe__lifecycle,
        conn_cfg_rcq_size__lifecycle,
        conn_cfg_rcqe__lifecycle,
        conn_cfg_sq_size__lifecycle,
        conn_cfg_rq_size__lifecycle,
        conn_cfg_get_compl_channel__get_default_success,
        conn_cfg_compl_channel__lifecycle,
        conn_cfg_retry_count__lifecycle,
        conn_cfg_ack_timeout__lifecycle,
        conn_cfg_setters__chain,
        conn_cfg_srq__lifecycle,
        conn_cfg_srq__clear,
        conn_cfg_clone__copies_every_field,
        conn_cfg_clone__independent,
        srq_cfg_new__success,
        srq_cfg_rq_size__lifecycle,
        srq_cfg_rcq_size__lifecycle,
        srq_cfg_rcqe__lifecycle,
        srq_cfg_clone__independent,
        srq_new__cfg_rcq_size_0_no_rcq,
        srq_new__cfg_NULL_defaults,
        peer_cfg_new__success,
        peer_cfg_direct_write_to_pmem__lifecycle,
        peer_cfg_get_desc_size__success,
        peer_cfg_get_desc__lifecycle,
        peer_cfg_from_desc__incorrect_desc_size,
        peer_cfg_from_desc__success,
        peer_cfg_from_desc__any_nonzero_byte_true,
        peer_cfg_from_desc__longer_desc,
        peer_cfg_clone__independent,
    ]
}

/// Interesting `u32` values for size lifecycles (0, defaults, large, > INT_MAX, max).
const SIZES: [u32; 7] = [0, 1, 10, 20, 4096, (i32::MAX as u32) + 1, u32::MAX];

/// The transport retry count: 7 (librpma's) by default; the builder stores any `u8` (a value
/// above 7 is refused when a request is made, conn.rs: conn_req_new__retry_count_above_7_E_INVAL).
fn conn_cfg_retry_count__lifecycle<B: Backend>(_b: &B) {
    assert_eq!(ConnCfg::<B::T>::new().retry_count(), 7);
    assert_eq!(ConnCfg::<B::T>::new().retry_count(), ConnCfg::<B::T>::DEFAULT_RETRY_COUNT);
    for n in [0u8, 1, 3, 7, 8, u8::MAX] {
        let cfg = ConnCfg::<B::T>::new().with_retry_count(n);
        assert_eq!(cfg.retry_count(), n);
        assert_eq!(cfg.clone().retry_count(), n);
        assert_eq!(cfg.ack_timeout(), None, "the retry count leaves the ACK timeout unset");
    }
}

/// The local ACK timeout exponent: unset (the CM's default) by default; the builder stores any
/// `u8` (outside 1..=31 it is refused when a request is made, conn.rs:
/// conn_req_new__ack_timeout_outside_1_31_E_INVAL).
fn conn_cfg_ack_timeout__lifecycle<B: Backend>(_b: &B) {
    assert_eq!(ConnCfg::<B::T>::new().ack_timeout(), None);
    for n in [0u8, 1, 14, 31, 32, u8::MAX] {
        let cfg = ConnCfg::<B::T>::new().with_ack_timeout(n);
        assert_eq!(cfg.ack_timeout(), Some(n));
        assert_eq!(cfg.clone().ack_timeout(), Some(n));
        assert_eq!(cfg.retry_count(), ConnCfg::<B::T>::DEFAULT_RETRY_COUNT, "the ACK timeout leaves the retry count");
    }
    let cfg = ConnCfg::<B::T>::new().with_ack_timeout(14).with_retry_count(0);
    assert_eq!((cfg.retry_count(), cfg.ack_timeout()), (0, Some(14)));
    assert!(format!("{cfg:?}").contains("retry_count: 0"), "{cfg:?}");
    assert!(format!("{cfg:?}").contains("ack_timeout: Some(14)"), "{cfg:?}");
}

fn conn_cfg_new__success<B: Backend>(_b: &B) {
    let cfg = ConnCfg::<B::T>::new();
    assert_eq!(cfg.timeout(), Duration::from_millis(1000));
    assert_eq!(cfg.timeout(), ConnCfg::<B::T>::DEFAULT_TIMEOUT);
    assert_eq!(cfg.cq_size(), 10);
    assert_eq!(cfg.cq_size(), ConnCfg::<B::T>::DEFAULT_CQ_SIZE);
    assert_eq!(cfg.rcq_size(), 0);
    assert_eq!(cfg.rcq_size(), ConnCfg::<B::T>::DEFAULT_RCQ_SIZE);
    assert_eq!(cfg.sq_size(), 10);
    assert_eq!(cfg.sq_size(), ConnCfg::<B::T>::DEFAULT_SQ_SIZE);
    assert_eq!(cfg.rq_size(), 10);
    assert_eq!(cfg.rq_size(), ConnCfg::<B::T>::DEFAULT_RQ_SIZE);
    assert!(!cfg.shared_channel());
    assert!(cfg.srq().is_none());
    // Default is the same as new.
    let d = ConnCfg::<B::T>::default();
    assert_eq!(
        (d.timeout(), d.cq_size(), d.rcq_size(), d.sq_size(), d.rq_size(), d.shared_channel(), d.srq().is_none()),
        (Duration::from_millis(1000), 10, 0, 10, 10, false, true)
    );
}

/// Any duration is stored as given (one above `i32::MAX` ms is refused only when a request is
/// made from it: conn.rs `conn_req_new__timeout_above_i32_max_ms`).
fn conn_cfg_timeout__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for t in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(500),
        Duration::from_secs(1),
        Duration::from_secs(5),
        Duration::from_micros(1500),
        Duration::from_millis(i32::MAX as u64),
        Duration::from_millis(i32::MAX as u64 + 1),
        Duration::MAX,
    ] {
        cfg = cfg.with_timeout(t);
        assert_eq!(cfg.timeout(), t);
    }
    // Only the timeout changes.
    assert_eq!((cfg.cq_size(), cfg.rcq_size(), cfg.sq_size(), cfg.rq_size()), (10, 0, 10, 10));
}

fn conn_cfg_cq_size__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for s in [5, 123, 1 << 16] {
        cfg = cfg.with_cq_size(s);
        assert_eq!(cfg.cq_size(), s);
    }
    // Only the CQ size changes.
    assert_eq!((cfg.rcq_size(), cfg.sq_size(), cfg.rq_size()), (0, 10, 10));
}

/// Sizes above INT_MAX (and above any device's limit) are stored as given: the limit is checked
/// when a request is made (conn.rs `conn_req_new__queue_size_above_device_limit`).
fn conn_cfg_cqe__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for s in SIZES {
        cfg = cfg.with_cq_size(s);
        assert_eq!(cfg.cq_size(), s);
    }
}

fn conn_cfg_rcq_size__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for s in [7, 0, 99] {
        cfg = cfg.with_rcq_size(s);
        assert_eq!(cfg.rcq_size(), s);
    }
    assert_eq!((cfg.cq_size(), cfg.sq_size(), cfg.rq_size()), (10, 10, 10));
}

fn conn_cfg_rcqe__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for s in SIZES {
        cfg = cfg.with_rcq_size(s);
        assert_eq!(cfg.rcq_size(), s);
    }
}

fn conn_cfg_sq_size__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for s in SIZES {
        cfg = cfg.with_sq_size(s);
        assert_eq!(cfg.sq_size(), s);
    }
    assert_eq!((cfg.cq_size(), cfg.rcq_size(), cfg.rq_size()), (10, 0, 10));
}

fn conn_cfg_rq_size__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for s in SIZES {
        cfg = cfg.with_rq_size(s);
        assert_eq!(cfg.rq_size(), s);
    }
    assert_eq!((cfg.cq_size(), cfg.rcq_size(), cfg.sq_size()), (10, 0, 10));
}

fn conn_cfg_get_compl_channel__get_default_success<B: Backend>(_b: &B) {
    assert!(!ConnCfg::<B::T>::new().shared_channel());
}

fn conn_cfg_compl_channel__lifecycle<B: Backend>(_b: &B) {
    let mut cfg = ConnCfg::<B::T>::new();
    for v in [true, false, true, true, false] {
        cfg = cfg.with_shared_channel(v);
        assert_eq!(cfg.shared_channel(), v);
    }
}

fn conn_cfg_setters__chain<B: Backend>(_b: &B) {
    let cfg = ConnCfg::<B::T>::new()
        .with_timeout(Duration::from_millis(42))
        .with_cq_size(11)
        .with_rcq_size(12)
        .with_sq_size(13)
        .with_rq_size(14)
        .with_shared_channel(true);
    assert_eq!(
        (cfg.timeout(), cfg.cq_size(), cfg.rcq_size(), cfg.sq_size(), cfg.rq_size(), cfg.shared_channel()),
        (Duration::from_millis(42), 11, 12, 13, 14, true)
    );
}

fn conn_cfg_srq__lifecycle<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let cfg = ConnCfg::<B::T>::new();
    assert!(cfg.srq().is_none());
    let cfg = cfg.with_srq(Some(&srq));
    // The same SRQ: it has the receive CQ the default SRQ configuration creates.
    assert!(cfg.srq().expect("srq set").rcq().is_some());
    // Replacing it with an SRQ without a receive CQ is visible through get.
    let srq2 = Srq::new(&p, Some(&SrqCfg::new().with_rcq_size(0))).unwrap();
    let cfg = cfg.with_srq(Some(&srq2));
    assert!(cfg.srq().expect("srq set").rcq().is_none());
    // The configuration keeps the SRQ alive after the caller's handle is gone.
    drop(srq2);
    assert!(cfg.srq().expect("srq kept").rcq().is_none());
    srq.delete().unwrap();
}

/// `with_srq(None)` unsets the SRQ (librpma could not; its NULL-SRQ error is type-enforced).
fn conn_cfg_srq__clear<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let cfg = ConnCfg::<B::T>::new().with_srq(Some(&srq)).with_srq(None);
    assert!(cfg.srq().is_none());
    // Clearing an unset SRQ is harmless.
    let cfg = cfg.with_srq(None);
    assert!(cfg.srq().is_none());
}

fn conn_cfg_clone__copies_every_field<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    let cfg = ConnCfg::<B::T>::new()
        .with_timeout(Duration::from_millis(7))
        .with_cq_size(1)
        .with_rcq_size(2)
        .with_sq_size(3)
        .with_rq_size(4)
        .with_shared_channel(true)
        .with_retry_count(5)
        .with_ack_timeout(18)
        .with_srq(Some(&srq));
    let c = cfg.clone();
    assert_eq!(
        (c.timeout(), c.cq_size(), c.rcq_size(), c.sq_size(), c.rq_size(), c.shared_channel()),
        (Duration::from_millis(7), 1, 2, 3, 4, true)
    );
    assert_eq!((c.retry_count(), c.ack_timeout()), (5, Some(18)));
    assert!(c.srq().is_some());
    // The original is unchanged by cloning.
    assert_eq!((cfg.timeout(), cfg.srq().is_some()), (Duration::from_millis(7), true));
}

fn conn_cfg_clone__independent<B: Backend>(_b: &B) {
    let cfg = ConnCfg::<B::T>::new();
    let c = cfg.clone();
    let cfg = cfg
        .with_timeout(Duration::from_millis(1))
        .with_cq_size(2)
        .with_rcq_size(3)
        .with_sq_size(4)
        .with_rq_size(5)
        .with_shared_channel(true);
    assert_eq!(
        (c.timeout(), c.cq_size(), c.rcq_size(), c.sq_size(), c.rq_size(), c.shared_channel()),
        (Duration::from_millis(1000), 10, 0, 10, 10, false)
    );
    let c = c.with_sq_size(99);
    assert_eq!((cfg.sq_size(), c.sq_size()), (4, 99));
}

/// docs/decisions.md #1: librpma's code (20 / 20) wins over its man page (100 / 100).
fn srq_cfg_new__success<B: Backend>(_b: &B) {
    let c = SrqCfg::new();
    assert_eq!(c.rq_size(), 20);
    assert_eq!(c.rcq_size(), 20);
    assert_eq!(SrqCfg::DEFAULT_SIZE, 20);
    let d = SrqCfg::default();
    assert_eq!((d.rq_size(), d.rcq_size()), (20, 20));
    assert_eq!(c, d);
}

fn srq_cfg_rq_size__lifecycle<B: Backend>(_b: &B) {
    let mut c = SrqCfg::new();
    for s in [1, 100, 0, 4096] {
        c = c.with_rq_size(s);
        assert_eq!(c.rq_size(), s);
    }
    assert_eq!(c.rcq_size(), 20);
}

fn srq_cfg_rcq_size__lifecycle<B: Backend>(_b: &B) {
    let mut c = SrqCfg::new();
    for s in [1, 100, 0, 4096] {
        c = c.with_rcq_size(s);
        assert_eq!(c.rcq_size(), s);
    }
    assert_eq!(c.rq_size(), 20);
}

fn srq_cfg_rcqe__lifecycle<B: Backend>(_b: &B) {
    for s in SIZES {
        let c = SrqCfg::new().with_rcq_size(s).with_rq_size(s);
        assert_eq!((c.rq_size(), c.rcq_size()), (s, s));
    }
}

fn srq_cfg_clone__independent<B: Backend>(_b: &B) {
    let c = SrqCfg::new().with_rq_size(5).with_rcq_size(6);
    let k = c;
    assert_eq!((k.rq_size(), k.rcq_size()), (5, 6));
    let c = c.with_rq_size(50).with_rcq_size(60);
    assert_eq!((k.rq_size(), k.rcq_size()), (5, 6));
    assert_eq!((c.rq_size(), c.rcq_size()), (50, 60));
}

fn srq_new__cfg_rcq_size_0_no_rcq<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let c = SrqCfg::new().with_rcq_size(0);
    let srq = Srq::new(&p, Some(&c)).unwrap();
    assert!(srq.rcq().is_none());
    srq.delete().unwrap();
    let srq = Srq::new(&p, Some(&c.with_rcq_size(5))).unwrap();
    assert!(srq.rcq().is_some());
    srq.delete().unwrap();
}

fn srq_new__cfg_NULL_defaults<B: Backend>(b: &B) {
    let t = b.transport();
    let p = peer(b, &t);
    let srq = Srq::new(&p, None).unwrap();
    // The default rcq_size (20) is > 0: the SRQ has its own receive CQ.
    assert!(srq.rcq().is_some());
    srq.delete().unwrap();
}

fn peer_cfg_new__success<B: Backend>(_b: &B) {
    assert!(!PeerCfg::new().direct_write_to_pmem());
    assert!(!PeerCfg::default().direct_write_to_pmem());
    assert_eq!(PeerCfg::new().descriptor(), [0]);
}

fn peer_cfg_direct_write_to_pmem__lifecycle<B: Backend>(_b: &B) {
    let mut c = PeerCfg::new();
    for v in [true, false, true, true, false] {
        c = c.with_direct_write_to_pmem(v);
        assert_eq!(c.direct_write_to_pmem(), v);
    }
}

fn peer_cfg_get_desc_size__success<B: Backend>(_b: &B) {
    let c = PeerCfg::new();
    assert_eq!(c.descriptor_size(), 1);
    assert_eq!(PeerCfg::DESCRIPTOR_SIZE, 1);
    assert_eq!(c.descriptor().len(), c.descriptor_size());
}

fn peer_cfg_get_desc__lifecycle<B: Backend>(_b: &B) {
    for v in [false, true] {
        let c = PeerCfg::new().with_direct_write_to_pmem(v);
        let d = c.descriptor();
        assert_eq!(d, [u8::from(v)]);
        let back = PeerCfg::from_descriptor(&d).unwrap();
        assert_eq!(back.direct_write_to_pmem(), v);
        assert_eq!(back, c);
    }
}

fn peer_cfg_from_desc__incorrect_desc_size<B: Backend>(_b: &B) {
    assert_kind(PeerCfg::from_descriptor(&[]), ErrorKind::InvalidInput);
}

fn peer_cfg_from_desc__success<B: Backend>(_b: &B) {
    assert!(PeerCfg::from_descriptor(&[1]).unwrap().direct_write_to_pmem());
    assert!(!PeerCfg::from_descriptor(&[0]).unwrap().direct_write_to_pmem());
}

fn peer_cfg_from_desc__any_nonzero_byte_true<B: Backend>(_b: &B) {
    for v in 0..=u8::MAX {
        let c = PeerCfg::from_descriptor(&[v]).unwrap();
        assert_eq!(c.direct_write_to_pmem(), v != 0, "byte {v:#x}");
        // Re-encoding normalizes to 0 / 1.
        assert_eq!(c.descriptor(), [u8::from(v != 0)]);
    }
}

fn peer_cfg_from_desc__longer_desc<B: Backend>(_b: &B) {
    // Only the first byte counts.
    assert!(!PeerCfg::from_descriptor(&[0, 1, 1]).unwrap().direct_write_to_pmem());
    assert!(PeerCfg::from_descriptor(&[2, 0]).unwrap().direct_write_to_pmem());
}

fn peer_cfg_clone__independent<B: Backend>(_b: &B) {
    let c = PeerCfg::new().with_direct_write_to_pmem(true);
    let k = c;
    assert!(k.direct_write_to_pmem());
    let c = c.with_direct_write_to_pmem(false);
    assert!(k.direct_write_to_pmem());
    assert!(!c.direct_write_to_pmem());
}
