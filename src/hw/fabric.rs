//! Rail-optimised multi-tier fat-trees, described by a few numbers (`fabric` in a topology file):
//! leaf switches each serving one rail (one NIC rank) of a group of nodes, a spine tier joining
//! the leaves of a pod, and an optional core tier joining the pods, with an oversubscription
//! (down:up bandwidth) per tier. [`FabricSpec::build`] expands it into switch devices and links
//! appended to a machine; [`FabricRoutes`] picks a route between two NICs structurally (up to
//! the lowest tier both reach, then down), so routing never searches the fabric. ECMP is either
//! ideal spreading (a tier's parallel switches merged into one of their summed capacity) or a
//! deterministic hash of the two NICs onto one switch per tier, whose collisions share links as
//! real ECMP does. Knows nothing of nodes' insides: the NICs are given.

use super::{Device, DeviceId, DeviceKind, Link, LinkId, LinkKind, Machine};
use crate::error::{Error, Location, Result};
use crate::units::us_to_ns;
use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Most switches of one tier (and nodes per leaf), and most links the tiers above the leaves may add: bounds that
/// refuse a mistyped count before it allocates (100,000 GPUs need a few thousand switches).
const MAX_SWITCHES: u32 = 65_536;
const MAX_FABRIC_LINKS: u64 = 20_000_000;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    pub leaf: LeafTier,
    pub spine: SpineTier,
    /// Joins the pods; needed when the nodes make more than one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<CoreTier>,
    /// Rail-optimised (default): NIC r of every node of a leaf group goes to that group's leaf r.
    /// Otherwise one leaf takes all NICs of its nodes.
    #[serde(default = "yes")]
    pub rails: bool,
    /// How a flow picks among parallel switches of a tier.
    #[serde(default)]
    pub ecmp: Ecmp,
}

