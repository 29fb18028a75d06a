//! Device information for `rpma devices`: what rpma needs to know about a device, like
//! `ibv_devinfo` for rpma.
//!
//! What comes from where:
//! - capabilities and limits: [`rpma::Capabilities`], through the selected backend
//!   ([`rpma::Device::capabilities`] of the device owning an address);
//! - on the mock: the fabric's devices and the addresses they own
//!   ([`rpma::mock::MockFabric::devices`]); the mock models no ports or GIDs;
//! - on verbs: the rpma API has no device enumeration, so devices, ports, port states, link
//!   layers, GIDs and network interfaces are read from sysfs (`/sys/class/infiniband`), the
//!   interfaces' IP addresses from `getifaddrs`, and each device's capabilities are queried
//!   through the backend by one of its addresses.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::Result;
use rpma::{Capabilities, ContextType, Device, Transport};
use serde::Serialize;

/// What rpma needs to know about a device.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DeviceInfo {
    /// The backend that reported it.
    pub(crate) backend: String,
    /// The device name.
    pub(crate) name: String,
    /// The IP addresses that reach it (what `--addr` takes).
    pub(crate) addresses: Vec<String>,
    /// Its ports (empty on the mock, which models none).
    pub(crate) ports: Vec<PortInfo>,
    /// Capabilities and limits, if they could be queried.
    pub(crate) capabilities: Option<CapsInfo>,
    /// Why the capabilities are missing, if they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// A port of a verbs device (from sysfs).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PortInfo {
    /// The port number.
    pub(crate) port: u32,
    /// The state (`ACTIVE`, `DOWN`, ...).
    pub(crate) state: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub(crate) link_layer: String,
    /// The non-zero GIDs of the port.
    pub(crate) gids: Vec<String>,
    /// The network interfaces behind the port's GIDs.
    pub(crate) netdevs: Vec<String>,
}

/// [`Capabilities`] for output.
#[derive(Clone, Debug, Serialize)]
#[allow(clippy::struct_excessive_bools)]
pub(crate) struct CapsInfo {
    /// Maximum message size of one operation.
    pub(crate) max_msg_size: u64,
    /// On-demand paging for RC reads and writes.
    pub(crate) odp: bool,
    /// Native RDMA Atomic Write (else an 8-byte write fenced by the earlier operations). On
    /// verbs from rpma-verbs' run-time probe (kernel capability bit and provider support).
    pub(crate) native_atomic_write: bool,
    /// Native RDMA Flush (else emulated with an 8-byte read after the write: APM). On verbs from
    /// rpma-verbs' run-time probe (both flush capability bits and provider support).
    pub(crate) native_flush: bool,
    /// Maximum work requests of a shared receive queue.
    pub(crate) max_srq_wr: u32,
    /// Maximum work requests of a send or receive queue.
    pub(crate) max_qp_wr: u32,
    /// Maximum entries of a completion queue.
    pub(crate) max_cqe: u32,
    /// Maximum inline data of a send.
    pub(crate) max_inline_data: u32,
    /// Maximum private data with a connection request.
    pub(crate) max_private_data_connect: usize,
    /// Maximum private data with an accept.
    pub(crate) max_private_data_accept: usize,
    /// `ibv_advise_mr` is available.
    pub(crate) advise_mr: bool,
    /// The device is iWARP.
    pub(crate) iwarp: bool,
}

impl From<&Capabilities> for CapsInfo {
    fn from(c: &Capabilities) -> Self {
        Self {
            max_msg_size: c.max_msg_size,
            odp: c.odp,
            native_atomic_write: c.native_atomic_write,
            native_flush: c.native_flush,
            max_srq_wr: c.max_srq_wr,
            max_qp_wr: c.max_qp_wr,
            max_cqe: c.max_cqe,
            max_inline_data: c.max_inline_data,
            max_private_data_connect: c.max_private_data_connect,
            max_private_data_accept: c.max_private_data_accept,
            advise_mr: c.advise_mr,
            iwarp: c.iwarp,
        }
    }
}

/// The devices of a mock fabric.
#[cfg(feature = "mock")]
#[must_use]
pub(crate) fn mock_devices(fabric: &rpma::mock::MockFabric) -> Vec<DeviceInfo> {
    fabric
        .devices()
        .iter()
        .map(|d| DeviceInfo {
            backend: "mock".into(),
            name: d.name().to_owned(),
            addresses: d.addrs().to_vec(),
            ports: Vec::new(),
            capabilities: Some(CapsInfo::from(d.capabilities())),
            note: None,
        })
        .collect()
}

