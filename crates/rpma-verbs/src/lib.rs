//! The RDMA transport of rpma-rs over libibverbs and librdmacm.
