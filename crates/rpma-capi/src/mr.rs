//! `rpma_mr_*`: local regions (the caller's memory) and remote regions (descriptors).

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use rpma_core::{Advice, MrRemote, Usage};
use rpma_mem::Memory;

use rpma_core::rpma_log;

use crate::backend::{on_backend, Backed, Backend, MrType};
use crate::ffi::{code, give, guard, handle, nonnull, put, take, E_INVAL, E_PROVIDER};
use crate::log::librpma_log;
use crate::peer::RpmaPeer;

/// `struct rpma_mr_local`: the registration and the caller's base pointer.
pub struct RpmaMrLocal {
    pub(crate) mr: Backed<MrType>,
    ptr: *mut c_void,
}

/// `struct rpma_mr_remote`.
pub struct RpmaMrRemote {
    pub(crate) mr: MrRemote,
}

/// `rpma_mr_reg`: registers the caller's `[ptr, ptr + size)`; the memory stays the caller's and
/// must stay valid until `rpma_mr_dereg` (librpma's contract).
///
/// # Safety
/// C1: `ptr` is NULL or valid for reads and writes of `size` bytes until `rpma_mr_dereg`,
/// accessed by the caller only as librpma allows (no Rust references exist to it); `mr_ptr` is
/// NULL or writable. C2 for `peer`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_reg(
    peer: *mut RpmaPeer,
    ptr: *mut c_void,
    size: usize,
    usage: c_int,
    mr_ptr: *mut *mut RpmaMrLocal,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let p = unsafe { handle(peer) }?;
        nonnull(mr_ptr)?;
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(E_INVAL)?;
        if size == 0 || size > isize::MAX as usize {
            return Err(E_INVAL);
        }
        let usage = u32::try_from(usage).map_err(|_| E_INVAL)?;
        let usage = Usage::from_bits_retain(usage);
        // SAFETY: [M6, C1] the caller keeps [ptr, ptr + size) valid and reaches it by no Rust
        // reference until rpma_mr_dereg returns 0, which it does only once no operation in
        // flight holds the region (else RPMA_E_PROVIDER, region kept) and no peer can reach it
        // any more (the backend gave the memory back, else RPMA_E_PROVIDER); no release function:
        // the memory stays the caller's. M6 asks for writable bytes, C1 only for what the usage
        // needs: a region registered without a usage that lets something write it (RECV,
        // READ_DST, WRITE_DST) may be read-only memory, and is never written (rpma-core refuses
        // it as a destination, a backend writes only what the usage grants, and this library
        // never hands out a mutable view of it).
        let memory = unsafe { Memory::from_raw_parts(base, size, None) };
        let mr = on_backend!(&p.peer, |T, peer| T::wrap::<MrType>(peer.reg_mr(memory, usage).map_err(code)?));
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(mr_ptr, RpmaMrLocal { mr, ptr }) };
        Ok(())
    })
}

/// `rpma_mr_dereg`: deregisters the region, frees the handle and NULLs `*mr_ptr` (also when
/// deregistration fails). While an operation in flight (a posted receive, an unsignaled or not
/// yet completed operation) still holds the region, it is `RPMA_E_PROVIDER` with an ERROR log
/// line (EBUSY) and the handle stays valid and untouched: the memory is the caller's, who could
/// free it on success while the device still reaches it (librpma deregistered at once). It
/// returns 0 only once nothing can reach the memory any more: on the mock, a peer's one-sided
/// operation copying into or out of the region right now is waited for; a backend that still
/// keeps the memory after deregistering (never expected) makes it `RPMA_E_PROVIDER`, the handle
/// freed, and the memory must then be leaked (rule C1).
///
/// # Safety
/// C1/C2: `mr_ptr` is NULL or a slot holding NULL or a live region used by no other thread.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_dereg(mr_ptr: *mut *mut RpmaMrLocal) -> c_int {
    guard(|| {
        nonnull(mr_ptr)?;
        // SAFETY: [C1] mr_ptr is a valid slot.
        let p = unsafe { mr_ptr.read() };
        // SAFETY: [C2] the slot holds NULL or a live handle.
        if let Some(m) = unsafe { p.as_ref() } {
            if on_backend!(&m.mr, |T, mr| mr.is_in_use()) {
                rpma_log!(
                    Error,
                    "rpma_mr_dereg: the region is in use by an operation in flight (EBUSY): complete \
                     or retire it first; the region stays registered"
                );
                return Err(E_PROVIDER);
            }
        }
        // SAFETY: [C1, C2] the caller's slot.
        let Some(m) = unsafe { take(mr_ptr) }? else {
            return Ok(());
        };
        // No operation of ours holds the region (checked above, and no other thread uses it:
        // C2); a backend gives the memory back only once no peer can reach it any more (the
        // mock waits for a peer's copy in progress). The memory handed back has no release
        // function: dropping it leaves it to the caller.
        let RpmaMrLocal { mr, .. } = *m;
        match on_backend!(mr, |T, mr| mr.dereg().map_err(code))? {
            Some(memory) => {
                drop(memory);
                Ok(())
            }
            // The backend kept the memory (something may still reach it): never 0 then (C1),
            // or the caller would free a buffer still in use. The handle is gone (deregistration
            // consumed it) and the buffer must be leaked, as after any failed deregistration.
            None => {
                rpma_log!(
                    Error,
                    "rpma_mr_dereg: the region is still reachable after deregistration; do not free \
                     or reuse its memory"
                );
                Err(E_PROVIDER)
            }
        }
    })
}

