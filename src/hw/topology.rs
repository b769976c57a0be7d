//! Topology files and presets. A topology file (JSON or TOML, see `docs/machines.md` and
//! `topologies/topology.schema.json`) describes a cluster in one of two forms: parametric
//! (`cluster`: nodes of identical servers, how GPUs attach to their host (PCIe) and to each other
//! (through the host, or NVLink), the network between nodes, and where training data is read from)
//! or explicit (`graph`, see [`super::graph`]). It may name a calibration file to apply.
//! [`Topology::instantiate`] expands it into a [`Machine`] big enough for a GPU count.

use super::fabric::FabricSpec;
use super::graph::GraphSpec;
use super::{BandwidthCurve, Calibration, Device, DeviceId, DeviceKind, GpuInfo, Link, LinkKind, Machine};
use crate::error::{Error, Location, Result};
use crate::units::{gb_per_s_to_bytes_per_ns, gbit_per_s_to_bytes_per_ns, us_to_ns};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Built-in topologies: the shipped files in `topologies/`, compiled in so they work from any
/// directory. The first one is the default.
pub const PRESETS: &[(&str, &str)] = &[
    ("k80-cluster", include_str!("../../topologies/k80-cluster.json")),
    ("v100-cluster", include_str!("../../topologies/v100-cluster.json")),
    ("dgx1-p100", include_str!("../../topologies/dgx1-p100.json")),
    ("dgx1-v100", include_str!("../../topologies/dgx1-v100.json")),
    ("dgx-a100", include_str!("../../topologies/dgx-a100.json")),
    ("dgx-a100-80gb", include_str!("../../topologies/dgx-a100-80gb.json")),
    ("dgx-h100", include_str!("../../topologies/dgx-h100.json")),
    ("gb200-nvl72", include_str!("../../topologies/gb200-nvl72.json")),
    ("scaledl-server-a", include_str!("../../topologies/scaledl-server-a.json")),
    ("scaledl-server-b", include_str!("../../topologies/scaledl-server-b.json")),
    ("dettmers-4gpu", include_str!("../../topologies/dettmers-4gpu.json")),
    ("gradientflow-cluster", include_str!("../../topologies/gradientflow-cluster.json")),
    ("accdp-a100", include_str!("../../topologies/accdp-a100.json")),
    ("v100-pcie-10gbe", include_str!("../../topologies/v100-pcie-10gbe.json")),
    ("v100-pcie-100gbe", include_str!("../../topologies/v100-pcie-100gbe.json")),
    ("v100-pcie-ib100", include_str!("../../topologies/v100-pcie-ib100.json")),
    ("abci-v", include_str!("../../topologies/abci-v.json")),
    ("abci-a", include_str!("../../topologies/abci-a.json")),
];

/// Name of the topology used when none is given.
pub const DEFAULT_TOPOLOGY: &str = "k80-cluster";

/// A parsed topology file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Where the numbers come from.
    #[serde(default)]
    pub source: String,
    /// Parametric form: identical nodes described by a few numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSpec>,
    /// Explicit form: one server's devices and links (see [`GraphSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphSpec>,
    /// A preset whose machine this file reuses (instead of `cluster` or `graph`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// A fat-tree between the nodes in place of the single network switch (see [`FabricSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<FabricSpec>,
    /// Calibration file applied after building (path relative to the topology file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// The calibration itself, read when the topology is loaded (or set by `--calibration`).
    #[serde(skip)]
    pub calibrated: Option<Calibration>,
    /// How collectives run on the machine (`--collective-model`, `--nccl-*`; the ideal model by default).
    #[serde(skip)]
    pub collectives: crate::collective::CollectiveModel,
    /// How railless transfers between nodes pick their NICs under the ideal model (`--nic-route`).
    #[serde(skip)]
    pub nic_route: super::NicRoute,
    /// Whether collectives in flight slow the compute beside them (`--compute-contention`).
    #[serde(skip)]
    pub compute_contention: super::ComputeContention,
    /// Faults injected when the machine is built (`--slow-gpu`, `--straggler-node`, `--degrade-link`).
    #[serde(skip)]
    pub faults: super::faults::Faults,
}

/// NVLink ports of an H100 SXM, the most of any GPU (NVIDIA H100 architecture whitepaper, 2022).
const MAX_NVLINK_PORTS: u32 = 18;