fn yes() -> bool {
    true
}
fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LeafTier {
    /// Nodes per leaf group (per rail in the rail-optimised fabric). Counts are read signed so
    /// that a negative one is refused by name, not by the parser.
    pub nodes: i64,
    /// Down:up bandwidth of a leaf (1 = non-blocking).
    #[serde(default = "one")]
    pub oversubscription: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpineTier {
    /// Spine switches per pod; each joins every leaf of the pod.
    pub switches: i64,
    /// Leaf groups per pod (absent: every leaf group in one pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_groups: Option<i64>,
    /// Down:up bandwidth of a spine towards the core (1 = non-blocking).
    #[serde(default = "one")]
    pub oversubscription: f64,
    /// Latency of a leaf-spine hop (default: the network's `latency_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoreTier {
    /// Core switches; each joins every spine of every pod.
    pub switches: i64,
    /// Latency of a spine-core hop (default: the network's `latency_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Ecmp {
    /// Ideal spreading (adaptive routing at its best): a tier's switches act as one.
    #[default]
    Spread,
    /// Each NIC pair hashed onto one switch per tier; flows that collide share its links.
    Hash,
}

/// The network's NIC links, which the fabric's rates and latencies start from.
pub struct NicLinks {
    pub kind: LinkKind,
    pub latency_ns: u64,
    /// Effective rate of one NIC link (bytes/ns).
    pub rate: f64,
    /// Default hop latency of the tiers above the leaves (µs).
    pub latency_us: f64,
}

impl FabricSpec {
    /// Checks counts, rates and latencies; errors name the field.
    pub fn check(&self, path: &Path) -> Result<()> {
        let at = |f: &str| Location::file(path).with_field(format!("fabric.{f}"));
        let count = |f: &str, v: i64| -> Result<()> {
            if v < 1 {
                return Err(Error::parse(at(f), format!("must be at least 1, not {v}")));
            }
            if v > MAX_SWITCHES as i64 {
                return Err(Error::parse(at(f), format!("{v} is more than the {MAX_SWITCHES} a tier may have")));
            }
            Ok(())
        };
        count("leaf.nodes", self.leaf.nodes)?;
        count("spine.switches", self.spine.switches)?;
        if let Some(g) = self.spine.leaf_groups {
            count("spine.leaf_groups", g)?;
        }
        for (f, v) in [
            ("leaf.oversubscription", self.leaf.oversubscription),
            ("spine.oversubscription", self.spine.oversubscription),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Err(Error::parse(at(f), format!("must be a positive number (down:up bandwidth), not {v}")));
            }
        }
        let mut lat = vec![("spine.latency_us", self.spine.latency_us)];
        if let Some(c) = &self.core {
            count("core.switches", c.switches)?;
            lat.push(("core.latency_us", c.latency_us));
        }
        for (f, v) in lat {
            if let Some(v) = v {
                crate::units::check_duration_us(v).map_err(|m| Error::parse(at(f), m))?;
            }
        }
        Ok(())
    }

    /// Appends the switches and links joining `nics` (per node, NIC r = rail r) and returns the
    /// routes over them. Errors when the tiers do not connect every node.
    pub fn build(
        &self,
        topo: &str,
        devices: &mut Vec<Device>,
        links: &mut Vec<Link>,
        nics: &[Vec<DeviceId>],
        net: &NicLinks,
    ) -> Result<FabricRoutes> {
        let err = |m: String| Error::topology(topo, m);
        let rails = nics.iter().map(Vec::len).max().unwrap_or(0) as u32;
        let leaves_per_group = if self.rails { rails.max(1) } else { 1 };
        let nics_per_leaf_node = if self.rails { 1 } else { rails.max(1) };
        // Counts are checked to lie in 1..=MAX_SWITCHES.
        let leaf_nodes = self.leaf.nodes as u32;
        let nodes = nics.len() as u32;
        let groups = nodes.div_ceil(leaf_nodes).max(1);
        let per_pod = self.spine.leaf_groups.map_or(groups, |g| g as u32);
        let pods = groups.div_ceil(per_pod);
        let core = match (&self.core, pods) {
            (_, 1) => None,
            (Some(c), _) => Some(c),
            (None, _) => {
                return Err(err(format!(
                    "fabric: the tiers do not connect the GPUs: {nodes} nodes make {groups} leaf groups of \
                     leaf.nodes = {leaf_nodes}, in {pods} pods of spine.leaf_groups = {per_pod}, and there is no \
                     `core` tier to join the pods"
                )))
            }
        };
        let spread = self.ecmp == Ecmp::Spread;
        let spines = if spread { 1 } else { self.spine.switches as u32 };
        let cores = core.map_or(0, |c| if spread { 1 } else { c.switches as u32 });
        let leaves = groups as u64 * leaves_per_group as u64;
        let added = 2 * leaves * spines as u64 + 2 * pods as u64 * spines as u64 * cores as u64;
        if added > MAX_FABRIC_LINKS {
            return Err(err(format!(
                "fabric: {added} links between switches for {nodes} nodes is more than {MAX_FABRIC_LINKS}; use fewer \
                 spine.switches or core.switches, or ecmp = \"spread\""
            )));
        }
        // Rates from the spec's sizes (not the nodes present), so a partly filled leaf or pod has
        // the same links as a full one.
        let leaf_down = leaf_nodes as f64 * nics_per_leaf_node as f64 * net.rate;
        let leaf_up = leaf_down / self.leaf.oversubscription / spines as f64;
        let spine_down = per_pod as f64 * leaves_per_group as f64 * leaf_up;
        let spine_up = spine_down / self.spine.oversubscription / cores.max(1) as f64;
        for (what, r) in [("leaf uplink", leaf_up), ("spine uplink", spine_up)] {
            crate::units::check_rate_gb_s(r).map_err(|m| err(format!("fabric: {what}: {m}")))?;
        }
        let spine_lat = us_to_ns(self.spine.latency_us.unwrap_or(net.latency_us));
        let core_lat = us_to_ns(core.and_then(|c| c.latency_us).unwrap_or(net.latency_us));
        let push_dev = |devices: &mut Vec<Device>, name: String| {
            devices.push(Device { name, kind: DeviceKind::NetworkSwitch, node: None });
            (devices.len() - 1) as DeviceId
        };
        let pair = |links: &mut Vec<Link>, a: DeviceId, b: DeviceId, lat: u64, rate: f64| {
            links.extend(Link::both_ways(a, b, net.kind, lat, rate));
            ((links.len() - 2) as LinkId, (links.len() - 1) as LinkId)
        };
        let mut routes = FabricRoutes {
            hash: !spread,
            spines,
            cores,
            nic: HashMap::default(),
            leaf_pod: Vec::new(),
            leaf_up: Vec::new(),
            leaf_down: Vec::new(),
            spine_up: Vec::new(),
            spine_down: Vec::new(),
            rail_of_gpu: HashMap::default(),
        };
        let spine_ids: Vec<DeviceId> = (0..pods)
            .flat_map(|p| (0..spines).map(move |s| (p, s)))
            .map(|(p, s)| push_dev(devices, if spread { format!("pod{p}.spine") } else { format!("pod{p}.spine{s}") }))
            .collect();
        for g in 0..groups {
            let pod = g / per_pod;
            for r in 0..leaves_per_group {
                let name = if self.rails { format!("leaf{g}.rail{r}") } else { format!("leaf{g}") };
                let leaf = push_dev(devices, name);
                let index = routes.leaf_pod.len() as u32;
                routes.leaf_pod.push(pod);
                let (mut up, mut down) = (Vec::new(), Vec::new());
                for s in 0..spines {
                    let (u, d) = pair(links, leaf, spine_ids[(pod * spines + s) as usize], spine_lat, leaf_up);
                    up.push(u);
                    down.push(d);
                }
                routes.leaf_up.push(up);
                routes.leaf_down.push(down);
                for n in g * leaf_nodes..((g + 1) * leaf_nodes).min(nodes) {
                    for (i, &nic) in nics[n as usize].iter().enumerate() {
                        if self.rails && i as u32 != r {
                            continue;
                        }
                        let (u, d) = pair(links, nic, leaf, net.latency_ns, net.rate);
                        routes.nic.insert(nic, (index, u, d));
                    }
                }
            }
        }
        if core.is_some() {
            let core_ids: Vec<DeviceId> = (0..cores)
                .map(|c| push_dev(devices, if spread { "core".to_string() } else { format!("core{c}") }))
                .collect();
            for &spine in &spine_ids {
                let (mut up, mut down) = (Vec::new(), Vec::new());
                for &c in &core_ids {
                    let (u, d) = pair(links, spine, c, core_lat, spine_up);
                    up.push(u);
                    down.push(d);
                }
                routes.spine_up.push(up);
                routes.spine_down.push(down);
            }
        }
        Ok(routes)
    }
}

