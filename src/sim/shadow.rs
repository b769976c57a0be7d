//! Symmetry classes of a collective step's transfers. A step run by flows (a ring of 1,024 ranks:
//! 1,024 transfers) often moves identical transfers over routes of the same shape: the same bytes,
//! latency and rate cap, over links of the same capacities in the same order. When those routes
//! share no link with each other, and the links carry nothing else, each transfer is alone in a
//! component of the same shape, and max-min rates are a function of a component's shape (a flow's
//! progress, of its rate history: [`super::fluid`]). So the engine runs one transfer of each such
//! class as a flow (the *representative*) and finishes the others with it (its *shadows*).
//!
//! Two collectives over the same ranks (ZeRO-3's parameter all-gather beside its gradient
//! reduce-scatter, both rings in the same order) put, at every ring position, one transfer of each
//! on the same route: their classes cover the same routes, so the representatives share a route
//! and each shadow's links carry the image of that shared component. Contention stays modelled:
//! the representatives share their links as the whole ring's transfers would.
//!
//! Invariant: a class's shadows are *live* (not flows) only while every link of the class's
//! routes (the *footprint*) carries nothing but the representatives of live classes with the very
//! same routes: checked when the representative starts moving, and kept by turning the shadows
//! into the flows a full run holds at that instant (their representative's state, copied) the
//! moment other traffic is about to reach the footprint (a flow activating); a collective does
//! not reserve links of a footprint (reserving treats them as held by another collective, so its
//! transfers there run as flows). Results are bit-identical to running every transfer as its own flow
//! ([`super::Options::collective_flows`], tested in `tests/collective_shadows.rs`).

use super::{Engine, EventKind, FlowId, Owner, Pending, Xfer};
use crate::collective::{Algorithm, CollectiveOp};
use crate::error::Result;
use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;

/// Key of a step's classes: the collective as the lowerer keys its plans, and the step's class
/// (steps of one class move identical transfers).
type StepKey = (u32, CollectiveOp, Algorithm, u64, u32);

/// One class of two or more transfers: the representative's index in the step, its shadows'
/// indices, the id of its routes (equal ids: the same routes), and its footprint.
#[derive(Debug)]
struct Class {
    rep: u32,
    shadows: Vec<u32>,
    id: u32,
    links: Vec<u32>,
}

/// A step's transfers with their routes: those run as plain flows, and the classes.
#[derive(Debug)]
pub(super) struct StepClasses {
    xfers: Vec<Xfer>,
    routes: Vec<u32>,
    singles: Vec<u32>,
    classes: Vec<Class>,
    /// Per class: steps whose shadows arrived (their bytes are added to the links at the end).
    arrived: Vec<std::cell::Cell<u64>>,
}

/// A class of one running step: its representative's pending slot keys it.
#[derive(Debug)]
struct Running {
    collective: u32,
    step: u32,
    classes: Rc<StepClasses>,
    class: u32,
    /// The representative's fluid flow while its shadows are live.
    flow: Option<FlowId>,
}