/// Identical nodes, each with `gpus_per_node` GPUs under one host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// GPU model name (for reports and, later, GPU specs).
    pub gpu: String,
    /// Add nodes when more GPUs are asked for than the file lists (default true).
    #[serde(default = "yes")]
    pub grow: bool,
    /// Each GPU's link to its host, per direction. Peer traffic without NVLink goes through the host.
    pub pcie: LinkSpec,
    /// If present, every pair of GPUs in a node has a direct link of this speed per direction.
    #[serde(default)]
    pub nvlink: Option<LinkSpec>,
    /// Each node's link to the network switch, per direction.
    pub network: NetworkSpec,
    pub storage: StorageSpec,
    /// Effective transport rates (see `crate::hw::transports`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transports: Option<crate::hw::Transports>,
}

fn yes() -> bool {
    true
}

/// Latency and bandwidth of one link direction. Give the bandwidth in GB/s or in Gbit/s.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    #[serde(default)]
    pub bandwidth_gb_s: Option<f64>,
    #[serde(default)]
    pub bandwidth_gbit_s: Option<f64>,
    #[serde(default)]
    pub latency_us: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NetworkKind {
    Ethernet,
    Infiniband,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    pub kind: NetworkKind,
    #[serde(flatten)]
    pub link: LinkSpec,
    /// Fraction of the line rate a transfer achieves (protocol overhead); default 1.
    #[serde(default = "one")]
    pub efficiency: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    /// One file system for the whole cluster, reached over the network (NFS), or a disk per node.
    pub shared: bool,
    #[serde(flatten)]
    pub link: LinkSpec,
}

impl LinkSpec {
    pub(crate) fn rate(&self, topo: &str, what: &str) -> Result<f64> {
        let rate = match (self.bandwidth_gb_s, self.bandwidth_gbit_s) {
            (Some(gb), None) => gb_per_s_to_bytes_per_ns(gb),
            (None, Some(gbit)) => gbit_per_s_to_bytes_per_ns(gbit),
            _ => {
                return Err(Error::topology(
                    topo,
                    format!("{what}: give exactly one of bandwidth_gb_s or bandwidth_gbit_s"),
                ))
            }
        };
        crate::units::check_rate_gb_s(rate).map_err(|m| Error::topology(topo, format!("{what}: {m}")))?;
        crate::units::check_duration_us(self.latency_us)
            .map_err(|m| Error::topology(topo, format!("{what} (field `latency_us`): {m}")))?;
        Ok(rate)
    }
}

/// Loads a topology by preset name or file path (`.json` or `.toml`).
pub fn load_topology(name_or_path: &str) -> Result<Topology> {
    if let Some((_, text)) = PRESETS.iter().find(|(n, _)| *n == name_or_path) {
        return parse_topology(text, Path::new(&format!("<preset {name_or_path}>")), false);
    }
    let path = Path::new(name_or_path);
    if !path.exists() {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
        return Err(Error::invalid(
            "topology",
            format!("`{name_or_path}` is neither a preset ({}) nor an existing file", names.join(", ")),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let toml = path.extension().is_some_and(|e| e == "toml");
    let mut topo = parse_topology(&text, path, toml)?;
    if let Some(c) = &topo.calibration {
        let cal_path = path.parent().unwrap_or(Path::new(".")).join(c);
        topo.calibrated = Some(Calibration::load(&cal_path)?);
    }
    Ok(topo)
}

/// Parses topology text; errors name the file and, for JSON, the line.
pub fn parse_topology(text: &str, path: &Path, toml: bool) -> Result<Topology> {
    let mut topo: Topology = if toml {
        ::toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| crate::error::line_of_offset(text, s.start));
            Error::parse(Location { path: path.into(), line, field: None }, e.message().to_string())
        })?
    } else {
        serde_json::from_str(text).map_err(|e| Error::parse(Location::line(path, e.line()), e.to_string()))?
    };
    // Errors that name only the topology (a link's rate, a node count) also name the file; the
    // machine the file describes is built (see below) so nothing in it fails later.
    let in_file = |e: Error| match e {
        Error::Topology { msg, .. } | Error::Invalid { msg, .. } => Error::parse(Location::file(path), msg),
        other => other,
    };
    if let Some(base) = topo.base.clone() {
        topo.take_base(&base, path)?;
    }
    topo.check(path).map_err(in_file)?;
    let (nodes, per_node, grow) = topo.shape();
    crate::limits::check("gpus", nodes as u64 * per_node as u64)
        .map_err(|e| Error::parse(Location::file(path), format!("{nodes} nodes of {per_node} GPUs: {e}")))?;
    // Every node is a copy of the same server, so two nodes (one where there is one) show every
    // error the whole machine would, at a cost that does not grow with the node count.
    topo.build(if grow { 2 } else { nodes.min(2) }).map_err(in_file)?;
    Ok(topo)
}

