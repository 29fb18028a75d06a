//! Throw-away queue pairs that ask a provider what it supports where no query says it (native
//! flush and atomic write: crate::native; the inline data size: crate::inline).

use rdma_sys as ffi;

/// Creates an RC QP on `ctx` (with its own PD and CQ) from the attributes `set` fills in,
/// returns what `check` says of it (`false` if it cannot be created), and destroys everything
/// before returning. The calls bypass fault injection and resource tracking: nothing outlives
/// the call.
pub(crate) fn probe_qp(
    ctx: *mut ffi::ibv_context,
    set: impl FnOnce(&mut ffi::ibv_qp_init_attr_ex),
    check: impl FnOnce(*mut ffi::ibv_qp) -> bool,
) -> bool {
    // SAFETY: [V1] `ctx` is an open context (the caller holds its device); every object made
    // here is destroyed before returning, QP first; the attribute struct is zeroed (valid) and
    // only the members its comp_mask names are read by the provider.
    unsafe {
        let pd = ffi::ibv_alloc_pd(ctx);
        if pd.is_null() {
            return false;
        }
        let cq = ffi::ibv_create_cq(ctx, 2, std::ptr::null_mut(), std::ptr::null_mut(), 0);
        let mut ok = false;
        if !cq.is_null() {
            let mut a: ffi::ibv_qp_init_attr_ex = std::mem::zeroed();
            a.send_cq = cq;
            a.recv_cq = cq;
            a.cap = ffi::ibv_qp_cap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            a.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
            a.comp_mask = ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
            a.pd = pd;
            set(&mut a);
            let qp = crate::sys::create_qp_ex(ctx, &mut a);
            if !qp.is_null() {
                ok = check(qp);
                ffi::ibv_destroy_qp(qp);
            }
            ffi::ibv_destroy_cq(cq);
        }
        ffi::ibv_dealloc_pd(pd);
        ok
    }
}
