//! `rpma_peer_cfg_from_descriptor` on arbitrary bytes: never panics; an empty input is
//! `InvalidInput`; otherwise the first byte alone decides "direct write to PMem" and the descriptor
//! round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpma::{ErrorKind, PeerCfg};

fuzz_target!(|data: &[u8]| {
    match PeerCfg::from_descriptor(data) {
        Ok(cfg) => {
            assert!(!data.is_empty());
            assert_eq!(cfg.direct_write_to_pmem(), data[0] != 0);
            let again = PeerCfg::from_descriptor(&cfg.descriptor()).unwrap();
            assert_eq!(again.direct_write_to_pmem(), cfg.direct_write_to_pmem());
        }
        Err(e) => {
            assert!(data.is_empty());
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        }
    }
});
