//! The librpma function of each Rust item: how rpma-capi names in its log lines the call an
//! [`Error`](crate::Error) or a log record names in Rust.

/// Every function of librpma 1.3 and the Rust item that does what it does, spelled as
/// [`Error::op`](crate::Error::op) and [`LogRecord::function`](crate::logging::LogRecord)
/// spell it (`Conn::write(..).imm` is a write with `.imm(..)`, `drop(ConnCfg)` dropping the
/// value), in the C names' order. Each side names one row: the mapping is one to one.
/// docs/api-mapping.md gives each row's signatures.
pub const FUNCTIONS: [(&str, &str); 84] = [
    ("rpma_atomic_write", "Conn::atomic_write"),
    ("rpma_conn_apply_remote_peer_cfg", "Conn::apply_remote_peer_cfg"),
    ("rpma_conn_cfg_delete", "drop(ConnCfg)"),
    ("rpma_conn_cfg_get_compl_channel", "ConnCfg::shared_channel"),
    ("rpma_conn_cfg_get_cq_size", "ConnCfg::cq_size"),
    ("rpma_conn_cfg_get_rcq_size", "ConnCfg::rcq_size"),
    ("rpma_conn_cfg_get_rq_size", "ConnCfg::rq_size"),
    ("rpma_conn_cfg_get_sq_size", "ConnCfg::sq_size"),
    ("rpma_conn_cfg_get_srq", "ConnCfg::srq"),
    ("rpma_conn_cfg_get_timeout", "ConnCfg::timeout"),
    ("rpma_conn_cfg_new", "ConnCfg::new"),
    ("rpma_conn_cfg_set_compl_channel", "ConnCfg::with_shared_channel"),
    ("rpma_conn_cfg_set_cq_size", "ConnCfg::with_cq_size"),
    ("rpma_conn_cfg_set_rcq_size", "ConnCfg::with_rcq_size"),
    ("rpma_conn_cfg_set_rq_size", "ConnCfg::with_rq_size"),
    ("rpma_conn_cfg_set_sq_size", "ConnCfg::with_sq_size"),
    ("rpma_conn_cfg_set_srq", "ConnCfg::with_srq"),
    ("rpma_conn_cfg_set_timeout", "ConnCfg::with_timeout"),
    ("rpma_conn_delete", "Conn::delete"),
    ("rpma_conn_disconnect", "Conn::disconnect"),
    ("rpma_conn_get_compl_fd", "Conn::compl_fd"),
    ("rpma_conn_get_cq", "Conn::cq"),
    ("rpma_conn_get_event_fd", "Conn::event_fd"),
    ("rpma_conn_get_private_data", "Conn::private_data"),
    ("rpma_conn_get_qp_num", "Conn::qp_num"),
    ("rpma_conn_get_rcq", "Conn::rcq"),
    ("rpma_conn_next_event", "Conn::next_event"),
    ("rpma_conn_req_connect", "ConnReq::connect"),
    ("rpma_conn_req_delete", "ConnReq::delete"),
    ("rpma_conn_req_get_private_data", "ConnReq::private_data"),
    ("rpma_conn_req_new", "ConnReq::new"),
    ("rpma_conn_req_recv", "ConnReq::recv"),
    ("rpma_conn_wait", "Conn::wait"),
    ("rpma_cq_get_fd", "Cq::fd"),
    ("rpma_cq_get_wc", "Cq::poll"),
    ("rpma_cq_wait", "Cq::wait"),
    ("rpma_ep_get_fd", "Ep::fd"),
    ("rpma_ep_listen", "Ep::listen"),
    ("rpma_ep_next_conn_req", "Ep::next_conn_req"),
    ("rpma_ep_shutdown", "Ep::shutdown"),
    ("rpma_err_2str", "librpma::err_2str"),
    ("rpma_flush", "Conn::flush"),
    ("rpma_log_get_threshold", "logging::threshold"),
    ("rpma_log_set_function", "logging::set_function"),
    ("rpma_log_set_threshold", "logging::set_threshold"),
    ("rpma_mr_advise", "MrLocal::advise"),
    ("rpma_mr_dereg", "MrLocal::dereg"),
    ("rpma_mr_get_descriptor", "MrLocal::descriptor"),
    ("rpma_mr_get_descriptor_size", "MrLocal::descriptor_size"),
    ("rpma_mr_get_ptr", "MrLocal::addr"),
    ("rpma_mr_get_size", "MrLocal::len"),
    ("rpma_mr_reg", "Peer::reg_mr"),
    ("rpma_mr_remote_delete", "drop(MrRemote)"),
    ("rpma_mr_remote_from_descriptor", "MrRemote::from_descriptor"),
    ("rpma_mr_remote_get_flush_type", "MrRemote::flush_type"),
    ("rpma_mr_remote_get_size", "MrRemote::len"),
    ("rpma_peer_cfg_delete", "drop(PeerCfg)"),
    ("rpma_peer_cfg_from_descriptor", "PeerCfg::from_descriptor"),
    ("rpma_peer_cfg_get_descriptor", "PeerCfg::descriptor"),
    ("rpma_peer_cfg_get_descriptor_size", "PeerCfg::descriptor_size"),
    ("rpma_peer_cfg_get_direct_write_to_pmem", "PeerCfg::direct_write_to_pmem"),
    ("rpma_peer_cfg_new", "PeerCfg::new"),
    ("rpma_peer_cfg_set_direct_write_to_pmem", "PeerCfg::with_direct_write_to_pmem"),
    ("rpma_peer_delete", "Peer::delete"),
    ("rpma_peer_new", "Peer::new"),
    ("rpma_read", "Conn::read"),
    ("rpma_recv", "Conn::recv"),
    ("rpma_send", "Conn::send"),
    ("rpma_send_with_imm", "Conn::send(..).imm"),
    ("rpma_srq_cfg_delete", "drop(SrqCfg)"),
    ("rpma_srq_cfg_get_rcq_size", "SrqCfg::rcq_size"),
    ("rpma_srq_cfg_get_rq_size", "SrqCfg::rq_size"),
    ("rpma_srq_cfg_new", "SrqCfg::new"),
    ("rpma_srq_cfg_set_rcq_size", "SrqCfg::with_rcq_size"),
    ("rpma_srq_cfg_set_rq_size", "SrqCfg::with_rq_size"),
    ("rpma_srq_delete", "Srq::delete"),
    ("rpma_srq_get_rcq", "Srq::rcq"),
    ("rpma_srq_new", "Srq::new"),
    ("rpma_srq_recv", "Srq::recv"),
    ("rpma_utils_conn_event_2str", "ConnEvent::as_str"),
    ("rpma_utils_get_ibv_context", "Device::lookup"),
    ("rpma_utils_ibv_context_is_odp_capable", "Device::is_odp_capable"),
    ("rpma_write", "Conn::write"),
    ("rpma_write_with_imm", "Conn::write(..).imm"),
];

