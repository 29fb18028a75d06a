//! Utilities: device lookup, ODP capability, event and error strings; peers.
//!
//! Type-enforced (no case): `get_ibvc__addr_NULL`, `get_ibvc__ibv_ctx_NULL`,
//! `get_ibvc__type_unknown` / `sanity__type_unknown` (a `ContextType` is LOCAL or REMOTE),
//! `ibvc_odp__*_NULL`, `peer_new__ibv_ctx_eq_NULL` / `__peer_ptr_eq_NULL`,
//! `peer_delete__invalid_peer_ptr` / `__null_peer`; `*__malloc_ERRNO` (allocation failure
//! aborts).

use rpma::{librpma, ConnEvent, ContextType, Device, ErrorKind, Peer, Usage};

use super::harness::{assert_kind, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        get_ibv_context__success_local,
        get_ibv_context__success_remote,
        get_ibv_context__unknown_addr_E_PROVIDER,
        peer_new__success,
        get_ibvc__success_local_and_remote_same_device,
        ibvc_odp__matches_caps,
        peer_new__capabilities,
        peer_new__two_peers_one_device,
        peer_delete__success,
        peer_delete__objects_keep_peer_alive,
        conn_event_2str__CONN_UNDEFINED,
        conn_event_2str__CONN_ESTABLISHED,
        conn_event_2str__CONN_CLOSED,
        conn_event_2str__CONN_LOST,
        conn_event_2str__CONN_REJECTED,
        conn_event_2str__CONN_UNREACHABLE,
        conn_event_2str__CONN_UNSUPPORTED,
        conn_event__as_str_and_display,
        err_2str__SUCCESS,
        err_2str__E_UNKNOWN,
        err_2str__E_NOSUPP,
        err_2str__E_PROVIDER,
        err_2str__E_NOMEM,
        err_2str__E_INVAL,
        err_2str__E_NO_COMPLETION,
        err_2str__E_NO_NEXT,
        err_2str__E_AGAIN,
        err_2str__E_SHARED_CHANNEL,
        err_2str__E_NOT_SHARED_CHNL,
        err_2str__unknown_code,
        librpma__error_codes,
        librpma__function_names,
        error__context,
    ]
}

fn get_ibv_context__success_local<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    assert!(!d.name().is_empty());
}

fn get_ibv_context__success_remote<B: Backend>(b: &B) {
    let t = b.transport();
    Device::lookup(&t, &b.addr(), ContextType::Remote).unwrap();
}

fn get_ibv_context__unknown_addr_E_PROVIDER<B: Backend>(b: &B) {
    let t = b.transport();
    // 192.0.2.0/24 is TEST-NET-1: never assigned to a device.
    assert_kind(Device::lookup(&t, "192.0.2.77", ContextType::Local), ErrorKind::Provider);
}

fn peer_new__success<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    let p = Peer::new(&d).unwrap();
    assert_eq!(p.capabilities(), &b.caps());
    assert_eq!(d.is_odp_capable().unwrap(), b.caps().odp);
}

fn get_ibvc__success_local_and_remote_same_device<B: Backend>(b: &B) {
    let t = b.transport();
    let l = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    let r = Device::lookup(&t, &b.addr(), ContextType::Remote).unwrap();
    // The address is local: resolving it as a remote address routes through the same device.
    assert_eq!(l.name(), r.name());
    assert_eq!(l.capabilities().unwrap(), r.capabilities().unwrap());
}

fn ibvc_odp__matches_caps<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    assert_eq!(d.is_odp_capable().unwrap(), b.caps().odp);
    assert_eq!(d.is_odp_capable().unwrap(), d.capabilities().unwrap().odp);
}

fn peer_new__capabilities<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    let p = Peer::new(&d).unwrap();
    let caps = p.capabilities();
    assert_eq!(caps, &d.capabilities().unwrap());
    assert_eq!(p.device().name(), d.name());
    // Limits a working RC device always has.
    assert!(caps.max_qp_wr > 0);
    assert!(caps.max_cqe > 0);
    assert!(caps.max_msg_size > 0);
    assert!(caps.max_private_data_connect > 0);
    assert!(caps.max_private_data_accept >= caps.max_private_data_connect);
}

