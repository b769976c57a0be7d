//! The Machine: devices (GPUs, CPU sockets, switches, NICs, storage) joined by directed links, each
//! with a latency and a bandwidth curve over message size, plus routing between devices.
//! Built from a topology file or preset ([`topology`]); read by the DAG builder (which GPU sits on
//! which host, where its data comes from) and by the engine (link capacities, routes).
//! Knows nothing of DAGs, strategies or time-stepping.

pub mod builder;
pub mod calibration;
pub mod fabric;
pub mod faults;
pub mod graph;
mod route;
pub mod topology;
pub mod transports;

pub use calibration::Calibration;
pub use route::{ComputeContention, NicRoute, Route};
pub use topology::{load_topology, Topology};
pub use transports::{HostStaged, HostStagedSpec, NetTransport, NetworkInfo, Transports};

use rustc_hash::{FxHashMap as HashMap, FxHashSet};
use serde::{Deserialize, Serialize};

/// Index of a device in [`Machine::devices`].
pub type DeviceId = u32;
/// Index of a directed link in [`Machine::links`].
pub type LinkId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Gpu,
    /// A CPU socket with its memory: the root of a node's PCIe tree.
    Cpu,
    PcieSwitch,
    Nic,
    NvSwitch,
    NetworkSwitch,
    Storage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    Pcie,
    Nvlink,
    Nvswitch,
    Qpi,
    Ethernet,
    Infiniband,
    Storage,
}

impl LinkKind {
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Pcie => "pcie",
            LinkKind::Nvlink => "nvlink",
            LinkKind::Nvswitch => "nvswitch",
            LinkKind::Qpi => "qpi",
            LinkKind::Ethernet => "ethernet",
            LinkKind::Infiniband => "infiniband",
            LinkKind::Storage => "storage",
        }
    }

    pub const ALL: [LinkKind; 7] = [
        LinkKind::Pcie,
        LinkKind::Nvlink,
        LinkKind::Nvswitch,
        LinkKind::Qpi,
        LinkKind::Ethernet,
        LinkKind::Infiniband,
        LinkKind::Storage,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Device {
    pub name: String,
    pub kind: DeviceKind,
    /// Node (server) the device belongs to; `None` for shared fabric (network switch, NFS).
    pub node: Option<u32>,
}

/// Achievable bandwidth of one message as a function of its size: piecewise-linear in log(size)
/// between measured points, flat beyond the ends. Rates in bytes/ns (= GB/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthCurve {
    /// (message bytes, bytes/ns), sorted by size, at least one point.
    points: Vec<(u64, f64)>,
}

impl BandwidthCurve {
    pub fn constant(rate: f64) -> Self {
        BandwidthCurve { points: vec![(0, rate)] }
    }

    /// Builds a curve from (bytes, rate) points; they are sorted by size. Rates must be positive.
    pub fn from_points(mut points: Vec<(u64, f64)>) -> Option<Self> {
        if points.is_empty() || points.iter().any(|&(_, r)| !(r.is_finite() && r > 0.0)) {
            return None;
        }
        points.sort_by_key(|p| p.0);
        Some(BandwidthCurve { points })
    }

    /// The link's capacity for fair sharing: the highest rate on the curve.
    pub fn peak(&self) -> f64 {
        self.points.iter().map(|p| p.1).fold(0.0, f64::max)
    }

    /// Rate one message of `bytes` can reach on this link alone.
    pub fn rate_for(&self, bytes: u64) -> f64 {
        let pts = &self.points;
        if bytes <= pts[0].0 {
            return pts[0].1;
        }
        for w in pts.windows(2) {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            if bytes <= x1 {
                // Measured sizes are usually powers of two apart, so interpolate in log(size);
                // from a point at 0 bytes, linearly.
                let t = if x0 == 0 {
                    bytes as f64 / x1.max(1) as f64
                } else {
                    (bytes as f64 / x0 as f64).ln() / (x1 as f64 / x0 as f64).ln().max(f64::MIN_POSITIVE)
                };
                return y0 + t * (y1 - y0);
            }
        }
        pts[pts.len() - 1].1
    }

