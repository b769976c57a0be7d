//! Symmetry classes of a collective step's transfers. A step run by flows (a ring of 1,024 ranks:
//! 1,024 transfers) often moves identical transfers over routes of the same shape: the same bytes,
//! latency and rate cap, over links of the same capacities in the same order. The step's transfers
//! fall into *groups*, connected by shared links (one transfer whose route shares no link; under
//! `--nic-route channels` a striped ring's rank sends its NVLink share and, through the next GPU's
//! NIC, its network share over the same NVLink hops: a group of two). When groups have the same
//! shape (their transfers alike and sharing links the same way) and their links carry nothing
//! else, each group is alone in components of the same shape, and max-min rates are a function
//! of a component's shape (a flow's progress, of its rate history: [`super::fluid`]). So the
//! engine runs one group of each such class as flows (the *representatives*) and finishes the
//! others with it (their *shadows*: shadow m of an image group arrives with representative m).
//!
//! Two collectives over the same ranks (ZeRO-3's parameter all-gather beside its gradient
//! reduce-scatter, both rings in the same order) put, at every ring position, one transfer of each
//! on the same route: their classes cover the same routes, so the representatives share a route
//! and each shadow's links carry the image of that shared component. Contention stays modelled:
//! the representatives share their links as the whole ring's transfers would.
//!
//! Invariant: a class's shadows are *live* (not flows) only while every link of the class's
//! routes (the *footprint*) carries nothing but the representatives of live classes with the very
//! same routes: checked when the first representative of its group starts moving (the others,
//! still waiting out their latency, move later with the class live), and kept by turning the
//! shadows into the flows a full run holds at that instant (their representative's state, copied;
//! pending with their representative when it has not moved yet) the moment other traffic is about
//! to reach the footprint (a flow activating); a collective does not reserve links of a footprint
//! (reserving treats them as held by another collective, so its transfers there run as flows).
//! Results are bit-identical to running every transfer as its own flow
//! ([`super::Options::collective_flows`], tested in `tests/collective_shadows.rs`).

use super::{Engine, EventKind, FlowId, Owner, Pending, Xfer};
use crate::collective::{Algorithm, CollectiveOp};
use crate::error::Result;
use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;

/// Key of a step's classes: the collective as the lowerer keys its plans, and the step's class
/// (steps of one class move identical transfers).
type StepKey = (u32, CollectiveOp, Algorithm, u64, u32);

/// One class of two or more groups of transfers. A group is a connected component of the step's
/// transfers by shared links (one transfer when its route shares no link with another's; a
/// striped ring's rank sends its NVLink share and its network share over the same NVLink hops: a
/// group of two); the groups of a class have the same shape and share no link. The representative
/// group runs as flows, the others are its images (shadows).
#[derive(Debug)]
struct Class {
    /// The representative group's transfers (indices in the step, in step order).
    reps: Vec<u32>,
    /// The other groups' transfers, group by group: image g's member m at `g * reps.len() + m`.
    shadows: Vec<u32>,
    /// The id of its routes (equal ids: the same routes, group by group).
    id: u32,
    /// Its footprint: every link of its groups' routes, once, with the number of the group's
    /// routes that cross it.
    links: Vec<(u32, u32)>,
    /// Per member of a group: steps whose shadows of it arrived (their bytes are added to the
    /// links at the end).
    arrived: Vec<std::cell::Cell<u64>>,
}

impl Class {
    fn images(&self) -> usize {
        self.shadows.len() / self.reps.len()
    }
}

/// A step's transfers with their routes: those run as plain flows, and the classes.
#[derive(Debug)]
pub(super) struct StepClasses {
    xfers: Vec<Xfer>,
    routes: Vec<u32>,
    singles: Vec<u32>,
    classes: Vec<Class>,
}

/// A class of one running step.
#[derive(Debug)]
struct Running {
    collective: u32,
    step: u32,
    classes: Rc<StepClasses>,
    class: u32,
    /// Per member of the representative group: its pending slot, its fluid flow while it moves
    /// with its shadows live, and whether it arrived.
    slots: Vec<u32>,
    flows: Vec<Option<FlowId>>,
    arrived: Vec<bool>,
    /// Members still to arrive.
    left: u32,
    /// Its shadows are live (its footprint is marked): set when its first member moves.
    live: bool,
}

