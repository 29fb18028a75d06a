//! # rpma-testbins: helper programs of the test scripts
//!
//! Two programs that the scripts run inside the test VMs (they call them by name):
//!
//! - `rpma-power-cut` (`scripts/softroce/power-cut.sh`): RDMA writes made persistent into a
//!   devdax device while the host cuts the VM's power, then the check, after the reboot, that
//!   every acknowledged record is intact; and the latency of native and emulated persistent
//!   flushes (docs/reliability.md, docs/native-ops.md);
//! - `rpma-log-power-cut` (`scripts/softroce/log-power-cut.sh`, `scripts/test-cluster.sh`): the
//!   writer and the checker of rpma-log's replicas under power cuts and under the cluster's
//!   nemesis (docs/log.md).
//!
//! Their writers need the `verbs` feature; `testing` gives `rpma-log-power-cut cluster-write
//! --broken RULE`. The library holds what both programs share: mapping the persistent memory
//! they check ([`pmem::map`]), their one `unsafe` call.
// One module maps the persistent memory (an `unsafe` call of rpma-mem, rule M5); everything
// else is safe.
#![deny(unsafe_code)]

pub mod pmem;