/// The engine's state of collective shadows.
#[derive(Debug, Default)]
pub(super) struct Shadows {
    enabled: bool,
    memo: HashMap<StepKey, Option<Rc<StepClasses>>>,
    /// Ids of classes' route lists (representative's route first).
    ids: HashMap<Vec<u32>, u32>,
    running: HashMap<u32, Running>,
    /// Representatives' pending slots of the live classes.
    live: Vec<u32>,
    /// Per class id: live classes of it. Per link: 1 + the id whose live classes' footprint holds
    /// it, or 0 (footprints of two ids that share a link are never live together).
    live_count: Vec<u32>,
    owner: Vec<u32>,
    /// Scratch: per link, the epoch it was last seen in (route disjointness).
    stamp: Vec<u32>,
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
            for &l in &class.links {
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
        }
    }

    /// Runs a collective's current step by flows with shadows; false (nothing started) when
    /// shadows are off or the step has no class of two or more transfers.
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
            let (x, route) = (classes.xfers[class.rep as usize], classes.routes[class.rep as usize]);
            let rep = self.start_flow_on(Owner::Collective(slot), x, step, route);
            self.flows_created += class.shadows.len() as u64;
            let running = Running { collective: slot, step, classes: classes.clone(), class: c as u32, flow: None };
            self.shadows.running.insert(rep, running);
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
        let value = found.map(|(singles, classes)| {
            let arrived = classes.iter().map(|_| std::cell::Cell::new(0)).collect();
            Rc::new(StepClasses { xfers, routes, singles, classes, arrived })
        });
        self.shadows.memo.insert(key, value.clone());
        Ok(value)
    }

    /// Splits a step's transfers into plain ones and classes of identical transfers over routes of
    /// one shape; None if the routes share a link or no class has two members.
    fn classify(&mut self, xfers: &[Xfer], routes: &[u32]) -> Option<(Vec<u32>, Vec<Class>)> {
        let s = &mut self.shadows;
        s.epoch = s.epoch.wrapping_add(1);
        if s.epoch == 0 {
            s.stamp.iter_mut().for_each(|m| *m = 0);
            s.epoch = 1;
        }
        let mut by_shape: HashMap<Vec<u64>, usize> = HashMap::default();
        let mut members: Vec<Vec<u32>> = Vec::new();
        let mut singles = Vec::new();
        for (i, (x, &r)) in xfers.iter().zip(routes).enumerate() {
            let route = &self.routes[r as usize];
            for &l in &route.links {
                if self.shadows.stamp[l as usize] == self.shadows.epoch {
                    return None;
                }
                self.shadows.stamp[l as usize] = self.shadows.epoch;
            }
            if x.bytes == 0 || route.links.is_empty() {
                singles.push(i as u32);
                continue;
            }
            let cap = self.route_caps.get(self.machine, &self.routes, r, x.bytes).min(x.cap);
            let route = &self.routes[r as usize];
            let mut shape = vec![x.bytes, x.latency(route), cap.to_bits()];
            shape.extend(route.links.iter().map(|&l| self.link_capacity[l as usize].to_bits()));
            let next = members.len();
            let k = *by_shape.entry(shape).or_insert(next);
            if k == next {
                members.push(Vec::new());
            }
            members[k].push(i as u32);
        }
        let mut classes = Vec::new();
        for m in members {
            if m.len() < 2 {
                singles.extend(m);
                continue;
            }
            let route_list: Vec<u32> = m.iter().map(|&i| routes[i as usize]).collect();
            let links = route_list.iter().flat_map(|&r| self.routes[r as usize].links.iter().copied()).collect();
            let next = self.shadows.ids.len() as u32;
            let id = *self.shadows.ids.entry(route_list).or_insert(next);
            if id == next {
                self.shadows.live_count.push(0);
            }
            classes.push(Class { rep: m[0], shadows: m[1..].to_vec(), id, links });
        }
        if classes.is_empty() {
            return None;
        }
        singles.sort_unstable();
        Some((singles, classes))
    }

    /// A flow is about to move (`activate`): a representative's shadows go live if its footprint
    /// carries only live classes of the same routes (true: the caller marks them once it moves),
    /// else they become flows of their own; any other flow turns the live shadows on its links
    /// into flows first.
    pub(super) fn shadow_before_move(&mut self, slot: u32) -> Result<bool> {
        if !self.shadows.enabled {
            return Ok(false);
        }
        let quiet = self.shadows.running.get(&slot).map(|r| {
            let class = &r.classes.classes[r.class as usize];
            // Classes of the same routes live: by the invariant the footprint carries only them.
            self.shadows.live_count[class.id as usize] > 0
                || class.links.iter().all(|&l| {
                    self.reserved_by[l as usize] == 0
                        && self.shadows.owner[l as usize] == 0
                        && self.net.flows_on(l) == 0
                })
        });
        // Its footprint carries only the flows of classes like this one turned into flows (each
        // shadow's image in its representative's state): they become shadows again.
        let quiet = match quiet {
            Some(false) => Some(self.reshadow(slot)?),
            q => q,
        };
        match quiet {
            Some(true) => return Ok(true),
            Some(false) => self.shadows_to_pending(slot),
            None => {}
        }
        if !self.shadows.live.is_empty() {
            // A copy: turning shadows into flows may insert one on this very route.
            let links = self.routes[self.pending[slot as usize].route as usize].links.clone();
            self.unshadow_links(&links);
        }
        Ok(false)
    }

    /// Before representative `slot` moves: if every link of its class's footprint carries the same
    /// k flows of other collectives' steps (each the flow of a class with the same routes: on the
    /// representative's route one per collective, on each shadow's route one per collective in the
    /// state of that collective's flow on the representative's route), nothing else, no live
    /// shadow and no reservation, those classes are still each other's images: the flows on the
    /// shadows' routes become shadows again (live) and the class can go live beside them.
    fn reshadow(&mut self, slot: u32) -> Result<bool> {
        let r = &self.shadows.running[&slot];
        let (classes, ci) = (r.classes.clone(), r.class as usize);
        let class = &classes.classes[ci];
        let rep_route = classes.routes[class.rep as usize];
        let rep_first = self.routes[rep_route as usize].links[0];
        let k = self.net.flows_on(rep_first);
        if k == 0
            || class
                .links
                .iter()
                .any(|&l| self.reserved_by[l as usize] != 0 || self.shadows.is_marked(l) || self.net.flows_on(l) != k)
        {
            return Ok(false);
        }
        // The collectives' flows on the representative's route, with their steps' classes.
        let mut partners = Vec::with_capacity(k);
        for f in self.net.flows_of(rep_first).to_vec() {
            let ps = self.flow_slot[f as usize];
            let p = self.pending[ps as usize];
            let Owner::Collective(c) = p.owner else { return Ok(false) };
            let run = &self.collectives[c as usize];
            if p.route != rep_route || run.partial.is_some() || run.reservation.is_some() || run.step != p.step {
                return Ok(false);
            }
            let Some(theirs) = self.step_classes(c, p.step)? else { return Ok(false) };
            let Some(tc) = theirs.classes.iter().position(|x| x.id == class.id) else { return Ok(false) };
            partners.push((f, ps, c, theirs, tc));
        }
        let mut absorbed = Vec::new();
        for &i in &class.shadows {
            let route = classes.routes[i as usize];
            for &g in self.net.flows_of(self.routes[route as usize].links[0]) {
                let gs = self.flow_slot[g as usize];
                let gp = self.pending[gs as usize];
                let Owner::Collective(c) = gp.owner else { return Ok(false) };
                let Some(&(f, ps, ..)) = partners.iter().find(|p| p.2 == c) else { return Ok(false) };
                if gp.route != route
                    || gp.step != self.pending[ps as usize].step
                    || self.net.state(g) != self.net.state(f)
                {
                    return Ok(false);
                }
                absorbed.push((g, gs));
            }
        }
        for (g, gs) in absorbed {
            self.net.remove(g);
            self.free_pending.push(gs);
        }
        for (f, ps, c, theirs, tc) in partners {
            let step = self.pending[ps as usize].step;
            self.shadows
                .running
                .insert(ps, Running { collective: c, step, classes: theirs, class: tc as u32, flow: None });
            self.shadow_moving(ps, f);
        }
        Ok(true)
    }

    /// A representative whose shadows went live now moves as fluid flow `f`.
    pub(super) fn shadow_moving(&mut self, slot: u32, f: FlowId) {
        let r = self.shadows.running.get_mut(&slot).expect("a representative");
        r.flow = Some(f);
        let (classes, ci) = (r.classes.clone(), r.class as usize);
        let class = &classes.classes[ci];
        let s = &mut self.shadows;
        s.live_count[class.id as usize] += 1;
        if s.live_count[class.id as usize] == 1 {
            for &l in &class.links {
                s.owner[l as usize] = class.id + 1;
            }
        }
        s.live.push(slot);
    }

    /// A representative that may not go live: its shadows become flows starting now, as they would
    /// in a full run (same start, latency passed at this instant).
    fn shadows_to_pending(&mut self, slot: u32) {
        let r = self.shadows.running.remove(&slot).expect("a representative");
        self.shadows.unshadowed += 1;
        let start = self.pending[slot as usize].start;
        for &i in &r.classes.classes[r.class as usize].shadows {
            let ps = self.shadow_pending(&r, i, start);
            self.push(start, EventKind::FlowActivate(ps));
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
            live.retain(|&rep| {
                let r = &running[&rep];
                let same = r.classes.classes[r.class as usize].id == id;
                if same {
                    hit.push(rep);
                }
                !same
            });
            hit.sort_unstable();
            for rep in hit {
                self.live_to_flows(rep);
            }
        }
    }

    /// A live class's shadows become flows in their representative's state (see the module
    /// comment); their links are marked for the next solve, which leaves an unchanged component
    /// as it is.
    fn live_to_flows(&mut self, rep: u32) {
        self.shadows.unshadowed += 1;
        let r = self.shadows.running.remove(&rep).expect("a live class");
        let class = &r.classes.classes[r.class as usize];
        self.shadows.left(class);
        let orig = self.pending[rep as usize];
        let state = self.net.state(r.flow.expect("live"));
        for &i in &class.shadows {
            let ps = self.shadow_pending(&r, i, orig.start);
            self.flow_in_state(r.classes.routes[i as usize], state, ps);
        }
    }

    /// Adds the bytes of every shadow that arrived to its links (whole bytes: the sums are exact in
    /// any order, as [`Engine::account_steps`]'s).
    pub(super) fn shadow_bytes(&mut self) {
        for classes in self.shadows.memo.values().flatten() {
            for (class, arrived) in classes.classes.iter().zip(&classes.arrived) {
                if arrived.get() == 0 {
                    continue;
                }
                for &i in &class.shadows {
                    let (x, route) = (classes.xfers[i as usize], classes.routes[i as usize]);
                    for &l in &self.routes[route as usize].links {
                        self.link_bytes[l as usize] += (x.bytes * arrived.get()) as f64;
                    }
                }
            }
        }
    }

    /// A representative arrived (before `flow_finished` counts it): its live shadows arrive with it.
    pub(super) fn shadows_arrive(&mut self, slot: u32) {
        if self.shadows.running.is_empty() {
            return;
        }
        let Some(r) = self.shadows.running.remove(&slot) else { return };
        let class = &r.classes.classes[r.class as usize];
        self.shadows.left(class);
        self.shadows.live.retain(|&s| s != slot);
        let arrived = &r.classes.arrived[r.class as usize];
        arrived.set(arrived.get() + 1);
        let n = class.shadows.len() as u32;
        self.shadows.shadowed += n as u64;
        self.collectives[r.collective as usize].outstanding -= n;
    }
}
