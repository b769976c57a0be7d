//! Bandwidth sharing: flows over links, rates by max-min fairness with per-flow caps (progressive
//! filling). Only the connected component of links and flows touched since the last solve is
//! re-solved, so a change costs the size of its component, not of the whole network.
//! Knows nothing of tasks, events or devices: flows are ids with a link list, an amount and a cap.
//!
//! A *bundle* ([`FluidNet::add_bundle`]) is one flow standing for k members of the same size, start
//! and cap, each over its own route: on a link that m members cross it counts m times (m = k on
//! the links they share, 1 on a member's own). Progressive filling counts those multiplicities and
//! takes a fixed bundle's share off a link m times, one subtraction a member, so while its members
//! are fixed in the same round every value is bit for bit what k separate flows get. The round in
//! which only some members would be fixed (a saturated link that not all cross) splits the bundle
//! into its members first, each in the bundle's state ([`FluidNet::take_splits`]), and filling goes
//! on as for k separate flows.

use crate::units::Nanos;

pub type FlowId = u32;

#[derive(Debug, Clone)]
struct Flow {
    /// Bytes still to move at time `last`.
    remaining: f64,
    rate: f64,
    cap: f64,
    last: Nanos,
    links: std::ops::Range<u32>,
    /// Bumped whenever the rate changes, so stale completion events can be told apart.
    version: u32,
    /// A completion event for the current version is out, due at `due`.
    scheduled: bool,
    due: Nanos,
    live: bool,
    /// Members it stands for: 1 for a plain flow, k for a bundle (then listed in `bundles`).
    members: u32,
}

/// What a bundle knows beyond its flow: each member's route, and the multiplicity of each link of
/// the flow's list (the union of the routes, in order of first appearance).
#[derive(Debug, Clone)]
struct Bundle {
    routes: Vec<Vec<u32>>,
    mult: Vec<u32>,
}

/// A bundle split by a solve into one flow per member: `members[i]` is the flow of member `i`
/// (`members[0]` is the bundle's own id, which keeps its version and completion event; the others
/// are new flows in the bundle's state whose completions, if one was due, are in that solve's
/// output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub bundle: FlowId,
    pub members: Vec<FlowId>,
}

/// Everything about a moving flow that decides its future: what a copy needs to behave the same.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowState {
    pub remaining: f64,
    pub rate: f64,
    pub cap: f64,
    pub last: Nanos,
    /// When its completion event is due, if one is out.
    pub due: Option<Nanos>,
}

/// A completion the caller should schedule: flow `flow` (at `version`) ends at `time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub flow: FlowId,
    pub version: u32,
    pub time: Nanos,
}

/// The set of active flows and the links they share.
pub struct FluidNet {
    capacity: Vec<f64>,
    flows: Vec<Flow>,
    free: Vec<FlowId>,
    /// Links of all flows, flows index ranges into it; slots of dead flows are reused by size.
    link_arena: Vec<u32>,
    on_link: Vec<Vec<FlowId>>,
    /// Members crossing each link (the length of `on_link` while no bundle is there).
    load: Vec<u32>,
    bundles: rustc_hash::FxHashMap<FlowId, Bundle>,
    splits: Vec<Split>,
    dirty_links: Vec<u32>,
    // Scratch for solving, kept between calls so a solve allocates nothing.
    link_mark: Vec<u32>,
    flow_mark: Vec<u32>,
    epoch: u32,
    comp_links: Vec<u32>,
    comp_flows: Vec<FlowId>,
    cap_left: Vec<f64>,
    unfixed_on: Vec<u32>,
    fixed: Vec<bool>,
    newly: Vec<FlowId>,
    /// Freed arena slots, by length.
    arena_free: Vec<Vec<std::ops::Range<u32>>>,
}

