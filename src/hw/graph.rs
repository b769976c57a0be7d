//! The explicit form of a topology file: one server written out as devices and links (GPUs, CPU
//! sockets, PCIe switches, NICs, NVSwitches and the links between them), replicated per node and
//! joined by a network switch. This is how a DGX-1's hybrid cube-mesh, a two-socket PCIe box with
//! QPI, or GPU pairs under a shared PCIe switch are described; contention on a shared switch uplink
//! then falls out of routing. Owns the format, its checks (errors name the field and the device or
//! link at fault) and the expansion into a [`Machine`]; routing and sharing live elsewhere.

use super::calibration::CurvePoint;
use super::fabric::{FabricSpec, NicLinks};
use super::topology::{LinkSpec, NetworkKind};
use super::{BandwidthCurve, Device, DeviceId, DeviceKind, GpuInfo, Link, LinkKind, Machine};
use crate::error::{Error, Location, Result};
use crate::units::{gb_per_s_to_bytes_per_ns, gbit_per_s_to_bytes_per_ns, us_to_ns};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// One server, replicated `nodes` times.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSpec {
    /// GPU model name, for reports.
    pub gpu: String,
    #[serde(default = "one_node")]
    pub nodes: u32,
    /// Add nodes when more GPUs are asked for than the file lists (default true).
    #[serde(default = "yes")]
    pub grow: bool,
    /// Devices of one server. GPUs get ranks in the order listed, node by node.
    pub devices: Vec<DeviceSpec>,
    /// Links of one server, between device names.
    pub links: Vec<LinkEntry>,
    /// How nodes reach each other: every device in `attach` (usually the NICs) links to one switch.
    #[serde(default)]
    pub network: Option<GraphNetwork>,
    pub storage: GraphStorage,
    /// Effective transport rates (see `crate::hw::transports`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transports: Option<super::Transports>,
}

fn one_node() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn unit() -> f64 {
    1.0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    pub kind: DeviceKind,
    /// For GPUs: the CPU socket whose memory feeds it (host-to-device copies start there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// A link between two devices of the server. Both directions unless `duplex` is false; each
/// direction has the full bandwidth. Give a flat rate (GB/s or Gbit/s) or a measured `curve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    pub from: String,
    pub to: String,
    pub kind: LinkKind,
    #[serde(default)]
    pub latency_us: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gb_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbit_s: Option<f64>,
    /// Achievable rate by message size, piecewise-linear; replaces the flat rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curve: Option<Vec<CurvePoint>>,
    #[serde(default = "yes")]
    pub duplex: bool,
    /// NVLinks this link aggregates (NVLink and NVSwitch links): what NCCL counts for its link
    /// width when `bandwidth_gb_s` is a measured rate rather than a multiple of one link's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphNetwork {
    pub kind: NetworkKind,
    #[serde(flatten)]
    pub link: LinkSpec,
    /// Fraction of the line rate a transfer achieves over TCP (sockets) and over RDMA (InfiniBand
    /// verbs, RoCE, GPUDirect). `protocol` picks which applies.
    #[serde(default = "unit")]
    pub tcp_efficiency: f64,
    #[serde(default = "unit")]
    pub rdma_efficiency: f64,
    pub protocol: Protocol,
    /// Devices of the server that link to the switch.
    pub attach: Vec<String>,
    /// NCCL moves network data through host memory here (no GPUDirect RDMA) at a measured rate per
    /// channel (see [`super::HostStaged`]); absent: only the links limit a transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_staged: Option<super::HostStagedSpec>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Tcp,
    Rdma,
}

impl GraphNetwork {
    pub fn efficiency(&self) -> f64 {
        match self.protocol {
            Protocol::Tcp => self.tcp_efficiency,
            Protocol::Rdma => self.rdma_efficiency,
        }
    }
}

/// Where training data is read from: one shared file system behind the network switch, or a disk
/// per node attached to the device `attach` (a CPU socket).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphStorage {
    pub shared: bool,
    #[serde(flatten)]
    pub link: LinkSpec,
    pub attach: String,
}

