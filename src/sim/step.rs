//! Timing one collective step on its own, for collectives on reserved links.
//!
//! A step's transfers start together. Those that share links form a component; components do not
//! interact, so each is timed alone: a single transfer by the closed form the fluid model gives a
//! lone flow, several by a small private fluid simulation with the engine's own semantics. Symmetric
//! machines repeat the same component many times (every node pair of a hierarchical ring), so
//! results are memoised by an exact structural signature. [`StepTimer::states_at`] replays a step
//! to an instant and reports each transfer's state, so the engine can turn it back into flows.

use super::fluid::{Completion, FlowState, FluidNet};
use crate::units::{transfer_ns, Nanos};
use rustc_hash::FxHashMap as HashMap;

/// One transfer of a step: its links, latency, bytes and single-message rate cap.
#[derive(Debug, Clone, Copy)]
pub(super) struct Member<'a> {
    pub links: &'a [u32],
    pub latency: Nanos,
    pub bytes: u64,
    pub cap: f64,
}

/// What a transfer is doing at an instant (times relative to the step's start).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum MemberState {
    Done,
    /// Still waiting out its latency; its bytes start at this offset (possibly the instant itself).
    Waiting(Nanos),
    Moving(FlowState),
}

/// A flow outside the step that shares links with it, directly or through other flows (data
/// loading on a node's network link, say). The step may be timed with it only while it keeps its
/// rate: the step's transfers must not change it.
#[derive(Debug, Clone)]
pub(super) struct Outside {
    pub links: Vec<u32>,
    pub cap: f64,
    pub rate: f64,
}

#[derive(Default)]
pub(super) struct StepTimer {
    /// Finish times per member, or None where the step would change an outside flow's rate.
    memo: HashMap<Vec<u64>, Option<Vec<Nanos>>>,
    parent: Vec<u32>,
    /// The first member seen on each link, while grouping members into components.
    link_member: LinkMap,
    /// Local link ids of the signature being built.
    ids: LinkMap,
    /// Scratch of [`StepTimer::components_of`]: per root item its component, per component its
    /// size, and the components of the latest call (reused, so timing a step allocates none).
    comp_index: Vec<u32>,
    comp_size: Vec<u32>,
    comps: Comps,
    /// Scratch of the signature being looked up.
    sig: Vec<u64>,
}

/// Items grouped into components, flat: component k holds `items[starts[k]..starts[k + 1]]`.
#[derive(Default)]
struct Comps {
    items: Vec<u32>,
    starts: Vec<u32>,
}

impl Comps {
    fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    fn get(&self, k: usize) -> &[u32] {
        &self.items[self.starts[k] as usize..self.starts[k + 1] as usize]
    }
}

/// A map from global link ids to a u32, reused across calls: `value[g]` holds when `epoch[g]` is
/// the current epoch, so starting afresh costs nothing (no map built and dropped per component).
#[derive(Default)]
struct LinkMap {
    epoch: Vec<u32>,
    value: Vec<u32>,
    current: u32,
}

impl LinkMap {
    /// Empties the map, over links `0..links`.
    fn begin(&mut self, links: usize) {
        if self.epoch.len() < links {
            self.epoch.resize(links, 0);
            self.value.resize(links, 0);
        }
        self.current = self.current.wrapping_add(1);
        if self.current == 0 {
            self.epoch.iter_mut().for_each(|e| *e = 0);
            self.current = 1;
        }
    }

    fn get(&self, link: usize) -> Option<u32> {
        (self.epoch[link] == self.current).then(|| self.value[link])
    }

    fn insert(&mut self, link: usize, value: u32) {
        self.epoch[link] = self.current;
        self.value[link] = value;
    }
}

impl StepTimer {
    pub fn new(links: usize) -> Self {
        let mut timer = StepTimer::default();
        timer.link_member.begin(links);
        timer.ids.begin(links);
        timer
    }

    fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let p = self.parent[x as usize];
            self.parent[x as usize] = self.parent[p as usize];
            x = p;
        }
        x
    }

    /// Members grouped into components of shared links, each in member order; components ordered
    /// by their first member.
    fn components(&mut self, members: &[Member]) -> Vec<Vec<u32>> {
        let mut comps = std::mem::take(&mut self.comps);
        self.components_of(members.len(), |i| members[i].links, &mut comps);
        let out = (0..comps.len()).map(|k| comps.get(k).to_vec()).collect();
        self.comps = comps;
        out
    }

    /// Components of the members and the `outside` flows (items `n..`) together, as
    /// [`StepTimer::components_of`]: a component's members come first (item order), then the
    /// outside flows it holds; a component without a member holds no outside flow either (those
    /// are the flows of the step's own links).
    fn components_with_into(&mut self, members: &[Member], outside: &[Outside], out: &mut Comps) {
        let n = members.len();
        let route = |i: usize| if i < n { members[i].links } else { outside[i - n].links.as_slice() };
        self.components_of(n + outside.len(), route, out);
    }

    /// Items (routes as link lists) grouped into components of shared links, each in item order;
    /// components ordered by their first item.
    fn components_of<'a>(&mut self, count: usize, route: impl Fn(usize) -> &'a [u32], out: &mut Comps) {
        self.link_member.begin(0);
        self.parent.clear();
        self.parent.extend(0..count as u32);
        for i in 0..count {
            for &l in route(i) {
                let l = l as usize;
                match self.link_member.get(l) {
                    Some(first) => {
                        let (a, b) = (self.find(i as u32), self.find(first));
                        if a != b {
                            self.parent[a.max(b) as usize] = a.min(b);
                        }
                    }
                    None => self.link_member.insert(l, i as u32),
                }
            }
        }
        // Component index by root (an item index), in order of first item; then the items placed
        // by a counting sort, so each component keeps item order.
        let (index, size) = (&mut self.comp_index, &mut self.comp_size);
        index.clear();
        index.resize(count, u32::MAX);
        size.clear();
        for i in 0..count as u32 {
            let root = self.find(i) as usize;
            let index = &mut self.comp_index;
            if index[root] == u32::MAX {
                index[root] = self.comp_size.len() as u32;
                self.comp_size.push(0);
            }
            self.comp_size[index[root] as usize] += 1;
        }
        out.starts.clear();
        out.starts.push(0);
        let mut at = 0;
        for &k in &self.comp_size {
            at += k;
            out.starts.push(at);
        }
        // comp_size becomes each component's next free slot.
        self.comp_size.copy_from_slice(&out.starts[..out.starts.len() - 1]);
        out.items.clear();
        out.items.resize(count, 0);
        for i in 0..count as u32 {
            let root = self.find(i) as usize;
            let k = self.comp_index[root] as usize;
            out.items[self.comp_size[k] as usize] = i;
            self.comp_size[k] += 1;
        }
    }

    /// How long the step takes (from its start until its last transfer arrives) next to the `outside` flows (the whole component they form with it,
    /// rates as last solved), or None if its transfers would change an outside flow's rate.
    pub fn duration_with(&mut self, members: &[Member], outside: &[Outside], capacity: &[f64]) -> Option<Nanos> {
        if !outside.is_empty() {
            // Components of members and outside flows together: each is timed with the outside
            // flows it holds (fluid shares never cross components, so this is the joint run's
            // outcome, as for the components of a step alone).
            let n = members.len() as u32;
            let mut comps = std::mem::take(&mut self.comps);
            self.components_with_into(members, outside, &mut comps);
            let mut longest = Some(0);
            for k in 0..comps.len() {
                let c = comps.get(k);
                if c[0] >= n {
                    continue;
                }
                let split = c.partition_point(|&i| i < n);
                let finish = if split == 1 && split == c.len() {
                    solo(&members[c[0] as usize], capacity)
                } else {
                    match self.timed(members, &c[..split], &held(outside, n, &c[split..]), capacity) {
                        Some(f) => f,
                        None => {
                            longest = None;
                            break;
                        }
                    }
                };
                longest = longest.map(|l| l.max(finish));
            }
            self.comps = comps;
            return longest;
        }
        let mut longest = 0;
        for comp in self.components(members) {
            let finish = if comp.len() == 1 {
                solo(&members[comp[0] as usize], capacity)
            } else {
                self.timed(members, &comp, &[], capacity).expect("no outside flow to disturb")
            };
            longest = longest.max(finish);
        }
        Some(longest)
    }

    /// Splits a step for a partial reservation: members of components with a link that
    /// `touched` marks (other traffic is on it) must run as flows, returned in member order; the
    /// other components are timed alone, and the latest finish among them is returned.
    pub fn split(&mut self, members: &[Member], touched: impl Fn(u32) -> bool, capacity: &[f64]) -> (Vec<u32>, Nanos) {
        let mut real = Vec::new();
        let mut longest = 0;
        for comp in self.components(members) {
            if comp.iter().any(|&i| members[i as usize].links.iter().any(|&l| touched(l))) {
                real.extend_from_slice(&comp);
                continue;
            }
            let finish = if comp.len() == 1 {
                solo(&members[comp[0] as usize], capacity)
            } else {
                self.timed(members, &comp, &[], capacity).expect("no outside flow to disturb")
            };
            longest = longest.max(finish);
        }
        real.sort_unstable();
        (real, longest)
    }

    /// The latest finish time of a component's members (0 for none), memoised by signature (found
    /// without building the component's local links, which only a first timing needs).
    fn timed(&mut self, members: &[Member], comp: &[u32], outside: &[Outside], capacity: &[f64]) -> Option<Nanos> {
        let mut sig = std::mem::take(&mut self.sig);
        sig.clear();
        signature_into(&mut self.ids, members, comp, outside, capacity, &mut sig, None);
        let latest = |f: &Option<Vec<Nanos>>| f.as_ref().map(|f| f.iter().copied().max().unwrap_or(0));
        let known = self.memo.get(sig.as_slice()).map(latest);
        self.sig = sig;
        known.unwrap_or_else(|| {
            let (sig, local) = signature(&mut self.ids, members, comp, outside, capacity);
            let f = Component::new(members, comp, &local).finish_times();
            let out = latest(&f);
            self.memo.insert(sig, f);
            out
        })
    }

    /// Each member's state at offset `at` after the step's start, as a step-by-step run holds it
    /// once the instant's completions are handled and before its activations and bandwidth
    /// solve; plus the links whose shares that solve must recompute. `outside` as given to
    /// [`StepTimer::duration_with`] when the step was timed.
    pub fn states_at(
        &mut self,
        members: &[Member],
        outside: &[Outside],
        capacity: &[f64],
        at: Nanos,
    ) -> (Vec<MemberState>, Vec<u32>) {
        let mut states = vec![MemberState::Done; members.len()];
        let mut dirty = Vec::new();
        let n = members.len() as u32;
        let mut comps = std::mem::take(&mut self.comps);
        self.components_with_into(members, outside, &mut comps);
        for k in 0..comps.len() {
            let c = comps.get(k);
            if c[0] >= n {
                continue;
            }
            let split = c.partition_point(|&i| i < n);
            let comp = &c[..split];
            if split == 1 && split == c.len() {
                let i = comp[0] as usize;
                states[i] = solo_state(&members[i], capacity, at);
                continue;
            }
            let (_, local) = signature(&mut self.ids, members, comp, &held(outside, n, &c[split..]), capacity);
            let (local_states, local_dirty) = Component::new(members, comp, &local).states_at(at);
            for (k, &i) in comp.iter().enumerate() {
                states[i as usize] = local_states[k];
            }
            dirty.extend(local_dirty.into_iter().map(|l| local.globals[l as usize]));
        }
        self.comps = comps;
        (states, dirty)
    }
}

