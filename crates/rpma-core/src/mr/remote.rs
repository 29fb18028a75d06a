//! A remote memory region, decoded from the descriptor a peer sent.

use crate::descriptor::MrDescriptor;
use crate::error::Result;
use crate::types::Usage;

/// A remote memory region (`struct rpma_mr_remote`), decoded from a peer's descriptor.
///
/// Plain data: it holds no resource. Its content comes from the remote peer and is untrusted:
/// operations check offsets against the size it claims, and the responder checks the real
/// registration. `Copy`, `Send + Sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrRemote {
    desc: MrDescriptor,
}

impl MrRemote {
    /// The size of a region's descriptor (`rpma_mr_get_descriptor_size()`): what
    /// [`MrLocal::descriptor`](crate::MrLocal::descriptor) gives and
    /// [`MrRemote::from_descriptor`] takes.
    pub const DESCRIPTOR_SIZE: usize = crate::descriptor::MR_DESCRIPTOR_SIZE;
    /// `RPMA_ATOMIC_WRITE_ALIGNMENT`: the alignment and size of an atomic write into a remote
    /// region ([`Conn::atomic_write`](crate::Conn::atomic_write)).
    pub const ATOMIC_WRITE_ALIGNMENT: usize = crate::validate::ATOMIC_WRITE_ALIGNMENT;

    /// `rpma_mr_remote_from_descriptor`.
    #[doc(alias = "rpma_mr_remote_from_descriptor")]
    ///
    /// SECURITY: a tampered descriptor redirects operations; exchange descriptors over a
    /// channel you trust.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `desc` is shorter than 21 bytes or its
    /// usage byte is 0 (librpma's code behaviour; its man page said `Unsupported`,
    /// docs/decisions.md #2).
    pub fn from_descriptor(desc: &[u8]) -> Result<Self> {
        Ok(Self { desc: MrDescriptor::decode(desc)? })
    }

    /// `rpma_mr_remote_get_size`.
    #[doc(alias = "rpma_mr_remote_get_size")]
    #[must_use]
    pub const fn len(&self) -> u64 {
        self.desc.len
    }

    /// Whether the remote region is empty.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.desc.len == 0
    }

    /// The remote base address (`raddr`).
    #[must_use]
    pub const fn addr(&self) -> u64 {
        self.desc.addr
    }

    /// The remote key.
    #[must_use]
    pub const fn rkey(&self) -> u32 {
        self.desc.rkey
    }

    /// The usage the owner registered with.
    #[must_use]
    pub const fn usage(&self) -> Usage {
        self.desc.usage()
    }

    /// `rpma_mr_remote_get_flush_type`: the flush-type bits of the remote usage.
    #[doc(alias = "rpma_mr_remote_get_flush_type")]
    #[must_use]
    pub const fn flush_type(&self) -> Usage {
        self.desc.usage().intersection(Usage::FLUSH_TYPES)
    }

    /// The decoded descriptor.
    #[must_use]
    pub const fn descriptor(&self) -> &MrDescriptor {
        &self.desc
    }
}