    pub fn points(&self) -> &[(u64, f64)] {
        &self.points
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Link {
    pub from: DeviceId,
    pub to: DeviceId,
    pub kind: LinkKind,
    pub latency_ns: u64,
    pub bandwidth: BandwidthCurve,
    /// NVLinks an NVLink or NVSwitch link aggregates, when the topology file says (NCCL counts
    /// them for its link width); otherwise NCCL's model infers the count from the rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvlinks: Option<u32>,
}

impl Link {
    /// A link whose NVLink count is not given (NCCL's model infers it from the rate if needed).
    pub fn new(from: DeviceId, to: DeviceId, kind: LinkKind, latency_ns: u64, bandwidth: BandwidthCurve) -> Link {
        Link { from, to, kind, latency_ns, bandwidth, nvlinks: None }
    }

    /// The two directions of a full-duplex cable at a flat rate (bytes/ns).
    pub fn both_ways(a: DeviceId, b: DeviceId, kind: LinkKind, latency_ns: u64, rate: f64) -> [Link; 2] {
        let curve = BandwidthCurve::constant(rate);
        [Link::new(a, b, kind, latency_ns, curve.clone()), Link::new(b, a, kind, latency_ns, curve)]
    }

    /// Capacity shared among concurrent transfers (bytes/ns).
    pub fn capacity(&self) -> f64 {
        self.bandwidth.peak()
    }
}

/// What the DAG builder needs to know about one GPU.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GpuInfo {
    pub device: DeviceId,
    /// The CPU socket whose memory feeds this GPU (host-to-device copies start here).
    pub host: DeviceId,
    /// Where this GPU's training data is read from (local disk or shared file system).
    pub storage: DeviceId,
    pub node: u32,
}

/// A whole machine or cluster, ready for routing and simulation.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub name: String,
    /// GPU model name, for reports.
    pub gpu_model: String,
    pub devices: Vec<Device>,
    pub links: Vec<Link>,
    /// GPUs in rank order (node by node).
    pub gpus: Vec<GpuInfo>,
    /// Collective efficiencies from a calibration file (empty: every collective at full rate).
    #[serde(skip)]
    pub collective_efficiency: Vec<calibration::CollectiveEfficiency>,
    /// How collectives are lowered onto this machine (NCCL's mechanics by default).
    #[serde(skip)]
    pub collectives: crate::collective::CollectiveModel,
    /// How railless transfers between nodes pick their NICs under the ideal collective model.
    #[serde(skip)]
    pub nic_route: NicRoute,
    /// Whether collectives in flight slow the compute beside them (`sim::contention`).
    #[serde(skip)]
    pub compute_contention: ComputeContention,
    /// Effective transport rates from the topology file (empty: the links decide).
    #[serde(skip)]
    pub transports: Transports,
    /// The network between nodes (line rate, transport), when the topology has one.
    #[serde(skip)]
    pub network: Option<NetworkInfo>,
    /// Per node, the devices that attach it to the network switch (its NICs), in device order.
    #[serde(skip)]
    nics: Vec<Vec<DeviceId>>,
    #[serde(skip)]
    out_links: Vec<Vec<LinkId>>,
    #[serde(skip)]
    in_links: Vec<Vec<LinkId>>,
    /// The network switch every path between two nodes must cross, when there is exactly one:
    /// routes between nodes are then found as two short searches through it.
    #[serde(skip)]
    gateway: Option<DeviceId>,
    /// The gateway's outgoing and incoming links sorted by the node at their other end (devices
    /// outside every node first), so a search through the gateway follows only the links into the
    /// nodes it may need instead of all of them (which made routing quadratic in the node count).
    #[serde(skip)]
    gateway_links: [Vec<(Option<u32>, LinkId)>; 2],
    /// The fat-tree between the nodes, when the topology has one in place of a single switch.
    #[serde(skip)]
    fabric: Option<fabric::FabricRoutes>,
    /// Per GPU rank, how many times longer its compute takes (a slow GPU or straggler node, see
    /// [`faults`]); empty when every GPU runs at its nominal speed.
    #[serde(skip)]
    pub compute_factor: Vec<f64>,
}

