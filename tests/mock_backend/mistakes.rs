//! What ten common mistakes say: the Rust item called, the numbers involved, and the fix where
//! there is one; a failed provider call's errno follows as the error's source.

use super::*;

use rpma::descriptor::Offer;

/// The error's text and its sources' (`: `-separated, as `anyhow`'s `{:#}` prints a chain),
/// after asserting its kind.
#[track_caller]
fn says<T: std::fmt::Debug>(r: rpma::Result<T>, kind: ErrorKind) -> String {
    let e = r.expect_err("a mistake");
    assert_eq!(e.kind(), kind, "{e}");
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

#[track_caller]
fn has(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{text:?} does not say {p:?}");
    }
}

#[test]
fn errors__ten_common_mistakes_name_the_item_the_numbers_and_the_fix() {
    let fx = fixture();
    let (c, src, dst) = (&fx.p.client, &fx.src, &fx.rdst);
    // 1. A write past the end of the remote region.
    let t = says(c.write(dst.at(4090), src.slice(0..8)).post(), ErrorKind::InvalidInput);
    has(&t, &["Conn::write: ", "offset 4090 + length 8 > the region's 4096 bytes"]);
    // 2. A persistent flush before the peer's configuration was applied.
    let t = says(c.flush(dst.slice(0..8), FlushType::Persistent).post(), ErrorKind::Unsupported);
    has(&t, &["Conn::flush: ", "direct write to PMem", "Conn::apply_remote_peer_cfg"]);
    // 3. A flush to a region not registered for it.
    let plain = fx.p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap();
    let t = says(c.flush(remote(&plain).slice(0..8), FlushType::Visibility).post(), ErrorKind::Unsupported);
    has(&t, &["Conn::flush: ", "not registered for visibility flush", "Usage::FLUSH_TYPE_VISIBILITY"]);
    // 4. A local range past the end of its region.
    let small = fx.p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let t = says(c.write(dst.at(0), small.slice(0..100)).post(), ErrorKind::InvalidInput);
    has(&t, &["Conn::write: ", "offset 0 + length 100 > the region's 64 bytes"]);
    // 5. An atomic write at an offset that is not a multiple of 8.
    let t = says(c.atomic_write(dst.at(4), [1; 8]).post(), ErrorKind::InvalidInput);
    has(&t, &["Conn::atomic_write: ", "dst_offset 4", "RPMA_ATOMIC_WRITE_ALIGNMENT (8)"]);
    // 6. Inline data beyond the connection's limit.
    let t = says(c.send_inline(&[0; 16]).post(), ErrorKind::InvalidInput);
    has(&t, &["Conn::send: ", "16 bytes, max_inline 0", "ConnCfg::with_max_inline"]);
    // 7. Persisting a range outside the region.
    let t = says(fx.dst.persist(4000, 200), ErrorKind::InvalidInput);
    has(&t, &["MrLocal::persist", "[4000, 4000 + 200) is outside the region of 4096 bytes"]);
    // 8. Private data that is no offer.
    let t = says(Offer::decode(&[0; 10]), ErrorKind::InvalidInput);
    has(&t, &["Offer::decode", "private data of 10 bytes holds no offer of 22", "Offer::encode"]);
    // 9. A device lookup of an address no device owns.
    let t = says(Device::lookup(&fx.f, "203.0.113.9", ContextType::Local), ErrorKind::Provider);
    has(&t, &["Device::lookup: ", "No such device (os error 19)"]);
    // 10. A wait with a zero timeout.
    let t = says(c.cq().wait_next(Some(Duration::ZERO)), ErrorKind::InvalidInput);
    has(&t, &["Cq::wait_next", "the timeout is zero", "non-blocking"]);
    // And the mock's own: a power cut without the persistence model names the builder's call.
    let t = says(fx.f.power_cut(fx.p.speer.device().backend()), ErrorKind::InvalidInput);
    has(&t, &["MockFabric::power_cut", "MockFabricBuilder::persistent_memory"]);
}

