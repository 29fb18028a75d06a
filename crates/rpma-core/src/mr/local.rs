//! A registered local memory region: registration, its bytes, and deregistration.

use std::fmt;
use std::sync::Arc;

use rpma_mem::{MemError, Memory, VolatileSlice};

use crate::descriptor::{MrDescriptor, MR_DESCRIPTOR_SIZE};
use crate::error::{Error, ErrorKind, Result};
use crate::peer::{Peer, PeerInner};
use crate::transport::{MrBackend, Transport};
use crate::types::{Advice, Usage};
use crate::validate;

/// A registered local memory region (`struct rpma_mr_local`) that owns its bytes.
///
/// The region owns the [`Memory`] it was registered with and gives it back on
/// [`dereg`](MrLocal::dereg). Its bytes are reached in two ways (`docs/memory.md`):
/// - always, through a [`VolatileSlice`] ([`MrLocal::volatile`], and the copying shorthands
///   [`read`](MrLocal::read), [`write`](MrLocal::write), [`to_vec`](MrLocal::to_vec)): the device
///   or a remote peer may change them at any moment, so no reference to them is made (rule M2);
/// - as a plain `&mut [u8]` ([`MrLocal::as_mut_slice`]) only when nothing else can touch them:
///   `&mut self` (no operation is being built on the region), no remote access granted by its
///   usage, and no operation in flight holding it (rule M3).
///
/// Dropping the region deregisters it before its memory is freed; a connection that posted an
/// operation on it keeps the registration alive until that operation is retired (rule V4).
///
/// `Send + Sync`: every access through `&self` is a volatile copy.
pub struct MrLocal<T: Transport> {
    pub(crate) mr: Arc<T::Mr>,
    usage: Usage,
    remote_access: bool,
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

/// The `Error` of a memory failure in operation `op`.
pub(crate) fn mem_error(op: &'static str, e: &MemError) -> Error {
    let kind = match e {
        MemError::Alloc { .. } | MemError::HugePages { .. } => ErrorKind::OutOfMemory,
        MemError::Io { .. } => ErrorKind::Provider,
        _ => ErrorKind::InvalidInput,
    };
    let err = match (kind, e.errno()) {
        (ErrorKind::Provider, Some(errno)) => Error::provider(op, errno),
        _ => Error::new(kind, op),
    };
    err.with_detail(&e.to_string())
}

impl<T: Transport> Peer<T> {
    /// `rpma_mr_reg`: registers `memory` for `usage`; the region owns it until
    /// [`MrLocal::dereg`] gives it back.
    ///
    /// ```
    /// # fn f<T: rpma::Transport>(peer: &rpma::Peer<T>) -> rpma::Result<()> {
    /// use rpma::{Memory, Usage};
    /// let mr = peer.reg_mr(Memory::from_vec(vec![0; 4096]), Usage::WRITE_SRC)?;
    /// let v = mr.dereg()?.map(|m| m.into_vec());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the memory is empty or `usage` is empty
    /// or has bits outside [`Usage::all()`]; [`Provider`](crate::ErrorKind::Provider) if the
    /// registration fails (the memory is released then).
    #[doc(alias = "rpma_mr_reg")]
    pub fn reg_mr(&self, memory: Memory, usage: Usage) -> Result<MrLocal<T>> {
        const OP: &str = "Peer::reg_mr";
        if memory.is_empty() {
            return Err(Error::invalid_input(OP, "size is 0"));
        }
        validate::usage(OP, usage)?;
        let mr = self.transport().reg_mr(&self.inner.pd, memory, usage).map_err(|e| e.in_op(OP))?;
        let remote_access = usage.remote_readable()
            || usage.remote_writable()
            || (self.inner.caps.iwarp && usage.intersects(Usage::READ_DST | Usage::RECV));
        Ok(MrLocal { mr: Arc::new(mr), usage, remote_access, _peer: Arc::clone(&self.inner) })
    }

    /// Registers `len` zeroed, page-aligned bytes (what librpma's examples register).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `len == 0` or `usage` is invalid;
    /// [`OutOfMemory`](crate::ErrorKind::OutOfMemory) if the memory cannot be allocated; as
    /// [`Peer::reg_mr`].
    pub fn alloc_mr(&self, len: usize, usage: Usage) -> Result<MrLocal<T>> {
        const OP: &str = "Peer::alloc_mr";
        if len == 0 {
            return Err(Error::invalid_input(OP, "len is 0: a region holds at least 1 byte"));
        }
        let memory = Memory::page_aligned(len).map_err(|e| mem_error(OP, &e))?;
        self.reg_mr(memory, usage).map_err(|e| e.in_op(OP))
    }
}

impl<T: Transport> MrLocal<T> {
    /// Whether the region was registered on the peer (protection domain) `peer`.
    #[inline]
    pub(crate) fn is_of(&self, peer: &Arc<PeerInner<T>>) -> bool {
        Arc::ptr_eq(&self._peer, peer)
    }

    /// `rpma_mr_get_ptr`: the registered base address (as the peer sees it in descriptors).
    #[doc(alias = "rpma_mr_get_ptr")]
    #[must_use]
    pub fn addr(&self) -> u64 {
        self.mr.addr()
    }

    /// `rpma_mr_get_size`: the registered length.
    #[doc(alias = "rpma_mr_get_size")]
    #[must_use]
    pub fn len(&self) -> usize {
        self.mr.len()
    }

    /// The remote key peers use to reach the region (also in its descriptor).
    #[must_use]
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
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

    /// Whether a remote peer may access the region (its usage grants a remote read, write or
    /// flush; on iWARP also a read destination or receive buffer, which need remote write).
    #[must_use]
    pub const fn remote_access(&self) -> bool {
        self.remote_access
    }

