//! Devices, peers and peer configurations.

use std::fmt;
use std::sync::Arc;

use crate::descriptor::{decode_peer_cfg, encode_peer_cfg, PEER_CFG_DESCRIPTOR_SIZE};
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{Capabilities, Transport};
use crate::types::ContextType;

/// An RDMA device context of a transport (librpma's `struct ibv_context *`). `Send + Sync`,
/// cheap to clone.
#[derive(Clone)]
pub struct Device<T: Transport> {
    pub(crate) transport: T,
    pub(crate) dev: T::Device,
}

impl<T: Transport> fmt::Debug for Device<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("transport", &self.transport.name()).field("dev", &self.dev).finish()
    }
}

impl<T: Transport> Device<T> {
    /// `rpma_utils_get_ibv_context`: the device that owns (`Local`) or routes to (`Remote`) the
    /// IP address `addr`.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if `addr` cannot be translated, bound or
    /// resolved (e.g. no RDMA device has the address). A NULL `addr`, NULL out-pointer or an
    /// invalid type cannot be expressed.
    pub fn lookup(transport: &T, addr: &str, kind: ContextType) -> Result<Self> {
        let dev = transport.lookup_device(addr, kind).map_err(|e| e.in_op("Device::lookup"))?;
        Ok(Self { transport: transport.clone(), dev })
    }

    /// A device from a backend's device object obtained otherwise than by
    /// [`Device::lookup`] (e.g. rpma-verbs' device of a context a C program passes to
    /// `rpma_peer_new`). Part of the backend contract ([`crate::transport`], not
    /// semver-stable).
    #[must_use]
    pub fn from_backend(transport: &T, dev: T::Device) -> Self {
        Self { transport: transport.clone(), dev }
    }

    /// `rpma_utils_ibv_context_is_odp_capable`: whether the device supports on-demand paging
    /// for RC reads and writes.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if the device query fails.
    pub fn is_odp_capable(&self) -> Result<bool> {
        let caps = self.transport.capabilities(&self.dev).map_err(|e| e.in_op("Device::is_odp_capable"))?;
        Ok(caps.odp)
    }

    /// Everything the device and backend can do.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if the device query fails.
    pub fn capabilities(&self) -> Result<Capabilities> {
        self.transport.capabilities(&self.dev).map_err(|e| e.in_op("Device::capabilities"))
    }

    /// The device's name (e.g. `rxe0`).
    #[must_use]
    pub fn name(&self) -> String {
        self.transport.device_name(&self.dev)
    }

    /// The transport this device belongs to.
    #[must_use]
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The backend's device object (part of the backend contract, [`crate::transport`], which is
    /// not semver-stable).
    #[must_use]
    pub fn backend(&self) -> &T::Device {
        &self.dev
    }
}

pub(crate) struct PeerInner<T: Transport> {
    pub(crate) pd: Arc<T::Pd>,
    pub(crate) caps: Capabilities,
    pub(crate) device: Device<T>,
}

/// A peer (`struct rpma_peer`): a protection domain on a device, the root of memory regions,
/// endpoints, connection requests and shared receive queues.
///
/// Cheap to clone (a handle). Every object made from a peer keeps it alive, so the protection
/// domain is released only after the last of them (librpma left this to the caller: deleting a
/// peer with live regions made `ibv_dealloc_pd` fail and leak). `Send + Sync`.
pub struct Peer<T: Transport> {
    pub(crate) inner: Arc<PeerInner<T>>,
}

impl<T: Transport> Clone for Peer<T> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<T: Transport> fmt::Debug for Peer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer").field("device", &self.inner.device).finish_non_exhaustive()
    }
}

/// `rpma_peer_new`'s mapping of an `ibv_alloc_pd` failure (docs/semantics.md#peer-creation):
/// `ENOMEM` → `OutOfMemory`, no errno (0) → `Other`, any other errno → `Provider`. Other kinds pass
/// through.
fn alloc_pd_error(e: Error) -> Error {
    const ENOMEM: i32 = 12;
    match (e.kind(), e.errno()) {
        (ErrorKind::Provider, Some(ENOMEM)) => Error::new(ErrorKind::OutOfMemory, e.op()),
        (ErrorKind::Provider, Some(0)) => {
            Error::new(ErrorKind::Other, e.op()).with_detail("ibv_alloc_pd failed without an errno")
        }
        _ => e,
    }
}