impl Machine {
    /// Assembles a machine and checks it: links name existing devices and have positive bandwidth,
    /// and every GPU can reach its host and storage.
    pub fn new(
        name: String,
        gpu_model: String,
        devices: Vec<Device>,
        links: Vec<Link>,
        gpus: Vec<GpuInfo>,
    ) -> crate::Result<Self> {
        let err = |msg: String| crate::Error::topology(name.clone(), msg);
        let n = devices.len() as u32;
        let mut out_links = vec![Vec::new(); devices.len()];
        let mut in_links = vec![Vec::new(); devices.len()];
        for (i, l) in links.iter().enumerate() {
            if l.from >= n || l.to >= n {
                return Err(err(format!("link {i} names a device that does not exist")));
            }
            let (a, b) = (&devices[l.from as usize].name, &devices[l.to as usize].name);
            if l.capacity().is_nan() || l.capacity() <= 0.0 {
                return Err(err(format!("link {a} -> {b} has zero bandwidth")));
            }
            // Every rate and latency, however it was given (file, preset, calibration, efficiency
            // factor), must be in the range the engine's integer time can hold.
            for &(_, rate) in l.bandwidth.points() {
                crate::units::check_rate_gb_s(rate).map_err(|m| err(format!("link {a} -> {b}: {m}")))?;
            }
            if l.latency_ns as f64 > crate::units::MAX_DURATION_US * 1e3 {
                return Err(err(format!(
                    "link {a} -> {b}: latency of {} ns is beyond the limit of {:e} us",
                    l.latency_ns,
                    crate::units::MAX_DURATION_US
                )));
            }
            out_links[l.from as usize].push(i as LinkId);
            in_links[l.to as usize].push(i as LinkId);
        }
        let gateway = find_gateway(&devices, &links);
        let gateway_links = match gateway {
            Some(gw) => [false, true].map(|incoming| {
                let ids = if incoming { &in_links[gw as usize] } else { &out_links[gw as usize] };
                let mut by_node: Vec<(Option<u32>, LinkId)> = ids
                    .iter()
                    .map(|&l| {
                        let link = &links[l as usize];
                        (devices[(if incoming { link.from } else { link.to }) as usize].node, l)
                    })
                    .collect();
                by_node.sort_unstable();
                by_node
            }),
            None => [Vec::new(), Vec::new()],
        };
        let mut nics: Vec<Vec<DeviceId>> = Vec::new();
        if let Some(gw) = gateway {
            for l in &links {
                if let (true, Some(node)) = (l.to == gw, devices[l.from as usize].node) {
                    if nics.len() <= node as usize {
                        nics.resize(node as usize + 1, Vec::new());
                    }
                    nics[node as usize].push(l.from);
                }
            }
            nics.iter_mut().for_each(|n| {
                n.sort_unstable();
                n.dedup();
            });
        }
        if gpus.is_empty() {
            return Err(err("the machine has no GPUs".into()));
        }
        let m = Machine {
            name: name.clone(),
            gpu_model,
            devices,
            links,
            gpus,
            collective_efficiency: Vec::new(),
            collectives: Default::default(),
            nic_route: Default::default(),
            compute_contention: Default::default(),
            transports: Transports::default(),
            network: None,
            nics,
            out_links,
            in_links,
            gateway,
            gateway_links,
            fabric: None,
            compute_factor: Vec::new(),
        };
        // Every GPU must reach the first one and be reached from it (one search each way).
        let (from_first, to_first) = (m.reachable(m.gpus[0].device, false), m.reachable(m.gpus[0].device, true));
        for g in &m.gpus {
            if !(from_first[g.device as usize] && to_first[g.device as usize]) {
                let (gname, first) = (m.device_name(g.device), m.device_name(m.gpus[0].device));
                return Err(err(format!("GPU {gname} is disconnected: no route between it and {first}")));
            }
        }
        // Every GPU must be reached from its host and its storage: one search per distinct host or
        // storage device, not one route search per GPU (a one-node machine of 16,384 GPUs took
        // minutes that way).
        let mut sources: Vec<DeviceId> = m.gpus.iter().flat_map(|g| [g.host, g.storage]).collect();
        sources.sort_unstable();
        sources.dedup();
        let mut targets: HashMap<DeviceId, Vec<DeviceId>> = HashMap::default();
        for g in &m.gpus {
            for s in [g.host, g.storage] {
                targets.entry(s).or_default().push(g.device);
            }
        }
        let mut reached: HashMap<(DeviceId, DeviceId), bool> = HashMap::default();
        for s in sources {
            let seen = m.reachable_near(s, &targets[&s]);
            for &g in &targets[&s] {
                reached.insert((s, g), seen.contains(&g));
            }
        }
        for g in &m.gpus {
            for (what, other) in [("host", g.host), ("storage", g.storage)] {
                if !reached[&(other, g.device)] {
                    let gname = &m.devices[g.device as usize].name;
                    return Err(err(format!("GPU {gname} cannot be reached from its {what}")));
                }
            }
        }
        Ok(m)
    }

