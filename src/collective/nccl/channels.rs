//! NCCL's view of a machine and the channels its graph search finds on it (src/graph/topo.cc,
//! paths.cc, search.cc): the path type and width between every two GPUs of a node and between a
//! GPU and each NIC, then rings (and tree chains) found speed by speed, each channel consuming its
//! speed on every link it crosses, keeping the solution with the most bandwidth. Widths are NCCL's
//! nominal ones (per-NVLink width by GPU generation, PCIe Gen3 x16 = 12 GB/s, the inter-socket
//! width of the CPU family, the NIC's line rate), so the channel counts and graph speeds are the
//! ones NCCL's tuner would see; the *effective* rates of the machine's links decide the simulated
//! time, not these.
//!
//! A simplification of NCCL's search, not a copy: one greedy depth-first search per speed and
//! path-type limit, candidates in order of path type then rank distance, no timeouts (an
//! expansion budget instead), no cross-NIC rings.

use super::tuner::GraphSummary;
use super::version::{Arch, CpuVendor, PathType, Tables};
use crate::hw::{DeviceId, DeviceKind, LinkId, LinkKind, Machine};
use rustc_hash::FxHashMap as HashMap;

/// One channel of a graph: the GPUs of a node in the order the ring (or tree chain) visits them,
/// as positions in the node's local rank list, and the NIC it enters and leaves by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Channel {
    pub order: Vec<u32>,
    /// Index into the node's NICs ([`Machine::nics`]), for channels that cross nodes.
    pub nic: Option<u32>,
}

/// A graph the search found: its channels and what the tuner reads from it.
#[derive(Debug, Clone)]
pub struct Graph {
    pub channels: Vec<Channel>,
    pub summary: GraphSummary,
}

/// The path between two devices as NCCL classifies it, with the machine links it crosses.
#[derive(Debug, Clone)]
struct Path {
    kind: PathType,
    links: Vec<LinkId>,
    /// The slowest link's NCCL width, GB/s.
    width: f64,
    /// Bandwidth a channel of speed s consumes on each link: s x this (Intel's root-complex P2P
    /// penalty, `INTEL_P2P_OVERHEAD`, on GPU-to-GPU paths through the CPU).
    overhead: f64,
}

/// Effective width of one NVLink per GPU generation, GB/s per direction, to count the NVLinks a
/// preset's aggregated link stands for: P100 18.5 (Tartan's p2pBandwidthLatencyTest on a DGX-1,
/// `topologies/dgx1-p100.json`), V100 and later 23 (25 GB/s nominal at Tartan's 0.92 efficiency).
fn nvlink_effective(arch: Arch) -> f64 {
    match arch {
        Arch::Pascal => 18.5,
        _ => 23.0,
    }
}

/// Most channels a graph search keeps (init.cc: `ringGraph.maxChannels = MAXCHANNELS/2`).
const MAX_GRAPH_CHANNELS: usize = 16;
/// Expansions allowed per channel search (NCCL bounds its search by time instead).
const SEARCH_BUDGET: u32 = 20_000;

/// The node's GPUs and NICs with NCCL's paths and widths between them.
pub struct NodeTopo<'m> {
    machine: &'m Machine,
    tables: &'static Tables,
    arch: Arch,
    cpu: CpuVendor,
    /// GPU devices of the node, in local rank order.
    pub gpus: Vec<DeviceId>,
    /// NIC devices of the node (the network attach points), in device order.
    pub nics: Vec<DeviceId>,
    gpu_paths: Vec<Vec<Path>>,
    to_nic: Vec<Vec<Path>>,
    from_nic: Vec<Vec<Path>>,
    width: HashMap<LinkId, f64>,
    nic_width: f64,
    /// NCCL's `totalWidth`: the most a GPU can send (NVLinks summed, or its PCIe link).
    total_width: f64,
}