impl FluidNet {
    /// `capacity[l]` is link `l`'s bandwidth in bytes/ns.
    pub fn new(capacity: Vec<f64>) -> Self {
        let n = capacity.len();
        FluidNet {
            capacity,
            flows: Vec::new(),
            free: Vec::new(),
            link_arena: Vec::new(),
            on_link: vec![Vec::new(); n],
            load: vec![0; n],
            bundles: Default::default(),
            splits: Vec::new(),
            dirty_links: Vec::new(),
            link_mark: vec![0; n],
            flow_mark: Vec::new(),
            epoch: 0,
            comp_links: Vec::new(),
            comp_flows: Vec::new(),
            cap_left: vec![0.0; n],
            unfixed_on: vec![0; n],
            fixed: Vec::new(),
            newly: Vec::new(),
            arena_free: Vec::new(),
        }
    }

    /// Adds a flow of `bytes` over `links` (non-empty) at time `now`, at most `cap` bytes/ns.
    /// Its rate is set at the next [`FluidNet::solve`].
    pub fn add(&mut self, links: &[u32], bytes: f64, cap: f64, now: Nanos) -> FlowId {
        self.add_inner(links, bytes, cap, now, true)
    }

    /// Adds a bundle standing for one flow of `bytes` per route of `routes` (at least one, each
    /// non-empty, no link twice in a route), all at most `cap` bytes/ns, at time `now` (see the
    /// module comment). Its rate, one member's, is set at the next [`FluidNet::solve`]; its
    /// completion is every member's, unless a solve splits it first.
    pub fn add_bundle(&mut self, routes: &[&[u32]], bytes: f64, cap: f64, now: Nanos) -> FlowId {
        debug_assert!(!routes.is_empty() && routes.iter().all(|r| !r.is_empty()));
        if routes.len() == 1 {
            return self.add(routes[0], bytes, cap, now);
        }
        let mut union: Vec<u32> = Vec::new();
        let mut mult: Vec<u32> = Vec::new();
        // Position of each link in `union` (a map: bundles of many members cross many links).
        let mut at: rustc_hash::FxHashMap<u32, u32> = Default::default();
        for route in routes {
            for &l in route.iter() {
                match at.get(&l) {
                    Some(&i) => mult[i as usize] += 1,
                    None => {
                        at.insert(l, union.len() as u32);
                        union.push(l);
                        mult.push(1);
                    }
                }
            }
        }
        let id = self.add_inner(&union, bytes, cap, now, true);
        for (&l, &m) in union.iter().zip(&mult) {
            self.load[l as usize] += m - 1;
        }
        self.flows[id as usize].members = routes.len() as u32;
        self.bundles.insert(id, Bundle { routes: routes.iter().map(|r| r.to_vec()).collect(), mult });
        id
    }

    /// Members a flow stands for (1 unless it is a bundle).
    pub fn members(&self, id: FlowId) -> u32 {
        self.flows[id as usize].members
    }

    /// The members' routes of a bundle (None for a plain flow), in member order.
    pub fn member_routes(&self, id: FlowId) -> Option<&[Vec<u32>]> {
        self.bundles.get(&id).map(|b| b.routes.as_slice())
    }

    /// Bundles split by the solves since the last call, in the order they split.
    pub fn take_splits(&mut self) -> Vec<Split> {
        std::mem::take(&mut self.splits)
    }

    /// Members of live flows crossing link `l` (a bundle counts once per member crossing it).
    pub fn load_on(&self, l: u32) -> u32 {
        self.load[l as usize]
    }

