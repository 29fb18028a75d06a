//! Native vs emulated flush and atomic write.

use super::*;

#[test]
fn flush__native_completes_with_flush_opcode() {
    let fx = fixture_on(MockFabric::builder().native(true, true).build());
    assert!(fx.p.client.peer().capabilities().native_flush);
    fx.p.client.flush(fx.rdst.slice(0..4096), FlushType::Visibility).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (1, WcStatus::Success, WcOpcode::Flush));
    fx.p.client.atomic_write(fx.rdst.at(8), 0x0102_0304_0506_0708u64.to_le_bytes()).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (2, WcStatus::Success, WcOpcode::AtomicWrite));
    assert_eq!(fx.dst.to_vec(8, 8).unwrap(), 0x0102_0304_0506_0708u64.to_le_bytes());
}

#[test]
fn flush__emulated_completes_with_read_opcode() {
    let fx = fixture();
    assert!(!fx.p.client.peer().capabilities().native_flush);
    fx.p.client.flush(fx.rdst.slice(0..4096), FlushType::Visibility).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (1, WcStatus::Success, WcOpcode::RdmaRead));
    fx.p.client.atomic_write(fx.rdst.at(8), [9; 8]).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (2, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(fx.dst.to_vec(8, 8).unwrap(), [9; 8]);
}

/// Reads a region registered with flush usages only.
fn read_flush_only_region(f: MockFabric) -> WcStatus {
    let fx = fixture_on(f);
    let target = fx.p.speer.alloc_mr(4096, Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT).unwrap();
    let rt = remote(&target);
    // Flushing it works either way.
    fx.p.client.flush(rt.slice(0..64), FlushType::Visibility).context(1).post().unwrap();
    assert_eq!(next_wc(fx.p.client.cq()).status(), WcStatus::Success);
    // rpma-core lets the read through (flush usages imply remote read under APM); the
    // responder decides.
    fx.p.client.read(fx.src.slice(0..64), rt.at(0)).context(2).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!(wc.wr_id(), 2);
    wc.status()
}

#[test]
fn mr_reg__native_flush_usage_is_not_remotely_readable() {
    assert_eq!(read_flush_only_region(MockFabric::builder().native(true, false).build()), WcStatus::RemAccessErr);
}

#[test]
fn mr_reg__emulated_flush_usage_is_remotely_readable() {
    assert_eq!(read_flush_only_region(MockFabric::new()), WcStatus::Success);
}

#[test]
fn flush__native_needs_the_flush_usage_at_the_responder() {
    // A descriptor claiming a flush usage the region lacks (tampered): the native responder
    // refuses it, touching nothing.
    let fx = fixture_on(MockFabric::builder().native(true, true).build());
    let target = fx.p.speer.alloc_mr(4096, Usage::WRITE_DST).unwrap();
    let mut desc = target.descriptor();
    desc[20] |= Usage::FLUSH_TYPE_VISIBILITY.bits() as u8;
    let rt = MrRemote::from_descriptor(&desc).unwrap();
    fx.p.client.flush(rt.slice(0..64), FlushType::Visibility).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::RemAccessErr));
}