impl Topology {
    /// The GPU the file names (`cluster.gpu` or `graph.gpu`).
    pub fn gpu_name(&self) -> Option<&str> {
        self.cluster.as_ref().map(|c| c.gpu.as_str()).or(self.graph.as_ref().map(|g| g.gpu.as_str()))
    }

    /// Relabels the machine's GPUs (results name this GPU); links and devices stay as they are.
    pub fn set_gpu_name(&mut self, gpu: &str) {
        if let Some(c) = &mut self.cluster {
            c.gpu = gpu.to_string();
        }
        if let Some(g) = &mut self.graph {
            g.gpu = gpu.to_string();
        }
    }

    /// Copies the machine of preset `base` into this file (which must not describe one itself).
    fn take_base(&mut self, base: &str, path: &Path) -> Result<()> {
        let at = || Location::file(path).with_field("base".to_string());
        if self.cluster.is_some() || self.graph.is_some() {
            return Err(Error::parse(at(), "give `base` or a machine (`cluster` or `graph`), not both"));
        }
        let Some((_, text)) = PRESETS.iter().find(|(n, _)| *n == base) else {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            return Err(Error::parse(at(), format!("`{base}` is not a preset ({})", names.join(", "))));
        };
        let preset: Topology = serde_json::from_str(text).map_err(|e| Error::parse(at(), e.to_string()))?;
        self.cluster = preset.cluster;
        self.graph = preset.graph;
        Ok(())
    }

    fn check(&self, path: &Path) -> Result<()> {
        let t = &self.name;
        if let Some(f) = &self.fabric {
            let at = |m: &str| Error::parse(Location::file(path).with_field("fabric".to_string()), m.to_string());
            match &self.graph {
                Some(g) if g.network.is_some() && !g.storage.shared => {}
                Some(g) if g.network.is_some() => {
                    return Err(at("a fabric needs local storage (graph.storage.shared = false)"))
                }
                _ => return Err(at("a fabric replaces the network switch of a `graph` machine with a `network`")),
            }
            f.check(path)?;
        }
        let c = match (&self.cluster, &self.graph) {
            (Some(c), None) => c,
            (None, Some(g)) => return g.check(path, t),
            _ => {
                return Err(Error::parse(
                    Location::file(path),
                    "give exactly one of `cluster` (parametric) or `graph` (explicit)",
                ))
            }
        };
        if c.nodes == 0 || c.gpus_per_node == 0 {
            return Err(Error::topology(t, "cluster.nodes and cluster.gpus_per_node must be at least 1"));
        }
        c.pcie.rate(t, "cluster.pcie")?;
        if let Some(nv) = &c.nvlink {
            nv.rate(t, "cluster.nvlink")?;
            // The parametric form joins every GPU pair of a node with its own link, which needs
            // gpus_per_node - 1 NVLink ports per GPU; the most any GPU has is 18 (H100 SXM, NVIDIA
            // H100 Tensor Core GPU Architecture whitepaper, 2022). Larger NVLink domains go through
            // NVSwitches, which the explicit `graph` form describes.
            if c.gpus_per_node - 1 > MAX_NVLINK_PORTS {
                return Err(Error::topology(
                    t,
                    format!(
                        "cluster.nvlink joins every pair of a node's GPUs, which needs {} NVLink ports per GPU \
                         for cluster.gpus_per_node = {}; no GPU has more than {MAX_NVLINK_PORTS}. Describe a \
                         larger NVLink domain with an NVSwitch in the `graph` form",
                        c.gpus_per_node - 1,
                        c.gpus_per_node
                    ),
                ));
            }
        }
        c.network.link.rate(t, "cluster.network")?;
        if !(c.network.efficiency > 0.0 && c.network.efficiency <= 1.0) {
            return Err(Error::topology(t, "cluster.network.efficiency must be in (0, 1]"));
        }
        c.storage.link.rate(t, "cluster.storage")?;
        if let Some(tr) = &c.transports {
            tr.check(path, "cluster.")?;
        }
        Ok(())
    }

    /// Total GPUs the file describes.
    pub fn gpu_count(&self) -> u32 {
        let (nodes, per_node, _) = self.shape();
        nodes.saturating_mul(per_node)
    }

    /// (nodes, GPUs per node, may grow) of either form.
    fn shape(&self) -> (u32, u32, bool) {
        match (&self.cluster, &self.graph) {
            (Some(c), _) => (c.nodes, c.gpus_per_node, c.grow),
            (None, Some(g)) => (g.nodes, g.gpus_per_node(), g.grow && g.network.is_some()),
            (None, None) => (0, 0, false),
        }
    }

