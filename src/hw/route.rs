//! Routing: the path a transfer takes between two devices. Fewest hops, ties broken by link order,
//! so a route is the same on every run and machine.

use super::{DeviceId, LinkId, Machine};
use std::collections::VecDeque;

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

impl Machine {
    /// Fewest-hop route from `src` to `dst`, or `None` if unreachable.
    pub fn shortest_path(&self, src: DeviceId, dst: DeviceId) -> Option<Route> {
        if src == dst {
            return Some(Route { links: Vec::new(), latency_ns: 0 });
        }
        let n = self.devices.len();
        let mut via: Vec<Option<LinkId>> = vec![None; n];
        let mut seen = vec![false; n];
        seen[src as usize] = true;
        let mut queue = VecDeque::from([src]);
        while let Some(d) = queue.pop_front() {
            for &l in self.out_links(d) {
                let to = self.links[l as usize].to;
                if !seen[to as usize] {
                    seen[to as usize] = true;
                    via[to as usize] = Some(l);
                    if to == dst {
                        return Some(self.unwind(&via, src, dst));
                    }
                    queue.push_back(to);
                }
            }
        }
        None
    }

    fn unwind(&self, via: &[Option<LinkId>], src: DeviceId, dst: DeviceId) -> Route {
        let mut links = Vec::new();
        let mut at = dst;
        while at != src {
            let l = via[at as usize].expect("BFS reached this device through a link");
            links.push(l);
            at = self.links[l as usize].from;
        }
        links.reverse();
        let latency_ns = links.iter().map(|&l| self.links[l as usize].latency_ns).sum();
        Route { links, latency_ns }
    }
}