    /// Devices reachable from `start`, searched only as far as `goals` need: through the network
    /// gateway, only into the nodes of `start` and `goals` (a path into any other node would have
    /// to come back through the gateway). The search stops once every goal is reached.
    fn reachable_near(&self, start: DeviceId, goals: &[DeviceId]) -> FxHashSet<DeviceId> {
        let mut nodes: Vec<Option<u32>> = vec![None, self.devices[start as usize].node];
        nodes.extend(goals.iter().map(|&g| self.devices[g as usize].node));
        nodes.sort_unstable();
        nodes.dedup();
        let mut left: FxHashSet<DeviceId> = goals.iter().copied().collect();
        let mut seen: FxHashSet<DeviceId> = FxHashSet::default();
        seen.insert(start);
        left.remove(&start);
        let mut stack = vec![start];
        // Without a single switch (a fat-tree), a node's own GPUs are searched for inside it.
        let home = self.devices[start as usize].node;
        let inside =
            self.gateway.is_none() && home.is_some() && goals.iter().all(|&g| self.devices[g as usize].node == home);
        while let Some(d) = stack.pop() {
            if left.is_empty() {
                break;
            }
            let near: Vec<LinkId>;
            let links = if Some(d) == self.gateway {
                let by_node = &self.gateway_links[0];
                near = nodes
                    .iter()
                    .flat_map(|&n| {
                        let from = by_node.partition_point(|&(m, _)| m < n);
                        by_node[from..].iter().take_while(move |&&(m, _)| m == n).map(|&(_, l)| l)
                    })
                    .collect();
                &near
            } else {
                self.out_links(d)
            };
            for &l in links {
                let to = self.links[l as usize].to;
                if inside && self.devices[to as usize].node != home {
                    continue;
                }
                if seen.insert(to) {
                    left.remove(&to);
                    stack.push(to);
                }
            }
        }
        seen
    }

