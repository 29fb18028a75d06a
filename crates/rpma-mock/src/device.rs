//! The mock's devices: each a name, the addresses it owns and its capabilities.

use rpma_core::Capabilities;

/// A mock RDMA device: a name, the IP addresses it owns, and its capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MockDevice {
    pub(crate) name: String,
    pub(crate) addrs: Vec<String>,
    pub(crate) caps: Capabilities,
    pub(crate) index: usize,
}

impl MockDevice {
    /// The device name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The addresses the device owns.
    #[must_use]
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The device's capabilities.
    #[must_use]
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
}
