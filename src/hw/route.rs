//! Routing: the path a transfer takes between two devices. Cheapest by latency plus the time of a
//! 1 MiB message at each link's peak rate; ties broken deterministically, so a route is the same
//! on every run and machine.

use super::{DeviceId, LinkId, LinkKind, Machine};
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A path of directed links with its total latency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub links: Vec<LinkId>,
    pub latency_ns: u64,
}

impl Route {
    /// The fastest a single message of `bytes` can go on this route alone: the slowest link's
    /// curve value at that size. Infinite for an empty route (a device to itself).
    pub fn rate_cap(&self, machine: &Machine, bytes: u64) -> f64 {
        self.links.iter().map(|&l| machine.links[l as usize].bandwidth.rate_for(bytes)).fold(f64::INFINITY, f64::min)
    }
}

/// How a transfer between nodes that names no rail picks the NICs it leaves and enters by, under
/// the ideal collective model (the NCCL model always routes as NCCL does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicRoute {
    /// The cheapest route ([`Machine::shortest_path`]): where two GPUs share a PCIe switch with
    /// two NICs, the tie-break sends both through the first NIC.
    Cheapest,
    /// NCCL's choice ([`Machine::p2p_route`]): the receiver's local NIC, reached by PXN through
    /// the sender's node GPU of the same index (`ncclTopoGetLocalNet`, `ncclTopoGetNetDev`,
    /// NCCL 2.21.5), so each GPU of a DGX H100 has a NIC of its own.
    Local,
    /// As `Local`, and a ring across nodes runs as one ring per GPU of a node (NCCL's channels,
    /// [`crate::collective::Plan::over_channels`]), so every GPU's NIC carries a share of it
    /// instead of one GPU's NIC carrying it all. The default: it is how the stacks that dagsim
    /// predicts send (ABCI nccl-tests on 2 to 8 nodes: bus bandwidth above one adapter's rate;
    /// docs/machines.md).
    #[default]
    Channels,
}

impl NicRoute {
    /// Names accepted by `--nic-route`.
    pub const NAMES: [&'static str; 3] = ["cheapest", "local", "channels"];

    pub fn name(self) -> &'static str {
        match self {
            NicRoute::Cheapest => "cheapest",
            NicRoute::Local => "local",
            NicRoute::Channels => "channels",
        }
    }

    /// Parses a `--nic-route` value; the error names the flag and the accepted values.
    pub fn parse(s: &str) -> crate::error::Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cheapest" => Ok(NicRoute::Cheapest),
            "local" | "nccl" => Ok(NicRoute::Local),
            "channels" => Ok(NicRoute::Channels),
            other => Err(crate::error::Error::invalid(
                "--nic-route",
                format!("unknown NIC route `{other}`; expected cheapest, local or channels"),
            )),
        }
    }
}

/// Whether compute kernels slow down while collective kernels run beside them on the same GPU
/// (`--compute-contention`). The engine's model is `sim::contention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeContention {
    /// A collective overlaps compute for free.
    Off,
    /// Each NCCL channel of a collective in flight holds one SM for the collective's whole
    /// duration, and a compute kernel beside it runs on the SMs left. The default: it moves the
    /// validation rows' mean error 12.3 -> 12.1% and their optimism +9.7 -> +9.4%
    /// (docs/machines.md).
    #[default]
    Sms,
    /// `Sms`, and the collective's traffic through the GPU's memory (each byte it receives is
    /// stored, read back and read or written as user data) taken from the bandwidth the
    /// memory-bound part of a compute kernel streams at (`sim/contention.rs`).
    SmsHbm,
}

impl ComputeContention {
    pub fn name(self) -> &'static str {
        match self {
            ComputeContention::Off => "off",
            ComputeContention::Sms => "sms",
            ComputeContention::SmsHbm => "sms+hbm",
        }
    }

    /// Parses a `--compute-contention` value; the error names the flag and the accepted values.
    pub fn parse(s: &str) -> crate::error::Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(ComputeContention::Off),
            "sms" => Ok(ComputeContention::Sms),
            "sms+hbm" => Ok(ComputeContention::SmsHbm),
            other => Err(crate::error::Error::invalid(
                "--compute-contention",
                format!("unknown compute contention `{other}`; expected off, sms or sms+hbm"),
            )),
        }
    }
}

/// Message size at which routes are compared: big enough that bandwidth matters, small enough
/// that latency still counts.
const ROUTE_REFERENCE_BYTES: f64 = (1 << 20) as f64;