impl<'m> NodeTopo<'m> {
    /// NCCL's view of one node holding `gpus` (devices, in local rank order).
    pub fn new(
        machine: &'m Machine,
        tables: &'static Tables,
        arch: Arch,
        gpus: Vec<DeviceId>,
        node: Option<u32>,
    ) -> Self {
        let cpu = machine.transports.cpu_vendor();
        let nics: Vec<DeviceId> = node.map(|n| machine.nics(n).to_vec()).unwrap_or_default();
        let nic_width = machine.network.map_or(tables.pci_width, |n| n.line_rate);
        let mut t = NodeTopo {
            machine,
            tables,
            arch,
            cpu,
            gpus,
            nics,
            gpu_paths: Vec::new(),
            to_nic: Vec::new(),
            from_nic: Vec::new(),
            width: HashMap::default(),
            nic_width,
            total_width: 0.0,
        };
        let g = t.gpus.clone();
        t.gpu_paths = g.iter().map(|&a| g.iter().map(|&b| t.path(a, b, true)).collect()).collect();
        let nics = t.nics.clone();
        t.to_nic = g.iter().map(|&a| nics.iter().map(|&n| t.path(a, n, false)).collect()).collect();
        t.from_nic = g.iter().map(|&a| nics.iter().map(|&n| t.path(n, a, false)).collect()).collect();
        t.total_width = g
            .iter()
            .map(|&d| {
                let (mut nv, mut pci) = (0.0, 0.0f64);
                for &l in machine.out_links(d) {
                    match machine.links[l as usize].kind {
                        LinkKind::Nvlink | LinkKind::Nvswitch => nv += t.link_width(l),
                        LinkKind::Pcie => pci = pci.max(t.link_width(l)),
                        _ => {}
                    }
                }
                f64::max(nv, pci)
            })
            .fold(0.0, f64::max);
        t
    }

    /// NCCL's width of a machine link, GB/s.
    fn link_width(&mut self, l: LinkId) -> f64 {
        if let Some(&w) = self.width.get(&l) {
            return w;
        }
        let link = &self.machine.links[l as usize];
        let cap = link.capacity();
        let from = self.machine.devices[link.from as usize].kind;
        let to = self.machine.devices[link.to as usize].kind;
        let w = match link.kind {
            LinkKind::Nvlink | LinkKind::Nvswitch => {
                // The topology's count when it gives one (its rate may be a measured rate under
                // load in both directions, as abci-a's), else the rate over one link's.
                let count = match link.nvlinks {
                    Some(n) => n.max(1) as f64,
                    None => (cap / nvlink_effective(self.arch)).round().max(1.0),
                };
                count * self.tables.nvlink_width(self.arch)
            }
            LinkKind::Qpi => self.tables.inter_socket_width(self.cpu),
            LinkKind::Ethernet | LinkKind::Infiniband => self.nic_width,
            // A CPU attached straight to the switch (parametric clusters) is its own NIC.
            LinkKind::Pcie if from == DeviceKind::NetworkSwitch || to == DeviceKind::NetworkSwitch => self.nic_width,
            // PCIe Gen3 x16 is 12 GB/s to NCCL; faster links count as Gen4/Gen5 x16 (24, 48).
            LinkKind::Pcie | LinkKind::Storage => {
                let pci = self.tables.pci_width;
                if cap <= pci * 1.4 {
                    pci
                } else if cap <= pci * 2.8 {
                    2.0 * pci
                } else {
                    4.0 * pci
                }
            }
        };
        self.width.insert(l, w);
        w
    }

    /// The machine's route between two devices, classified as NCCL would.
    fn path(&mut self, a: DeviceId, b: DeviceId, gpu_to_gpu: bool) -> Path {
        if a == b {
            return Path { kind: PathType::Loc, links: Vec::new(), width: f64::INFINITY, overhead: 1.0 };
        }
        let Some(route) = self.machine.shortest_path(a, b) else {
            return Path { kind: PathType::Net, links: Vec::new(), width: 0.0, overhead: 1.0 };
        };
        let m = self.machine;
        let (mut cpus, mut switches, mut via_gpu, mut qpi, mut nvlink_only) = (0, 0, false, false, true);
        let mut width = f64::INFINITY;
        for (i, &l) in route.links.iter().enumerate() {
            width = width.min(self.link_width(l));
            let link = &m.links[l as usize];
            if link.kind == LinkKind::Qpi {
                qpi = true;
            }
            if !matches!(link.kind, LinkKind::Nvlink | LinkKind::Nvswitch) {
                nvlink_only = false;
            }
            if i + 1 < route.links.len() {
                match m.devices[link.to as usize].kind {
                    DeviceKind::Cpu => cpus += 1,
                    DeviceKind::PcieSwitch => switches += 1,
                    DeviceKind::Gpu => via_gpu = true,
                    _ => {}
                }
            }
        }
        let kind = if nvlink_only {
            if via_gpu {
                PathType::Nvb
            } else {
                PathType::Nvl
            }
        } else if qpi || cpus > 1 {
            PathType::Sys
        } else if cpus == 1 {
            PathType::Phb
        } else if switches > 1 {
            PathType::Pxb
        } else {
            PathType::Pix
        };
        let overhead = if gpu_to_gpu && kind == PathType::Phb && self.tables.intel_p2p(self.cpu) {
            self.tables.intel_p2p_overhead
        } else {
            1.0
        };
        Path { kind, links: route.links, width, overhead }
    }

