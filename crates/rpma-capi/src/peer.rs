//! Peers: `struct rpma_peer`, `rpma_peer_new` and `rpma_peer_delete`.

use std::ffi::c_int;

use rpma_core::Peer;

use crate::backend::device::{device, ibv_context};
use crate::backend::{on_backend, Backed, Backend, PeerType};
use crate::ffi::{code, give, guard, nonnull, take};

/// `struct rpma_peer`.
pub struct RpmaPeer {
    pub(crate) peer: Backed<PeerType>,
}

/// `rpma_peer_new`.
///
/// # Safety
/// C1: `peer_ptr` is NULL or writable; `ibv_ctx` is NULL, a context from
/// `rpma_utils_get_ibv_context` or (on verbs) one of `rdma_get_devices`'s, or any other
/// pointer (refused with `RPMA_E_INVAL`, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_new(ibv_ctx: *mut ibv_context, peer_ptr: *mut *mut RpmaPeer) -> c_int {
    guard(|| {
        nonnull(peer_ptr)?;
        let d = device(ibv_ctx)?;
        let peer = on_backend!(d, |T, d| T::wrap::<PeerType>(Peer::new(d).map_err(code)?));
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(peer_ptr, RpmaPeer { peer }) };
        Ok(())
    })
}

/// `rpma_peer_delete`: frees the peer and NULLs `*peer_ptr`, even when the provider fails.
///
/// # Safety
/// C1/C2: `peer_ptr` is NULL or a slot holding NULL or a live peer.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_delete(peer_ptr: *mut *mut RpmaPeer) -> c_int {
    guard(|| {
        // SAFETY: [C1, C2] the caller's slot.
        match unsafe { take(peer_ptr) }? {
            Some(p) => on_backend!(p.peer, |T, peer| peer.delete().map_err(code)),
            None => Ok(()),
        }
    })
}