/// `rpma_mr_get_descriptor`: writes the 21-byte descriptor to `desc`.
///
/// # Safety
/// C1/C2: `mr` is NULL or live; `desc` is NULL or writable for 21 bytes.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_descriptor(mr: *const RpmaMrLocal, desc: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let m = unsafe { handle(mr) }?;
        nonnull(desc)?;
        let d = on_backend!(&m.mr, |T, mr| mr.descriptor());
        // SAFETY: [C1] desc is writable for the descriptor size (librpma's contract).
        unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), desc.cast::<u8>(), d.len()) };
        Ok(())
    })
}

/// `rpma_mr_get_descriptor_size`.
///
/// # Safety
/// C1/C2: `mr` is NULL or live; `desc_size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_descriptor_size(mr: *const RpmaMrLocal, desc_size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        unsafe { handle(mr) }?;
        nonnull(desc_size)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(desc_size, MrRemote::DESCRIPTOR_SIZE) };
        Ok(())
    })
}

/// `rpma_mr_get_ptr`: the base address given to `rpma_mr_reg`.
///
/// # Safety
/// C1/C2: `mr` is NULL or live; `ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_ptr(mr: *const RpmaMrLocal, ptr: *mut *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let m = unsafe { handle(mr) }?;
        nonnull(ptr)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(ptr, m.ptr) };
        Ok(())
    })
}

/// `rpma_mr_get_size`.
///
/// # Safety
/// C1/C2: `mr` is NULL or live; `size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_size(mr: *const RpmaMrLocal, size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let m = unsafe { handle(mr) }?;
        nonnull(size)?;
        let len = on_backend!(&m.mr, |T, mr| mr.len());
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(size, len) };
        Ok(())
    })
}

/// `rpma_mr_remote_from_descriptor`: a descriptor too short or without a usage is logged (ERROR)
/// and refused, as librpma does.
///
/// # Safety
/// C1: `desc` is NULL or readable for `desc_size` bytes; `mr_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_from_descriptor(
    desc: *const c_void,
    desc_size: usize,
    mr_ptr: *mut *mut RpmaMrRemote,
) -> c_int {
    const FN: &str = "rpma_mr_remote_from_descriptor";
    guard(|| {
        nonnull(desc)?;
        nonnull(mr_ptr)?;
        if desc_size < MrRemote::DESCRIPTOR_SIZE {
            librpma_log!(
                Error,
                FN,
                "incorrect size of the descriptor: {desc_size} bytes (should be at least: {} bytes)",
                MrRemote::DESCRIPTOR_SIZE
            );
            return Err(E_INVAL);
        }
        // Only the descriptor's bytes are read, whatever desc_size claims beyond them.
        let len = desc_size.min(MrRemote::DESCRIPTOR_SIZE);
        // SAFETY: [C1] desc is readable for desc_size >= len bytes.
        let bytes = unsafe { std::slice::from_raw_parts(desc.cast::<u8>(), len) };
        let mr = MrRemote::from_descriptor(bytes).map_err(|e| {
            // The usage byte follows the address (8 bytes), the size (8) and the rkey (4).
            if bytes[MrRemote::DESCRIPTOR_SIZE - 1] == 0 {
                librpma_log!(Error, FN, "usage type of memory is not set");
            }
            code(e)
        })?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(mr_ptr, RpmaMrRemote { mr }) };
        Ok(())
    })
}

/// `rpma_mr_remote_get_size`.
///
/// # Safety
/// C1/C2: `mr` is NULL or live; `size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_get_size(mr: *const RpmaMrRemote, size: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let m = unsafe { handle(mr) }?;
        nonnull(size)?;
        // A size beyond the address space cannot be a region of this process's peer's either;
        // saturate rather than truncate.
        let len = usize::try_from(m.mr.len()).unwrap_or(usize::MAX);
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(size, len) };
        Ok(())
    })
}

/// `rpma_mr_remote_get_flush_type`: the `RPMA_MR_USAGE_FLUSH_TYPE_*` bits of the remote usage.
///
/// # Safety
/// C1/C2: `mr` is NULL or live; `flush_type` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_get_flush_type(mr: *const RpmaMrRemote, flush_type: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let m = unsafe { handle(mr) }?;
        nonnull(flush_type)?;
        let bits = (m.mr.flush_type() & Usage::FLUSH_TYPES).bits();
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(flush_type, c_int::try_from(bits).unwrap_or(0)) };
        Ok(())
    })
}

/// `rpma_mr_remote_delete`.
///
/// # Safety
/// C1/C2: `mr_ptr` is NULL or a slot holding NULL or a live remote region.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_delete(mr_ptr: *mut *mut RpmaMrRemote) -> c_int {
    // SAFETY: [C1, C2] the caller's slot.
    guard(|| unsafe { take(mr_ptr) }.map(drop))
}

/// `rpma_mr_advise`: advises the provider about `[offset, offset + len)` of the region
/// (`advice`: `IBV_ADVISE_MR_ADVICE_PREFETCH` 0, `_PREFETCH_WRITE` 1, `_PREFETCH_NO_FAULT` 2).
/// NULL `mr`, an unknown advice or a range outside the region is `RPMA_E_INVAL` (librpma
/// checked none of them).
///
/// # Safety
/// C2: `mr` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_advise(
    mr: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    advice: c_int,
    flags: u32,
) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let m = unsafe { handle(mr) }?;
        let advice = match advice {
            0 => Advice::Prefetch,
            1 => Advice::PrefetchWrite,
            2 => Advice::PrefetchNoFault,
            _ => return Err(E_INVAL),
        };
        on_backend!(&m.mr, |T, mr| mr.advise(offset, len, advice, flags).map_err(code))
    })
}