    /// Devices reachable from `start` (following links backwards if `reverse`).
    fn reachable(&self, start: DeviceId, reverse: bool) -> Vec<bool> {
        let mut seen = vec![false; self.devices.len()];
        seen[start as usize] = true;
        let mut stack = vec![start];
        let mut incoming: Vec<Vec<DeviceId>> = Vec::new();
        if reverse {
            incoming = vec![Vec::new(); self.devices.len()];
            for l in &self.links {
                incoming[l.to as usize].push(l.from);
            }
        }
        while let Some(d) = stack.pop() {
            let next: Vec<DeviceId> = if reverse {
                incoming[d as usize].clone()
            } else {
                self.out_links(d).iter().map(|&l| self.links[l as usize].to).collect()
            };
            for n in next {
                if !seen[n as usize] {
                    seen[n as usize] = true;
                    stack.push(n);
                }
            }
        }
        seen
    }

    pub fn device_name(&self, d: DeviceId) -> &str {
        &self.devices[d as usize].name
    }

    /// Outgoing links of a device, in link order.
    pub fn out_links(&self, d: DeviceId) -> &[LinkId] {
        &self.out_links[d as usize]
    }

    /// Incoming links of a device, in link order.
    pub fn in_links(&self, d: DeviceId) -> &[LinkId] {
        &self.in_links[d as usize]
    }

    /// The switch every path between two different nodes crosses, if the machine has one.
    pub fn gateway(&self) -> Option<DeviceId> {
        self.gateway
    }

    /// The devices that attach `node` to the network switch (its NICs), in device order.
    pub fn nics(&self, node: u32) -> &[DeviceId] {
        self.nics.get(node as usize).map_or(&[], |n| n.as_slice())
    }

    /// Number of nodes (servers) the GPUs span.
    pub fn node_count(&self) -> u32 {
        self.gpus.iter().map(|g| g.node + 1).max().unwrap_or(0)
    }

    /// The rate cap of a transfer from device `src` to device `dst` that uses `channels` NCCL
    /// channels: where the two sit in different nodes and the network is host-staged
    /// ([`HostStaged`]), `channels` times the rate of one; otherwise infinite (the links decide).
    pub fn net_channel_cap(&self, src: DeviceId, dst: DeviceId, channels: u32) -> f64 {
        let Some(hs) = self.network.and_then(|n| n.host_staged) else { return f64::INFINITY };
        match (self.devices[src as usize].node, self.devices[dst as usize].node) {
            (Some(a), Some(b)) if a != b => channels as f64 * hs.channel_rate,
            _ => f64::INFINITY,
        }
    }

    /// [`Machine::net_channel_cap`] of a point-to-point transfer (NCCL's send/recv channels).
    pub fn p2p_net_cap(&self, src: DeviceId, dst: DeviceId) -> f64 {
        match self.network.and_then(|n| n.host_staged) {
            Some(hs) => self.net_channel_cap(src, dst, hs.p2p_channels),
            None => f64::INFINITY,
        }
    }

