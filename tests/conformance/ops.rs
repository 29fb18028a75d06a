//! Conformance cases: read, write, atomic write, flush, send, recv and the imm variants.

use rpma::{CompletionFlags, ErrorKind, Usage, WcOpcode, WcStatus};

use super::harness::{assert_kind, mr, next_wc, pair, remote, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![write__success_then_read_back, read__flags_0]
}

fn write__success_then_read_back<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let target = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::READ_SRC);
    let local = mr(&p.cpeer, 4096, Usage::WRITE_SRC | Usage::READ_DST);
    let r = remote(&target);
    local.write(0, b"0123456789").unwrap();
    p.client.write(Some(&r), 100, Some(&local), 0, 10, CompletionFlags::ALWAYS, 7).unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (7, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(target.to_vec(100, 10).unwrap(), b"0123456789");
    p.client.read(Some(&local), 1000, Some(&r), 100, 10, CompletionFlags::ALWAYS, 8).unwrap();
    let wc = next_wc(p.client.cq());
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (8, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(local.to_vec(1000, 10).unwrap(), b"0123456789");
}

fn read__flags_0<B: Backend>(b: &B) {
    let t = b.transport();
    let p = pair(b, &t);
    let target = mr(&p.speer, 64, Usage::READ_SRC);
    let local = mr(&p.cpeer, 64, Usage::READ_DST);
    let r = remote(&target);
    assert_kind(p.client.read(Some(&local), 0, Some(&r), 0, 8, CompletionFlags::empty(), 0), ErrorKind::Inval);
}