impl Machine {
    /// Cost of crossing a link when choosing routes: its latency plus the time of a reference
    /// message at its peak rate, in whole nanoseconds (integers keep the choice deterministic).
    pub(super) fn route_cost(&self, l: LinkId) -> u64 {
        let link = &self.links[l as usize];
        link.latency_ns.saturating_add((ROUTE_REFERENCE_BYTES / link.capacity()).ceil() as u64)
    }

    /// Cheapest route from `src` to `dst` (Dijkstra on [`Machine::route_cost`]; ties go to the
    /// device reached first, then link order), or `None` if unreachable. So NVLink beats a PCIe
    /// detour of the same hop count, and a DGX-1's non-neighbours go two NVLink hops. Between
    /// nodes of a machine whose nodes meet only at one switch, the route is the cheapest way to
    /// that switch followed by the cheapest way from it, each found by a search that stays inside
    /// one node (so routing cost does not grow with the cluster).
    ///
    /// A shared device outside every node (shared storage) whose links all lead to or from that
    /// switch is routed the same way: every path from it starts with one of its links to the
    /// switch, so the search need not explore the whole cluster (which made a shared-storage
    /// machine quadratic in its GPU count).
    pub fn shortest_path(&self, src: DeviceId, dst: DeviceId) -> Option<Route> {
        let (a, b) = (self.devices[src as usize].node, self.devices[dst as usize].node);
        if self.fabric.is_some() && a.is_some() && b.is_some() && a != b {
            return self.fabric_route(src, dst, None, None);
        }
        if let Some(gw) = self.gateway() {
            let split = match (a, b) {
                (Some(a), Some(b)) => a != b,
                (None, Some(_)) => src != gw && self.only_via(src, gw, false),
                (Some(_), None) => dst != gw && self.only_via(dst, gw, true),
                (None, None) => false,
            };
            if split {
                let mut up = self.search(src, gw, false)?;
                let down = self.search(gw, dst, true)?;
                up.links.extend(down.links);
                up.latency_ns = up.latency_ns.saturating_add(down.latency_ns);
                return Some(up);
            }
        }
        self.search(src, dst, false)
    }

    /// The route between GPUs of two nodes through NIC number `rail` of each node (a rail of a
    /// multi-NIC fabric), or the cheapest route when the machine has no such NIC or both ends sit
    /// in one node.
    pub fn route_via_rail(&self, src: DeviceId, dst: DeviceId, rail: u32) -> Option<Route> {
        self.route_via_nics(src, dst, rail, rail, None)
    }

