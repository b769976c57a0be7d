//! Images of transfers. A reduced simulation of a parallel plan leaves DP replicas out but still
//! sends their pipeline transfers, so the network carries the full load (the DAG declares them as
//! images of the simulated replica's transfers: [`crate::dag::DagBuilder::add_images`]). Those
//! are most of a large plan's flows (GPT-3 175B on 1,024 GPUs: 15 of every 16 pipeline transfers).
//!
//! While the links of the originals and their images carry nothing else (no other flow moving, no
//! collective holding one), each copy of the machine holds a translated copy of the originals'
//! flows: same bytes, start, latency, caps and link capacities, link for link (checked once, before
//! the run, for every image: a one-to-one map per copy from the originals' links to its own, no link
//! shared between copies). Max-min rates are a function of a component's shape, and a flow's
//! progress of its rate history ([`super::fluid`]), so every image moves exactly as its original:
//! the engine runs the original alone and finishes its images with it (*shadows*). The moment other
//! traffic is about to reach any of those links (a flow activating, a collective trying to reserve),
//! every shadow becomes the flow a full run holds at that instant (its original's state, copied),
//! and images run as flows until no pipeline transfer and no other traffic is left on those links.
//! Results are bit-identical to running every image (tested against [`super::Options::image_flows`]).

use super::{Engine, EventKind, Owner, Pending, SHARED_ROUTE};
use crate::collective::{Latency, NO_RAIL};
use crate::dag::{TaskId, Work};
use crate::error::Result;
use crate::units::Nanos;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Role of a task that is not an original or an image.
const NONE: u32 = u32::MAX;

/// A moving original started while shadowing, with its shadows.
#[derive(Debug)]
struct Live {
    begun: Nanos,
    /// Its pending slot, and its fluid flow once its latency has passed.
    slot: u32,
    flow: Option<super::FlowId>,
    /// Image tasks with their routes.
    shadows: Vec<(TaskId, u32)>,
}

/// The engine's state of images (empty and off when the DAG declares none, or when an image is not
/// a translated copy of its original).
#[derive(Debug, Default)]
pub(super) struct Mirror {
    /// Per task: [`NONE`], 2 x group (an original) or 2 x group + 1 (an image).
    role: Vec<u32>,
    /// Per machine link: carried by an original or an image.
    link: Vec<bool>,
    /// Per route id: touches such a link.
    route: Vec<bool>,
    /// Shadowing now.
    on: bool,
    live: HashMap<u32, Live>,
    /// Flows of originals and images under way (pending or moving), other flows moving on the
    /// links of originals and images, and those links held by collectives.
    real: u32,
    foreign: u32,
    held: u32,
    /// Images finished as shadows, and times shadows were turned into flows.
    pub shadowed: u64,
    pub unshadowed: u64,
}

impl Mirror {
    /// Whether route `r` touches the links of originals or images.
    pub fn touches(&self, r: u32) -> bool {
        self.route.get(r as usize).copied().unwrap_or(false)
    }

    /// Whether images may be shadowed in this run (every image a translated copy).
    pub fn enabled(&self) -> bool {
        !self.link.is_empty()
    }

    /// Whether images are shadowed now.
    pub fn shadowing(&self) -> bool {
        self.on
    }

    /// Whether link `l` is one of them.
    pub fn is_link(&self, l: usize) -> bool {
        self.link.get(l).copied().unwrap_or(false)
    }

    /// Notes a route just interned (ids in order).
    pub fn add_route(&mut self, links: &[u32]) {
        if !self.link.is_empty() {
            let t = links.iter().any(|&l| self.link[l as usize]);
            self.route.push(t);
        }
    }

    /// A collective holds (or frees) a link.
    pub fn hold(&mut self, link: usize, was: bool, now: bool) {
        if was != now && self.is_link(link) {
            if now {
                self.held += 1;
            } else {
                self.held -= 1;
            }
        }
    }

    fn is_original(&self, t: TaskId) -> bool {
        self.role.get(t as usize).is_some_and(|&r| r != NONE && r % 2 == 0)
    }
}

