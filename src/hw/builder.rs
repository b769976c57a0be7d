//! Parametric machines, so users need not write topology files: `nodes` servers of
//! `gpus_per_node` GPUs joined inside by a named interconnect (`pcie3`, `pcie4`, `nvlink`,
//! `nvswitch`) and between nodes by a named network (`10gbe`, `25gbe`, `100gbe`, `100gbe-rdma`,
//! `ib56`, `ib100`, `ib200`). Builds the explicit graph form ([`GraphSpec`]), so routing and
//! contention work exactly as for a hand-written file. Owns the names and their numbers only.

use super::graph::{DeviceSpec, GraphNetwork, GraphSpec, GraphStorage, LinkEntry, Protocol};
use super::topology::{LinkSpec, NetworkKind};
use super::{DeviceKind, LinkKind, Topology};
use crate::error::{Error, Result};

/// A named intra-node interconnect: per-GPU PCIe rate to its switch (GB/s), GPUs per PCIe switch,
/// and the GPU-to-GPU fabric if any (kind, GB/s per direction).
struct Intra {
    name: &'static str,
    pcie_gb_s: f64,
    per_switch: u32,
    fabric: Option<(LinkKind, f64)>,
    about: &'static str,
}

const INTRA: &[Intra] = &[
    Intra {
        name: "pcie3",
        pcie_gb_s: 12.0,
        per_switch: 2,
        fabric: None,
        about: "PCIe 3.0 x16, a GPU pair per switch, 12 GB/s achievable",
    },
    Intra {
        name: "pcie4",
        pcie_gb_s: 25.0,
        per_switch: 2,
        fabric: None,
        about: "PCIe 4.0 x16, a GPU pair per switch, 25 GB/s achievable",
    },
    Intra {
        name: "nvlink",
        pcie_gb_s: 12.0,
        per_switch: 2,
        fabric: Some((LinkKind::Nvlink, 23.0)),
        about: "one NVLink 2.0 link between every GPU pair (23 GB/s) plus PCIe 3.0 to the host",
    },
    Intra {
        name: "nvswitch",
        pcie_gb_s: 25.0,
        per_switch: 2,
        fabric: Some((LinkKind::Nvswitch, 270.0)),
        about: "every GPU on an NVSwitch (270 GB/s) plus PCIe 4.0 to the host",
    },
];

/// A named network: kind, line rate (Gbit/s), latency (us), protocol, TCP and RDMA efficiencies.
struct Inter {
    name: &'static str,
    kind: NetworkKind,
    gbit_s: f64,
    latency_us: f64,
    protocol: Protocol,
    tcp_efficiency: f64,
    rdma_efficiency: f64,
}

const INTER: &[Inter] = &[
    Inter {
        name: "10gbe",
        kind: NetworkKind::Ethernet,
        gbit_s: 10.0,
        latency_us: 25.0,
        protocol: Protocol::Tcp,
        tcp_efficiency: 0.9,
        rdma_efficiency: 0.95,
    },
    Inter {
        name: "25gbe",
        kind: NetworkKind::Ethernet,
        gbit_s: 25.0,
        latency_us: 15.0,
        protocol: Protocol::Tcp,
        tcp_efficiency: 0.8,
        rdma_efficiency: 0.95,
    },
    Inter {
        name: "100gbe",
        kind: NetworkKind::Ethernet,
        gbit_s: 100.0,
        latency_us: 10.0,
        protocol: Protocol::Tcp,
        tcp_efficiency: 0.6,
        rdma_efficiency: 0.95,
    },
    Inter {
        name: "100gbe-rdma",
        kind: NetworkKind::Ethernet,
        gbit_s: 100.0,
        latency_us: 3.0,
        protocol: Protocol::Rdma,
        tcp_efficiency: 0.6,
        rdma_efficiency: 0.95,
    },
    Inter {
        name: "ib56",
        kind: NetworkKind::Infiniband,
        gbit_s: 56.0,
        latency_us: 1.0,
        protocol: Protocol::Rdma,
        tcp_efficiency: 0.5,
        rdma_efficiency: 0.95,
    },
    Inter {
        name: "ib100",
        kind: NetworkKind::Infiniband,
        gbit_s: 100.0,
        latency_us: 1.0,
        protocol: Protocol::Rdma,
        tcp_efficiency: 0.5,
        rdma_efficiency: 0.95,
    },
    Inter {
        name: "ib200",
        kind: NetworkKind::Infiniband,
        gbit_s: 200.0,
        latency_us: 1.0,
        protocol: Protocol::Rdma,
        tcp_efficiency: 0.5,
        rdma_efficiency: 0.95,
    },
];

/// Names accepted for `--intra` and `--inter`.
pub fn intra_names() -> Vec<&'static str> {
    INTRA.iter().map(|i| i.name).collect()
}
pub fn inter_names() -> Vec<&'static str> {
    INTER.iter().map(|i| i.name).collect()
}