/// The outside flows `items` (indices past the `n` members) of a component, in order.
fn held(outside: &[Outside], n: u32, items: &[u32]) -> Vec<Outside> {
    items.iter().map(|&i| outside[(i - n) as usize].clone()).collect()
}

/// The rate a lone flow gets: its cap or its slowest link.
fn solo_rate(m: &Member, capacity: &[f64]) -> f64 {
    m.links.iter().map(|&l| capacity[l as usize]).fold(m.cap, f64::min)
}

fn moves(m: &Member) -> bool {
    m.bytes > 0 && !m.links.is_empty()
}

/// Finish offset of a transfer alone on its links.
fn solo(m: &Member, capacity: &[f64]) -> Nanos {
    if !moves(m) {
        return m.latency;
    }
    m.latency.saturating_add(transfer_ns(m.bytes as f64, solo_rate(m, capacity)))
}

fn solo_state(m: &Member, capacity: &[f64], at: Nanos) -> MemberState {
    if solo(m, capacity) <= at {
        MemberState::Done
    } else if m.latency >= at {
        MemberState::Waiting(m.latency)
    } else {
        let rate = solo_rate(m, capacity);
        MemberState::Moving(FlowState {
            remaining: m.bytes as f64,
            rate,
            cap: m.cap,
            last: m.latency,
            due: Some(solo(m, capacity)),
        })
    }
}