/// A link's rate: a curve if given, else the flat rate. Errors name `field`.
fn link_curve(l: &LinkEntry, at: &dyn Fn(&str) -> Location) -> Result<BandwidthCurve> {
    let what = format!("link {} -> {}", l.from, l.to);
    match (l.nvlinks, l.kind) {
        (Some(0), _) => return Err(Error::parse(at("nvlinks"), format!("{what}: nvlinks must be at least 1"))),
        (Some(_), LinkKind::Nvlink | LinkKind::Nvswitch) | (None, _) => {}
        (Some(_), k) => {
            return Err(Error::parse(
                at("nvlinks"),
                format!("{what}: nvlinks given, but only NVLink and NVSwitch links count NVLinks, not {}", k.name()),
            ))
        }
    }
    if let Some(points) = &l.curve {
        for p in points {
            crate::units::check_rate_gb_s(p.gb_s).map_err(|m| Error::parse(at("curve"), format!("{what}: {m}")))?;
        }
        let pts = points.iter().map(|p| (p.bytes, gb_per_s_to_bytes_per_ns(p.gb_s))).collect();
        return BandwidthCurve::from_points(pts)
            .ok_or_else(|| Error::parse(at("curve"), format!("{what}: every curve point needs a positive gb_s")));
    }
    let rate = match (l.bandwidth_gb_s, l.bandwidth_gbit_s) {
        (Some(gb), None) => gb_per_s_to_bytes_per_ns(gb),
        (None, Some(gbit)) => gbit_per_s_to_bytes_per_ns(gbit),
        _ => {
            return Err(Error::parse(
                at("bandwidth_gb_s"),
                format!("{what}: give exactly one of bandwidth_gb_s, bandwidth_gbit_s or curve"),
            ))
        }
    };
    crate::units::check_rate_gb_s(rate).map_err(|m| Error::parse(at("bandwidth_gb_s"), format!("{what}: {m}")))?;
    Ok(BandwidthCurve::constant(rate))
}