    /// Path type between local GPUs `i` and `j`.
    pub fn gpu_path_type(&self, i: usize, j: usize) -> PathType {
        self.gpu_paths[i][j].kind
    }

    /// Path type between local GPU `i` and NIC `n`.
    pub fn nic_path_type(&self, i: usize, n: usize) -> PathType {
        self.to_nic[i][n].kind
    }

    /// The widest path from a GPU to another GPU (one node) or to a NIC (several): NCCL's
    /// `maxWidth`, where the speed search starts.
    fn max_width(&self, inter: bool) -> f64 {
        let mut w: f64 = 0.0;
        for i in 0..self.gpus.len() {
            if inter {
                for p in &self.to_nic[i] {
                    w = w.max(p.width.min(self.nic_width));
                }
            } else {
                for (j, p) in self.gpu_paths[i].iter().enumerate() {
                    if j != i {
                        w = w.max(p.width / p.overhead);
                    }
                }
            }
        }
        if w == 0.0 || !w.is_finite() {
            self.nic_width
        } else {
            w
        }
    }

    /// NCCL's graph search for a ring (`tree` false) or a tree chain (`tree` true: no hop back to
    /// the first GPU; across nodes the first GPU both receives from and sends to the NIC), across
    /// nodes when `inter`. At most `max_channels` channels. Hops consume bandwidth one way only, as
    /// NCCL's `followPath` does.
    pub fn search(&self, tree: bool, inter: bool, max_channels: usize) -> Graph {
        let g = self.gpus.len();
        let speeds = self.tables.speeds(self.arch, inter);
        let max_width = self.max_width(inter);
        let mut idx = 0;
        while idx + 1 < speeds.len() && speeds[idx] > max_width {
            idx += 1;
        }
        let levels = [PathType::Nvl, PathType::Nvb, PathType::Pix, PathType::Pxb, PathType::Phb, PathType::Sys];
        // Single-GPU nodes have no hops inside; anything goes.
        let levels: &[PathType] = if g <= 1 { &levels[5..] } else { &levels };
        let mut best: Option<(f64, PathType, Vec<Channel>)> = None;
        loop {
            let speed = speeds[idx];
            for &level in levels {
                let chans = self.greedy(speed, level, tree, inter, max_channels);
                if chans.is_empty() {
                    continue;
                }
                let score = chans.len() as f64 * speed;
                let better = match &best {
                    None => true,
                    Some((s, _, c)) => score > c.len() as f64 * s + 1e-9,
                };
                if better {
                    best = Some((speed, level, chans));
                }
                break; // the lowest path-type limit that works at this speed
            }
            if let Some((s, _, c)) = &best {
                if c.len() as f64 * s >= self.total_width - 1e-9 && !inter {
                    break;
                }
                if inter && c.len() as f64 * s >= self.nics.len().max(1) as f64 * self.nic_width - 1e-9 {
                    break;
                }
            }
            let next_ok = idx + 1 < speeds.len()
                && best.as_ref().is_none_or(|(s, _, c)| !c.is_empty() && speeds[idx + 1] / s > 0.49);
            if !next_ok {
                break;
            }
            idx += 1;
        }
        let (speed, _, channels) = best.unwrap_or_else(|| {
            // NCCL: "Could not find a path ... falling back to simple order" at 0.1 GB/s.
            let order: Vec<u32> = (0..g as u32).collect();
            let nic = if inter && !self.nics.is_empty() { Some(0) } else { None };
            (0.1, PathType::Sys, vec![Channel { order, nic }])
        });
        let type_intra = self.worst_intra(&channels, tree);
        let type_inter = channels
            .iter()
            .filter_map(|c| c.nic.map(|n| (c, n as usize)))
            .map(|(c, n)| {
                let first = c.order[0] as usize;
                let last = *c.order.last().expect("a channel visits a GPU") as usize;
                self.to_nic[first][n].kind.max(self.to_nic[last][n].kind)
            })
            .max()
            .unwrap_or(PathType::Pix);
        let same = channels.windows(2).all(|w| w[0].order == w[1].order);
        Graph {
            summary: GraphSummary {
                channels: channels.len() as u32,
                speed_intra: speed,
                speed_inter: speed,
                type_intra,
                type_inter,
                plain_tree: false,
                same_channels: same,
            },
            channels,
        }
    }

