//! Local-only regions: out of the rkey table.

use super::*;

/// A descriptor of `mr` whose usage byte claims remote read and write (a lying peer).
fn forged_rw(mr: &MrLocal) -> MrRemote {
    let mut desc = mr.descriptor();
    desc[20] = (Usage::READ_SRC | Usage::WRITE_DST).bits() as u8;
    MrRemote::from_descriptor(&desc).unwrap()
}

#[test]
fn mr_reg__local_only_region_is_unreachable_by_its_rkey() {
    // A region whose usage grants no remote access is not in the mock's rkey table: a remote
    // read or write naming its rkey fails at the responder whatever the descriptor claims, and
    // touches no byte. That is what makes `as_mut_slice` sound for it (rule M3).
    let local_only = Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND | Usage::RECV;
    for op in ["read", "write"] {
        let fx = fixture();
        let mut target = fx.p.speer.alloc_mr(64, local_only).unwrap();
        assert!(!target.remote_access());
        target.as_mut_slice().unwrap().fill(0xAB);
        let forged = forged_rw(&target);
        fx.src.write(0, &[1; 8]).unwrap();
        match op {
            "read" => fx.p.client.read(fx.src.slice(0..8), forged.at(0)).context(1).post().unwrap(),
            _ => fx.p.client.write(forged.at(0), fx.src.slice(0..8)).context(1).post().unwrap(),
        }
        let wc = next_wc(fx.p.client.cq());
        assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::RemAccessErr), "{op}");
        assert_eq!(target.to_vec(0, 64).unwrap(), [0xAB; 64], "{op}: the region is untouched");
        assert_eq!(fx.src.to_vec(0, 8).unwrap(), [1; 8], "{op}: nothing was read");
        // Still exclusively ours.
        assert_eq!(target.as_mut_slice().unwrap().len(), 64);
    }
}

#[test]
fn mr_reg__iwarp_read_destination_is_remotely_writable() {
    // On iWARP a read destination needs remote write access: such a region is in the rkey
    // table, a (forged) remote write lands in it, and no plain `&mut [u8]` is handed out.
    let mut caps = rpma::Capabilities::roce_defaults();
    caps.iwarp = true;
    let fx = fixture_on(MockFabric::builder().capabilities(caps).build());
    let mut target = fx.p.speer.alloc_mr(64, Usage::READ_DST).unwrap();
    assert!(target.remote_access());
    assert_kind(target.as_mut_slice().map(|s| s.len()), ErrorKind::InvalidInput, "MrLocal::as_mut_slice");
    fx.src.write(0, b"iwarp!!!").unwrap();
    fx.p.client.write(forged_rw(&target).at(8), fx.src.slice(0..8)).context(1).post().unwrap();
    let wc = next_wc(fx.p.client.cq());
    assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success));
    assert_eq!(target.to_vec(8, 8).unwrap(), b"iwarp!!!");
}