    /// `rpma_mr_get_descriptor`: the 21-byte descriptor a remote peer needs to access the
    /// region.
    ///
    /// SECURITY: a descriptor grants access to the region to whoever holds it; exchange it over
    /// a channel you trust.
    #[doc(alias = "rpma_mr_get_descriptor")]
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
    #[doc(alias = "rpma_mr_get_descriptor_size")]
    #[must_use]
    pub const fn descriptor_size(&self) -> usize {
        MR_DESCRIPTOR_SIZE
    }

    /// The region's bytes as a [`VolatileSlice`]: copies in and out, single-value volatile and
    /// atomic accesses (e.g. polling a byte a peer writes), never a reference (rule M2).
    #[must_use]
    pub fn volatile(&self) -> VolatileSlice<'_> {
        self.mr.memory()
    }

    /// The region's bytes as a plain mutable slice, to fill or read data in place (zero copy).
    ///
    /// Sound because nothing else can touch the bytes while the slice lives (rule M3): `&mut
    /// self` means no operation is being built on the region in this thread or another, the
    /// usage grants no remote access, and no operation posted earlier is still in flight.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the usage grants remote access (a peer
    /// may write or read the bytes at any time: use [`MrLocal::volatile`]);
    /// [`WouldBlock`](crate::ErrorKind::WouldBlock) if an operation posted on the region has not
    /// been retired yet (poll its completion, or a later signaled one of the same queue, first).
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        const OP: &str = "MrLocal::as_mut_slice";
        if self.remote_access {
            return Err(Error::invalid_input(OP, "remote peers may access this region: use volatile()"));
        }
        Arc::get_mut(&mut self.mr)
            .and_then(|mr| mr.memory_mut())
            .map(Memory::as_mut_slice)
            .ok_or_else(|| Error::new(ErrorKind::WouldBlock, OP).with_detail("an operation in flight holds the region"))
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    ///
    /// The copy is a snapshot: an operation in flight on these bytes may be changing them.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `[offset, offset + dst.len())` is
    /// outside the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.volatile().read(offset, dst).map_err(|e| mem_error("MrLocal::read", &e))
    }

    /// Copies `len` bytes at `offset` into a new vector.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the range is outside the region.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let v = self.volatile().subslice(offset, len).map_err(|e| mem_error("MrLocal::to_vec", &e))?;
        Ok(v.to_vec())
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `[offset, offset + src.len())` is
    /// outside the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.volatile().write(offset, src).map_err(|e| mem_error("MrLocal::write", &e))
    }

    /// Makes the region's bytes `[offset, offset + len)` durable now, as the owner of
    /// persistent memory does after storing into it (librpma's GPSPM server, which persists what
    /// a client wrote when the client asks; any local store into a persistent region): the range
    /// is written back from the CPU caches, or synced to its file for a file mapping. On memory
    /// that is not persistent it changes nothing there (on the mock's persistence model it makes
    /// the range durable: docs/persistence.md).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the range is outside the region (the
    /// message names the offset, the length and the region's size);
    /// [`Provider`](crate::ErrorKind::Provider) if writing it back fails (e.g. `msync`).
    pub fn persist(&self, offset: usize, len: usize) -> Result<()> {
        const OP: &str = "MrLocal::persist";
        if offset.checked_add(len).map_or(true, |end| end > self.mr.len()) {
            return Err(Error::invalid_input(
                OP,
                &format!("range [{offset}, {offset} + {len}) is outside the region of {} bytes", self.mr.len()),
            ));
        }
        self.mr.persist(offset, len).map_err(|e| e.in_op(OP))
    }

    /// `rpma_mr_advise`: advises the provider about `[offset, offset + len)` (e.g. prefetch an
    /// on-demand-paging mapping).
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if the range is outside the region (checked
    /// here, unlike librpma, docs/decisions.md #13), or the provider rejects the advice or flags;
    /// [`Unsupported`](crate::ErrorKind::Unsupported) if advising is not supported;
    /// [`Provider`](crate::ErrorKind::Provider) on other provider failures.
    #[doc(alias = "rpma_mr_advise")]
    pub fn advise(&self, offset: usize, len: usize, advice: Advice, flags: u32) -> Result<()> {
        const OP: &str = "MrLocal::advise";
        validate::local_range(OP, self.mr.len(), offset, len)?;
        if len > u32::MAX as usize {
            return Err(Error::invalid_input(OP, "len does not fit the 32-bit SGE length"));
        }
        self.mr.advise(offset, len, advice, flags).map_err(|e| e.in_op(OP))
    }

    /// Whether an operation in flight (posted and not retired yet) still holds the region:
    /// then [`MrLocal::dereg`] would defer deregistration (`Ok(None)`).
    #[must_use]
    pub fn is_in_use(&self) -> bool {
        Arc::strong_count(&self.mr) > 1 || self.mr.in_use()
    }

    /// `rpma_mr_dereg`: deregisters the region now and gives its memory back. (Dropping it
    /// deregisters too, logging a failure.) If an operation in flight still holds the region,
    /// deregistration happens when that operation is retired, the memory is freed then, and
    /// this returns `Ok(None)`.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if deregistration fails: the device may still
    /// reach the memory, so it is leaked, never freed (rule M1).
    #[doc(alias = "rpma_mr_dereg")]
    pub fn dereg(self) -> Result<Option<Memory>> {
        match Arc::try_unwrap(self.mr) {
            Ok(mr) => mr.dereg().map_err(|e| e.in_op("MrLocal::dereg")),
            Err(_) => Ok(None),
        }
    }
}