/// Each node's local storage read rate, GB/s, and latency, us: a datacentre NVMe SSD on PCIe 3.0
/// x4 (Intel SSD DC P3600 product specification: up to 2.6 GB/s sequential read, 20 us read
/// latency), taken lower for the file system and small random reads of a data loader (an
/// assumption; `--storage-gb-s` replaces it).
pub const DEFAULT_STORAGE_GB_S: f64 = 2.0;
const STORAGE_LATENCY_US: f64 = 50.0;

/// What `--nodes --gpus-per-node --intra --inter --storage-gb-s --nics-per-node` ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Parametric {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub intra: String,
    pub inter: String,
    pub gpu: String,
    /// Each node's local storage read rate (GB/s).
    pub storage_gb_s: f64,
    /// Network adapters per node. One sits on the CPU; several sit on the PCIe switches, at most
    /// one each, so GPUs reach the network through the NIC beside them (as in a DGX-1, where
    /// each PCIe switch holds a GPU pair and a NIC).
    pub nics_per_node: u32,
}

impl Default for Parametric {
    fn default() -> Self {
        Parametric {
            nodes: 1,
            gpus_per_node: 4,
            intra: "pcie3".into(),
            inter: "10gbe".into(),
            gpu: "GPU".into(),
            storage_gb_s: DEFAULT_STORAGE_GB_S,
            nics_per_node: 1,
        }
    }
}

fn dev(name: String, kind: DeviceKind, host: Option<&str>) -> DeviceSpec {
    DeviceSpec { name, kind, host: host.map(str::to_string) }
}

fn link(from: &str, to: &str, kind: LinkKind, latency_us: f64, gb_s: f64) -> LinkEntry {
    LinkEntry {
        from: from.into(),
        to: to.into(),
        kind,
        latency_us,
        bandwidth_gb_s: Some(gb_s),
        bandwidth_gbit_s: None,
        curve: None,
        duplex: true,
        nvlinks: None,
    }
}