/// The librpma function that does what the Rust item `item` does (`"Conn::read"` →
/// `"rpma_read"`), or `None` for an item librpma has no function for (`Peer::alloc_mr`,
/// `Conn::wait_timeout`, ...) and for anything else.
#[must_use]
pub fn c_function(item: &str) -> Option<&'static str> {
    FUNCTIONS.iter().find(|(_, rust)| *rust == item).map(|(c, _)| *c)
}

/// The Rust item that does what the librpma function `function` does (`"rpma_read"` →
/// `"Conn::read"`), or `None` for a name that is no librpma function.
#[must_use]
pub fn rust_item(function: &str) -> Option<&'static str> {
    FUNCTIONS.iter().find(|(c, _)| *c == function).map(|(_, rust)| *rust)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_c_function_maps_to_its_rust_item_and_back() {
        assert_eq!(rust_item("rpma_read"), Some("Conn::read"));
        assert_eq!(rust_item("rpma_mr_reg"), Some("Peer::reg_mr"));
        assert_eq!(rust_item("rpma_write_with_imm"), Some("Conn::write(..).imm"));
        assert_eq!(rust_item("rpma_cq_get_wc"), Some("Cq::poll"));
        assert_eq!(c_function("Device::lookup"), Some("rpma_utils_get_ibv_context"));
        assert_eq!(c_function("Conn::wait"), Some("rpma_conn_wait"));
        for (c, rust) in FUNCTIONS {
            assert_eq!(rust_item(c), Some(rust), "{c}");
            assert_eq!(c_function(rust), Some(c), "{rust}");
        }
    }

    #[test]
    fn the_table_is_one_to_one_over_librpma_functions() {
        let mut c: Vec<_> = FUNCTIONS.iter().map(|r| r.0).collect();
        let mut rust: Vec<_> = FUNCTIONS.iter().map(|r| r.1).collect();
        assert!(c.windows(2).all(|w| w[0] < w[1]), "the C names are sorted and unique");
        assert!(c.iter().all(|n| n.starts_with("rpma_")));
        rust.sort_unstable();
        rust.dedup();
        assert_eq!(rust.len(), FUNCTIONS.len(), "a Rust item in two rows");
        c.dedup();
        assert_eq!(c.len(), 84, "librpma 1.3 has 84 functions");
    }

    #[test]
    fn items_without_a_librpma_function() {
        for item in ["Peer::alloc_mr", "Conn::wait_timeout", "Offer::decode", "ibv_post_send", "rpma_read", ""] {
            assert_eq!(c_function(item), None, "{item}");
        }
        assert_eq!(rust_item("Conn::read"), None);
        assert_eq!(rust_item("rpma_nothing"), None);
    }
}
