//! Routing: the path a transfer takes between two devices. Cheapest by latency plus the time of a
//! 1 MiB message at each link's peak rate; ties broken deterministically, so a route is the same
//! on every run and machine.

use super::{DeviceId, LinkId, Machine};
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

/// Message size at which routes are compared: big enough that bandwidth matters, small enough
/// that latency still counts.
const ROUTE_REFERENCE_BYTES: f64 = (1 << 20) as f64;

impl Machine {
    /// Cost of crossing a link when choosing routes: its latency plus the time of a reference
    /// message at its peak rate, in whole nanoseconds (integers keep the choice deterministic).
    fn route_cost(&self, l: LinkId) -> u64 {
        let link = &self.links[l as usize];
        link.latency_ns.saturating_add((ROUTE_REFERENCE_BYTES / link.capacity()).ceil() as u64)
    }

    /// Cheapest route from `src` to `dst` (Dijkstra on [`Machine::route_cost`]; ties go to the
    /// device reached first, then link order), or `None` if unreachable. So NVLink beats a PCIe
    /// detour of the same hop count, and a DGX-1's non-neighbours go two NVLink hops. Between
    /// nodes of a machine whose nodes meet only at one switch, the route is the cheapest way to
    /// that switch followed by the cheapest way from it (under the NCCL model, through the NIC
    /// NCCL gives each GPU: [`Machine::via_local_nic`]), each found by a search that stays inside
    /// one node (so routing cost does not grow with the cluster).
    ///
    /// A shared device outside every node (shared storage) whose links all lead to or from that
    /// switch is routed the same way: every path from it starts with one of its links to the
    /// switch, so the search need not explore the whole cluster (which made a shared-storage
    /// machine quadratic in its GPU count).
    pub fn shortest_path(&self, src: DeviceId, dst: DeviceId) -> Option<Route> {
        let (a, b) = (self.devices[src as usize].node, self.devices[dst as usize].node);
        if let Some(gw) = self.gateway() {
            let split = match (a, b) {
                (Some(a), Some(b)) => a != b,
                (None, Some(_)) => src != gw && self.only_via(src, gw, false),
                (Some(_), None) => dst != gw && self.only_via(dst, gw, true),
                (None, None) => false,
            };
            if split {
                let mut up = match self.via_local_nic(src, gw, false) {
                    Some(r) => r,
                    None => self.search(src, gw, false)?,
                };
                let down = match self.via_local_nic(dst, gw, true) {
                    Some(r) => r,
                    None => self.search(gw, dst, true)?,
                };
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
        let (a, b) = (self.devices[src as usize].node, self.devices[dst as usize].node);
        let (Some(gw), Some(a), Some(b)) = (self.gateway(), a, b) else { return self.shortest_path(src, dst) };
        let (Some(&nic_a), Some(&nic_b)) = (self.nics(a).get(rail as usize), self.nics(b).get(rail as usize)) else {
            return self.shortest_path(src, dst);
        };
        if a == b {
            return self.shortest_path(src, dst);
        }
        let up = self.search(src, nic_a, false)?;
        let out = *self.out_links(nic_a).iter().find(|&&l| self.links[l as usize].to == gw)?;
        let inn = *self.in_links(nic_b).iter().find(|&&l| self.links[l as usize].from == gw)?;
        let down = self.search(nic_b, dst, true)?;
        let mut links = up.links;
        links.extend([out, inn]);
        links.extend(down.links);
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).fold(0, u64::saturating_add);
        Some(Route { links, latency_ns })
    }

    /// Under the NCCL collective model, the route between GPU `d` and the network switch `gw`
    /// (from the switch to `d` with `reverse`) through the NIC NCCL gives it; `None` under the
    /// ideal model (cheapest route), when `d` is no GPU or when its node has one NIC. NCCL (`ncclTopoGetLocalNet`, src/graph/topo.cc @ v2.21.5-1) takes the NICs nearest the
    /// GPU and picks number `mirror(dev) % count` of them, `dev` being the GPU's index in its node
    /// (its bits mirrored when `count` is a power of two): GPUs behind one PCIe switch with as many
    /// NICs each use their own, where the cheapest-route search put them all on the first.
    fn via_local_nic(&self, d: DeviceId, gw: DeviceId, reverse: bool) -> Option<Route> {
        if !matches!(self.collectives, crate::collective::CollectiveModel::Nccl(_)) {
            return None;
        }
        let slot = *self.gpu_slot.get(d as usize).filter(|&&s| s != u32::MAX)?;
        let nics = self.nics(self.devices[d as usize].node?);
        if nics.len() < 2 {
            return None;
        }
        let mut nearest: Vec<(Route, LinkId)> = Vec::new();
        let mut best = u64::MAX;
        for &nic in nics {
            let (inner, hop) = if reverse {
                (self.search(nic, d, true), self.in_links(nic).iter().find(|&&l| self.links[l as usize].from == gw))
            } else {
                (self.search(d, nic, false), self.out_links(nic).iter().find(|&&l| self.links[l as usize].to == gw))
            };
            let (Some(inner), Some(&hop)) = (inner, hop) else { continue };
            let cost = inner.links.iter().chain([&hop]).map(|&l| self.route_cost(l)).fold(0, u64::saturating_add);
            if cost < best {
                best = cost;
                nearest.clear();
            }
            if cost == best {
                nearest.push((inner, hop));
            }
        }
        let count = nearest.len() as u32;
        if count == 0 {
            return None;
        }
        let pick = if count.is_power_of_two() { mirror_bits(slot, count) } else { slot };
        let (inner, hop) = nearest.swap_remove((pick % count) as usize);
        let links: Vec<LinkId> = if reverse {
            std::iter::once(hop).chain(inner.links).collect()
        } else {
            inner.links.into_iter().chain([hop]).collect()
        };
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).fold(0, u64::saturating_add);
        Some(Route { links, latency_ns })
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

/// The low log2(`pow2`) bits of `value` in reverse order (NCCL's `mirrorBits`).
fn mirror_bits(value: u32, pow2: u32) -> u32 {
    let bits = pow2.trailing_zeros();
    (0..bits).filter(|b| value & (1 << b) != 0).map(|b| 1 << (bits - 1 - b)).sum()
}

#[cfg(test)]
mod tests {
    use super::mirror_bits;

    #[test]
    fn mirror_bits_reverses_the_low_bits_as_nccl_does() {
        assert_eq!((0..2).map(|v| mirror_bits(v, 2)).collect::<Vec<_>>(), [0, 1]);
        assert_eq!((0..4).map(|v| mirror_bits(v, 4)).collect::<Vec<_>>(), [0, 2, 1, 3]);
        assert_eq!(mirror_bits(3, 8), 6);
        assert_eq!(mirror_bits(5, 4), 2, "bits above the count are ignored");
        assert_eq!(mirror_bits(7, 1), 0);
    }
}