/// The capabilities of the device owning `addr`, through transport `t`.
///
/// # Errors
/// If no device owns `addr` or the query fails.
pub(crate) fn query<T: Transport>(t: &T, addr: &str) -> Result<(String, CapsInfo)> {
    let dev = Device::lookup(t, addr, ContextType::Local)?;
    Ok((dev.name(), CapsInfo::from(&dev.capabilities()?)))
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

fn sorted_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(p)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect())
        .unwrap_or_default();
    v.sort_by_key(|s| (s.len(), s.clone()));
    v
}

/// The IP addresses of network interface `netdev`.
fn addresses_of(netdev: &str) -> Vec<String> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter(|a| a.interface_name == netdev)
        .filter_map(|a| a.address)
        .filter_map(|s| {
            s.as_sockaddr_in()
                .map(|v4| v4.ip().to_string())
                .or_else(|| s.as_sockaddr_in6().map(|v6| v6.ip().to_string()))
        })
        .collect()
}

/// The RDMA devices the kernel knows (sysfs `class/infiniband` under `sysfs_root`), with ports,
/// GIDs, network interfaces and their addresses; capabilities are left empty.
#[must_use]
pub(crate) fn sysfs_devices(sysfs_root: &Path) -> Vec<DeviceInfo> {
    let class = sysfs_root.join("class/infiniband");
    sorted_dir(&class)
        .into_iter()
        .map(|name| {
            let dev = class.join(&name);
            let mut ports = Vec::new();
            let mut addresses = Vec::new();
            for p in sorted_dir(&dev.join("ports")) {
                let pdir = dev.join("ports").join(&p);
                let gids: Vec<String> = sorted_dir(&pdir.join("gids"))
                    .into_iter()
                    .filter_map(|g| read_trim(&pdir.join("gids").join(g)))
                    .filter(|g| g.chars().any(|c| c != '0' && c != ':'))
                    .collect();
                let mut netdevs: Vec<String> = sorted_dir(&pdir.join("gid_attrs/ndevs"))
                    .into_iter()
                    .filter_map(|i| read_trim(&pdir.join("gid_attrs/ndevs").join(i)))
                    .filter(|n| !n.is_empty())
                    .collect();
                netdevs.dedup();
                for n in &netdevs {
                    for a in addresses_of(n) {
                        if !addresses.contains(&a) {
                            addresses.push(a);
                        }
                    }
                }
                let state = read_trim(&pdir.join("state")).unwrap_or_default();
                let state = state.split_once(": ").map_or(state.clone(), |(_, s)| s.to_owned());
                ports.push(PortInfo {
                    port: p.parse().unwrap_or(0),
                    state,
                    link_layer: read_trim(&pdir.join("link_layer")).unwrap_or_default(),
                    gids,
                    netdevs,
                });
            }
            DeviceInfo { backend: "verbs".into(), name, addresses, ports, capabilities: None, note: None }
        })
        .collect()
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// How a device's flushes go, for the listing: on verbs a persistent flush stays an RDMA Read
/// even with native flush (docs/native-ops.md), on the mock both types are native.
fn flush_path(backend: &str, native: bool) -> &'static str {
    match (native, backend) {
        (false, _) => "emulated (an 8-byte RDMA Read after the writes, APM)",
        (true, "verbs") => {
            "native (IBV_WR_FLUSH), persistent too (IBV_FLUSH_PERSISTENT: the target region must be on pmem; \
             RPMA_VERBS_PERSISTENT_FLUSH=read makes persistent flushes RDMA Reads)"
        }
        (true, _) => "native (IBV_WR_FLUSH)",
    }
}

/// How this host makes a local store into pmem durable (`MrLocal::persist`, rpma-mem's
/// `Memory::persist`): the CPU's cache write-back instruction; `msync` for a file mapping
/// without `MAP_SYNC`.
fn persist_line() -> String {
    let m = rpma::mem::cpu_persist_method();
    let how = match m {
        rpma::mem::PersistMethod::Clwb | rpma::mem::PersistMethod::ClflushOpt => " + sfence",
        _ => "",
    };
    format!("{m}{how} (devdax, MAP_SYNC files); msync (other file mappings)")
}