impl<T: Transport> Peer<T> {
    /// `rpma_peer_new`: queries the device's capabilities and allocates a protection domain.
    ///
    /// # Errors
    /// [`Provider`](crate::ErrorKind::Provider) if the capability query or `ibv_alloc_pd` fails;
    /// [`OutOfMemory`](crate::ErrorKind::OutOfMemory) if the PD cannot be allocated for lack of
    /// memory (`ENOMEM`); [`Other`](crate::ErrorKind::Other) if `ibv_alloc_pd` fails without an
    /// errno.
    pub fn new(device: &Device<T>) -> Result<Self> {
        const OP: &str = "Peer::new";
        let caps = device.transport.capabilities(&device.dev).map_err(|e| e.in_op(OP))?;
        // librpma 1.3's line, word for word and from its function (librpma logs nothing of the
        // flush; ours says it at DEBUG, with the device).
        if !caps.native_atomic_write {
            rpma_log!(Info in OP, "Native atomic write is not supported - ordinary RDMA write will be used instead.");
        }
        if !caps.native_flush {
            rpma_log!(Debug in OP, "Native flush is not supported on {}: a flush is emulated by an RDMA Read", device.name());
        }
        let pd = device.transport.alloc_pd(&device.dev, &caps).map_err(|e| alloc_pd_error(e).in_op(OP))?;
        Ok(Self { inner: Arc::new(PeerInner { pd: Arc::new(pd), caps, device: device.clone() }) })
    }

    /// The capabilities the peer saw at creation.
    #[must_use]
    pub fn capabilities(&self) -> &Capabilities {
        &self.inner.caps
    }

    /// The peer's device.
    #[must_use]
    pub fn device(&self) -> &Device<T> {
        &self.inner.device
    }

    pub(crate) fn transport(&self) -> &T {
        &self.inner.device.transport
    }

    /// The runtime of the peer's transport ([`Transport::runtime`]): where code on this peer
    /// takes its time, pauses and threads ([`crate::runtime`]).
    #[must_use]
    pub fn runtime(&self) -> &dyn crate::runtime::Runtime {
        self.transport().runtime()
    }

    /// `rpma_peer_delete`: drops this handle. The protection domain is released when the last
    /// object made from the peer is gone.
    ///
    /// # Errors
    /// None in practice; kept fallible for librpma parity (`ibv_dealloc_pd` failures are
    /// logged when the PD is finally released).
    pub fn delete(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}

/// A peer configuration (`struct rpma_peer_cfg`): what a peer tells its remote side about
/// itself (whether RDMA writes land directly in its persistent memory).
///
/// A plain builder; `Copy`, `Send + Sync`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCfg {
    direct_write_to_pmem: bool,
}

impl PeerCfg {
    /// The size of a peer configuration's descriptor (`rpma_peer_cfg_get_descriptor_size()`).
    pub const DESCRIPTOR_SIZE: usize = PEER_CFG_DESCRIPTOR_SIZE;

    /// `rpma_peer_cfg_new`: `direct_write_to_pmem = false`.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `rpma_peer_cfg_set_direct_write_to_pmem`: declares that an RDMA write to this node lands
    /// persistently in its PMem (e.g. DDIO off). Gates [`FlushType::Persistent`](crate::FlushType).
    #[doc(alias = "rpma_peer_cfg_set_direct_write_to_pmem")]
    #[must_use]
    pub const fn with_direct_write_to_pmem(mut self, supported: bool) -> Self {
        self.direct_write_to_pmem = supported;
        self
    }

    /// `rpma_peer_cfg_get_direct_write_to_pmem`.
    #[doc(alias = "rpma_peer_cfg_get_direct_write_to_pmem")]
    #[must_use]
    pub const fn direct_write_to_pmem(&self) -> bool {
        self.direct_write_to_pmem
    }

    /// `rpma_peer_cfg_get_descriptor`: the 1-byte descriptor to send to the remote peer.
    ///
    /// SECURITY: descriptors travel unauthenticated (e.g. in connection private data); a
    /// tampered one can make the remote side believe writes are persistent. Exchange them over an
    /// authenticated channel where that matters.
    #[must_use]
    pub fn descriptor(&self) -> [u8; PEER_CFG_DESCRIPTOR_SIZE] {
        encode_peer_cfg(self.direct_write_to_pmem())
    }

    /// `rpma_peer_cfg_get_descriptor_size`: always 1.
    #[must_use]
    pub const fn descriptor_size(&self) -> usize {
        PEER_CFG_DESCRIPTOR_SIZE
    }

    /// `rpma_peer_cfg_from_descriptor`: the configuration a remote peer described.
    ///
    /// # Errors
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput) if `desc` is empty.
    pub fn from_descriptor(desc: &[u8]) -> Result<Self> {
        let v = decode_peer_cfg(desc)?;
        Ok(Self { direct_write_to_pmem: v })
    }
}
