//! The private-data container of librpma's examples (`struct common_data`, 28 bytes).
//!
//! ```text
//! offset 0  u16  data_offset      where user data starts inside the described region
//! offset 2  u8   mr_desc_size     bytes of the MR descriptor at descriptors[0]
//! offset 3  u8   pcfg_desc_size   bytes of the peer-cfg descriptor after it (0 = none)
//! offset 4  [u8; 24] descriptors
//! ```
//! Native byte order, as the C examples send the struct's bytes; a receiver requires at least
//! 28 bytes (the transport may zero-pad private data past what the peer sent).

use anyhow::{bail, ensure, Result};
use rpma::MrRemote;
use rpma::PeerCfg;

/// `sizeof(struct common_data)`.
pub const COMMON_DATA_SIZE: usize = 28;
/// `DESCRIPTORS_MAX_SIZE`.
pub const DESCRIPTORS_MAX_SIZE: usize = 24;

/// A decoded `struct common_data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommonData {
    /// Where the user data starts inside the described region.
    pub data_offset: u16,
    /// The memory region's descriptor.
    pub mr_desc: Vec<u8>,
    /// The peer configuration's descriptor, if sent.
    pub pcfg_desc: Option<Vec<u8>>,
}

impl CommonData {
    /// A container with a memory region descriptor and no peer configuration.
    #[must_use]
    pub fn new(data_offset: u16, mr_desc: &[u8; MrRemote::DESCRIPTOR_SIZE]) -> Self {
        Self { data_offset, mr_desc: mr_desc.to_vec(), pcfg_desc: None }
    }

    /// Adds the peer configuration's descriptor (example 05).
    #[must_use]
    pub fn with_pcfg(mut self, pcfg: &PeerCfg) -> Self {
        self.pcfg_desc = Some(pcfg.descriptor().to_vec());
        self
    }

    /// The 28 bytes to send.
    ///
    /// # Errors
    /// If the descriptors do not fit in 24 bytes.
    pub fn encode(&self) -> Result<[u8; COMMON_DATA_SIZE]> {
        let pcfg = self.pcfg_desc.as_deref().unwrap_or(&[]);
        ensure!(self.mr_desc.len() + pcfg.len() <= DESCRIPTORS_MAX_SIZE, "descriptors exceed 24 bytes");
        let mut b = [0u8; COMMON_DATA_SIZE];
        b[0..2].copy_from_slice(&self.data_offset.to_ne_bytes());
        b[2] = self.mr_desc.len() as u8;
        b[3] = pcfg.len() as u8;
        b[4..4 + self.mr_desc.len()].copy_from_slice(&self.mr_desc);
        b[4 + self.mr_desc.len()..4 + self.mr_desc.len() + pcfg.len()].copy_from_slice(pcfg);
        Ok(b)
    }

    /// Decodes the container from received private data (untrusted).
    ///
    /// # Errors
    /// If fewer than 28 bytes were received, or the sizes inside do not fit the container or do
    /// not match the descriptor sizes of this librpma version.
    pub fn decode(pdata: &[u8]) -> Result<Self> {
        if pdata.len() < COMMON_DATA_SIZE {
            bail!("received private data is too small ({} < {COMMON_DATA_SIZE} bytes)", pdata.len());
        }
        let data_offset = u16::from_ne_bytes([pdata[0], pdata[1]]);
        let (mr, pc) = (usize::from(pdata[2]), usize::from(pdata[3]));
        ensure!(mr + pc <= DESCRIPTORS_MAX_SIZE, "private data: descriptor sizes {mr} + {pc} exceed 24 bytes");
        ensure!(
            mr == MrRemote::DESCRIPTOR_SIZE,
            "private data: MR descriptor size {mr} != {}",
            MrRemote::DESCRIPTOR_SIZE
        );
        ensure!(
            pc == 0 || pc == PeerCfg::DESCRIPTOR_SIZE,
            "private data: peer-cfg descriptor size {pc} != {}",
            PeerCfg::DESCRIPTOR_SIZE
        );
        let d = &pdata[4..4 + DESCRIPTORS_MAX_SIZE];
        Ok(Self { data_offset, mr_desc: d[..mr].to_vec(), pcfg_desc: (pc > 0).then(|| d[mr..mr + pc].to_vec()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let desc: [u8; MrRemote::DESCRIPTOR_SIZE] = core::array::from_fn(|i| i as u8 + 1);
        let pcfg = PeerCfg::new().with_direct_write_to_pmem(true);
        let c = CommonData::new(17, &desc).with_pcfg(&pcfg);
        let b = c.encode().unwrap();
        assert_eq!(&b[0..2], &17u16.to_ne_bytes());
        assert_eq!(b[2], 21);
        assert_eq!(b[3], 1);
        assert_eq!(&b[4..25], &desc);
        assert_eq!(b[25], pcfg.descriptor()[0]);
        assert_eq!(&b[26..], &[0, 0]);
        let mut padded = b.to_vec();
        padded.resize(56, 0);
        assert_eq!(CommonData::decode(&padded).unwrap(), c);
    }

    #[test]
    fn rejects_short_and_inconsistent() {
        assert!(CommonData::decode(&[0u8; 27]).is_err());
        let mut b = [0u8; 28];
        b[2] = 21;
        b[3] = 4;
        assert!(CommonData::decode(&b).is_err());
        b[2] = 20;
        b[3] = 0;
        assert!(CommonData::decode(&b).is_err());
        b[2] = 21;
        assert!(CommonData::decode(&b).unwrap().pcfg_desc.is_none());
    }
}