/// A component's links renumbered in order of first use, with their global ids and capacities.
struct LocalLinks {
    globals: Vec<u32>,
    capacity: Vec<f64>,
    /// Per member of the component (in order), its links as local ids.
    routes: Vec<Vec<u32>>,
    /// The outside flows with their links as local ids.
    outside: Vec<Outside>,
}

/// An exact description of a component up to renaming of links: equal signatures evolve alike.
fn signature(
    ids: &mut LinkMap,
    members: &[Member],
    comp: &[u32],
    outside: &[Outside],
    capacity: &[f64],
) -> (Vec<u64>, LocalLinks) {
    let mut links = LocalLinks { globals: Vec::new(), capacity: Vec::new(), routes: Vec::new(), outside: Vec::new() };
    let mut sig = Vec::new();
    signature_into(ids, members, comp, outside, capacity, &mut sig, Some(&mut links));
    (sig, links)
}

/// [`signature`] appended to `sig`, building the local links only when `links` is given (a
/// memoised component needs just its signature). Local ids count links in order of first use
/// either way.
fn signature_into(
    ids: &mut LinkMap,
    members: &[Member],
    comp: &[u32],
    outside: &[Outside],
    capacity: &[f64],
    sig: &mut Vec<u64>,
    mut links: Option<&mut LocalLinks>,
) {
    ids.begin(capacity.len());
    let mut count = 0u32;
    sig.extend([comp.len() as u64, outside.len() as u64]);
    let want = links.is_some();
    // Global links in order of first use (local id = index).
    let mut firsts: Vec<u32> = Vec::new();
    // A route's links as local ids, new ids in order of first use, each pushed to the signature
    // (the ids are kept only when the local links are built).
    let mut local_route = |route: &[u32], sig: &mut Vec<u64>| -> Vec<u32> {
        let mut out = Vec::new();
        for &g in route {
            let gi = g as usize;
            let id = ids.get(gi).unwrap_or_else(|| {
                ids.insert(gi, count);
                firsts.push(g);
                count += 1;
                count - 1
            });
            sig.push(id as u64);
            if want {
                out.push(id);
            }
        }
        out
    };
    for &i in comp {
        let m = &members[i as usize];
        sig.extend([m.latency, m.bytes, m.cap.to_bits(), m.links.len() as u64]);
        let route = local_route(m.links, sig);
        if let Some(l) = links.as_deref_mut() {
            l.routes.push(route);
        }
    }
    for o in outside {
        sig.extend([o.cap.to_bits(), o.rate.to_bits(), o.links.len() as u64]);
        let route = local_route(&o.links, sig);
        if let Some(l) = links.as_deref_mut() {
            l.outside.push(Outside { links: route, ..*o });
        }
    }
    sig.extend(firsts.iter().map(|&g| capacity[g as usize].to_bits()));
    if let Some(l) = links {
        l.capacity.extend(firsts.iter().map(|&g| capacity[g as usize]));
        l.globals = firsts;
    }
}

/// A private fluid simulation of one component, with the engine's semantics: at each instant,
/// handle every event, then solve shares once. Outside flows move from the start at their rates and
/// never finish here (the engine turns the step back into flows when one does).
struct Component<'a> {
    members: Vec<Member<'a>>,
    routes: &'a [Vec<u32>],
    outside: &'a [Outside],
    capacity: &'a [f64],
}

/// What a private run ends with: the net, which member each flow is (outside flows: u32::MAX),
/// per member its finish time, and whether an outside flow's rate changed.
struct Replay {
    net: FluidNet,
    flow_member: Vec<u32>,
    finish: Vec<Option<Nanos>>,
    disturbed: bool,
}

