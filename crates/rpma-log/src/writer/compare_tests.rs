//! The repair's comparison of a replica's range with the writer's history: only the bytes a
//! record is made of count. A pad's filler (which no writer writes, so each replica holds what
//! an earlier lap left there) that differs must not count as a difference: a repair lowers a
//! replica's commit to the first difference before it rewrites what follows, and a repair cut
//! short there would leave acknowledged entries below the commit of a replica that held them.

use std::time::Duration;

use rpma::mock::{Device, MockFabric, Peer};
use rpma::{ContextType, Memory};

use crate::format::{self, Record};
use crate::{Log, LogOptions, Quorum, Replica, ReplicaAddr};

const LOG_ID: u64 = 0xC0_3E4E;

fn peer(fabric: &MockFabric, ip: &str) -> Peer {
    Peer::new(&Device::lookup(fabric, ip, ContextType::Local).expect("device")).expect("peer")
}

#[test]
fn a_pads_filler_is_no_difference_and_an_entrys_byte_is() {
    let fabric = MockFabric::builder().device("w", &["10.0.0.1"]).device("r", &["10.0.1.1"]).build();
    let rpeer = peer(&fabric, "10.0.1.1");
    let region = Memory::page_aligned(format::HEADER + 512).expect("memory");
    let _replica =
        Replica::format(&rpeer, region, LOG_ID).expect("format").listen("10.0.1.1", "7500").expect("listen").spawn();
    let opts = LogOptions::new(LOG_ID).quorum(Quorum::All).timeout(Duration::from_secs(2));
    let (mut log, _) =
        Log::open(&peer(&fabric, "10.0.0.1"), &[ReplicaAddr::new("10.0.1.1", "7500")], opts).expect("open");
    // Entries of 100 bytes (records of 144) in a ring of 512: the fourth needs a pad of 80.
    for k in 0..3u8 {
        log.append(&[k; 100]).expect("append");
    }
    log.sync_all().expect("sync");
    log.truncate_prefix(3).expect("truncate");
    log.append(&[9; 100]).expect("append after the pad");
    log.sync_all().expect("sync");
    let (from, to) = (log.head, log.tail);
    let ring = log.ring.to_vec(0, 512).expect("ring");
    let pad = log
        .bounds
        .iter()
        .copied()
        .find(|&b| matches!(format::parse_record(&ring, 512, b, to), Ok(Record::Pad(_))))
        .expect("a pad in the history");
    let entry = *log.index.back().expect("an entry");
    // The replica's range as the writer holds it: no difference.
    log.scratch.write(0, &ring).expect("scratch");
    assert_eq!(log.first_difference(from, to).expect("compare"), to);
    // Another filler after the pad's header: still none.
    let filler = (pad % 512) as usize + format::ENTRY_HEADER;
    log.scratch.write(filler, &[0xEE; 8]).expect("filler");
    assert_eq!(log.first_difference(from, to).expect("compare"), to, "a pad's filler counted as a difference");
    // With the rule off (`Broken::compare_pad_filler`) the filler counts, at the pad: the
    // assertion above catches it.
    #[cfg(feature = "testing")]
    {
        let rules = log.opts.clone();
        let mut broken = crate::Broken::none();
        broken.compare_pad_filler = true;
        log.opts = rules.clone().broken(broken);
        assert_eq!(log.first_difference(from, to).expect("compare"), pad, "the broken comparison");
        log.opts = rules;
    }
    // A byte of the entry's payload: a difference, at the entry.
    let at = (entry % 512) as usize + format::ENTRY_HEADER + 3;
    log.scratch.write(at, &[0xEE]).expect("payload");
    assert_eq!(log.first_difference(from, to).expect("compare"), entry);
}