    /// The route between GPUs of two nodes leaving through NIC `out_rail` of the source's node and
    /// entering through NIC `in_rail` of the destination's, going first to the device `via` when
    /// given (the cheapest route when either NIC is missing or both ends sit in one node).
    fn route_via_nics(
        &self,
        src: DeviceId,
        dst: DeviceId,
        out_rail: u32,
        in_rail: u32,
        via: Option<DeviceId>,
    ) -> Option<Route> {
        let (a, b) = (self.devices[src as usize].node, self.devices[dst as usize].node);
        if self.fabric.is_some() && a.is_some() && b.is_some() && a != b {
            return self.fabric_route(src, dst, Some((out_rail, in_rail)), via);
        }
        let (Some(gw), Some(a), Some(b)) = (self.gateway(), a, b) else { return self.shortest_path(src, dst) };
        let (Some(&nic_a), Some(&nic_b)) = (self.nics(a).get(out_rail as usize), self.nics(b).get(in_rail as usize))
        else {
            return self.shortest_path(src, dst);
        };
        if a == b {
            return self.shortest_path(src, dst);
        }
        let up = match via {
            Some(p) => {
                let mut up = self.search(src, p, false)?;
                up.links.extend(self.search(p, nic_a, false)?.links);
                up
            }
            None => self.search(src, nic_a, false)?,
        };
        let out = *self.out_links(nic_a).iter().find(|&&l| self.links[l as usize].to == gw)?;
        let inn = *self.in_links(nic_b).iter().find(|&&l| self.links[l as usize].from == gw)?;
        let down = self.search(nic_b, dst, true)?;
        let mut links = up.links;
        links.extend([out, inn]);
        links.extend(down.links);
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).fold(0, u64::saturating_add);
        Some(Route { links, latency_ns })
    }

    /// The route of a point-to-point transfer between two GPUs the way NCCL's network transport
    /// sends it (NCCL 2.21.5, `ncclTopoGetNetDev` in src/graph/search.cc, for a peer): the
    /// receiver takes its own local NIC; the sender, by default (`NCCL_P2P_PXN_LEVEL=2`), the
    /// local NIC of its node's GPU with the receiver's local index, reached over NVLink through
    /// that GPU (PXN), when such an NVLink path exists and otherwise its own local NIC. Inside a
    /// node, between devices that are not GPUs, or on a machine without NICs per node: the
    /// cheapest route.
    pub fn p2p_route(&self, src: DeviceId, dst: DeviceId) -> Option<Route> {
        let (Some(a), Some(b)) = (self.gpu_slot(src), self.gpu_slot(dst)) else { return self.shortest_path(src, dst) };
        if a.0 == b.0 || self.nics(a.0).is_empty() || self.nics(b.0).is_empty() {
            return self.shortest_path(src, dst);
        }
        let in_rail = self.local_nic(b.0, b.1)?;
        // PXN: the GPU of the source's node with the receiver's index forwards the data to its
        // own NIC (`ncclTopoGetLocalGpu`), when the source reaches it over NVLink.
        let proxy = self.node_gpus(a.0).get(b.1 as usize).map(|g| g.device).filter(|&p| {
            p != src
                && self.search(src, p, false).is_some_and(|r| {
                    r.links
                        .iter()
                        .all(|&l| matches!(self.links[l as usize].kind, LinkKind::Nvlink | LinkKind::Nvswitch))
                })
        });
        let out_rail = match proxy {
            Some(_) => self.local_nic(a.0, b.1)?,
            None => self.local_nic(a.0, a.1)?,
        };
        self.route_via_nics(src, dst, out_rail, in_rail, proxy)
    }

    /// The route of a transfer that names no rail: under the NCCL collective model, and under the
    /// ideal model with [`NicRoute::Local`], the way NCCL's net transport sends it
    /// ([`Machine::p2p_route`]: each GPU's own NIC, PXN); under the ideal model with
    /// [`NicRoute::Cheapest`], the cheapest route.
    pub fn railless_route(&self, src: DeviceId, dst: DeviceId) -> Option<Route> {
        match (self.collectives, self.nic_route) {
            (crate::collective::CollectiveModel::Nccl(_), _) | (_, NicRoute::Local | NicRoute::Channels) => {
                self.p2p_route(src, dst)
            }
            (crate::collective::CollectiveModel::Ideal, NicRoute::Cheapest) => self.shortest_path(src, dst),
        }
    }

    /// The GPUs of `node`, in rank order (the machine lists GPUs node by node).
    fn node_gpus(&self, node: u32) -> &[super::GpuInfo] {
        let from = self.gpus.partition_point(|g| g.node < node);
        let to = self.gpus.partition_point(|g| g.node <= node);
        &self.gpus[from..to]
    }

    /// A GPU device's node and its index among that node's GPUs (NCCL's `gpu.dev`).
    pub fn gpu_slot(&self, d: DeviceId) -> Option<(u32, u32)> {
        let node = self.devices[d as usize].node?;
        let i = self.node_gpus(node).iter().position(|g| g.device == d)?;
        Some((node, i as u32))
    }

    /// NCCL's local NIC of the GPU with local index `local` of `node`, as an index into the
    /// node's NICs (`ncclTopoGetLocalNet`, src/graph/topo.cc, NCCL 2.21.5, channel 0): of the
    /// NICs nearest the GPU (NCCL: widest then shortest path type; here: cheapest route), the
    /// one at the GPU's index, bit-mirrored when their count is a power of two (`mirrorBits`, src/graph/topo.h), modulo the
    /// count. So two GPUs sharing a PCIe switch with two NICs each take their own NIC.
    pub fn local_nic(&self, node: u32, local: u32) -> Option<u32> {
        let gpu = self.node_gpus(node).get(local as usize)?.device;
        let costs: Vec<u64> = self
            .nics(node)
            .iter()
            .map(|&n| {
                // On a fat-tree a search of the whole machine would wander through the fabric
                // (thousands of switches) before settling the NICs it cannot reach cheaply; a
                // way out of the node and back costs more than any way inside it, so the search
                // inside the node finds the same costs.
                let links = if self.fabric.is_some() {
                    self.search_in_node(gpu, n, node)
                } else {
                    self.search(gpu, n, false).map(|r| r.links)
                };
                links.map_or(u64::MAX, |l| l.iter().map(|&l| self.route_cost(l)).fold(0, u64::saturating_add))
            })
            .collect();
        let best = *costs.iter().min()?;
        let near: Vec<u32> = (0..costs.len() as u32).filter(|&n| costs[n as usize] == best).collect();
        let count = near.len() as u32;
        let pick = if count.is_power_of_two() { mirror_bits(local, count) } else { local };
        Some(near[(pick % count) as usize])
    }

    /// Whether every link out of `d` (into `d`, with `incoming`) joins it to `gw`.
    fn only_via(&self, d: DeviceId, gw: DeviceId, incoming: bool) -> bool {
        let links = if incoming { self.in_links(d) } else { self.out_links(d) };
        links.iter().all(|&l| {
            let link = &self.links[l as usize];
            (if incoming { link.from } else { link.to }) == gw
        })
    }

    /// Dijkstra from `src` to `dst`, or backwards from `dst` to `src` (`reverse`), keeping state
    /// only for the devices it reaches.
    fn search(&self, src: DeviceId, dst: DeviceId, reverse: bool) -> Option<Route> {
        if src == dst {
            return Some(Route { links: Vec::new(), latency_ns: 0 });
        }
        let (start, goal) = if reverse { (dst, src) } else { (src, dst) };
        // Per reached device: (cost, link it was reached by, settled).
        let mut state: HashMap<DeviceId, (u64, Option<LinkId>, bool)> = HashMap::default();
        state.insert(start, (0, None, false));
        let mut heap = BinaryHeap::from([Reverse((0u64, start))]);
        while let Some(Reverse((c, d))) = heap.pop() {
            let entry = state.get_mut(&d).expect("pushed devices have state");
            if entry.2 {
                continue;
            }
            entry.2 = true;
            if d == goal {
                return Some(self.unwind_from(&state, start, goal, reverse));
            }
            let all = if reverse { self.in_links(d) } else { self.out_links(d) };
            let through_gateway;
            let links = if Some(d) == self.gateway && (!reverse || self.devices[goal as usize].node.is_some()) {
                through_gateway = self.gateway_links_toward(reverse, [src, dst]);
                &through_gateway
            } else {
                all
            };
            for &l in links {
                let link = &self.links[l as usize];
                let to = if reverse { link.from } else { link.to };
                let next = c.saturating_add(self.route_cost(l));
                let e = state.entry(to).or_insert((u64::MAX, None, false));
                if next < e.0 {
                    *e = (next, Some(l), e.2);
                    heap.push(Reverse((next, to)));
                }
            }
        }
        None
    }

    /// The gateway's links (incoming if `reverse`) whose other end is outside every node or in
    /// the node of one of `ends`, in link order within each node. A cheapest path never leaves the
    /// gateway into a third node: nodes are joined only through the gateway, so it would have to
    /// come back through it, and a path that visits the gateway twice is never the cheapest (every
    /// link costs at least 1). Backwards, a path could enter a third node from a shared device
    /// outside every node, so the caller restricts backward searches only when the start of the
    /// route is inside a node.
    fn gateway_links_toward(&self, reverse: bool, ends: [DeviceId; 2]) -> Vec<LinkId> {
        let by_node = &self.gateway_links[reverse as usize];
        let mut nodes = vec![None];
        for d in ends {
            let n = self.devices[d as usize].node;
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
        let mut out = Vec::new();
        for n in nodes {
            let from = by_node.partition_point(|&(m, _)| m < n);
            out.extend(by_node[from..].iter().take_while(|&&(m, _)| m == n).map(|&(_, l)| l));
        }
        out
    }

    fn unwind_from(
        &self,
        state: &HashMap<DeviceId, (u64, Option<LinkId>, bool)>,
        start: DeviceId,
        goal: DeviceId,
        reverse: bool,
    ) -> Route {
        let mut links = Vec::new();
        let mut at = goal;
        while at != start {
            let l = state[&at].1.expect("the search reached this device through a link");
            links.push(l);
            let link = &self.links[l as usize];
            at = if reverse { link.to } else { link.from };
        }
        if !reverse {
            links.reverse();
        }
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).fold(0, u64::saturating_add);
        Route { links, latency_ns }
    }
}

/// `val`'s low log2(`pow2`) bits in reverse order (NCCL's `mirrorBits`, src/graph/topo.h): spreads
/// consecutive GPUs over NICs that several of them share.
fn mirror_bits(val: u32, pow2: u32) -> u32 {
    let bits = pow2.trailing_zeros();
    if bits == 0 {
        return 0;
    }
    (val & (pow2 - 1)).reverse_bits() >> (32 - bits)
}