impl<'a> Component<'a> {
    fn new(all: &[Member<'a>], comp: &[u32], local: &'a LocalLinks) -> Self {
        Component {
            members: comp.iter().map(|&i| all[i as usize]).collect(),
            routes: &local.routes,
            outside: &local.outside,
            capacity: &local.capacity,
        }
    }

    /// Runs until every member is done (`until` = None), or to instant `until` (handling only its
    /// completions). Stops early if an outside flow's rate changes.
    fn run(&self, until: Option<Nanos>) -> Replay {
        let n = self.members.len();
        let mut net = FluidNet::new(self.capacity.to_vec());
        let mut finish: Vec<Option<Nanos>> = vec![None; n];
        let mut flow_member: Vec<u32> = Vec::new();
        let mut outside_flows = Vec::with_capacity(self.outside.len());
        for o in self.outside {
            let state = FlowState { remaining: 1.0, rate: o.rate, cap: o.cap, last: 0, due: Some(Nanos::MAX) };
            let (f, _) = net.insert_state(&o.links, state);
            if flow_member.len() <= f as usize {
                flow_member.resize(f as usize + 1, u32::MAX);
            }
            outside_flows.push(f);
        }
        // (time, kind: 0 completion / 1 activation, member or flow, version)
        let mut events: std::collections::BTreeMap<Nanos, Vec<(u8, u32, u32)>> = Default::default();
        for (i, m) in self.members.iter().enumerate() {
            events.entry(m.latency).or_default().push((1, i as u32, 0));
        }
        let mut out: Vec<Completion> = Vec::new();
        let mut disturbed = false;
        while let Some((&t, _)) = events.first_key_value() {
            if until.is_some_and(|u| t > u) {
                break;
            }
            let at_limit = until == Some(t);
            let mut bucket = events.remove(&t).expect("present");
            if at_limit {
                // Activations at the limit instant are left to the engine.
                bucket.retain(|e| e.0 == 0);
            }
            for (kind, id, version) in bucket {
                if kind == 1 {
                    let m = &self.members[id as usize];
                    if !moves(m) {
                        finish[id as usize] = Some(t);
                        continue;
                    }
                    let f = net.add(&self.routes[id as usize], m.bytes as f64, m.cap, t);
                    if flow_member.len() <= f as usize {
                        flow_member.resize(f as usize + 1, 0);
                    }
                    flow_member[f as usize] = id;
                } else if net.is_live(id) && net.version(id) == version {
                    net.remove(id);
                    finish[flow_member[id as usize] as usize] = Some(t);
                }
            }
            if at_limit {
                break;
            }
            out.clear();
            net.solve(t, &mut out);
            if outside_flows.iter().zip(self.outside).any(|(&f, o)| net.rate(f) != o.rate) {
                disturbed = true;
                break;
            }
            for c in &out {
                events.entry(c.time).or_default().push((0, c.flow, c.version));
            }
        }
        for &f in &outside_flows {
            flow_member[f as usize] = u32::MAX;
        }
        Replay { net, flow_member, finish, disturbed }
    }

    fn finish_times(&self) -> Option<Vec<Nanos>> {
        let r = self.run(None);
        if r.disturbed {
            return None;
        }
        Some(r.finish.into_iter().map(|f| f.expect("every member finishes")).collect())
    }

    fn states_at(&self, at: Nanos) -> (Vec<MemberState>, Vec<u32>) {
        let Replay { net, flow_member, finish, disturbed } = self.run(Some(at));
        debug_assert!(!disturbed, "a step timed without disturbing outside flows replays alike");
        let mut states: Vec<MemberState> = self
            .members
            .iter()
            .zip(&finish)
            .map(|(m, f)| if f.is_some() { MemberState::Done } else { MemberState::Waiting(m.latency) })
            .collect();
        for (f, &member) in flow_member.iter().enumerate() {
            let f = f as u32;
            if member != u32::MAX && net.is_live(f) && finish[member as usize].is_none() {
                states[member as usize] = MemberState::Moving(net.state(f));
            }
        }
        (states, net.dirty_links().to_vec())
    }
}