    /// Kinds of link present, sorted, for utilisation reports.
    pub fn link_kinds(&self) -> Vec<LinkKind> {
        let mut kinds: Vec<LinkKind> = self.links.iter().map(|l| l.kind).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// The single network switch that separates nodes, if the machine is built that way: exactly one
/// shared (node-less) switch, no link joining two different nodes directly, and no other shared
/// device that node traffic could pass through (shared storage only sends).
fn find_gateway(devices: &[Device], links: &[Link]) -> Option<DeviceId> {
    let mut switches = devices
        .iter()
        .enumerate()
        .filter(|(_, d)| d.node.is_none() && d.kind == DeviceKind::NetworkSwitch)
        .map(|(i, _)| i as DeviceId);
    let gateway = switches.next()?;
    if switches.next().is_some() {
        return None;
    }
    let node = |d: DeviceId| devices[d as usize].node;
    for l in links {
        match (node(l.from), node(l.to)) {
            (Some(a), Some(b)) if a != b => return None,
            (Some(_), None) if l.to != gateway => return None,
            _ => {}
        }
    }
    Some(gateway)
}

impl Machine {
    /// Whether the nodes meet through a fat-tree fabric (`fabric` in the topology).
    pub fn has_fabric(&self) -> bool {
        self.fabric.is_some()
    }

    /// GPUs per node if the first `gpus` GPUs fill whole nodes that are identical (same devices
    /// and links, up to renaming), meet only at the network switch, and read data and feed GPUs
    /// from inside themselves (local storage): then a rotation of the nodes maps the machine onto
    /// itself, and one node's GPUs behave like every node's. `None` otherwise.
    pub fn uniform_nodes(&self, gpus: u32) -> Option<u32> {
        self.gateway?;
        self.identical_nodes(gpus, true)
    }

    /// GPUs per node if the first `gpus` GPUs fill whole nodes that are identical inside (same
    /// devices and links, up to renaming, host and storage their own) with no slow GPU; with
    /// `same_outside`, their links outside must also reach the very same devices (one switch),
    /// else only the same kinds and rates (nodes hanging at different places of a fabric).
    pub fn identical_nodes(&self, gpus: u32, same_outside: bool) -> Option<u32> {
        if !self.compute_factor.is_empty() {
            return None;
        }
        let used = &self.gpus[..(gpus as usize).min(self.gpus.len())];
        let nodes = used.last()?.node + 1;
        let per_node = used.iter().filter(|g| g.node == 0).count() as u32;
        if nodes < 2 || per_node == 0 || per_node * nodes != gpus {
            return None;
        }
        for (r, g) in used.iter().enumerate() {
            let node = Some(g.node);
            if g.node != r as u32 / per_node
                || self.devices[g.device as usize].node != node
                || self.devices[g.host as usize].node != node
                || self.devices[g.storage as usize].node != node
            {
                return None;
            }
        }
        // Each node's devices and touching links, gathered in one pass (so the check stays linear
        // in the machine's size).
        let mut devices: Vec<Vec<DeviceId>> = vec![Vec::new(); nodes as usize];
        let mut position = vec![0u64; self.devices.len()];
        for (i, d) in self.devices.iter().enumerate() {
            if let Some(n) = d.node.filter(|&n| n < nodes) {
                position[i] = devices[n as usize].len() as u64;
                devices[n as usize].push(i as DeviceId);
            }
        }
        let mut links: Vec<Vec<LinkId>> = vec![Vec::new(); nodes as usize];
        for (i, l) in self.links.iter().enumerate() {
            let (a, b) = (self.devices[l.from as usize].node, self.devices[l.to as usize].node);
            for n in [a, b].into_iter().flatten().filter(|&n| n < nodes) {
                if links[n as usize].last() != Some(&(i as LinkId)) {
                    links[n as usize].push(i as LinkId);
                }
            }
        }
        let sig = |n: u32| self.node_signature(n, &devices[n as usize], &links[n as usize], &position, same_outside);
        let first = sig(0);
        (1..nodes).all(|n| sig(n) == first).then_some(per_node)
    }

    /// A node's devices (kinds, in order) and the links touching it, with devices renamed to their
    /// position in the node (shared devices keep their id, or with `same_outside` false only their kind): equal signatures mean identical nodes.
    fn node_signature(
        &self,
        node: u32,
        devices: &[DeviceId],
        links: &[LinkId],
        position: &[u64],
        same_outside: bool,
    ) -> Vec<u64> {
        let mut sig: Vec<u64> = devices.iter().map(|&d| self.devices[d as usize].kind as u64).collect();
        let name = |d: DeviceId| {
            if self.devices[d as usize].node == Some(node) {
                position[d as usize]
            } else if same_outside {
                u64::MAX / 2 + d as u64
            } else {
                u64::MAX / 2 + self.devices[d as usize].kind as u64
            }
        };
        for &li in links {
            let l = &self.links[li as usize];
            sig.extend([name(l.from), name(l.to), l.kind as u64, l.latency_ns]);
            sig.extend(l.bandwidth.points().iter().flat_map(|&(b, r)| [b, r.to_bits()]));
        }
        sig
    }
}