impl GraphSpec {
    /// Checks names, endpoints and rates; errors name the file, the field and the device or link.
    pub fn check(&self, path: &Path, topo: &str) -> Result<()> {
        let at = |f: String| Location::file(path).with_field(f);
        if self.nodes == 0 {
            return Err(Error::parse(at("graph.nodes".into()), "must be at least 1"));
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, d) in self.devices.iter().enumerate() {
            if names.insert(d.name.as_str(), i).is_some() {
                return Err(Error::parse(
                    at(format!("graph.devices[{i}]")),
                    format!("device `{}` is listed twice", d.name),
                ));
            }
        }
        if !self.devices.iter().any(|d| d.kind == DeviceKind::Gpu) {
            return Err(Error::parse(at("graph.devices".into()), "the server has no GPU"));
        }
        let known = |name: &str, field: String| -> Result<usize> {
            names.get(name).copied().ok_or_else(|| Error::parse(at(field), format!("unknown device `{name}`")))
        };
        for (i, d) in self.devices.iter().enumerate() {
            match (d.kind, &d.host) {
                (DeviceKind::Gpu, Some(h)) => {
                    let hi = known(h, format!("graph.devices[{i}].host"))?;
                    if self.devices[hi].kind != DeviceKind::Cpu {
                        return Err(Error::parse(
                            at(format!("graph.devices[{i}].host")),
                            format!("GPU `{}`: host `{h}` is not a CPU", d.name),
                        ));
                    }
                }
                (DeviceKind::Gpu, None) => {
                    return Err(Error::parse(
                        at(format!("graph.devices[{i}].host")),
                        format!("GPU `{}` needs a host CPU", d.name),
                    ))
                }
                _ => {}
            }
        }
        for (i, l) in self.links.iter().enumerate() {
            let field = |f: &str| at(format!("graph.links[{i}].{f}"));
            known(&l.from, format!("graph.links[{i}].from")).map_err(|_| {
                Error::parse(field("from"), format!("link {} -> {}: unknown device `{}`", l.from, l.to, l.from))
            })?;
            known(&l.to, format!("graph.links[{i}].to")).map_err(|_| {
                Error::parse(field("to"), format!("link {} -> {}: unknown device `{}`", l.from, l.to, l.to))
            })?;
            if l.from == l.to {
                return Err(Error::parse(field("to"), format!("link {} -> {} joins a device to itself", l.from, l.to)));
            }
            crate::units::check_duration_us(l.latency_us)
                .map_err(|m| Error::parse(field("latency_us"), format!("link {} -> {}: {m}", l.from, l.to)))?;
            link_curve(l, &|f| field(f))?;
        }
        if let Some(net) = &self.network {
            for (i, a) in net.attach.iter().enumerate() {
                known(a, format!("graph.network.attach[{i}]"))?;
            }
            if net.attach.is_empty() {
                return Err(Error::parse(at("graph.network.attach".into()), "name at least one device (a NIC)"));
            }
            net.link.rate(topo, "graph.network")?;
            for (name, e) in [("tcp_efficiency", net.tcp_efficiency), ("rdma_efficiency", net.rdma_efficiency)] {
                if !(e > 0.0 && e <= 1.0) {
                    return Err(Error::parse(at(format!("graph.network.{name}")), "must be in (0, 1]"));
                }
            }
            if let Some(hs) = &net.host_staged {
                hs.check(&|f: &str| at(format!("graph.network.host_staged.{f}")))?;
                if self.transports.as_ref().is_some_and(|t| t.gdr == Some(true)) {
                    return Err(Error::parse(
                        at("graph.network.host_staged".into()),
                        "contradicts `transports.gdr: true` (GPUDirect RDMA moves data without host staging)",
                    ));
                }
            }
        } else if self.nodes > 1 {
            return Err(Error::parse(at("graph.network".into()), "several nodes need a network"));
        }
        known(&self.storage.attach, "graph.storage.attach".into())?;
        self.storage.link.rate(topo, "graph.storage")?;
        if let Some(tr) = &self.transports {
            tr.check(path, "graph.")?;
        }
        Ok(())
    }

    pub fn gpus_per_node(&self) -> u32 {
        self.devices.iter().filter(|d| d.kind == DeviceKind::Gpu).count() as u32
    }

