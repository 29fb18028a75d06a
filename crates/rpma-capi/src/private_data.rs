//! `struct rpma_conn_private_data`: a view of the private data of a request or connection.

use std::ffi::c_void;

/// `struct rpma_conn_private_data`.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct rpma_conn_private_data {
    /// The bytes (NULL when there are none).
    pub ptr: *mut c_void,
    /// Their number.
    pub len: u8,
}

impl rpma_conn_private_data {
    /// A view of `bytes`, which live as long as the object they belong to (librpma's rule).
    /// The `*mut` is librpma's type only: the bytes are Rust-owned and shared, and C reads
    /// them only (include/librpma.h says so; rule C1), never writes through `ptr`.
    pub(crate) fn of(bytes: &[u8]) -> Self {
        if bytes.is_empty() {
            Self { ptr: std::ptr::null_mut(), len: 0 }
        } else {
            // Private data is at most 255 bytes by type; a longer buffer is cut to what the
            // struct can describe.
            Self { ptr: bytes.as_ptr().cast_mut().cast(), len: u8::try_from(bytes.len()).unwrap_or(u8::MAX) }
        }
    }

    /// The bytes `pdata` describes: `Ok(None)` for NULL, `Err` for a struct without bytes
    /// (NULL `ptr` or `len` 0: librpma's `RPMA_E_INVAL`).
    ///
    /// # Safety
    /// C1: `pdata` is NULL or a readable struct whose `ptr` is readable for `len` bytes for `'a`.
    pub(crate) unsafe fn bytes<'a>(pdata: *const Self) -> Result<Option<&'a [u8]>, ()> {
        // SAFETY: [C1] pdata is NULL or readable.
        match unsafe { pdata.as_ref() } {
            None => Ok(None),
            Some(p) if p.ptr.is_null() || p.len == 0 => Err(()),
            Some(p) => {
                // SAFETY: [C1] ptr is readable for len bytes for the call.
                Ok(Some(unsafe { std::slice::from_raw_parts(p.ptr.cast::<u8>().cast_const(), usize::from(p.len)) }))
            }
        }
    }
}