/// The engine's state of collective shadows.
#[derive(Debug, Default)]
pub(super) struct Shadows {
    enabled: bool,
    memo: HashMap<StepKey, Option<Rc<StepClasses>>>,
    /// Ids of classes' route lists (representative group's routes first).
    ids: HashMap<Vec<u32>, u32>,
    /// Running classes by key, and the key and member index of each representative's pending
    /// slot.
    running: HashMap<u32, Running>,
    member: HashMap<u32, (u32, u32)>,
    next_key: u32,
    /// Keys of the live classes.
    live: Vec<u32>,
    /// Per class id: live classes of it. Per link: 1 + the id whose live classes' footprint holds
    /// it, or 0 (footprints of two ids that share a link are never live together).
    live_count: Vec<u32>,
    owner: Vec<u32>,
    /// Scratch: per link, the epoch it was last seen in and the transfer that crossed it then
    /// (grouping a step's transfers by shared links).
    stamp: Vec<u32>,
    holder: Vec<u32>,
    epoch: u32,
    /// Transfers that arrived as shadows, and times a class's shadows were turned into flows
    /// (live ones, or ones whose representative found other traffic as it began to move).
    pub shadowed: u64,
    pub unshadowed: u64,
}

impl Shadows {
    /// A live class of `class`'s id is no longer live.
    fn left(&mut self, class: &Class) {
        self.live_count[class.id as usize] -= 1;
        if self.live_count[class.id as usize] == 0 {
            for &(l, _) in &class.links {
                self.owner[l as usize] = 0;
            }
        }
    }

    /// Whether live shadows are on link `l`: no collective may reserve it (its timing would leave
    /// them out), so reserving treats it as held by another collective.
    pub(super) fn is_marked(&self, l: u32) -> bool {
        self.owner.get(l as usize).is_some_and(|&o| o > 0)
    }
}

/// A collective whose converted flows [`Engine::reshadow`] turns back into a live class: its
/// slot, its step, the step's classes, the class, and its flows on the representative routes.
type Partner = (u32, u32, Rc<StepClasses>, usize, Vec<FlowId>);

/// Union-find root of `i`, halving paths.
fn root(parent: &mut [u32], mut i: u32) -> u32 {
    while parent[i as usize] != i {
        parent[i as usize] = parent[parent[i as usize] as usize];
        i = parent[i as usize];
    }
    i
}

