//! Peer configurations: `struct rpma_peer_cfg` and `rpma_peer_cfg_*`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use rpma_core::PeerCfg;

use crate::ffi::{code, give, guard, handle, nonnull, put, take, E_INVAL};
use crate::log::librpma_log;

/// `struct rpma_peer_cfg`: its one setting, read and written atomically (librpma 1.0+).
pub struct RpmaPeerCfg {
    direct: AtomicBool,
}

impl RpmaPeerCfg {
    /// The configuration as rpma-core takes it.
    pub(crate) fn cfg(&self) -> PeerCfg {
        PeerCfg::new().with_direct_write_to_pmem(self.direct.load(Ordering::Acquire))
    }
}

/// `rpma_peer_cfg_new`.
///
/// # Safety
/// C1: `pcfg_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_new(pcfg_ptr: *mut *mut RpmaPeerCfg) -> c_int {
    guard(|| {
        nonnull(pcfg_ptr)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(pcfg_ptr, RpmaPeerCfg { direct: AtomicBool::new(false) }) };
        Ok(())
    })
}

/// `rpma_peer_cfg_delete`.
///
/// # Safety
/// C1/C2: `pcfg_ptr` is NULL or a slot holding NULL or a live configuration.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_delete(pcfg_ptr: *mut *mut RpmaPeerCfg) -> c_int {
    // SAFETY: [C1, C2] the caller's slot.
    guard(|| unsafe { take(pcfg_ptr) }.map(drop))
}

/// `rpma_peer_cfg_set_direct_write_to_pmem`.
///
/// # Safety
/// C2: `pcfg` is NULL or a live configuration.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_set_direct_write_to_pmem(pcfg: *mut RpmaPeerCfg, supported: bool) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(pcfg) }?;
        c.direct.store(supported, Ordering::Release);
        Ok(())
    })
}

/// `rpma_peer_cfg_get_direct_write_to_pmem`.
///
/// # Safety
/// C1/C2: `pcfg` is NULL or live; `supported` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_get_direct_write_to_pmem(
    pcfg: *const RpmaPeerCfg,
    supported: *mut bool,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(pcfg) }?;
        nonnull(supported)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(supported, c.direct.load(Ordering::Acquire)) };
        Ok(())
    })
}

/// `rpma_peer_cfg_get_descriptor`: writes the 1-byte descriptor to `desc`.
///
/// # Safety
/// C1/C2: `pcfg` is NULL or live; `desc` is NULL or writable for 1 byte.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_get_descriptor(pcfg: *const RpmaPeerCfg, desc: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(pcfg) }?;
        nonnull(desc)?;
        let d = c.cfg().descriptor();
        // SAFETY: [C1] desc is writable for the descriptor's size (librpma's contract).
        unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), desc.cast::<u8>(), d.len()) };
        Ok(())
    })
}

/// `rpma_peer_cfg_get_descriptor_size`.
///
/// # Safety
/// C1/C2: `pcfg` is NULL or live; `desc_size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_get_descriptor_size(pcfg: *const RpmaPeerCfg, desc_size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        unsafe { handle(pcfg) }?;
        nonnull(desc_size)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(desc_size, PeerCfg::DESCRIPTOR_SIZE) };
        Ok(())
    })
}

/// `rpma_peer_cfg_from_descriptor`: logs, as librpma does, a descriptor too short (ERROR) and
/// whether the peer supports direct write to PMem (INFO).
///
/// # Safety
/// C1: `desc` is NULL or readable for `desc_size` bytes; `pcfg_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_from_descriptor(
    desc: *const c_void,
    desc_size: usize,
    pcfg_ptr: *mut *mut RpmaPeerCfg,
) -> c_int {
    const FN: &str = "rpma_peer_cfg_from_descriptor";
    guard(|| {
        nonnull(desc)?;
        nonnull(pcfg_ptr)?;
        if desc_size < PeerCfg::DESCRIPTOR_SIZE {
            librpma_log!(
                Error,
                FN,
                "incorrect size of the descriptor: {desc_size} bytes (should be at least {} bytes)",
                PeerCfg::DESCRIPTOR_SIZE
            );
            return Err(E_INVAL);
        }
        // Only the descriptor's bytes are read, whatever desc_size claims beyond them.
        let len = desc_size.min(PeerCfg::DESCRIPTOR_SIZE);
        // SAFETY: [C1] desc is readable for desc_size >= len bytes.
        let bytes = unsafe { std::slice::from_raw_parts(desc.cast::<u8>(), len) };
        let cfg = PeerCfg::from_descriptor(bytes).map_err(code)?;
        let direct = cfg.direct_write_to_pmem();
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(pcfg_ptr, RpmaPeerCfg { direct: AtomicBool::new(direct) }) };
        // librpma's line, its "INFO: " included.
        let supported = if direct { "supported" } else { "unsupported" };
        librpma_log!(Info, FN, "INFO: Direct Write To PMem is {supported}");
        Ok(())
    })
}