/// The human-readable listing.
#[must_use]
pub(crate) fn render(devs: &[DeviceInfo]) -> String {
    let mut s = String::new();
    if devs.is_empty() {
        s.push_str("no RDMA devices found\n");
    }
    for d in devs {
        let _ = writeln!(s, "{} ({})", d.name, d.backend);
        let addrs = if d.addresses.is_empty() { "none".to_owned() } else { d.addresses.join(", ") };
        let _ = writeln!(s, "  addresses:            {addrs}");
        if d.backend == "mock" {
            let _ = writeln!(s, "  ports:                not modeled by the mock");
        }
        for p in &d.ports {
            let _ = writeln!(
                s,
                "  port {}:               {} ({}), netdev {}",
                p.port,
                p.state,
                p.link_layer,
                p.netdevs.join(", ")
            );
            for g in &p.gids {
                let _ = writeln!(s, "    gid:                {g}");
            }
        }
        match &d.capabilities {
            Some(c) => {
                let _ = writeln!(s, "  max message size:     {} bytes", c.max_msg_size);
                let _ = writeln!(s, "  on-demand paging:     {}", yes(c.odp));
                let _ = writeln!(s, "  flush:                {}", flush_path(&d.backend, c.native_flush));
                let aw = if c.native_atomic_write {
                    "native (IBV_WR_ATOMIC_WRITE)"
                } else {
                    "emulated (an 8-byte RDMA Write fenced by the earlier operations)"
                };
                let _ = writeln!(s, "  atomic write:         {aw}");
                let _ = writeln!(s, "  local persist:        {}", persist_line());
                let _ = writeln!(s, "  SRQ:                  up to {} work requests", c.max_srq_wr);
                let _ = writeln!(
                    s,
                    "  queues:               {} work requests, {} CQ entries, {} bytes inline",
                    c.max_qp_wr, c.max_cqe, c.max_inline_data
                );
                let _ = writeln!(
                    s,
                    "  private data:         {} bytes with connect, {} with accept",
                    c.max_private_data_connect, c.max_private_data_accept
                );
                let _ = writeln!(s, "  advise_mr:            {}; iWARP: {}", yes(c.advise_mr), yes(c.iwarp));
            }
            None => {
                let why = d.note.as_deref().unwrap_or("not queried");
                let _ = writeln!(s, "  capabilities:         unknown ({why})");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_listing_reads_ports_and_gids() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("class/infiniband/rxe0/ports/1");
        fs::create_dir_all(p.join("gids")).unwrap();
        fs::create_dir_all(p.join("gid_attrs/ndevs")).unwrap();
        fs::write(p.join("state"), "4: ACTIVE\n").unwrap();
        fs::write(p.join("link_layer"), "Ethernet\n").unwrap();
        fs::write(p.join("gids/0"), "fe80:0000:0000:0000:0000:0000:0000:0001\n").unwrap();
        fs::write(p.join("gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n").unwrap();
        fs::write(p.join("gid_attrs/ndevs/0"), "dummy0\n").unwrap();
        let d = sysfs_devices(root.path());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "rxe0");
        assert_eq!(d[0].ports[0].state, "ACTIVE");
        assert_eq!(d[0].ports[0].link_layer, "Ethernet");
        assert_eq!(d[0].ports[0].gids, ["fe80:0000:0000:0000:0000:0000:0000:0001"]);
        assert_eq!(d[0].ports[0].netdevs, ["dummy0"]);
        assert!(render(&d).contains("capabilities:         unknown"));
    }

    #[test]
    fn the_listing_says_native_or_emulated() {
        let mut caps = Capabilities::roce_defaults();
        let dev = |backend: &str, caps: &Capabilities| DeviceInfo {
            backend: backend.into(),
            name: "d".into(),
            addresses: Vec::new(),
            ports: Vec::new(),
            capabilities: Some(CapsInfo::from(caps)),
            note: None,
        };
        let s = render(&[dev("verbs", &caps)]);
        assert!(s.contains("  flush:                emulated (an 8-byte RDMA Read"), "{s}");
        assert!(s.contains("  atomic write:         emulated ("), "{s}");
        caps.native_flush = true;
        caps.native_atomic_write = true;
        let s = render(&[dev("verbs", &caps), dev("mock", &caps)]);
        assert!(
            s.contains(
                "native (IBV_WR_FLUSH), persistent too (IBV_FLUSH_PERSISTENT: the target region must be on pmem"
            ),
            "{s}"
        );
        assert!(s.contains("  local persist:        "), "{s}");
        assert!(s.contains("  flush:                native (IBV_WR_FLUSH)\n"), "{s}");
        assert_eq!(s.matches("  atomic write:         native (IBV_WR_ATOMIC_WRITE)").count(), 2, "{s}");
    }
}
