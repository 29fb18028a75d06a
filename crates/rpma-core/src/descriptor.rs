//! Wire formats: the 21-byte memory-region descriptor and the 1-byte peer-config descriptor
//! (docs/semantics.md#descriptors), byte-compatible with librpma 0.9 - 1.3, and the [`Offer`]
//! that carries both in private data.

use crate::error::{Error, Result};
use crate::types::Usage;

/// Both descriptors of a server's offer in private data, made and read in one call.
pub use crate::offer::Offer;

/// Size of a memory-region descriptor ([`MrRemote::DESCRIPTOR_SIZE`](crate::MrRemote::DESCRIPTOR_SIZE)).
pub(crate) const MR_DESCRIPTOR_SIZE: usize = 21;
/// Size of a peer-configuration descriptor ([`PeerCfg::DESCRIPTOR_SIZE`](crate::PeerCfg::DESCRIPTOR_SIZE)).
pub(crate) const PEER_CFG_DESCRIPTOR_SIZE: usize = 1;

/// The decoded content of a memory-region descriptor.
///
/// Layout (packed, little-endian): `raddr: u64` at 0, `size: u64` at 8, `rkey: u32` at 16,
/// `usage: u8` at 20.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrDescriptor {
    /// Virtual address of the registered buffer in the owner's address space.
    pub addr: u64,
    /// Registered length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
    /// The `RPMA_MR_USAGE_*` bits the owner registered with (unknown bits are kept).
    pub usage: u8,
}

impl MrDescriptor {
    /// Encodes the descriptor.
    #[must_use]
    pub fn encode(&self) -> [u8; MR_DESCRIPTOR_SIZE] {
        let mut d = [0u8; MR_DESCRIPTOR_SIZE];
        d[0..8].copy_from_slice(&self.addr.to_le_bytes());
        d[8..16].copy_from_slice(&self.len.to_le_bytes());
        d[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        d[20] = self.usage;
        d
    }

    /// Decodes a descriptor received from a peer (`rpma_mr_remote_from_descriptor`).
    ///
    /// Bytes past the 21st are ignored, as in librpma.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if `desc` is shorter than 21
    /// bytes or its usage byte is zero (docs/decisions.md #2, #3: librpma's code behaviour is
    /// kept).
    pub fn decode(desc: &[u8]) -> Result<Self> {
        const OP: &str = "MrRemote::from_descriptor";
        let Some(d) = desc.get(..MR_DESCRIPTOR_SIZE) else {
            return Err(Error::invalid_input(OP, "descriptor shorter than 21 bytes"));
        };
        let mut a = [0u8; 8];
        a.copy_from_slice(&d[0..8]);
        let mut l = [0u8; 8];
        l.copy_from_slice(&d[8..16]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&d[16..20]);
        let usage = d[20];
        if usage == 0 {
            return Err(Error::invalid_input(OP, "descriptor usage byte is zero"));
        }
        Ok(Self { addr: u64::from_le_bytes(a), len: u64::from_le_bytes(l), rkey: u32::from_le_bytes(k), usage })
    }

    /// The usage bits as [`Usage`].
    #[must_use]
    pub const fn usage(&self) -> Usage {
        Usage::from_bits_retain(self.usage as u32)
    }
}

/// Encodes a peer-configuration descriptor.
#[must_use]
pub const fn encode_peer_cfg(direct_write_to_pmem: bool) -> [u8; PEER_CFG_DESCRIPTOR_SIZE] {
    [direct_write_to_pmem as u8]
}

/// Decodes a peer-configuration descriptor: any non-zero first byte means "direct write to
/// PMem supported".
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if `desc` is empty
/// (docs/decisions.md #11).
pub fn decode_peer_cfg(desc: &[u8]) -> Result<bool> {
    desc.first().map(|b| *b != 0).ok_or_else(|| Error::invalid_input("PeerCfg::from_descriptor", "descriptor is empty"))
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn golden_vector_from_upstream() {
        let d =
            MrDescriptor { addr: 0x0001_0203_0405_0607, len: 0x0809_0a0b_0c0d_0e0f, rkey: 0x1011_1213, usage: 0x21 };
        let bytes = d.encode();
        assert_eq!(
            bytes,
            [
                0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x13,
                0x12, 0x11, 0x10, 0x21
            ]
        );
        assert_eq!(MrDescriptor::decode(&bytes).unwrap(), d);
        let d2 = MrDescriptor { usage: 0x11, ..d };
        assert_eq!(d2.encode()[20], 0x11);
    }

    #[test]
    fn remote_from_descriptor__buff_usage_equal_zero() {
        let mut b = MrDescriptor { addr: 1, len: 2, rkey: 3, usage: 1 }.encode();
        b[20] = 0;
        assert_eq!(MrDescriptor::decode(&b).unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn peer_cfg_descriptor() {
        assert_eq!(encode_peer_cfg(true), [1]);
        assert_eq!(encode_peer_cfg(false), [0]);
        assert!(decode_peer_cfg(&[7]).unwrap());
        assert!(!decode_peer_cfg(&[0, 1]).unwrap());
        assert_eq!(decode_peer_cfg(&[]).unwrap_err().kind(), ErrorKind::InvalidInput);
    }

    proptest! {
        #[test]
        fn mr_descriptor_round_trip(addr: u64, len: u64, rkey: u32, usage in 1u8..) {
            let d = MrDescriptor { addr, len, rkey, usage };
            prop_assert_eq!(MrDescriptor::decode(&d.encode()).unwrap(), d);
        }

        #[test]
        fn mr_descriptor_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match MrDescriptor::decode(&bytes) {
                Ok(d) => {
                    prop_assert!(bytes.len() >= MR_DESCRIPTOR_SIZE);
                    prop_assert!(bytes[20] != 0);
                    prop_assert_eq!(&d.encode()[..], &bytes[..MR_DESCRIPTOR_SIZE]);
                }
                Err(e) => {
                    prop_assert_eq!(e.kind(), ErrorKind::InvalidInput);
                    prop_assert!(bytes.len() < MR_DESCRIPTOR_SIZE || bytes[20] == 0);
                }
            }
        }

        #[test]
        fn peer_cfg_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4)) {
            match decode_peer_cfg(&bytes) {
                Ok(v) => prop_assert_eq!(v, bytes[0] != 0),
                Err(e) => { prop_assert!(bytes.is_empty()); prop_assert_eq!(e.kind(), ErrorKind::InvalidInput); }
            }
        }
    }
}