    /// Builds a machine with at least `gpus` GPUs (adding nodes if the topology may grow).
    pub fn instantiate(&self, gpus: u32) -> Result<Machine> {
        let t = &self.name;
        let (file_nodes, per_node, grow) = self.shape();
        let nodes = if gpus > self.gpu_count() {
            if !grow {
                return Err(Error::invalid(
                    "GPU count",
                    format!("{gpus} GPUs asked for, but topology `{t}` has {} and does not grow", self.gpu_count()),
                ));
            }
            gpus.div_ceil(per_node)
        } else {
            file_nodes
        };
        // Refuse a machine too big to build before allocating it (a node count of 1e9 in a file).
        crate::limits::check("gpus", nodes as u64 * per_node as u64)
            .map_err(|e| Error::topology(t, format!("{nodes} nodes of {per_node} GPUs: {e}")))?;
        let mut machine = self.build(nodes)?;
        if let Some(cal) = &self.calibrated {
            machine.apply_calibration(cal)?;
        }
        machine.collectives = self.collectives;
        machine.nic_route = self.nic_route;
        machine.compute_contention = self.compute_contention;
        self.faults.apply(&mut machine)?;
        Ok(machine)
    }

    /// The machine of `nodes` nodes, without calibration.
    fn build(&self, nodes: u32) -> Result<Machine> {
        let t = &self.name;
        match (&self.cluster, &self.graph) {
            (Some(c), _) => self.build_cluster(c, nodes),
            (None, Some(g)) => g.build(t, &g.gpu, nodes, self.fabric.as_ref()),
            (None, None) => Err(Error::topology(t, "neither `cluster` nor `graph` is given")),
        }
    }

    /// The GPU model the file names.
    pub fn gpu_model(&self) -> &str {
        match (&self.cluster, &self.graph) {
            (Some(c), _) => &c.gpu,
            (None, Some(g)) => &g.gpu,
            (None, None) => "",
        }
    }

