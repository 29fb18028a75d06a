//! A CM id's addresses (`rdma_get_local_addr`, `rdma_get_peer_addr`) as socket addresses.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr::NonNull;

use rdma_sys as ffi;

/// The local and remote addresses of `id`, bound once its request was made (address resolved)
/// or received; `None` for one that is unset or of a family other than IPv4 and IPv6.
///
/// # Safety
/// `id` is alive (rule V1) and no librdmacm call on it runs meanwhile on another thread (the
/// owner's thread, rule V6: librdmacm writes the route while it processes the id's events).
pub(super) unsafe fn of_id(id: NonNull<ffi::rdma_cm_id>) -> (Option<SocketAddr>, Option<SocketAddr>) {
    // SAFETY: [V1, V6] per the contract; the unions are read as `sockaddr_storage`, which
    // covers every member and holds plain integers (any bit pattern is valid), all initialised
    // (librdmacm allocates its ids zeroed and writes the addresses in place).
    let (src, dst) = unsafe {
        let a = &(*id.as_ptr()).route.addr;
        (a.src_addr_union.src_storage, a.dst_addr_union.dst_storage)
    };
    (socket_addr(&src), socket_addr(&dst))
}

/// A `sockaddr_storage` of family `AF_INET` or `AF_INET6` as a [`SocketAddr`].
fn socket_addr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let ptr: *const libc::sockaddr_storage = s;
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: [V2] a `sockaddr_storage` is at least as large and as aligned as every
            // `sockaddr_*`, and its family says which one it holds (plain integers).
            let v4 = unsafe { &*ptr.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(v4.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: [V2] as above.
            let v6 = unsafe { &*ptr.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(v6.sin6_port),
                // As std reads a `sockaddr_in6`: the flow information as it is.
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addrs_of_both_families_and_none_of_others() {
        // SAFETY: [V2] all-zero bytes are a valid `sockaddr_storage` (plain integers).
        let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(socket_addr(&s), None, "AF_UNSPEC");
        {
            let p: *mut libc::sockaddr_storage = &mut s;
            // SAFETY: [V2] as in `socket_addr`.
            let v4 = unsafe { &mut *p.cast::<libc::sockaddr_in>() };
            v4.sin_family = libc::AF_INET as libc::sa_family_t;
            v4.sin_port = 7204u16.to_be();
            v4.sin_addr.s_addr = u32::from(Ipv4Addr::new(10, 77, 0, 1)).to_be();
        }
        assert_eq!(socket_addr(&s), Some("10.77.0.1:7204".parse().unwrap()));
        // SAFETY: [V2] as above.
        s = unsafe { std::mem::zeroed() };
        {
            let p: *mut libc::sockaddr_storage = &mut s;
            // SAFETY: [V2] as in `socket_addr`.
            let v6 = unsafe { &mut *p.cast::<libc::sockaddr_in6>() };
            v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            v6.sin6_port = 443u16.to_be();
            v6.sin6_addr.s6_addr = Ipv6Addr::LOCALHOST.octets();
        }
        assert_eq!(socket_addr(&s), Some("[::1]:443".parse().unwrap()));
    }
}
