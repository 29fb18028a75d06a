//! The mock's [`Transport`] implementation: device lookup, and the calls that make protection
//! domains, regions, shared receive queues, listeners and connection requests (each made by
//! the module of what it makes). The fabric itself is `fabric.rs`'s.

use std::sync::Arc;

use rpma_core::transport::{QueueConfig, Transport};
use rpma_core::{Capabilities, ContextType, Result, Usage};
use rpma_mem::Memory;

use crate::cq::MockCq;
use crate::device::MockDevice;
use crate::fabric::MockFabric;
use crate::pd::{self, MockMr, MockPd};
use crate::qp::{self, MockListener, MockQp, MockSrq};

impl Transport for MockFabric {
    type Device = MockDevice;
    type Pd = MockPd;
    type Mr = MockMr;
    type Cq = MockCq;
    type Srq = MockSrq;
    type Listener = MockListener;
    type Qp = MockQp;

    fn name(&self) -> &'static str {
        "mock"
    }

    fn runtime(&self) -> &dyn rpma_core::runtime::Runtime {
        self.inner.runtime()
    }

    fn lookup_device(&self, addr: &str, kind: ContextType) -> Result<MockDevice> {
        if let Some(e) = &self.inner.config_error {
            return Err(e.clone());
        }
        let faults = &self.inner.faults;
        faults.check("rdma_getaddrinfo")?;
        faults.check("rdma_create_id")?;
        let found = match (self.inner.owner(addr), kind) {
            (Some(d), ContextType::Local) => faults.check("rdma_bind_addr").map(|()| d.clone()),
            // The mock fabric is one loopback network: any fabric address is routed through the
            // first device.
            (Some(_), ContextType::Remote) => faults.check("rdma_resolve_addr").map(|()| self.inner.devices[0].clone()),
            (None, ContextType::Local) => Err(self.inner.no_device("rdma_bind_addr", addr)),
            (None, ContextType::Remote) => Err(self.inner.no_device("rdma_resolve_addr", addr)),
        };
        // The temporary CM id is destroyed whatever happened; as librpma, a failure of that is
        // ignored (docs/semantics.md#device-lookup).
        let _ = faults.check("rdma_destroy_id");
        found
    }

    fn capabilities(&self, dev: &MockDevice) -> Result<Capabilities> {
        self.inner.faults.check("ibv_query_device_ex")?;
        Ok(self.inner.devices[dev.index].caps.clone())
    }

    fn device_name(&self, dev: &MockDevice) -> String {
        dev.name.clone()
    }

    fn alloc_pd(&self, dev: &MockDevice, caps: &Capabilities) -> Result<MockPd> {
        pd::alloc_pd(&self.inner, dev, caps)
    }

    fn reg_mr(&self, pd: &Arc<MockPd>, memory: Memory, usage: Usage) -> Result<MockMr> {
        if self.inner.sim.is_some() {
            crate::sim::Sched::point("reg_mr");
        }
        pd.alive("ibv_reg_mr")?;
        pd::reg_mr(pd, memory, usage)
    }

    fn create_srq(&self, pd: &Arc<MockPd>, rq_size: u32, rcq_size: u32) -> Result<MockSrq> {
        pd.alive("ibv_create_srq")?;
        qp::create_srq(pd, rq_size, rcq_size)
    }

    fn listen(&self, pd: &Arc<MockPd>, addr: &str, port: &str) -> Result<MockListener> {
        pd.alive("rdma_listen")?;
        qp::listen(pd, addr, port)
    }

    fn connect_request(&self, pd: &Arc<MockPd>, addr: &str, port: &str, cfg: &QueueConfig<'_, Self>) -> Result<MockQp> {
        qp::connect_request(pd, addr, port, cfg)
    }
}