#[test]
fn errors__a_full_send_queue_names_its_size_and_the_fix() {
    let f = MockFabric::new();
    let p = pair_with(&f, Some(&ConnCfg::new().with_sq_size(4)), None);
    let src = p.cpeer.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let dst = remote(&p.speer.alloc_mr(64, Usage::WRITE_DST).unwrap());
    for i in 0..4 {
        p.client.write(dst.at(8 * i), src.slice(0..8)).flags(CompletionFlags::ON_ERROR).post().unwrap();
    }
    let t = says(p.client.write(dst.at(0), src.slice(0..8)).post(), ErrorKind::Provider);
    has(
        &t,
        &[
            "Conn::write: ",
            "Cannot allocate memory (os error 12)",
            "send queue is full: 4 of its sq_size 4 entries in flight, 1 more posted",
            "raise sq_size in ConnCfg",
            "signal operations and poll their completions",
        ],
    );
}

#[test]
fn errors__a_device_lookup_names_the_address_and_the_devices_addresses() {
    let f = MockFabric::builder().device("mock0", &["10.0.0.1", "10.0.0.2"]).device("mock1", &["10.0.1.1"]).build();
    for kind in [ContextType::Local, ContextType::Remote] {
        let t = says(Device::lookup(&f, "203.0.113.9", kind), ErrorKind::Provider);
        has(
            &t,
            &[
                "Device::lookup: ",
                "No such device (os error 19)",
                "no device owns 203.0.113.9; the devices own 10.0.0.1, 10.0.0.2, 10.0.1.1",
            ],
        );
    }
}

#[test]
fn errors__a_listen_that_fails_names_the_address_and_port() {
    let f = MockFabric::new();
    let p = peer(&f);
    let _ep = Ep::listen(&p, ADDR, "7301").unwrap();
    // The port in use.
    let t = says(Ep::listen(&p, ADDR, "7301"), ErrorKind::Provider);
    has(
        &t,
        &[
            "Ep::listen: ",
            "Address already in use (os error 98)",
            "listening on 127.0.0.1:7301",
            "another endpoint listens there",
        ],
    );
    // A service name for the port.
    let t = says(Ep::listen(&p, ADDR, "http"), ErrorKind::Provider);
    has(&t, &["Ep::listen: ", "listening on 127.0.0.1:http", "the port is not a number"]);
    // An address no device owns.
    let t = says(Ep::listen(&p, "203.0.113.9", "7301"), ErrorKind::Provider);
    has(&t, &["listening on 203.0.113.9:7301", "no device owns 203.0.113.9; the devices own 127.0.0.1"]);
}

#[test]
fn errors__alloc_mr_names_alloc_mr() {
    let f = MockFabric::new();
    let p = peer(&f);
    let e = p.alloc_mr(0, Usage::WRITE_SRC).expect_err("a zero-size allocation");
    // The operation is the call made, not the registration it is built on.
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Peer::alloc_mr"), "{e}");
    let t = e.to_string();
    assert_eq!(t, "Peer::alloc_mr: invalid argument: len is 0: a region holds at least 1 byte");
    assert!(!t.contains("Peer::reg_mr"), "{t}");
    // So does a registration that fails.
    arm(&f, "ibv_reg_mr", EIO);
    let t = says(p.alloc_mr(4096, Usage::WRITE_SRC), ErrorKind::Provider);
    assert_eq!(t, "Peer::alloc_mr: provider error: ibv_reg_mr failed: injected fault: Input/output error (os error 5)");
    // A registration made through reg_mr is named so.
    let t = says(p.reg_mr(rpma::Memory::from_vec(Vec::new()), Usage::WRITE_SRC), ErrorKind::InvalidInput);
    has(&t, &["Peer::reg_mr: ", "size is 0"]);
}