    fn worst_intra(&self, channels: &[Channel], tree: bool) -> PathType {
        let mut worst = PathType::Loc;
        for c in channels {
            let o = &c.order;
            let hops = if tree || c.nic.is_some() { o.len().saturating_sub(1) } else { o.len() };
            for k in 0..hops {
                let (a, b) = (o[k] as usize, o[(k + 1) % o.len()] as usize);
                worst = worst.max(self.gpu_paths[a][b].kind);
            }
        }
        if worst == PathType::Loc {
            PathType::Nvl
        } else {
            worst
        }
    }

    /// Channels found one after another at `speed` with GPU hops no farther than `level`.
    fn greedy(&self, speed: f64, level: PathType, tree: bool, inter: bool, max: usize) -> Vec<Channel> {
        let mut left: HashMap<LinkId, f64> = self.width.clone();
        let mut nic_left: Vec<[f64; 2]> = vec![[self.nic_width; 2]; self.nics.len()];
        let mut out = Vec::new();
        while out.len() < max {
            let mut budget = SEARCH_BUDGET;
            let found = if inter {
                self.find_inter(speed, level, tree, &mut left, &mut nic_left, &mut budget)
            } else {
                self.find_intra(speed, level, tree, &mut left, &mut budget)
            };
            match found {
                Some(c) => out.push(c),
                None => break,
            }
        }
        out
    }

    /// Consumes (`sign` 1) or returns (-1) a channel's speed on a path's links (and the reverse
    /// path's, for trees). False if some link lacks the bandwidth (nothing is consumed then).
    fn take(&self, p: &Path, rev: Option<&Path>, speed: f64, left: &mut HashMap<LinkId, f64>, sign: f64) -> bool {
        let need = |p: &Path| speed * p.overhead;
        if sign > 0.0 {
            let mut want: HashMap<LinkId, f64> = HashMap::default();
            for q in std::iter::once(p).chain(rev) {
                for &l in &q.links {
                    *want.entry(l).or_default() += need(q);
                }
            }
            if want.iter().any(|(l, w)| left.get(l).copied().unwrap_or(0.0) + 1e-9 < *w) {
                return false;
            }
        }
        for q in std::iter::once(p).chain(rev) {
            for &l in &q.links {
                *left.get_mut(&l).expect("width known") -= sign * need(q);
            }
        }
        true
    }

    /// Candidate next GPUs after `last`: closest path type first, then the path with the most
    /// bandwidth left (NCCL sorts next GPUs by the bandwidth their path still has), then distance
    /// in local rank.
    fn candidates(&self, last: usize, used: &[bool], level: PathType, left: &HashMap<LinkId, f64>) -> Vec<usize> {
        let g = self.gpus.len();
        let room = |j: usize| {
            let p = &self.gpu_paths[last][j];
            p.links.iter().map(|l| left.get(l).copied().unwrap_or(0.0)).fold(f64::INFINITY, f64::min) / p.overhead
        };
        let mut c: Vec<(usize, f64)> = (1..g)
            .map(|d| (last + d) % g)
            .filter(|&j| !used[j] && self.gpu_paths[last][j].kind <= level)
            .map(|j| (j, room(j)))
            .collect();
        c.sort_by(|a, b| {
            let (pa, pb) = (self.gpu_paths[last][a.0].kind, self.gpu_paths[last][b.0].kind);
            pa.cmp(&pb).then(b.1.total_cmp(&a.1)).then(((a.0 + g - last) % g).cmp(&((b.0 + g - last) % g)))
        });
        c.into_iter().map(|x| x.0).collect()
    }