impl Engine<'_> {
    /// Enables shadows unless flows are recorded, asked for one by one, or a left-out replica's
    /// images are shadowed (`mirror.rs` counts the traffic on its links flow by flow).
    pub(super) fn shadow_setup(&mut self) {
        let o = self.options;
        let n = self.machine.links.len();
        let s = &mut self.shadows;
        s.enabled = !(o.record_flows || o.collective_flows || self.mirror.enabled());
        if s.enabled {
            s.owner = vec![0; n];
            s.stamp = vec![0; n];
            s.holder = vec![0; n];
        }
    }

    /// Runs a collective's current step by flows with shadows; false (nothing started) when
    /// shadows are off or the step has no class of two or more groups.
    pub(super) fn start_step_shadowed(&mut self, slot: u32) -> Result<bool> {
        if !self.shadows.enabled {
            return Ok(false);
        }
        let step = self.collectives[slot as usize].step;
        let Some(classes) = self.step_classes(slot, step)? else { return Ok(false) };
        self.collectives[slot as usize].outstanding = classes.xfers.len() as u32;
        for &i in &classes.singles {
            self.start_flow_on(Owner::Collective(slot), classes.xfers[i as usize], step, classes.routes[i as usize]);
        }
        for (c, class) in classes.classes.iter().enumerate() {
            let key = self.shadows.next_key;
            self.shadows.next_key = key.wrapping_add(1);
            let mut slots = Vec::with_capacity(class.reps.len());
            for (m, &i) in class.reps.iter().enumerate() {
                let (x, route) = (classes.xfers[i as usize], classes.routes[i as usize]);
                let rep = self.start_flow_on(Owner::Collective(slot), x, step, route);
                self.shadows.member.insert(rep, (key, m as u32));
                slots.push(rep);
            }
            self.flows_created += class.shadows.len() as u64;
            let k = slots.len();
            let running = Running {
                collective: slot,
                step,
                classes: classes.clone(),
                class: c as u32,
                slots,
                flows: vec![None; k],
                arrived: vec![false; k],
                left: k as u32,
                live: false,
            };
            self.shadows.running.insert(key, running);
        }
        Ok(true)
    }

    /// The classes of a collective's step (found once per collective and step class).
    fn step_classes(&mut self, slot: u32, step: u32) -> Result<Option<Rc<StepClasses>>> {
        let run = &self.collectives[slot as usize];
        let crate::dag::Work::Collective { group, op, algorithm, bytes } = self.dag.task(run.task).work else {
            unreachable!("a collective slot runs a collective task")
        };
        let key = (group, op, algorithm, bytes, run.plan.step_class(step));
        if let Some(m) = self.shadows.memo.get(&key) {
            return Ok(m.clone());
        }
        self.load_step(slot, step);
        let xfers = self.step_scratch.clone();
        let routes = self.routes_of(&xfers)?;
        let found = self.classify(&xfers, &routes);
        let value = found.map(|(singles, classes)| Rc::new(StepClasses { xfers, routes, singles, classes }));
        self.shadows.memo.insert(key, value.clone());
        Ok(value)
    }

    /// Splits a step's transfers into groups (connected by shared links), and those into plain
    /// transfers and classes of groups of one shape: the same transfers (bytes, latency, rate
    /// cap) over routes of the same link capacities, sharing links the same way. None if no class
    /// has two groups.
    fn classify(&mut self, xfers: &[Xfer], routes: &[u32]) -> Option<(Vec<u32>, Vec<Class>)> {
        let s = &mut self.shadows;
        s.epoch = s.epoch.wrapping_add(1);
        if s.epoch == 0 {
            s.stamp.iter_mut().for_each(|m| *m = 0);
            s.epoch = 1;
        }
        let epoch = s.epoch;
        // Transfers that move bytes over links, joined where their routes share one.
        let moving = |i: usize| xfers[i].bytes > 0 && !self.routes[routes[i] as usize].links.is_empty();
        let mut parent: Vec<u32> = (0..xfers.len() as u32).collect();
        let mut singles = Vec::new();
        for (i, &r) in routes.iter().enumerate() {
            if !moving(i) {
                singles.push(i as u32);
                continue;
            }
            for &l in &self.routes[r as usize].links {
                let l = l as usize;
                if s.stamp[l] == epoch {
                    let (a, b) = (root(&mut parent, i as u32), root(&mut parent, s.holder[l]));
                    parent[a.max(b) as usize] = a.min(b);
                } else {
                    s.stamp[l] = epoch;
                    s.holder[l] = i as u32;
                }
            }
        }
        // Groups in order of their first transfer, members in step order.
        let mut group_of: HashMap<u32, usize> = HashMap::default();
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for i in 0..xfers.len() as u32 {
            if !moving(i as usize) {
                continue;
            }
            let g = *group_of.entry(root(&mut parent, i)).or_insert(groups.len());
            if g == groups.len() {
                groups.push(Vec::new());
            }
            groups[g].push(i);
        }
        // Shape of a group: per member its bytes, latency, cap and route length, per link its
        // capacity and where in the group it first appeared.
        let mut by_shape: HashMap<Vec<u64>, usize> = HashMap::default();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut seen: HashMap<u32, u64> = HashMap::default();
        for (g, group) in groups.iter().enumerate() {
            seen.clear();
            let mut shape = Vec::new();
            for &i in group {
                let (x, r) = (xfers[i as usize], routes[i as usize]);
                let cap = self.route_caps.get(self.machine, &self.routes, r, x.bytes).min(x.cap);
                let route = &self.routes[r as usize];
                shape.extend([x.bytes, x.latency(route), cap.to_bits(), route.links.len() as u64]);
                for &l in &route.links {
                    let next = seen.len() as u64;
                    let first = *seen.entry(l).or_insert(next);
                    shape.extend([self.link_capacity[l as usize].to_bits(), first]);
                }
            }
            let next = members.len();
            let k = *by_shape.entry(shape).or_insert(next);
            if k == next {
                members.push(Vec::new());
            }
            members[k].push(g);
        }
        let mut classes = Vec::new();
        for m in members {
            if m.len() < 2 {
                singles.extend(m.iter().flat_map(|&g| groups[g].iter().copied()));
                continue;
            }
            let route_list: Vec<u32> = m.iter().flat_map(|&g| groups[g].iter().map(|&i| routes[i as usize])).collect();
            let rep = &groups[m[0]];
            let mut links = Vec::new();
            for &g in &m {
                seen.clear();
                for &i in &groups[g] {
                    for &l in &self.routes[routes[i as usize] as usize].links {
                        let next = links.len() as u64;
                        let at = *seen.entry(l).or_insert(next) as usize;
                        if at == links.len() {
                            links.push((l, 0));
                        }
                        links[at].1 += 1;
                    }
                }
            }
            let next = self.shadows.ids.len() as u32;
            let id = *self.shadows.ids.entry(route_list).or_insert(next);
            if id == next {
                self.shadows.live_count.push(0);
            }
            classes.push(Class {
                reps: rep.clone(),
                shadows: m[1..].iter().flat_map(|&g| groups[g].iter().copied()).collect(),
                id,
                links,
                arrived: rep.iter().map(|_| std::cell::Cell::new(0)).collect(),
            });
        }
        if classes.is_empty() {
            return None;
        }
        singles.sort_unstable();
        Some((singles, classes))
    }

    /// A flow is about to move (`activate`): a representative group's first member makes its
    /// shadows live if its footprint carries only live classes of the same routes (true: the
    /// caller marks them once it moves), else they become flows of their own; a later member of a
    /// live class moves with it (true); any other flow turns the live shadows on its links into
    /// flows first.
    pub(super) fn shadow_before_move(&mut self, slot: u32) -> Result<bool> {
        if !self.shadows.enabled {
            return Ok(false);
        }
        if let Some(&(key, _)) = self.shadows.member.get(&slot) {
            let r = &self.shadows.running[&key];
            if r.live {
                // By the invariant its footprint carries only live classes of its routes.
                return Ok(true);
            }
            // The checks below read the net as a full run holds it at this instant.
            self.flush_bundles();
            let r = &self.shadows.running[&key];
            // The first member to move (a class turned into flows is no longer running).
            let class = &r.classes.classes[r.class as usize];
            // Classes of the same routes live: by the invariant the footprint carries only them.
            let quiet = self.shadows.live_count[class.id as usize] > 0
                || class.links.iter().all(|&(l, _)| {
                    self.reserved_by[l as usize] == 0
                        && self.shadows.owner[l as usize] == 0
                        && self.net.flows_on(l) == 0
                });
            // Its footprint carries only the flows of classes like this one turned into flows
            // (each shadow's image in its representative's state): they become shadows again.
            if quiet || self.reshadow(key)? {
                return Ok(true);
            }
            self.shadows_to_pending(key);
        }
        if !self.shadows.live.is_empty() {
            // A copy: turning shadows into flows may insert one on this very route.
            let links = self.routes[self.pending[slot as usize].route as usize].links.clone();
            self.unshadow_links(&links);
        }
        Ok(false)
    }

    /// The flow of collective `c`'s step `step` on `route`, if one moves there.
    fn flow_on_route(&self, c: u32, step: u32, route: u32) -> Option<FlowId> {
        self.net.flows_of(self.routes[route as usize].links[0]).iter().copied().find(|&f| {
            let p = &self.pending[self.flow_slot[f as usize] as usize];
            p.route == route && p.step == step && matches!(p.owner, Owner::Collective(o) if o == c)
        })
    }

    /// Before running class `key`'s first member moves: if every link of its footprint carries
    /// the flows of other collectives' steps whose classes have the same routes (per collective,
    /// one flow on each route of the representative group, and on each shadow's route one in the
    /// state of that collective's flow on the matching representative route), nothing else, no
    /// live shadow and no reservation, those classes are still each other's images: the flows on
    /// the shadows' routes become shadows again (live) and the class can go live beside them.
    fn reshadow(&mut self, key: u32) -> Result<bool> {
        let r = &self.shadows.running[&key];
        let (classes, ci) = (r.classes.clone(), r.class as usize);
        let class = &classes.classes[ci];
        let k = class.reps.len();
        let rep_routes: Vec<u32> = class.reps.iter().map(|&i| classes.routes[i as usize]).collect();
        if (1..k).any(|m| rep_routes[..m].contains(&rep_routes[m])) {
            return Ok(false); // two members on one route: their flows cannot be told apart
        }
        let rep_first = self.routes[rep_routes[0] as usize].links[0];
        let on_first: Vec<FlowId> = self
            .net
            .flows_of(rep_first)
            .iter()
            .copied()
            .filter(|&f| self.pending[self.flow_slot[f as usize] as usize].route == rep_routes[0])
            .collect();
        let n = on_first.len();
        // Bundled flows are not told apart by route here: those classes stay flows.
        let bundled = |l: u32| self.net.flows_of(l).iter().any(|&f| self.net.members(f) > 1);
        if n == 0
            || class.links.iter().any(|&(l, _)| bundled(l))
            || class.links.iter().any(|&(l, mult)| {
                self.reserved_by[l as usize] != 0
                    || self.shadows.is_marked(l)
                    || self.net.flows_on(l) != n * mult as usize
            })
        {
            return Ok(false);
        }
        // The collectives' flows on the representative group's routes, with their steps' classes.
        let mut partners: Vec<Partner> = Vec::with_capacity(n);
        for f in on_first {
            let p = self.pending[self.flow_slot[f as usize] as usize];
            let Owner::Collective(c) = p.owner else { return Ok(false) };
            let run = &self.collectives[c as usize];
            if run.partial.is_some() || run.reservation.is_some() || run.step != p.step {
                return Ok(false);
            }
            if partners.iter().any(|&(pc, ..)| pc == c) {
                return Ok(false);
            }
            let Some(theirs) = self.step_classes(c, p.step)? else { return Ok(false) };
            let Some(tc) = theirs.classes.iter().position(|x| x.id == class.id) else { return Ok(false) };
            let mut flows = Vec::with_capacity(k);
            for &route in &rep_routes {
                let Some(g) = self.flow_on_route(c, p.step, route) else { return Ok(false) };
                flows.push(g);
            }
            partners.push((c, p.step, theirs, tc, flows));
        }
        let mut absorbed = Vec::new();
        for (c, step, _, _, flows) in &partners {
            for (j, &i) in class.shadows.iter().enumerate() {
                let route = classes.routes[i as usize];
                let Some(g) = self.flow_on_route(*c, *step, route) else { return Ok(false) };
                if self.net.state(g) != self.net.state(flows[j % k]) {
                    return Ok(false);
                }
                absorbed.push(g);
            }
        }
        for g in absorbed {
            let gs = self.flow_slot[g as usize];
            self.net.remove(g);
            self.free_pending.push(gs);
        }
        for (c, step, theirs, tc, flows) in partners {
            let key = self.shadows.next_key;
            self.shadows.next_key = key.wrapping_add(1);
            let slots: Vec<u32> = flows.iter().map(|&f| self.flow_slot[f as usize]).collect();
            for (m, &s) in slots.iter().enumerate() {
                self.shadows.member.insert(s, (key, m as u32));
            }
            let running = Running {
                collective: c,
                step,
                classes: theirs,
                class: tc as u32,
                slots,
                flows: flows.into_iter().map(Some).collect(),
                arrived: vec![false; k],
                left: k as u32,
                live: false,
            };
            self.shadows.running.insert(key, running);
            self.go_live(key);
        }
        Ok(true)
    }

    /// A running class's shadows go live: its footprint is marked.
    fn go_live(&mut self, key: u32) {
        let s = &mut self.shadows;
        let r = s.running.get_mut(&key).expect("a running class");
        r.live = true;
        let class = &r.classes.classes[r.class as usize];
        s.live_count[class.id as usize] += 1;
        if s.live_count[class.id as usize] == 1 {
            for &(l, _) in &class.links {
                s.owner[l as usize] = class.id + 1;
            }
        }
        s.live.push(key);
    }

    /// A representative whose shadows are live now moves as fluid flow `f`.
    pub(super) fn shadow_moving(&mut self, slot: u32, f: FlowId) {
        let (key, m) = self.shadows.member[&slot];
        let r = self.shadows.running.get_mut(&key).expect("a running class");
        r.flows[m as usize] = Some(f);
        if !r.live {
            self.go_live(key);
        }
    }

    /// A class whose first member may not go live: its shadows become flows starting when their
    /// representatives do, as they would in a full run (same start, latency passed then).
    fn shadows_to_pending(&mut self, key: u32) {
        let r = self.shadows.running.remove(&key).expect("a running class");
        self.shadows.unshadowed += 1;
        let class = &r.classes.classes[r.class as usize];
        let k = class.reps.len();
        for (m, &slot) in r.slots.iter().enumerate() {
            self.shadows.member.remove(&slot);
            let start = self.pending[slot as usize].start;
            for &i in class.shadows.iter().skip(m).step_by(k) {
                let ps = self.shadow_pending(&r, i, start);
                self.push(start, EventKind::FlowActivate(ps));
            }
        }
    }

    /// The pending flow of shadow `i` (its index in the step) of a running class, moving from
    /// `start`; returns its slot.
    fn shadow_pending(&mut self, r: &Running, i: u32, start: crate::units::Nanos) -> u32 {
        let (x, route) = (r.classes.xfers[i as usize], r.classes.routes[i as usize]);
        let p = Pending {
            owner: Owner::Collective(r.collective),
            route,
            bytes: x.bytes,
            src: x.src,
            dst: x.dst,
            step: r.step,
            start,
            cap: x.cap,
        };
        let ps = self.new_pending(p);
        self.flows_created -= 1; // counted when its step started
        ps
    }

    /// Other traffic is about to reach `links`: every live class whose footprint holds one of them
    /// becomes the flows a full run holds now.
    fn unshadow_links(&mut self, links: &[u32]) {
        if self.shadows.live.is_empty() {
            return;
        }
        for &l in links {
            if self.shadows.owner[l as usize] == 0 {
                continue;
            }
            let id = self.shadows.owner[l as usize] - 1;
            let mut hit: Vec<u32> = Vec::new();
            let Shadows { live, running, .. } = &mut self.shadows;
            live.retain(|&key| {
                let r = &running[&key];
                let same = r.classes.classes[r.class as usize].id == id;
                if same {
                    hit.push(key);
                }
                !same
            });
            hit.sort_unstable();
            for key in hit {
                self.live_to_flows(key);
            }
        }
    }

    /// A live class's shadows become the flows of a full run (see the module comment): those of a
    /// moving member in its state (their links are marked for the next solve, which leaves an
    /// unchanged component as it is), those of a member still waiting out its latency pending
    /// with it, none for a member that arrived.
    fn live_to_flows(&mut self, key: u32) {
        self.shadows.unshadowed += 1;
        let r = self.shadows.running.remove(&key).expect("a live class");
        let class = &r.classes.classes[r.class as usize];
        self.shadows.left(class);
        let k = class.reps.len();
        for (m, &slot) in r.slots.iter().enumerate() {
            if r.arrived[m] {
                continue;
            }
            self.shadows.member.remove(&slot);
            let start = self.pending[slot as usize].start;
            let images = class.shadows.iter().skip(m).step_by(k);
            match r.flows[m] {
                Some(f) => {
                    let state = self.net.state(f);
                    for &i in images {
                        let ps = self.shadow_pending(&r, i, start);
                        self.flow_in_state(r.classes.routes[i as usize], state, ps);
                    }
                }
                None => {
                    for &i in images {
                        let ps = self.shadow_pending(&r, i, start);
                        self.push(start, EventKind::FlowActivate(ps));
                    }
                }
            }
        }
    }

    /// Adds the bytes of every shadow that arrived to its links (whole bytes: the sums are exact in
    /// any order, as [`Engine::account_steps`]'s).
    pub(super) fn shadow_bytes(&mut self) {
        for classes in self.shadows.memo.values().flatten() {
            for class in &classes.classes {
                let k = class.reps.len();
                for (j, &i) in class.shadows.iter().enumerate() {
                    let arrived = class.arrived[j % k].get();
                    if arrived == 0 {
                        continue;
                    }
                    let (x, route) = (classes.xfers[i as usize], classes.routes[i as usize]);
                    for &l in &self.routes[route as usize].links {
                        self.link_bytes[l as usize] += (x.bytes * arrived) as f64;
                    }
                }
            }
        }
    }

    /// A representative arrived (before `flow_finished` counts it): its live shadows arrive with
    /// it; the class is done once every member has.
    pub(super) fn shadows_arrive(&mut self, slot: u32) {
        if self.shadows.member.is_empty() {
            return;
        }
        let Some((key, m)) = self.shadows.member.remove(&slot) else { return };
        let s = &mut self.shadows;
        let r = s.running.get_mut(&key).expect("a running class");
        debug_assert!(r.live, "a member moves only while its class is live");
        r.arrived[m as usize] = true;
        r.flows[m as usize] = None;
        r.left -= 1;
        let class = &r.classes.classes[r.class as usize];
        let arrived = &class.arrived[m as usize];
        arrived.set(arrived.get() + 1);
        let n = class.images() as u32;
        s.shadowed += n as u64;
        self.collectives[r.collective as usize].outstanding -= n;
        if r.left == 0 {
            let r = s.running.remove(&key).expect("a running class");
            s.left(&r.classes.classes[r.class as usize]);
            s.live.retain(|&k| k != key);
        }
    }
}