    /// Expands `nodes` copies of the server (device names prefixed `n<i>.`) plus the switch and
    /// storage. Assumes [`GraphSpec::check`] passed.
    /// With `fabric`, the nodes' `network.attach` devices (NIC r = rail r) join a fat-tree instead
    /// of the single switch.
    pub fn build(&self, topo: &str, gpu_model: &str, nodes: u32, fabric: Option<&FabricSpec>) -> Result<Machine> {
        let mut devices: Vec<Device> = Vec::new();
        let mut links: Vec<Link> = Vec::new();
        let index: HashMap<&str, usize> = self.devices.iter().enumerate().map(|(i, d)| (d.name.as_str(), i)).collect();
        let push_dev = |devices: &mut Vec<Device>, name: String, kind, node| {
            devices.push(Device { name, kind, node });
            (devices.len() - 1) as DeviceId
        };
        let fabric = fabric.filter(|_| self.network.is_some());
        let network = match &self.network {
            Some(net) if fabric.is_none() => {
                let rate = net.link.rate(topo, "graph.network")? * net.efficiency();
                let kind = match net.kind {
                    NetworkKind::Ethernet => LinkKind::Ethernet,
                    NetworkKind::Infiniband => LinkKind::Infiniband,
                };
                let sw = push_dev(&mut devices, "switch".into(), DeviceKind::NetworkSwitch, None);
                Some((sw, kind, us_to_ns(net.link.latency_us), rate))
            }
            _ => None,
        };
        let disk_rate = self.storage.link.rate(topo, "graph.storage")?;
        let disk = (us_to_ns(self.storage.link.latency_us), BandwidthCurve::constant(disk_rate));
        let shared = match (self.storage.shared, network) {
            (true, Some((sw, ..))) => {
                let s = push_dev(&mut devices, "nfs".into(), DeviceKind::Storage, None);
                links.push(Link::new(s, sw, LinkKind::Storage, disk.0, disk.1.clone()));
                Some(s)
            }
            _ => None,
        };
        let curves: Vec<BandwidthCurve> =
            self.links.iter().map(|l| link_curve(l, &|_| Location::file(topo))).collect::<Result<_>>()?;
        let mut gpus = Vec::new();
        let (mut node_nics, mut rail_of_gpu) = (Vec::new(), rustc_hash::FxHashMap::default());
        for n in 0..nodes {
            let base = devices.len() as DeviceId;
            for d in &self.devices {
                push_dev(&mut devices, format!("n{n}.{}", d.name), d.kind, Some(n));
            }
            let id = |name: &str| base + index[name] as DeviceId;
            for (l, curve) in self.links.iter().zip(&curves) {
                let (a, b) = (id(&l.from), id(&l.to));
                let latency_ns = us_to_ns(l.latency_us);
                links.push(Link {
                    from: a,
                    to: b,
                    kind: l.kind,
                    latency_ns,
                    bandwidth: curve.clone(),
                    nvlinks: l.nvlinks,
                });
                if l.duplex {
                    links.push(Link {
                        from: b,
                        to: a,
                        kind: l.kind,
                        latency_ns,
                        bandwidth: curve.clone(),
                        nvlinks: l.nvlinks,
                    });
                }
            }
            if let (Some((sw, kind, lat, rate)), Some(net)) = (network, &self.network) {
                for a in &net.attach {
                    links.extend(Link::both_ways(id(a), sw, kind, lat, rate));
                }
            }
            let storage = match shared {
                Some(s) => s,
                None => {
                    let d = push_dev(&mut devices, format!("n{n}.disk"), DeviceKind::Storage, Some(n));
                    let to = id(&self.storage.attach);
                    links.push(Link::new(d, to, LinkKind::Storage, disk.0, disk.1.clone()));
                    d
                }
            };
            for (i, d) in self.devices.iter().filter(|d| d.kind == DeviceKind::Gpu).enumerate() {
                let host = id(d.host.as_deref().expect("checked: GPUs have a host"));
                gpus.push(GpuInfo { device: id(&d.name), host, storage, node: n });
                rail_of_gpu.insert(id(&d.name), i as u32);
            }
            if let (Some(_), Some(net)) = (fabric, &self.network) {
                node_nics.push(net.attach.iter().map(|a| id(a)).collect::<Vec<DeviceId>>());
            }
        }
        let routes = match (fabric, &self.network) {
            (Some(f), Some(net)) => {
                let nic = NicLinks {
                    kind: match net.kind {
                        NetworkKind::Ethernet => LinkKind::Ethernet,
                        NetworkKind::Infiniband => LinkKind::Infiniband,
                    },
                    latency_ns: us_to_ns(net.link.latency_us),
                    rate: net.link.rate(topo, "graph.network")? * net.efficiency(),
                    latency_us: net.link.latency_us,
                };
                Some(f.build(topo, &mut devices, &mut links, &node_nics, &nic)?)
            }
            _ => None,
        };
        let mut machine = Machine::new(topo.to_string(), gpu_model.to_string(), devices, links, gpus)?;
        if let Some(mut r) = routes {
            r.rail_of_gpu = rail_of_gpu;
            machine.fabric = Some(r);
            machine.nics = node_nics;
        }
        machine.transports = self.transports.clone().unwrap_or_default();
        if let Some(net) = &self.network {
            let transport = match net.protocol {
                Protocol::Tcp => super::NetTransport::Socket,
                Protocol::Rdma => super::NetTransport::Ib,
            };
            machine.network = Some(super::NetworkInfo {
                line_rate: net.link.rate(topo, "graph.network")?,
                transport: machine.transports.net.unwrap_or(transport),
                host_staged: net.host_staged.as_ref().map(|h| h.resolve()),
            });
        }
        Ok(machine)
    }
}