fn peer_new__two_peers_one_device<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    let p1 = Peer::new(&d).unwrap();
    let p2 = Peer::new(&d).unwrap();
    let m1 = p1.alloc_mr(64, Usage::READ_SRC).unwrap();
    let m2 = p2.alloc_mr(64, Usage::READ_SRC).unwrap();
    m1.dereg().unwrap();
    m2.dereg().unwrap();
    p1.delete().unwrap();
    p2.delete().unwrap();
}

fn peer_delete__success<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    Peer::new(&d).unwrap().delete().unwrap();
    // A clone is a handle: deleting one leaves the other usable.
    let p = Peer::new(&d).unwrap();
    let c = p.clone();
    p.delete().unwrap();
    c.alloc_mr(64, Usage::READ_SRC).unwrap().dereg().unwrap();
    c.delete().unwrap();
}

/// librpma's `ibv_dealloc_pd` failed (EBUSY) with live regions; here the region keeps the peer
/// alive and deleting the handle succeeds.
fn peer_delete__objects_keep_peer_alive<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    let p = Peer::new(&d).unwrap();
    let m = p.alloc_mr(64, Usage::READ_SRC | Usage::WRITE_DST).unwrap();
    p.delete().unwrap();
    m.write(0, &[9]).unwrap();
    assert_eq!(m.to_vec(0, 1).unwrap(), [9]);
    m.dereg().unwrap();
}

fn conn_event_2str__CONN_UNDEFINED<B: Backend>(_b: &B) {
    assert_eq!(ConnEvent::describe_code(-1), "Undefined connection event");
    assert_eq!(ConnEvent::describe_code(ConnEvent::Undefined as i32), "Undefined connection event");
}

fn conn_event_2str__CONN_ESTABLISHED<B: Backend>(_b: &B) {
    assert_eq!(ConnEvent::describe_code(0), "Connection established");
    assert_eq!(ConnEvent::describe_code(ConnEvent::Established as i32), "Connection established");
}

fn conn_event_2str__CONN_CLOSED<B: Backend>(_b: &B) {
    assert_eq!(ConnEvent::describe_code(1), "Connection closed");
    assert_eq!(ConnEvent::describe_code(ConnEvent::Closed as i32), "Connection closed");
}

fn conn_event_2str__CONN_LOST<B: Backend>(_b: &B) {
    assert_eq!(ConnEvent::describe_code(2), "Connection lost");
    assert_eq!(ConnEvent::describe_code(ConnEvent::Lost as i32), "Connection lost");
}

fn conn_event_2str__CONN_REJECTED<B: Backend>(_b: &B) {
    assert_eq!(ConnEvent::describe_code(3), "Connection rejected");
    assert_eq!(ConnEvent::describe_code(ConnEvent::Rejected as i32), "Connection rejected");
}

fn conn_event_2str__CONN_UNREACHABLE<B: Backend>(_b: &B) {
    assert_eq!(ConnEvent::describe_code(4), "Connection unreachable");
    assert_eq!(ConnEvent::describe_code(ConnEvent::Unreachable as i32), "Connection unreachable");
}

fn conn_event_2str__CONN_UNSUPPORTED<B: Backend>(_b: &B) {
    for v in [5, 6, 100, -2, i32::MIN, i32::MAX] {
        assert_eq!(ConnEvent::describe_code(v), "Unsupported connection event", "{v}");
    }
}

fn conn_event__as_str_and_display<B: Backend>(_b: &B) {
    for e in [
        ConnEvent::Undefined,
        ConnEvent::Established,
        ConnEvent::Closed,
        ConnEvent::Lost,
        ConnEvent::Rejected,
        ConnEvent::Unreachable,
    ] {
        assert_eq!(e.as_str(), ConnEvent::describe_code(e as i32));
        assert_eq!(e.to_string(), e.as_str());
    }
}

fn err_2str__SUCCESS<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(0), c"Success");
}

fn err_2str__E_UNKNOWN<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_000), c"Unknown error");
    assert_eq!(librpma::err_2str(librpma::code(ErrorKind::Other)), c"Unknown error");
}

fn err_2str__E_NOSUPP<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_001), c"Not supported");
}

fn err_2str__E_PROVIDER<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_002), c"Provider error occurred");
}

