//! `rpma_mr_remote_from_descriptor` on arbitrary bytes (a descriptor comes from the remote
//! peer): never panics; accepts exactly the inputs of at least 21 bytes with a non-zero usage
//! byte, decodes their fields little-endian and re-encodes them unchanged; refuses the rest
//! with `InvalidInput`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpma::descriptor::MrDescriptor;
use rpma::{ErrorKind, MrRemote};

fuzz_target!(|data: &[u8]| {
    match MrRemote::from_descriptor(data) {
        Ok(r) => {
            assert!(data.len() >= MrRemote::DESCRIPTOR_SIZE && data[20] != 0);
            let d = r.descriptor();
            assert_eq!(d.encode()[..], data[..MrRemote::DESCRIPTOR_SIZE]);
            assert_eq!(r.addr(), u64::from_le_bytes(data[0..8].try_into().unwrap()));
            assert_eq!(r.len(), u64::from_le_bytes(data[8..16].try_into().unwrap()));
            assert_eq!(r.rkey(), u32::from_le_bytes(data[16..20].try_into().unwrap()));
            assert_eq!(r.usage().bits(), u32::from(data[20]));
            assert_eq!(r.flush_type(), r.usage() & rpma::Usage::FLUSH_TYPES);
            assert_eq!(MrDescriptor::decode(&d.encode()).unwrap(), *d);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(data.len() < MrRemote::DESCRIPTOR_SIZE || data[20] == 0);
        }
    }
});