    fn find_intra(
        &self,
        speed: f64,
        level: PathType,
        tree: bool,
        left: &mut HashMap<LinkId, f64>,
        budget: &mut u32,
    ) -> Option<Channel> {
        let g = self.gpus.len();
        if g < 2 {
            return Some(Channel { order: vec![0], nic: None });
        }
        let mut used = vec![false; g];
        used[0] = true;
        let mut order = vec![0usize];
        if self.dfs_intra(speed, level, tree, left, &mut used, &mut order, budget) {
            Some(Channel { order: order.iter().map(|&x| x as u32).collect(), nic: None })
        } else {
            None
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn dfs_intra(
        &self,
        speed: f64,
        level: PathType,
        tree: bool,
        left: &mut HashMap<LinkId, f64>,
        used: &mut [bool],
        order: &mut Vec<usize>,
        budget: &mut u32,
    ) -> bool {
        let g = self.gpus.len();
        let last = *order.last().expect("starts with one GPU");
        if order.len() == g {
            if tree {
                return true;
            }
            let back = &self.gpu_paths[last][order[0]];
            return back.kind <= level && self.take(back, None, speed, left, 1.0);
        }
        for j in self.candidates(last, used, level, left) {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            let p = &self.gpu_paths[last][j];
            let rev = None;
            if !self.take(p, rev, speed, left, 1.0) {
                continue;
            }
            used[j] = true;
            order.push(j);
            if self.dfs_intra(speed, level, tree, left, used, order, budget) {
                return true;
            }
            order.pop();
            used[j] = false;
            self.take(p, rev, speed, left, -1.0);
        }
        false
    }

    /// A channel entering the node by a NIC, visiting every GPU, leaving by the same NIC.
    fn find_inter(
        &self,
        speed: f64,
        level: PathType,
        tree: bool,
        left: &mut HashMap<LinkId, f64>,
        nic_left: &mut [[f64; 2]],
        budget: &mut u32,
    ) -> Option<Channel> {
        let g = self.gpus.len();
        let nics = self.nics.len().max(1);
        // NICs in order of remaining width (NCCL spreads channels over NICs), then index.
        let mut nic_order: Vec<usize> = (0..nics).collect();
        if !self.nics.is_empty() {
            nic_order.sort_by(|&a, &b| nic_left[b][0].total_cmp(&nic_left[a][0]).then(a.cmp(&b)));
        }
        for n in nic_order {
            let have_nic = !self.nics.is_empty();
            if have_nic && (nic_left[n][0] + 1e-9 < speed || nic_left[n][1] + 1e-9 < speed) {
                continue;
            }
            // Entry GPUs closest to the NIC first.
            let mut starts: Vec<usize> = (0..g).collect();
            if have_nic {
                starts.sort_by_key(|&a| (self.to_nic[a][n].kind, a));
            }
            for a in starts {
                let (into, out_of) =
                    if have_nic { (Some(&self.from_nic[a][n]), Some(&self.to_nic[a][n])) } else { (None, None) };
                if let Some(p) = into {
                    if !self.take(p, if tree { out_of } else { None }, speed, left, 1.0) {
                        continue;
                    }
                }
                let mut used = vec![false; g];
                used[a] = true;
                let mut order = vec![a];
                let ok = self.dfs_inter(speed, level, tree, n, left, &mut used, &mut order, budget);
                if ok {
                    if have_nic {
                        nic_left[n][0] -= speed;
                        nic_left[n][1] -= speed;
                    }
                    let nic = have_nic.then_some(n as u32);
                    return Some(Channel { order: order.iter().map(|&x| x as u32).collect(), nic });
                }
                if let Some(p) = into {
                    self.take(p, if tree { out_of } else { None }, speed, left, -1.0);
                }
                if *budget == 0 {
                    return None;
                }
            }
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    fn dfs_inter(
        &self,
        speed: f64,
        level: PathType,
        tree: bool,
        nic: usize,
        left: &mut HashMap<LinkId, f64>,
        used: &mut [bool],
        order: &mut Vec<usize>,
        budget: &mut u32,
    ) -> bool {
        let g = self.gpus.len();
        let last = *order.last().expect("starts with one GPU");
        if order.len() == g {
            if tree || self.nics.is_empty() {
                return true;
            }
            // Rings leave by the NIC they came in by.
            return self.take(&self.to_nic[last][nic], None, speed, left, 1.0);
        }
        for j in self.candidates(last, used, level, left) {
            if *budget == 0 {
                return false;
            }
            *budget -= 1;
            let p = &self.gpu_paths[last][j];
            let rev = None;
            if !self.take(p, rev, speed, left, 1.0) {
                continue;
            }
            used[j] = true;
            order.push(j);
            if self.dfs_inter(speed, level, tree, nic, left, used, order, budget) {
                return true;
            }
            order.pop();
            used[j] = false;
            self.take(p, rev, speed, left, -1.0);
        }
        false
    }

    /// The most channels a graph search keeps.
    pub fn max_graph_channels() -> usize {
        MAX_GRAPH_CHANNELS
    }
}

/// NCCL's post-search duplication (search.cc end of `ncclTopoCompute`): fast graphs get twice the
/// channels at half the speed.
pub fn duplicate_fast(graph: &mut Graph, tables: &Tables, arch: Arch) {
    let s = &mut graph.summary;
    if s.speed_intra < 25.0 {
        return;
    }
    if tables.dup_needs_50_on_ampere && arch.compcap() > 80 && s.speed_intra < 50.0 && s.channels > 4 {
        return;
    }
    let n = graph.channels.len();
    let dup = (2 * n).min(MAX_GRAPH_CHANNELS);
    if dup <= n {
        return;
    }
    let factor = dup.div_ceil(n) as f64;
    for i in 0..dup - n {
        let c = graph.channels[i].clone();
        graph.channels.push(c);
    }
    s.channels = dup as u32;
    s.speed_intra /= factor;
    s.speed_inter /= factor;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::nccl::version::NcclVersion;
    use crate::hw::load_topology;

    fn node0(m: &Machine, per_node: usize) -> Vec<DeviceId> {
        m.gpus[..per_node].iter().map(|g| g.device).collect()
    }

    /// ABCI V-node, 2.8.4: two NVLinks per pair (42 GB/s to NCCL); K4 has no three arc-disjoint
    /// Hamiltonian cycles, so NCCL settles on six rings at 21 GB/s, which fill every GPU's 126.
    #[test]
    fn abci_v_has_six_rings_at_21() {
        let m = load_topology("abci-v").unwrap().instantiate(4).unwrap();
        let t = NcclVersion::V2_8_4.tables();
        let topo = NodeTopo::new(&m, t, Arch::Volta, node0(&m, 4), None);
        let g = topo.search(false, false, MAX_GRAPH_CHANNELS);
        assert_eq!(g.summary.channels, 6, "{:?}", g.channels);
        assert_eq!(g.summary.speed_intra, 21.0);
        assert_eq!(g.summary.type_intra, PathType::Nvl);
        // Every directed GPU pair carries exactly two rings.
        let mut count = std::collections::HashMap::new();
        for c in &g.channels {
            for k in 0..4 {
                *count.entry((c.order[k], c.order[(k + 1) % 4])).or_insert(0) += 1;
            }
        }
        assert!(count.len() == 12 && count.values().all(|&v| v == 2), "{count:?}");
    }

    /// A PCIe-only node, a GPU pair per switch under one Intel CPU: crossing the root complex costs
    /// 12/9 (2.8.4), so the one ring runs at 9 GB/s.
    #[test]
    fn pcie_ring_through_the_root_complex_runs_at_intel_p2p_speed() {
        let m = load_topology("v100-pcie-10gbe").unwrap().instantiate(4).unwrap();
        let t = NcclVersion::V2_8_4.tables();
        let topo = NodeTopo::new(&m, t, Arch::Volta, node0(&m, 4), None);
        assert_eq!(topo.gpu_path_type(0, 1), PathType::Pix);
        assert_eq!(topo.gpu_path_type(1, 2), PathType::Phb);
        let g = topo.search(false, false, MAX_GRAPH_CHANNELS);
        assert_eq!((g.summary.channels, g.summary.speed_intra, g.summary.type_intra), (1, 9.0, PathType::Phb));
        assert_eq!(g.channels[0].order, vec![0, 1, 2, 3]);
        // 2.18+: the penalty is 6/5, so 10 GB/s fits.
        let t = NcclVersion::V2_18_3.tables();
        let topo = NodeTopo::new(&m, t, Arch::Volta, node0(&m, 4), None);
        assert_eq!(topo.search(false, false, MAX_GRAPH_CHANNELS).summary.speed_intra, 10.0);
    }
}