/// Where each NIC, leaf and spine attaches, for structural routing.
#[derive(Debug, Clone, Default)]
pub struct FabricRoutes {
    /// ECMP by hash (else every tier has one merged switch).
    hash: bool,
    spines: u32,
    cores: u32,
    /// Per NIC: (leaf, link NIC -> leaf, link leaf -> NIC).
    nic: HashMap<DeviceId, (u32, LinkId, LinkId)>,
    leaf_pod: Vec<u32>,
    /// Per leaf, its links up to / down from spine s of its pod.
    leaf_up: Vec<Vec<LinkId>>,
    leaf_down: Vec<Vec<LinkId>>,
    /// Per spine (pod x spines + s), its links up to / down from core c.
    spine_up: Vec<Vec<LinkId>>,
    spine_down: Vec<Vec<LinkId>>,
    /// A GPU's index in its node: the rail its traffic leaves on when none is named.
    pub(crate) rail_of_gpu: HashMap<DeviceId, u32>,
}

/// SplitMix64 finaliser: a fixed, well-mixed hash, so ECMP choices are the same on every run.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl FabricRoutes {
    /// Links from NIC `a` to NIC `b`: up to the lowest tier both reach, then down.
    fn between(&self, a: DeviceId, b: DeviceId) -> Option<Vec<LinkId>> {
        let (&(la, up_a, _), &(lb, _, down_b)) = (self.nic.get(&a)?, self.nic.get(&b)?);
        if la == lb {
            return Some(vec![up_a, down_b]);
        }
        let h = if self.hash { mix(((a as u64) << 32) | b as u64) } else { 0 };
        let s1 = (h % self.spines as u64) as usize;
        let (pa, pb) = (self.leaf_pod[la as usize], self.leaf_pod[lb as usize]);
        if pa == pb {
            return Some(vec![up_a, self.leaf_up[la as usize][s1], self.leaf_down[lb as usize][s1], down_b]);
        }
        let h2 = mix(h ^ 0x5EED);
        let c = (h2 % self.cores.max(1) as u64) as usize;
        let s2 = ((h2 >> 32) % self.spines as u64) as usize;
        let (sa, sb) = ((pa * self.spines) as usize + s1, (pb * self.spines) as usize + s2);
        Some(vec![
            up_a,
            self.leaf_up[la as usize][s1],
            *self.spine_up.get(sa)?.get(c)?,
            *self.spine_down.get(sb)?.get(c)?,
            self.leaf_down[lb as usize][s2],
            down_b,
        ])
    }
}