impl Engine<'_> {
    /// Checks that every declared image is a translated copy of its original (see the module
    /// comment) and enables shadowing if all are; with [`super::Options::image_flows`] or
    /// flow records, or when any is not, every image runs as its own flow.
    pub(super) fn mirror_setup(&mut self) -> Result<()> {
        if self.options.record_flows || self.options.image_flows || self.dag.image_groups().next().is_none() {
            return Ok(());
        }
        let dag = self.dag;
        let n = dag.len();
        let mut role = vec![NONE; n];
        let copies = dag.image_groups().map(|(_, imgs)| imgs.len()).max().unwrap_or(0) as u32;
        let mut seen = vec![u32::MAX; copies as usize + 1];
        let ends = |t: TaskId| match dag.task(t).work {
            Work::Transfer { src, dst, bytes } => Some((src, dst, bytes)),
            _ => None,
        };
        // Roles; every original has each copy 1..=copies exactly once.
        for (g, (o, imgs)) in dag.image_groups().enumerate() {
            let g = g as u32;
            if role[o as usize] != NONE || imgs.len() as u32 != copies {
                return Ok(());
            }
            role[o as usize] = 2 * g;
            for &(i, c) in imgs {
                if role[i as usize] != NONE || c == 0 || c > copies || seen[c as usize] == g {
                    return Ok(());
                }
                seen[c as usize] = g;
                role[i as usize] = 2 * g + 1;
            }
        }
        // Links: 1 for originals, 2 + c for copy c; `pre` maps a copy's link back to the original's.
        let nlinks = self.machine.links.len();
        let mut owner = vec![0u32; nlinks];
        let mut pre = vec![u32::MAX; nlinks];
        let mut image_of: HashMap<(u32, u32), u32> = HashMap::default();
        let mut routes = Vec::new();
        for (o, _) in dag.image_groups() {
            let Some((src, dst, _)) = ends(o) else { return Ok(()) };
            let r = self.route(src, dst, NO_RAIL)?;
            for &l in &self.routes[r as usize].links {
                if owner[l as usize] > 1 {
                    return Ok(());
                }
                owner[l as usize] = 1;
            }
            routes.push(r);
        }
        let mut checked: HashSet<(u32, u32, u32, u64)> = HashSet::default();
        for ((o, imgs), &ro) in dag.image_groups().zip(&routes) {
            let Some((so, do_, bytes)) = ends(o) else { return Ok(()) };
            for &(i, c) in imgs {
                let Some((src, dst, b)) = ends(i) else { return Ok(()) };
                if b != bytes {
                    return Ok(());
                }
                let ri = self.route(src, dst, NO_RAIL)?;
                if !checked.insert((ro, ri, c, bytes)) {
                    continue;
                }
                let (a, z) = (&self.routes[ro as usize], &self.routes[ri as usize]);
                if a.links.len() != z.links.len() || a.latency_ns != z.latency_ns {
                    return Ok(());
                }
                for (&lo, &li) in a.links.iter().zip(&z.links) {
                    let (lo_, li_) = (lo as usize, li as usize);
                    let same_rate = self.link_capacity[lo_] == self.link_capacity[li_];
                    let mapped = *image_of.entry((c, lo)).or_insert(li) == li;
                    let own = owner[li_] == 0 || owner[li_] == 2 + c;
                    if !(same_rate && mapped && own && (pre[li_] == u32::MAX || pre[li_] == lo)) {
                        return Ok(());
                    }
                    owner[li_] = 2 + c;
                    pre[li_] = lo;
                }
                let (cap_o, cap_i) = (
                    self.route_caps.get(self.machine, &self.routes, ro, bytes),
                    self.route_caps.get(self.machine, &self.routes, ri, bytes),
                );
                if cap_o != cap_i {
                    return Ok(());
                }
                if self.machine.p2p_net_cap(so, do_) != self.machine.p2p_net_cap(src, dst) {
                    return Ok(());
                }
            }
        }
        let m = &mut self.mirror;
        m.role = role;
        m.link = owner.iter().map(|&o| o != 0).collect();
        m.route = self.routes.iter().map(|r| r.links.iter().any(|&l| owner[l as usize] != 0)).collect();
        // Links already held (none before the run starts, but keep the count honest).
        m.held = self.reserved_by.iter().enumerate().filter(|&(l, &h)| h != 0 && m.link[l]).count() as u32;
        Ok(())
    }

    /// Whether a flow is other traffic on the links of originals or images.
    fn foreign(&self, p: &Pending) -> bool {
        p.route != SHARED_ROUTE
            && self.mirror.touches(p.route)
            && match p.owner {
                Owner::Task(t) => self.mirror.role.get(t as usize).is_none_or(|&r| r == NONE),
                Owner::Collective(_) => true,
            }
    }

    /// Starts transfer task `t`: an image whose original moves from this instant on with nothing
    /// else on their links becomes its shadow; everything else becomes a flow.
    pub(super) fn begin_transfer(&mut self, t: TaskId, src: u32, dst: u32, bytes: u64) -> Result<()> {
        // A transfer task between nodes is a send/recv (a pipeline stage's activations).
        let cap = self.machine.p2p_net_cap(src, dst);
        let x = super::Xfer { src, dst, bytes, rail: NO_RAIL, latency: Latency::Route, cap };
        let role = self.mirror.role.get(t as usize).copied().unwrap_or(NONE);
        if role == NONE {
            return self.start_flow(Owner::Task(t), x, 0);
        }
        let m = &mut self.mirror;
        if role % 2 == 0 {
            if !m.on && m.real == 0 && m.foreign == 0 && m.held == 0 {
                m.on = true;
            }
            let route = self.route(src, dst, NO_RAIL)?;
            let slot = self.start_flow_on(Owner::Task(t), x, 0, route);
            self.mirror.real += 1;
            if self.mirror.on {
                let live = Live { begun: self.now, slot, flow: None, shadows: Vec::new() };
                self.mirror.live.insert(role / 2, live);
            }
            return Ok(());
        }
        if m.on {
            let now = self.now;
            if m.live.get(&(role / 2)).is_some_and(|l| l.begun == now) {
                let route = self.route(src, dst, NO_RAIL)?;
                self.mirror.live.get_mut(&(role / 2)).expect("checked above").shadows.push((t, route));
                self.flows_created += 1;
                return Ok(());
            }
            // Its original is not moving alongside: the shadows cannot stand for this one.
            self.mirror_off()?;
        }
        self.start_flow(Owner::Task(t), x, 0)?;
        self.mirror.real += 1;
        Ok(())
    }

    /// A flow's latency has passed and it is about to move (`activate`): other traffic reaching
    /// the images' links turns the shadows into flows first.
    pub(super) fn mirror_before_move(&mut self, slot: u32) -> Result<()> {
        let p = self.pending[slot as usize];
        if self.mirror.on && self.foreign(&p) {
            self.mirror_off()?;
        }
        Ok(())
    }

    /// A flow started moving as fluid flow `f`.
    pub(super) fn mirror_moving(&mut self, slot: u32, f: super::FlowId) {
        let p = self.pending[slot as usize];
        if self.foreign(&p) {
            self.mirror.foreign += 1;
            return;
        }
        if let Owner::Task(t) = p.owner {
            if self.mirror.is_original(t) {
                let e = self.mirror.role[t as usize] / 2;
                if let Some(l) = self.mirror.live.get_mut(&e) {
                    l.flow = Some(f);
                }
            }
        }
    }

    /// A moving flow arrived (before `flow_finished`).
    pub(super) fn mirror_arrived(&mut self, slot: u32) {
        let p = self.pending[slot as usize];
        if self.foreign(&p) {
            self.mirror.foreign -= 1;
        }
    }

    /// Transfer task `t` finished: an original's or image's flow is no longer under way, and an
    /// original's shadows arrive with it.
    pub(super) fn mirror_finished(&mut self, t: TaskId) -> Result<()> {
        let Some(&role) = self.mirror.role.get(t as usize) else { return Ok(()) };
        if role == NONE {
            return Ok(());
        }
        self.mirror.real -= 1;
        if role % 2 == 1 {
            return Ok(());
        }
        let Some(live) = self.mirror.live.remove(&(role / 2)) else { return Ok(()) };
        for &(i, r) in &live.shadows {
            let Work::Transfer { bytes, .. } = self.dag.task(i).work else { unreachable!("images are transfers") };
            for &l in &self.routes[r as usize].links {
                self.link_bytes[l as usize] += bytes as f64;
            }
            self.mirror.shadowed += 1;
            self.finish(i)?;
        }
        Ok(())
    }

    /// A collective is about to try reserving links: if any are the images' links, the shadows
    /// become flows first (a full run has them there).
    pub(super) fn mirror_before_reserve(&mut self, slot: u32) -> Result<()> {
        if !self.mirror.on {
            return Ok(());
        }
        let plan = self.collectives[slot as usize].plan.clone();
        let first = self.collectives[slot as usize].step;
        let memo = self.reserve_classes(slot, &plan, first)?;
        let touches = memo.borrow().classes.iter().any(|(_, routes, _)| routes.iter().any(|&r| self.mirror.touches(r)));
        if touches {
            self.mirror_off()?;
        }
        Ok(())
    }

    /// Turns every shadow into the flow a full run holds now (its original's state, on its own
    /// links) and stops shadowing until those links are quiet again.
    pub(super) fn mirror_off(&mut self) -> Result<()> {
        let m = &mut self.mirror;
        m.on = false;
        if m.live.is_empty() {
            return Ok(());
        }
        m.unshadowed += 1;
        let mut entries: Vec<u32> = m.live.keys().copied().collect();
        entries.sort_unstable();
        for e in entries {
            let live = self.mirror.live.remove(&e).expect("listed above");
            let orig = self.pending[live.slot as usize];
            for &(i, route) in &live.shadows {
                let Work::Transfer { src, dst, bytes } = self.dag.task(i).work else {
                    unreachable!("images are transfers")
                };
                let p = Pending {
                    owner: Owner::Task(i),
                    route,
                    bytes,
                    src,
                    dst,
                    step: 0,
                    start: orig.start,
                    cap: orig.cap,
                };
                let slot = self.new_pending(p);
                self.flows_created -= 1; // counted when it began
                self.mirror.real += 1;
                match live.flow {
                    Some(f) => {
                        let state = self.net.state(f);
                        self.flow_in_state(route, state, slot);
                    }
                    None => self.push(orig.start, EventKind::FlowActivate(slot)),
                }
            }
        }
        Ok(())
    }
}
