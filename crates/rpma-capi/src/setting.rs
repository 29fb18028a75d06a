//! The `u32` settings of the configuration handles (`rpma_conn_cfg_*`, `rpma_srq_cfg_*`): a
//! setter and a getter per field, generated for a handle type whose field is an `AtomicU32`.

/// Exports `$set(cfg, value)` and `$get(cfg, &value)` for the `AtomicU32` field `$field` of the
/// handle type `$ty` (used where `guard`, `handle`, `nonnull`, `put`, `c_int` and `Ordering`
/// are in scope).
macro_rules! u32_setting {
    ($ty:ty, $field:ident, $set:ident, $get:ident) => {
        #[doc = concat!("`", stringify!($set), "`.")]
        ///
        /// # Safety
        /// C2: `cfg` is NULL or live.
        #[no_mangle]
        pub unsafe extern "C" fn $set(cfg: *mut $ty, $field: u32) -> c_int {
            guard(|| {
                // SAFETY: [C2] the caller's handle.
                let c = unsafe { handle(cfg) }?;
                c.$field.store($field, Ordering::Release);
                Ok(())
            })
        }

        #[doc = concat!("`", stringify!($get), "`.")]
        ///
        /// # Safety
        /// C1, C2: `cfg` is NULL or live; the out-parameter is NULL or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $get(cfg: *const $ty, $field: *mut u32) -> c_int {
            guard(|| {
                // SAFETY: [C2] the caller's handle.
                let c = unsafe { handle(cfg) }?;
                nonnull($field)?;
                // SAFETY: [C1] checked non-NULL out-parameter.
                unsafe { put($field, c.$field.load(Ordering::Acquire)) };
                Ok(())
            })
        }
    };
}