impl Machine {
    /// The route between devices of two different nodes over the fat-tree: inside the source
    /// node to its NIC of the first of `rails` (the source GPU's own NIC when `None`), across the
    /// fabric to the destination node's NIC of the second (the destination GPU's own when
    /// `None`), and inside that node to `dst`. `None` if the machine has no fabric or the ends are
    /// not both in nodes. With `via` (NCCL's PXN proxy: the GPU of the source's node that owns the
    /// outgoing NIC), the data goes to that GPU first, as on a machine with one switch.
    pub(super) fn fabric_route(
        &self,
        src: DeviceId,
        dst: DeviceId,
        rails: Option<(u32, u32)>,
        via: Option<DeviceId>,
    ) -> Option<super::Route> {
        let f = self.fabric.as_ref()?;
        let (na, nb) = (self.devices[src as usize].node?, self.devices[dst as usize].node?);
        let (nics_a, nics_b) = (self.nics(na), self.nics(nb));
        if nics_a.is_empty() || nics_b.is_empty() {
            return None;
        }
        let pick = |nics: &[DeviceId], d: DeviceId, rail: Option<u32>| {
            let r = rail.or_else(|| f.rail_of_gpu.get(&d).copied()).unwrap_or(0);
            nics[r as usize % nics.len()]
        };
        let (nic_a, nic_b) = (pick(nics_a, src, rails.map(|r| r.0)), pick(nics_b, dst, rails.map(|r| r.1)));
        let mut links = match via {
            Some(p) => {
                let mut l = self.search_in_node(src, p, na)?;
                l.extend(self.search_in_node(p, nic_a, na)?);
                l
            }
            None => self.search_in_node(src, nic_a, na)?,
        };
        links.extend(f.between(nic_a, nic_b)?);
        links.extend(self.search_in_node(nic_b, dst, nb)?);
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).fold(0, u64::saturating_add);
        Some(super::Route { links, latency_ns })
    }

    /// Cheapest path from `src` to `dst` through devices of `node` only (Dijkstra on the route
    /// cost, ties to the lower device id).
    pub(super) fn search_in_node(&self, src: DeviceId, dst: DeviceId, node: u32) -> Option<Vec<LinkId>> {
        use std::cmp::Reverse;
        let mut state: HashMap<DeviceId, (u64, Option<LinkId>)> = HashMap::default();
        state.insert(src, (0, None));
        let mut heap = std::collections::BinaryHeap::from([Reverse((0u64, src))]);
        let mut done = rustc_hash::FxHashSet::default();
        while let Some(Reverse((c, d))) = heap.pop() {
            if !done.insert(d) {
                continue;
            }
            if d == dst {
                let mut path = Vec::new();
                let mut at = dst;
                while let Some(l) = state[&at].1 {
                    path.push(l);
                    at = self.links[l as usize].from;
                }
                path.reverse();
                return Some(path);
            }
            for &l in self.out_links(d) {
                let to = self.links[l as usize].to;
                if self.devices[to as usize].node != Some(node) {
                    continue;
                }
                let next = c.saturating_add(self.route_cost(l));
                let e = state.entry(to).or_insert((u64::MAX, None));
                if next < e.0 {
                    *e = (next, Some(l));
                    heap.push(Reverse((next, to)));
                }
            }
        }
        None
    }
}