    fn build_cluster(&self, c: &ClusterSpec, nodes: u32) -> Result<Machine> {
        let t = &self.name;

        let mut devices: Vec<Device> = Vec::new();
        let mut links: Vec<Link> = Vec::new();
        let mut gpu_infos = Vec::new();
        let add_dev = |devices: &mut Vec<Device>, name: String, kind, node| -> DeviceId {
            devices.push(Device { name, kind, node });
            (devices.len() - 1) as DeviceId
        };
        let add_pair = |links: &mut Vec<Link>, a: DeviceId, b: DeviceId, kind, lat: u64, rate: f64| {
            links.extend(Link::both_ways(a, b, kind, lat, rate));
        };

        let pcie = (us_to_ns(c.pcie.latency_us), c.pcie.rate(t, "pcie")?);
        let nvlink = match &c.nvlink {
            Some(nv) => Some((us_to_ns(nv.latency_us), nv.rate(t, "nvlink")?)),
            None => None,
        };
        let net_kind = match c.network.kind {
            NetworkKind::Ethernet => LinkKind::Ethernet,
            NetworkKind::Infiniband => LinkKind::Infiniband,
        };
        let net = (us_to_ns(c.network.link.latency_us), c.network.link.rate(t, "network")? * c.network.efficiency);
        let disk = (us_to_ns(c.storage.link.latency_us), c.storage.link.rate(t, "storage")?);

        let switch = add_dev(&mut devices, "switch".into(), DeviceKind::NetworkSwitch, None);
        let shared_storage = if c.storage.shared {
            let s = add_dev(&mut devices, "nfs".into(), DeviceKind::Storage, None);
            // Reads leave the file server at the storage rate, then cross each node's downlink.
            links.push(Link::new(s, switch, LinkKind::Storage, disk.0, BandwidthCurve::constant(disk.1)));
            Some(s)
        } else {
            None
        };

        for n in 0..nodes {
            let host = add_dev(&mut devices, format!("n{n}.cpu"), DeviceKind::Cpu, Some(n));
            add_pair(&mut links, host, switch, net_kind, net.0, net.1);
            let storage = match shared_storage {
                Some(s) => s,
                None => {
                    let d = add_dev(&mut devices, format!("n{n}.disk"), DeviceKind::Storage, Some(n));
                    links.push(Link::new(d, host, LinkKind::Storage, disk.0, BandwidthCurve::constant(disk.1)));
                    d
                }
            };
            let first_gpu = devices.len() as DeviceId;
            for g in 0..c.gpus_per_node {
                let gpu = add_dev(&mut devices, format!("n{n}.gpu{g}"), DeviceKind::Gpu, Some(n));
                add_pair(&mut links, host, gpu, LinkKind::Pcie, pcie.0, pcie.1);
                gpu_infos.push(GpuInfo { device: gpu, host, storage, node: n });
            }
            if let Some((lat, rate)) = nvlink {
                for a in 0..c.gpus_per_node {
                    for b in a + 1..c.gpus_per_node {
                        add_pair(&mut links, first_gpu + a, first_gpu + b, LinkKind::Nvlink, lat, rate);
                    }
                }
            }
        }
        let mut machine = Machine::new(self.name.clone(), c.gpu.clone(), devices, links, gpu_infos)?;
        machine.transports = c.transports.clone().unwrap_or_default();
        let transport = match c.network.kind {
            NetworkKind::Ethernet => crate::hw::NetTransport::Socket,
            NetworkKind::Infiniband => crate::hw::NetTransport::Ib,
        };
        machine.network = Some(crate::hw::NetworkInfo {
            line_rate: c.network.link.rate(t, "network")?,
            host_staged: None,
            transport: machine.transports.net.unwrap_or(transport),
        });
        Ok(machine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_instantiate() {
        for (name, _) in PRESETS {
            let t = load_topology(name).unwrap();
            let (_, per_node, grow) = t.shape();
            let gpus = if grow { 4 * per_node } else { t.gpu_count() };
            let m = t.instantiate(gpus).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(m.gpus.len() as u32 >= gpus, "{name}");
            assert!(!t.source.is_empty(), "{name} says where its numbers come from");
        }
        let m = load_topology("v100-cluster").unwrap().instantiate(16).unwrap();
        assert_eq!(m.node_count(), 4);
    }

    #[test]
    fn clusters_grow_to_fit() {
        let t = load_topology("k80-cluster").unwrap();
        let m = t.instantiate(64).unwrap();
        assert_eq!(m.gpus.len(), 64);
        assert_eq!(m.node_count(), 16);
    }

    #[test]
    fn peers_route_through_host_without_nvlink_and_directly_with_it() {
        let m = load_topology("k80-cluster").unwrap().instantiate(4).unwrap();
        let r = m.shortest_path(m.gpus[0].device, m.gpus[1].device).unwrap();
        assert_eq!(r.links.len(), 2);
        assert!(r.links.iter().all(|&l| m.links[l as usize].kind == LinkKind::Pcie));
        let m = load_topology("v100-cluster").unwrap().instantiate(4).unwrap();
        let r = m.shortest_path(m.gpus[0].device, m.gpus[1].device).unwrap();
        assert_eq!(r.links.len(), 1);
        assert_eq!(m.links[r.links[0] as usize].kind, LinkKind::Nvlink);
        // Across nodes: GPU -> host -> switch -> host -> GPU.
        let r = m.shortest_path(m.gpus[0].device, m.gpus[4].device).unwrap();
        assert_eq!(r.links.len(), 4);
    }

    #[test]
    fn bad_topologies_name_the_problem() {
        let bad = r#"{"name":"x","cluster":{"nodes":1,"gpus_per_node":1,"gpu":"g",
            "pcie":{"bandwidth_gb_s":0,"latency_us":1},
            "network":{"kind":"ethernet","bandwidth_gbit_s":10},
            "storage":{"shared":false,"bandwidth_gb_s":1}}}"#;
        let e = parse_topology(bad, Path::new("x.json"), false).unwrap_err().to_string();
        assert!(e.contains("cluster.pcie") && e.contains("positive"), "{e}");
        let e = parse_topology("{\"name\": 3}", Path::new("x.json"), false).unwrap_err().to_string();
        assert!(e.starts_with("x.json:1"), "{e}");
        let e = load_topology("no-such-thing").unwrap_err().to_string();
        assert!(e.contains("neither a preset"), "{e}");
    }

    #[test]
    fn nvlink_mesh_beyond_a_gpus_ports_is_refused_not_built() {
        // 1,000 GPUs a node all-to-all would be 4 million links (a fuzz input that hung CI).
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/v100-cluster.json"))
            .unwrap()
            .replace("\"gpus_per_node\": 4", "\"gpus_per_node\": 1000");
        let e = parse_topology(&text, Path::new("big.json"), false).unwrap_err().to_string();
        assert!(e.contains("999 NVLink ports") && e.contains("graph"), "{e}");
        let ok = text.replace("\"gpus_per_node\": 1000", "\"gpus_per_node\": 19");
        assert!(parse_topology(&ok, Path::new("ok.json"), false).is_ok());
    }
}