/// Builds the topology; unknown names are an error listing the known ones.
pub fn build_parametric(p: &Parametric) -> Result<Topology> {
    let intra = INTRA.iter().find(|i| i.name == p.intra).ok_or_else(|| {
        Error::invalid("--intra", format!("unknown interconnect `{}` (known: {})", p.intra, intra_names().join(", ")))
    })?;
    let inter = INTER.iter().find(|i| i.name == p.inter).ok_or_else(|| {
        Error::invalid("--inter", format!("unknown network `{}` (known: {})", p.inter, inter_names().join(", ")))
    })?;
    if p.nodes == 0 || p.gpus_per_node == 0 {
        return Err(Error::invalid("--nodes/--gpus-per-node", "must be at least 1"));
    }
    // A node's devices are checked and routed by name; an NVLink node is a full mesh. Beyond these
    // sizes building the machine alone takes minutes, so they are refused up front.
    let max_per_node = if matches!(intra.fabric, Some((kind, _)) if kind != LinkKind::Nvswitch) { 128 } else { 1024 };
    if p.gpus_per_node > max_per_node {
        return Err(Error::invalid(
            "--gpus-per-node",
            format!(
                "{} GPUs in one `{}` node is beyond the limit of {max_per_node} for a built machine; \
                 use more nodes, or a graph topology file for a bigger NVSwitch domain",
                p.gpus_per_node, p.intra
            ),
        ));
    }
    crate::limits::check("gpus", p.nodes as u64 * p.gpus_per_node as u64)?;
    if !(p.storage_gb_s.is_finite() && p.storage_gb_s > 0.0 && p.storage_gb_s <= 1e4) {
        return Err(Error::invalid(
            "--storage-gb-s",
            format!("must be a rate in (0, 10000] GB/s, not {}", p.storage_gb_s),
        ));
    }
    // PCIe switches add ~0.1-0.2 us per hop in hardware; 0.5 us leaves room for the software path.
    let pcie_lat = 0.5;
    let switches = p.gpus_per_node.div_ceil(intra.per_switch);
    // A switch's GPUs reach the network through the NIC beside them; two NICs on one switch would
    // tie on every route and the second would carry nothing, so that is refused, not ignored.
    if p.nics_per_node == 0 || p.nics_per_node > switches {
        return Err(Error::invalid(
            "--nics-per-node",
            format!(
                "must be between 1 and the node's PCIe switches ({switches} for {} `{}` GPUs, {} per switch), not {}; \
                 a node with a NIC per GPU needs a graph topology file (docs/machines.md, e.g. the dgx-a100 preset)",
                p.gpus_per_node, intra.name, intra.per_switch, p.nics_per_node
            ),
        ));
    }
    let mut devices = vec![dev("cpu0".into(), DeviceKind::Cpu, None)];
    let mut links = Vec::new();
    let nics: Vec<String> = (0..p.nics_per_node).map(|i| format!("nic{i}")).collect();
    for (i, nic) in nics.iter().enumerate() {
        devices.push(dev(nic.clone(), DeviceKind::Nic, None));
        let at = if p.nics_per_node == 1 { "cpu0".to_string() } else { format!("sw{i}") };
        links.push(link(&at, nic, LinkKind::Pcie, pcie_lat, intra.pcie_gb_s));
    }
    for s in 0..switches {
        devices.push(dev(format!("sw{s}"), DeviceKind::PcieSwitch, None));
        links.push(link("cpu0", &format!("sw{s}"), LinkKind::Pcie, pcie_lat, intra.pcie_gb_s));
    }
    for g in 0..p.gpus_per_node {
        devices.push(dev(format!("gpu{g}"), DeviceKind::Gpu, Some("cpu0")));
        links.push(link(
            &format!("sw{}", g / intra.per_switch),
            &format!("gpu{g}"),
            LinkKind::Pcie,
            pcie_lat,
            intra.pcie_gb_s,
        ));
    }
    match intra.fabric {
        Some((LinkKind::Nvswitch, rate)) => {
            devices.push(dev("nvswitch".into(), DeviceKind::NvSwitch, None));
            for g in 0..p.gpus_per_node {
                links.push(link(&format!("gpu{g}"), "nvswitch", LinkKind::Nvswitch, 1.0, rate));
            }
        }
        Some((kind, rate)) => {
            for a in 0..p.gpus_per_node {
                for b in a + 1..p.gpus_per_node {
                    links.push(link(&format!("gpu{a}"), &format!("gpu{b}"), kind, 1.0, rate));
                }
            }
        }
        None => {}
    }
    // The defaults keep their short name; other storage rates and NIC counts are in it.
    let mut name = format!("nodes-of-{}-{}-{}", p.gpus_per_node, intra.name, inter.name);
    if p.nics_per_node > 1 {
        name += &format!("-x{}", p.nics_per_node);
    }
    if p.storage_gb_s != DEFAULT_STORAGE_GB_S {
        name += &format!("-storage{}", p.storage_gb_s);
    }
    Ok(Topology {
        name: name.clone(),
        description: format!(
            "{} nodes of {} {}: {}; {} x {} between nodes; local storage {} GB/s",
            p.nodes, p.gpus_per_node, p.gpu, intra.about, p.nics_per_node, inter.name, p.storage_gb_s
        ),
        source: "dagsim parametric builder (src/hw/builder.rs): nominal rates with the documented efficiencies, see docs/machines.md".into(),
        cluster: None,
        base: None,
        fabric: None,
        faults: Default::default(),
        graph: Some(GraphSpec {
            gpu: p.gpu.clone(),
            nodes: p.nodes,
            grow: true,
            devices,
            links,
            network: Some(GraphNetwork {
                kind: inter.kind,
                link: LinkSpec { bandwidth_gb_s: None, bandwidth_gbit_s: Some(inter.gbit_s), latency_us: inter.latency_us },
                tcp_efficiency: inter.tcp_efficiency,
                rdma_efficiency: inter.rdma_efficiency,
                protocol: inter.protocol,
                attach: nics,
                host_staged: None,
            }),
            storage: GraphStorage {
                shared: false,
                link: LinkSpec {
                    bandwidth_gb_s: Some(p.storage_gb_s),
                    bandwidth_gbit_s: None,
                    latency_us: STORAGE_LATENCY_US,
                },
                attach: "cpu0".into(),
            },
            transports: None,
        }),
        calibration: None,
        calibrated: None,
        collectives: Default::default(),
        nic_route: Default::default(),
        compute_contention: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_builds_and_routes() {
        for intra in intra_names() {
            for inter in inter_names() {
                let p = Parametric {
                    nodes: 2,
                    gpus_per_node: 4,
                    intra: intra.into(),
                    inter: inter.into(),
                    ..Default::default()
                };
                let m = build_parametric(&p).unwrap().instantiate(8).unwrap();
                assert_eq!(m.gpus.len(), 8);
                assert_eq!(m.node_count(), 2);
            }
        }
        let m = build_parametric(&Parametric { intra: "nvswitch".into(), ..Default::default() })
            .unwrap()
            .instantiate(4)
            .unwrap();
        let r = m.shortest_path(m.gpus[0].device, m.gpus[3].device).unwrap();
        assert!(r.links.iter().all(|&l| m.links[l as usize].kind == LinkKind::Nvswitch));
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = build_parametric(&Parametric { inter: "carrier-pigeon".into(), ..Default::default() }).unwrap_err();
        assert!(e.to_string().contains("ib100"), "{e}");
        let e = build_parametric(&Parametric { intra: "usb".into(), ..Default::default() }).unwrap_err();
        assert!(e.to_string().contains("nvswitch"), "{e}");
    }
}