    fn add_inner(&mut self, links: &[u32], bytes: f64, cap: f64, now: Nanos, dirty: bool) -> FlowId {
        debug_assert!(!links.is_empty());
        let range = self.alloc_links(links);
        let flow = Flow {
            remaining: bytes,
            rate: 0.0,
            cap,
            last: now,
            links: range,
            version: 0,
            scheduled: false,
            due: 0,
            live: true,
            members: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                let version = self.flows[id as usize].version.wrapping_add(1);
                self.flows[id as usize] = Flow { version, ..flow };
                id
            }
            None => {
                self.flows.push(flow);
                self.flow_mark.push(0);
                self.fixed.push(false);
                (self.flows.len() - 1) as FlowId
            }
        };
        for &l in links {
            self.on_link[l as usize].push(id);
            self.load[l as usize] += 1;
            if dirty {
                self.dirty_links.push(l);
            }
        }
        id
    }

    /// Inserts a copy of a flow in `state` without marking its links for re-solving. Returns the id
    /// and the version its completion event (at `state.due`, if any) must carry.
    pub fn insert_state(&mut self, links: &[u32], state: FlowState) -> (FlowId, u32) {
        let id = self.add_inner(links, state.remaining, state.cap, state.last, false);
        let f = &mut self.flows[id as usize];
        f.rate = state.rate;
        f.version = f.version.wrapping_add(1);
        f.scheduled = state.due.is_some();
        f.due = state.due.unwrap_or(0);
        (id, f.version)
    }

    /// The live flows on link `l`.
    pub fn flows_of(&self, l: u32) -> &[FlowId] {
        &self.on_link[l as usize]
    }

    /// The state of a live flow.
    pub fn state(&self, id: FlowId) -> FlowState {
        let f = &self.flows[id as usize];
        FlowState { remaining: f.remaining, rate: f.rate, cap: f.cap, last: f.last, due: f.scheduled.then_some(f.due) }
    }

    /// Links touched since the last solve (possibly repeated).
    pub fn dirty_links(&self) -> &[u32] {
        &self.dirty_links
    }

    /// Marks a link for re-solving at the next [`FluidNet::solve`].
    pub fn mark_dirty(&mut self, link: u32) {
        self.dirty_links.push(link);
    }

    fn alloc_links(&mut self, links: &[u32]) -> std::ops::Range<u32> {
        let len = links.len() as u32;
        if let Some(r) = self.arena_free.get_mut(len as usize).and_then(Vec::pop) {
            self.link_arena[r.start as usize..r.end as usize].copy_from_slice(links);
            return r;
        }
        let start = self.link_arena.len() as u32;
        self.link_arena.extend_from_slice(links);
        start..start + len
    }

    /// Removes a finished flow; the links it used are re-solved at the next [`FluidNet::solve`].
    pub fn remove(&mut self, id: FlowId) {
        let bundle = if self.flows[id as usize].members > 1 { self.bundles.remove(&id) } else { None };
        let f = &mut self.flows[id as usize];
        debug_assert!(f.live);
        f.live = false;
        f.scheduled = false;
        f.version = f.version.wrapping_add(1);
        f.members = 1;
        let range = f.links.clone();
        for (n, i) in range.clone().enumerate() {
            let l = self.link_arena[i as usize];
            let list = &mut self.on_link[l as usize];
            let pos = list.iter().position(|&x| x == id).expect("a live flow is listed on its links");
            list.swap_remove(pos);
            self.load[l as usize] -= bundle.as_ref().map_or(1, |b| b.mult[n]);
            self.dirty_links.push(l);
        }
        let len = range.len();
        if self.arena_free.len() <= len {
            self.arena_free.resize_with(len + 1, Vec::new);
        }
        self.arena_free[len].push(range);
        self.free.push(id);
    }

    /// Links of a flow.
    pub fn links(&self, id: FlowId) -> &[u32] {
        let r = &self.flows[id as usize].links;
        &self.link_arena[r.start as usize..r.end as usize]
    }

    /// Current version of a flow: a completion event is valid only if it carries this version.
    pub fn version(&self, id: FlowId) -> u32 {
        self.flows[id as usize].version
    }

    pub fn is_live(&self, id: FlowId) -> bool {
        self.flows[id as usize].live
    }

    /// Number of flows currently sharing link `l`.
    pub fn flows_on(&self, l: u32) -> usize {
        self.on_link[l as usize].len()
    }

    /// Current rate of a flow (bytes/ns), as of the last solve.
    pub fn rate(&self, id: FlowId) -> f64 {
        self.flows[id as usize].rate
    }

    /// Re-solves rates for every component touched since the last call and reports the flows whose
    /// completion time changed (new flows included).
    pub fn solve(&mut self, now: Nanos, out: &mut Vec<Completion>) {
        if self.dirty_links.is_empty() {
            return;
        }
        let dirty = std::mem::take(&mut self.dirty_links);
        self.gather(&dirty);
        let mut dirty = dirty;
        dirty.clear();
        self.dirty_links = dirty;
        self.fill(now, out);
    }

    /// The links and live flows connected to `seeds` (the seeds included), each once, in breadth-first
    /// order. Valid until the next call that changes the net or solves it.
    pub fn component(&mut self, seeds: &[u32]) -> (&[u32], &[FlowId]) {
        self.gather(seeds);
        (&self.comp_links, &self.comp_flows)
    }

    /// Capacity of link `l` (bytes/ns).
    pub fn capacity(&self, l: u32) -> f64 {
        self.capacity[l as usize]
    }

    /// Fills `comp_links` and `comp_flows` with the component(s) of `seeds`, breadth first.
    fn gather(&mut self, seeds: &[u32]) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.link_mark.iter_mut().for_each(|m| *m = 0);
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.comp_links.clear();
        self.comp_flows.clear();
        for &l in seeds {
            if self.link_mark[l as usize] != epoch {
                self.link_mark[l as usize] = epoch;
                self.comp_links.push(l);
            }
        }
        let mut i = 0;
        while i < self.comp_links.len() {
            let l = self.comp_links[i] as usize;
            i += 1;
            for k in 0..self.on_link[l].len() {
                let f = self.on_link[l][k];
                if self.flow_mark[f as usize] == epoch {
                    continue;
                }
                self.flow_mark[f as usize] = epoch;
                self.comp_flows.push(f);
                let r = self.flows[f as usize].links.clone();
                for j in r {
                    let l2 = self.link_arena[j as usize];
                    if self.link_mark[l2 as usize] != epoch {
                        self.link_mark[l2 as usize] = epoch;
                        self.comp_links.push(l2);
                    }
                }
            }
        }
    }

    /// Progressive filling over the gathered component: raise all unfixed flows together until a
    /// link saturates or a flow hits its cap, fix those flows, repeat. A link's count of unfixed
    /// flows counts a bundle's members on it, and a fixed bundle's share comes off the link once
    /// per member, so members fixed together are bit for bit k separate flows; a bundle whose
    /// members would be fixed in different rounds is split first (see the module comment).
    fn fill(&mut self, now: Nanos, out: &mut Vec<Completion>) {
        for &l in &self.comp_links {
            self.cap_left[l as usize] = self.capacity[l as usize];
            self.unfixed_on[l as usize] = self.load[l as usize];
        }
        for &f in &self.comp_flows {
            self.fixed[f as usize] = false;
        }
        let mut newly = std::mem::take(&mut self.newly);
        let mut left = self.comp_flows.len();
        while left > 0 {
            let mut share = f64::INFINITY;
            for &l in &self.comp_links {
                let n = self.unfixed_on[l as usize];
                if n > 0 {
                    share = share.min(self.cap_left[l as usize] / n as f64);
                }
            }
            for &f in &self.comp_flows {
                if !self.fixed[f as usize] {
                    share = share.min(self.flows[f as usize].cap);
                }
            }
            // The flows held back at this level: capped ones, and those crossing a saturated link
            // (a bundle when every member crosses one; split when only some do).
            newly.clear();
            let mut i = 0;
            while i < self.comp_flows.len() {
                let f = self.comp_flows[i];
                if self.fixed[f as usize] {
                    i += 1;
                    continue;
                }
                let fl = &self.flows[f as usize];
                if fl.cap <= share {
                    newly.push(f);
                } else if fl.members > 1 {
                    let b = &self.bundles[&f];
                    let held = b.routes.iter().filter(|r| r.iter().any(|&l| self.saturated(l, share))).count();
                    if held == b.routes.len() {
                        newly.push(f);
                    } else if held > 0 {
                        // Its members part here: go on with them as separate flows, this one again.
                        left += self.split(f, out);
                        continue;
                    }
                } else if self.link_arena[fl.links.start as usize..fl.links.end as usize]
                    .iter()
                    .any(|&l| self.saturated(l, share))
                {
                    newly.push(f);
                }
                i += 1;
            }
            debug_assert!(!newly.is_empty(), "progressive filling fixes at least one flow per round");
            for &f in &newly {
                self.fixed[f as usize] = true;
                left -= 1;
                self.set_rate(f, share, now, out);
                let fl = &self.flows[f as usize];
                let mult = (fl.members > 1).then(|| &self.bundles[&f].mult);
                for (n, j) in fl.links.clone().enumerate() {
                    let l = self.link_arena[j as usize] as usize;
                    let times = mult.map_or(1, |m| m[n]);
                    // One subtraction per member, in the order k separate flows would make them.
                    for _ in 0..times {
                        self.cap_left[l] = (self.cap_left[l] - share).max(0.0);
                    }
                    self.unfixed_on[l] -= times;
                }
            }
        }
        self.newly = newly;
    }

    /// Whether link `l` is saturated at `share` in the current filling round.
    fn saturated(&self, l: u32, share: f64) -> bool {
        let n = self.unfixed_on[l as usize];
        n > 0 && self.cap_left[l as usize] / n as f64 <= share
    }

    /// Splits bundle `id`, during a fill of its component, into one flow per member in the
    /// bundle's state: member 0 keeps the id (its version and completion event), the others are
    /// new flows of the component whose completions (if due) go to `out`. Link loads are
    /// unchanged (a bundle counted each member). Returns how many flows were added.
    fn split(&mut self, id: FlowId, out: &mut Vec<Completion>) -> usize {
        let bundle = self.bundles.remove(&id).expect("a bundle has its record");
        let old = self.flows[id as usize].links.clone();
        for i in old.clone() {
            let l = self.link_arena[i as usize];
            let list = &mut self.on_link[l as usize];
            let pos = list.iter().position(|&x| x == id).expect("a live flow is listed on its links");
            list.swap_remove(pos);
        }
        let len = old.len();
        if self.arena_free.len() <= len {
            self.arena_free.resize_with(len + 1, Vec::new);
        }
        self.arena_free[len].push(old);
        let first = &bundle.routes[0];
        let range = self.alloc_links(first);
        for &l in first {
            self.on_link[l as usize].push(id);
        }
        let f = &mut self.flows[id as usize];
        f.links = range;
        f.members = 1;
        let f = f.clone();
        let mut members = vec![id];
        for route in &bundle.routes[1..] {
            let m = self.add_inner(route, f.remaining, f.cap, f.last, false);
            for &l in route {
                self.load[l as usize] -= 1; // add_inner counted it again
            }
            let g = &mut self.flows[m as usize];
            g.rate = f.rate;
            g.scheduled = f.scheduled;
            g.due = f.due;
            if g.scheduled {
                out.push(Completion { flow: m, version: g.version, time: g.due });
            }
            self.flow_mark[m as usize] = self.epoch;
            self.fixed[m as usize] = false;
            self.comp_flows.push(m);
            members.push(m);
        }
        self.splits.push(Split { bundle: id, members });
        bundle.routes.len() - 1
    }

    fn set_rate(&mut self, f: FlowId, rate: f64, now: Nanos, out: &mut Vec<Completion>) {
        let fl = &mut self.flows[f as usize];
        if fl.scheduled && fl.rate == rate {
            return; // its completion event still holds
        }
        // Progress is brought up to date only when the rate changes, so a flow's bytes depend on its
        // rate history alone, not on how often solves of its component happened to touch it (a
        // collective on reserved links leaves outside flows exactly as its flows would).
        let moved = fl.rate * (now - fl.last) as f64;
        fl.remaining = (fl.remaining - moved).max(0.0);
        fl.last = now;
        fl.rate = rate;
        fl.version = fl.version.wrapping_add(1);
        fl.scheduled = rate > 0.0;
        if fl.scheduled {
            let dt = if fl.remaining <= 0.0 { 0 } else { crate::units::transfer_ns(fl.remaining, rate) };
            fl.due = now.saturating_add(dt);
            out.push(Completion { flow: f, version: fl.version, time: fl.due });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solve(net: &mut FluidNet, now: Nanos) -> Vec<Completion> {
        let mut out = Vec::new();
        net.solve(now, &mut out);
        out
    }

    #[test]
    fn two_flows_on_one_link_each_get_half() {
        let mut net = FluidNet::new(vec![2.0]);
        let a = net.add(&[0], 1000.0, f64::INFINITY, 0);
        let b = net.add(&[0], 1000.0, f64::INFINITY, 0);
        let done = solve(&mut net, 0);
        assert_eq!(net.rate(a), 1.0);
        assert_eq!(net.rate(b), 1.0);
        assert!(done.iter().all(|c| c.time == 1000));
    }

    #[test]
    fn max_min_gives_leftover_to_unconstrained_flows() {
        // Link 0 (cap 1) carries flows a and b; link 1 (cap 10) carries b and c.
        // Max-min: a = b = 0.5 (bottleneck link 0), c = 9.5.
        let mut net = FluidNet::new(vec![1.0, 10.0]);
        let a = net.add(&[0], 100.0, f64::INFINITY, 0);
        let b = net.add(&[0, 1], 100.0, f64::INFINITY, 0);
        let c = net.add(&[1], 100.0, f64::INFINITY, 0);
        solve(&mut net, 0);
        assert_eq!((net.rate(a), net.rate(b), net.rate(c)), (0.5, 0.5, 9.5));
    }

    #[test]
    fn caps_limit_a_flow_and_free_the_rest() {
        let mut net = FluidNet::new(vec![4.0]);
        let a = net.add(&[0], 100.0, 1.0, 0);
        let b = net.add(&[0], 100.0, f64::INFINITY, 0);
        solve(&mut net, 0);
        assert_eq!((net.rate(a), net.rate(b)), (1.0, 3.0));
    }

    #[test]
    fn removal_speeds_up_the_survivor_and_keeps_progress() {
        let mut net = FluidNet::new(vec![2.0]);
        let a = net.add(&[0], 1000.0, f64::INFINITY, 0);
        let b = net.add(&[0], 3000.0, f64::INFINITY, 0);
        solve(&mut net, 0);
        // At t=1000, a is done (1000 bytes at 1 byte/ns); b has 2000 left and now gets 2 bytes/ns.
        net.remove(a);
        let done = solve(&mut net, 1000);
        assert_eq!(done, vec![Completion { flow: b, version: net.version(b), time: 2000 }]);
    }

    #[test]
    fn a_solve_that_keeps_a_rate_leaves_the_flow_as_it_was() {
        // Flow a is held to 1 byte/ns by its cap; b joining its link at t=7 leaves a's rate alone,
        // so a keeps its state and completion event as if b had never come.
        let mut net = FluidNet::new(vec![4.0]);
        let a = net.add(&[0], 100.0, 1.0, 0);
        solve(&mut net, 0);
        let before = (net.state(a), net.version(a));
        net.add(&[0], 100.0, f64::INFINITY, 7);
        let done = solve(&mut net, 7);
        assert_eq!((net.state(a), net.version(a)), before);
        assert!(done.iter().all(|c| c.flow != a));
    }

    #[test]
    fn untouched_components_are_not_rescheduled() {
        let mut net = FluidNet::new(vec![1.0, 1.0]);
        let _a = net.add(&[0], 100.0, f64::INFINITY, 0);
        solve(&mut net, 0);
        let b = net.add(&[1], 100.0, f64::INFINITY, 10);
        let done = solve(&mut net, 10);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].flow, b);
    }
}
