//! Utilities: device lookup, ODP capability, event and error strings.

use rpma::generic::{Device, Peer};
use rpma::{ContextType, ErrorKind};

use super::harness::{assert_kind, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![
        get_ibv_context__success_local,
        get_ibv_context__success_remote,
        get_ibv_context__unknown_addr_E_PROVIDER,
        peer_new__success
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
