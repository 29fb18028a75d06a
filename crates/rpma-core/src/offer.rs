//! [`Offer`]: the private data most servers accept with, packed and unpacked in one place.

use crate::conn::Conn;
use crate::descriptor::{MR_DESCRIPTOR_SIZE, PEER_CFG_DESCRIPTOR_SIZE};
use crate::error::{Error, Result};
use crate::mr::{MrLocal, MrRemote};
use crate::peer::PeerCfg;
use crate::transport::Transport;

/// The bytes of an [`Offer`] in private data: a region descriptor, then a peer configuration
/// descriptor (librpma's examples send the same two, in this order).
pub(crate) const OFFER_SIZE: usize = MR_DESCRIPTOR_SIZE + PEER_CFG_DESCRIPTOR_SIZE;

/// What a server offers the client it accepts: its region (where to read, write and flush) and
/// its peer configuration (whether it writes directly to persistent memory, which a persistent
/// flush needs), carried in the accept's private data.
///
/// ```text
/// // Server: accept with its region and its configuration.
/// let pdata = Offer::encode(&log, &PeerCfg::new().with_direct_write_to_pmem(true));
/// let server = ep.next_conn_req(None)?.connect(Some(&pdata))?;
/// // Client, once established: where to write, with the server's configuration applied.
/// let remote = Offer::decode(client.private_data())?.apply_to(&client);
/// ```
///
/// (Run on every backend by the conformance case `conn__offer_carries_region_and_peer_cfg`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The server's region.
    pub region: MrRemote,
    /// The server's peer configuration.
    pub peer_cfg: PeerCfg,
}

impl Offer {
    /// The bytes of an offer in private data: a region descriptor, then a peer configuration
    /// descriptor.
    pub const SIZE: usize = OFFER_SIZE;

    /// The private data offering `mr` with `peer_cfg`.
    #[must_use]
    pub fn encode<T: Transport>(mr: &MrLocal<T>, peer_cfg: &PeerCfg) -> [u8; OFFER_SIZE] {
        let mut out = [0u8; OFFER_SIZE];
        out[..MR_DESCRIPTOR_SIZE].copy_from_slice(&mr.descriptor());
        out[MR_DESCRIPTOR_SIZE..].copy_from_slice(&peer_cfg.descriptor());
        out
    }

    /// The offer in `pdata` (private data may be zero-padded past it).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `pdata` is shorter than [`Offer::SIZE`]
    /// (the message gives both lengths) or holds no valid descriptors (the peer is untrusted).
    pub fn decode(pdata: &[u8]) -> Result<Self> {
        const OP: &str = "Offer::decode";
        if pdata.len() < OFFER_SIZE {
            return Err(Error::invalid_input(
                OP,
                &format!(
                    "private data of {} bytes holds no offer of {OFFER_SIZE} (a region descriptor of \
                     {MR_DESCRIPTOR_SIZE} and a peer configuration of {PEER_CFG_DESCRIPTOR_SIZE}); did the server \
                     accept with Offer::encode?",
                    pdata.len()
                ),
            ));
        }
        let region = MrRemote::from_descriptor(&pdata[..MR_DESCRIPTOR_SIZE]).map_err(|e| e.in_op(OP))?;
        let peer_cfg = PeerCfg::from_descriptor(&pdata[MR_DESCRIPTOR_SIZE..OFFER_SIZE]).map_err(|e| e.in_op(OP))?;
        Ok(Self { region, peer_cfg })
    }

    /// Applies the server's configuration to `conn` ([`Conn::apply_remote_peer_cfg`]) and gives
    /// the region.
    pub fn apply_to<T: Transport>(self, conn: &Conn<T>) -> MrRemote {
        conn.apply_remote_peer_cfg(&self.peer_cfg);
        self.region
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_private_data_names_the_lengths() {
        let e = Offer::decode(&[0; 5]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("private data of 5 bytes holds no offer of 22"), "{e}");
    }
}
