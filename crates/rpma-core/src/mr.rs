//! Local and remote memory regions.

use std::fmt;
use std::sync::Arc;

use crate::descriptor::{MrDescriptor, MR_DESCRIPTOR_SIZE};
use crate::error::{Error, Result};
use crate::peer::{Peer, PeerInner};
use crate::transport::{MrBackend, MrBuffer, Transport};
use crate::types::{Advice, Usage};
use crate::validate;

/// A registered local memory region (`struct rpma_mr_local`) that owns its bytes.
///
/// The bytes can be written by the device or by a remote peer at any moment, so they are
/// reached by copy only ([`MrLocal::read`], [`MrLocal::write`]); no reference to them is handed
/// out. Dropping the region deregisters it before its memory is freed, and a connection that
/// posted an operation on it keeps the registration alive until that operation is retired.
pub struct MrLocal<T: Transport> {
    pub(crate) mr: Arc<T::Mr>,
    usage: Usage,
    _peer: Arc<PeerInner<T>>,
}

impl<T: Transport> fmt::Debug for MrLocal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrLocal")
            .field("addr", &format_args!("{:#x}", self.mr.addr()))
            .field("len", &self.mr.len())
            .field("usage", &self.usage)
            .finish()
    }
}

impl<T: Transport> Peer<T> {
    /// `rpma_mr_reg`: allocates `buf` and registers it for `usage`.
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if the buffer is empty (`size == 0`) or `usage` is
    /// empty or has bits outside [`Usage::all()`]; [`NoMem`](crate::ErrorKind::NoMem) if the
    /// memory cannot be allocated; [`Provider`](crate::ErrorKind::Provider) if the registration
    /// fails.
    pub fn reg_mr(&self, buf: MrBuffer, usage: Usage) -> Result<MrLocal<T>> {
        const OP: &str = "rpma_mr_reg";
        if buf.is_empty() {
            return Err(Error::inval(OP, "size is 0"));
        }
        validate::usage(OP, usage)?;
        let mr = self.transport().reg_mr(&self.inner.pd, buf, usage).map_err(|e| e.in_op(OP))?;
        Ok(MrLocal { mr: Arc::new(mr), usage, _peer: Arc::clone(&self.inner) })
    }

    /// Shorthand for [`Peer::reg_mr`] with a page-aligned buffer of `len` zeroed bytes.
    ///
    /// # Errors
    /// As [`Peer::reg_mr`].
    pub fn alloc_mr(&self, len: usize, usage: Usage) -> Result<MrLocal<T>> {
        self.reg_mr(MrBuffer::PageAligned(len), usage)
    }
}

impl<T: Transport> MrLocal<T> {
    /// `rpma_mr_get_ptr`: the registered base address (as the peer sees it in descriptors).
    #[must_use]
    pub fn addr(&self) -> u64 {
        self.mr.addr()
    }

    /// `rpma_mr_get_size`: the registered length.
    #[must_use]
    pub fn len(&self) -> usize {
        self.mr.len()
    }

    /// Whether the region is empty (never: registration rejects zero sizes).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.mr.len() == 0
    }

    /// The usage the region was registered for.
    #[must_use]
    pub const fn usage(&self) -> Usage {
        self.usage
    }

    /// The backend's region.
    #[must_use]
    pub fn raw(&self) -> &Arc<T::Mr> {
        &self.mr
    }

    /// `rpma_mr_get_descriptor`: the 21-byte descriptor a remote peer needs to access the
    /// region.
    ///
    /// SECURITY: a descriptor grants access to the region to whoever holds it; exchange it over
    /// a channel you trust.
    #[must_use]
    pub fn descriptor(&self) -> [u8; MR_DESCRIPTOR_SIZE] {
        MrDescriptor {
            addr: self.mr.addr(),
            len: self.mr.len() as u64,
            rkey: self.mr.rkey(),
            usage: self.usage.bits() as u8,
        }
        .encode()
    }

    /// `rpma_mr_get_descriptor_size`: always 21.
    #[must_use]
    pub const fn descriptor_size(&self) -> usize {
        MR_DESCRIPTOR_SIZE
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    ///
    /// The copy is a snapshot: an operation in flight on these bytes may be changing them.
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if `[offset, offset + dst.len())` is outside the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        validate::local_range("MrLocal::read", self.mr.len(), offset, dst.len())?;
        self.mr.read(offset, dst);
        Ok(())
    }

    /// Copies `len` bytes at `offset` into a new vector.
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if the range is outside the region.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        validate::local_range("MrLocal::to_vec", self.mr.len(), offset, len)?;
        let mut v = vec![0u8; len];
        self.mr.read(offset, &mut v);
        Ok(v)
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if `[offset, offset + src.len())` is outside the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        validate::local_range("MrLocal::write", self.mr.len(), offset, src.len())?;
        self.mr.write(offset, src);
        Ok(())
    }

    /// `rpma_mr_advise`: advises the provider about `[offset, offset + len)` (e.g. prefetch an
    /// on-demand-paging mapping).
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if the range is outside the region (checked here,
    /// unlike librpma, spec 9 #13), or the provider rejects the advice or flags;
    /// [`NoSupp`](crate::ErrorKind::NoSupp) if advising is not supported;
    /// [`Provider`](crate::ErrorKind::Provider) on other provider failures.
    pub fn advise(&self, offset: usize, len: usize, advice: Advice, flags: u32) -> Result<()> {
        const OP: &str = "rpma_mr_advise";
        validate::local_range(OP, self.mr.len(), offset, len)?;
        if len > u32::MAX as usize {
            return Err(Error::inval(OP, "len does not fit the 32-bit SGE length"));
        }
        self.mr.advise(offset, len, advice, flags).map_err(|e| e.in_op(OP))
    }

    /// `rpma_mr_dereg`: deregisters the region now and reports a failure. (Dropping it
    /// deregisters too, logging a failure.) If a connection still holds the region for an
    /// operation in flight, deregistration happens when that operation is retired.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if deregistration fails; the region is gone all
    /// the same (spec 9 #10).
    pub fn dereg(self) -> Result<()> {
        match Arc::try_unwrap(self.mr) {
            Ok(mr) => mr.dereg().map_err(|e| e.in_op("rpma_mr_dereg")),
            Err(_) => Ok(()),
        }
    }
}

/// A remote memory region (`struct rpma_mr_remote`), decoded from a peer's descriptor.
///
/// Plain data: it holds no resource. Its content comes from the remote peer and is untrusted:
/// operations check offsets against the size it claims, and the responder checks the real
/// registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrRemote {
    desc: MrDescriptor,
}

impl MrRemote {
    /// `rpma_mr_remote_from_descriptor`.
    ///
    /// SECURITY: a tampered descriptor redirects operations; exchange descriptors over a
    /// channel you trust.
    ///
    /// # Errors
    /// [`Inval`](crate::ErrorKind::Inval) if `desc` is shorter than 21 bytes or its usage byte
    /// is 0 (librpma's code behaviour; its man page said `NoSupp`, spec 9 #2).
    pub fn from_descriptor(desc: &[u8]) -> Result<Self> {
        Ok(Self { desc: MrDescriptor::decode(desc)? })
    }

    /// `rpma_mr_remote_get_size`.
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
