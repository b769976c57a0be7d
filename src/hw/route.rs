//! Routing: the path a transfer takes between two devices. Cheapest by latency plus the time of a
//! 1 MiB message at each link's peak rate; ties broken deterministically, so a route is the same
//! on every run and machine.

use super::{DeviceId, LinkId, Machine};
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
        link.latency_ns + (ROUTE_REFERENCE_BYTES / link.capacity()).ceil() as u64
    }

    /// Cheapest route from `src` to `dst` (Dijkstra on [`Machine::route_cost`]; ties go to the
    /// device reached first, then link order), or `None` if unreachable. So NVLink beats a PCIe
    /// detour of the same hop count, and a DGX-1's non-neighbours go two NVLink hops.
    pub fn shortest_path(&self, src: DeviceId, dst: DeviceId) -> Option<Route> {
        if src == dst {
            return Some(Route { links: Vec::new(), latency_ns: 0 });
        }
        let n = self.devices.len();
        let mut via: Vec<Option<LinkId>> = vec![None; n];
        let mut cost = vec![u64::MAX; n];
        let mut done = vec![false; n];
        cost[src as usize] = 0;
        let mut heap = BinaryHeap::from([Reverse((0u64, src))]);
        while let Some(Reverse((c, d))) = heap.pop() {
            if done[d as usize] {
                continue;
            }
            done[d as usize] = true;
            if d == dst {
                return Some(self.unwind(&via, src, dst));
            }
            for &l in self.out_links(d) {
                let to = self.links[l as usize].to;
                let next = c + self.route_cost(l);
                if next < cost[to as usize] {
                    cost[to as usize] = next;
                    via[to as usize] = Some(l);
                    heap.push(Reverse((next, to)));
                }
            }
        }
        None
    }

    fn unwind(&self, via: &[Option<LinkId>], src: DeviceId, dst: DeviceId) -> Route {
        let mut links = Vec::new();
        let mut at = dst;
        while at != src {
            let l = via[at as usize].expect("the search reached this device through a link");
            links.push(l);
            at = self.links[l as usize].from;
        }
        links.reverse();
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).sum();
        Route { links, latency_ns }
    }
}