fn err_2str__E_NOMEM<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_003), c"Out of memory");
}

fn err_2str__E_INVAL<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_004), c"Invalid argument");
}

fn err_2str__E_NO_COMPLETION<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_005), c"No next completion available");
}

fn err_2str__E_NO_NEXT<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_006), c"No next event available");
}

fn err_2str__E_AGAIN<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_007), c"Temporary error, try again");
}

fn err_2str__E_SHARED_CHANNEL<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_008), c"Completion channel is shared");
}

fn err_2str__E_NOT_SHARED_CHNL<B: Backend>(_b: &B) {
    assert_eq!(librpma::err_2str(-100_009), c"Completion channel is not shared");
}

fn err_2str__unknown_code<B: Backend>(_b: &B) {
    for c in [1, -1, 22, -22, -99_999, -100_010, i32::MIN, i32::MAX] {
        assert_eq!(librpma::err_2str(c), c"Unknown error", "{c}");
    }
}

fn librpma__error_codes<B: Backend>(_b: &B) {
    let expected = [
        (ErrorKind::Other, -100_000, "RPMA_E_UNKNOWN"),
        (ErrorKind::Unsupported, -100_001, "RPMA_E_NOSUPP"),
        (ErrorKind::Provider, -100_002, "RPMA_E_PROVIDER"),
        (ErrorKind::OutOfMemory, -100_003, "RPMA_E_NOMEM"),
        (ErrorKind::InvalidInput, -100_004, "RPMA_E_INVAL"),
        (ErrorKind::NoCompletion, -100_005, "RPMA_E_NO_COMPLETION"),
        (ErrorKind::NoEvent, -100_006, "RPMA_E_NO_EVENT"),
        (ErrorKind::WouldBlock, -100_007, "RPMA_E_AGAIN"),
        (ErrorKind::SharedChannel, -100_008, "RPMA_E_SHARED_CHANNEL"),
        (ErrorKind::NotSharedChannel, -100_009, "RPMA_E_NOT_SHARED_CHNL"),
    ];
    assert_eq!(ErrorKind::ALL.len(), expected.len());
    for (k, code, name) in expected {
        assert!(ErrorKind::ALL.contains(&k), "{k:?}");
        assert_eq!(librpma::code(k), code);
        assert_eq!(librpma::kind(code), Some(k));
        assert_eq!(librpma::macro_name(k), name);
        assert_eq!(librpma::err_2str(code) == c"Unknown error", k == ErrorKind::Other, "{name}");
        assert!(!k.to_string().is_empty());
    }
    for c in [0, 1, -1, -100_010, -99_999] {
        assert_eq!(librpma::kind(c), None);
    }
}

fn librpma__function_names<B: Backend>(_b: &B) {
    let names = [
        ("rpma_read", "Conn::read"),
        ("rpma_mr_reg", "Peer::reg_mr"),
        ("rpma_utils_get_ibv_context", "Device::lookup"),
        ("rpma_cq_get_wc", "Cq::poll"),
    ];
    for (c, rust) in names {
        assert_eq!(librpma::rust_item(c), Some(rust));
        assert_eq!(librpma::c_function(rust), Some(c));
    }
}

/// An error of a real call carries its kind, code, operation and a readable message.
fn error__context<B: Backend>(b: &B) {
    let t = b.transport();
    let d = Device::lookup(&t, &b.addr(), ContextType::Local).unwrap();
    let p = Peer::new(&d).unwrap();
    let e = p.alloc_mr(0, Usage::READ_SRC).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(librpma::code(e.kind()), -100_004);
    assert_eq!(e.op(), "Peer::alloc_mr");
    assert_eq!(e.errno(), None);
    assert!(std::error::Error::source(&e).is_none());
    let msg = e.to_string();
    assert!(msg.starts_with("Peer::alloc_mr: invalid argument: "), "{msg}");
    let e = Device::lookup(&t, "192.0.2.77", ContextType::Local).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Provider);
    assert_eq!(librpma::code(e.kind()), -100_002);
    assert_eq!(e.op(), "Device::lookup");
    // The provider's errno is the source, an io::Error.
    let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(source.and_then(std::io::Error::raw_os_error), e.errno());
    assert!(e.errno().is_some(), "{e:?}");
}
