//! The discrete-event engine. Runs a [`Dag`] on a [`Machine`]: a task starts when its predecessors
//! are done and its serial queue (if any) is free; fixed-time tasks end after their duration;
//! transfers become flows that share link bandwidth ([`fluid`]); collectives run their lowered
//! steps one after another.
//!
//! Determinism: time is integer nanoseconds, and everything that happens at one instant is
//! settled in a canonical order (tasks that became ready start in task-id order, queues dispatch in
//! queue-id order and pick by (priority, ready time, task id)), so the outcome does not depend on
//! the order in which events of the same instant were processed. The same inputs give the same
//! [`Run`], bit for bit.
//!
//! Speed: a collective whose links carry no other traffic, and whose transfers within each step
//! use disjoint links, is run on *reserved* links: each kind of step is timed once and one event
//! marks the end. If other traffic arrives on a reserved link, the collective is turned back into
//! the individual flows a step-by-step run would hold at that instant ([`Engine::materialize`]),
//! so both paths give identical results (tested). A collective whose links carry other flows that
//! its steps would not slow (batch reads held back by a shared file server, say) is reserved next
//! to them: each step is timed in a private run of the whole component with those flows, and any
//! change in that component turns it back into flows before the engine re-solves it. A collective
//! whose steps would slow such flows is *partly* reserved: only the transfers in components of
//! shared links that other traffic is on run as flows; the other components are timed per step
//! class and end with one event per step, so a collective next to one contended copy costs
//! O(steps) events, not O(steps x transfers).
//!
//! The engine does no I/O and knows no strategy: it sees tasks, queues, flows and link capacities.

mod contention;
pub mod fluid;
mod mirror;
mod shadow;
mod step;

use crate::collective::{CollectiveUse, Latency, Lowerer, Plan, NO_RAIL};
use crate::dag::{Dag, Discipline, TaskId, Work};
use crate::error::{Error, Result};
use crate::hw::{DeviceId, Machine, Route};
use crate::units::{Nanos, MAX_TIME_NS};
use fluid::{Completion, FlowId, FluidNet};
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::{AtomicU64, Ordering};
use step::{Member, MemberState, Outside, StepTimer};

/// What the engine records beyond task spans, and how it may take shortcuts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep one record per flow (start, end, bytes, links) for timelines. Costs memory, and turns
    /// off reserved-link collectives (their steps have no individual flows to record).
    pub record_flows: bool,
    /// Always run collectives flow by flow (the reference path; slower at scale, same results).
    pub stepwise_collectives: bool,
    /// Run every image transfer (a left-out DP replica's pipeline transfer) as its own flow, never
    /// as its original's shadow (the reference path; slower, same results: see `sim/mirror.rs`).
    pub image_flows: bool,
    /// Run every transfer of a collective step run by flows as its own flow, never as the shadow
    /// of an identical transfer over a route of the same shape (the reference path; slower, same
    /// results: see `sim/shadow.rs`).
    pub collective_flows: bool,
    /// Add every flow to the bandwidth solver on its own, never as a member of a bundle of the
    /// flows that start moving at the same instant with the same bytes and cap (the reference
    /// path; slower, same results: see [`Engine::flush_bundles`]).
    pub unbundled_flows: bool,
}

/// One finished flow, when [`Options::record_flows`] is on.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRecord {
    /// The transfer or collective task the flow belongs to.
    pub task: TaskId,
    /// Collective step (0 for plain transfers).
    pub step: u32,
    pub src: DeviceId,
    pub dst: DeviceId,
    pub bytes: u64,
    /// When bytes started moving (after the route latency) and when the last arrived.
    pub start: Nanos,
    pub end: Nanos,
    pub route: u32,
}

/// The outcome of a simulation.
#[derive(Debug, Clone)]
pub struct Run {
    /// Per task: when it started (left its queue) and finished.
    pub start: Vec<Nanos>,
    pub end: Vec<Nanos>,
    pub makespan: Nanos,
    /// Bytes carried by each link over the whole run.
    pub link_bytes: Vec<f64>,
    /// Events processed (fewer when collectives run on reserved links).
    pub events: u64,
    /// Point-to-point transfers carried out, counting every transfer of every collective step.
    pub flows: u64,
    /// Finished flows in a canonical order (by start, end, task, step, src, dst).
    pub flow_records: Vec<FlowRecord>,
    /// Routes used by flows (indexed by [`FlowRecord::route`]).
    pub routes: Vec<Route>,
    /// Collectives that ran on reserved links from start to end, and those turned back into flows.
    pub reserved_collectives: u64,
    pub materialized_collectives: u64,
    /// Collectives run on partly reserved links: the transfers that share links with other
    /// traffic as flows, the rest reserved (counted in `materialized_collectives` when disturbed).
    pub partial_collectives: u64,
    /// Image transfers that moved as their originals' shadows (not flows of their own), and the
    /// times other traffic reaching their links turned the shadows under way into flows.
    pub shadowed_transfers: u64,
    pub shadows_to_flows: u64,
    /// Collective transfers that arrived as the shadows of identical ones (not flows of their
    /// own), and the times other traffic turned a class's shadows into flows.
    pub collective_shadows: u64,
    pub collective_shadows_to_flows: u64,
    /// Bundles of flows that joined the solver as one (see [`Options::unbundled_flows`]), the
    /// flows they stood for, and the bundles the solver split into their members.
    pub bundles: u64,
    pub bundled_flows: u64,
    pub bundle_splits: u64,
    /// How the collectives ran (model's choice per operation), summed over the run.
    pub collectives: Vec<CollectiveUse>,
    /// With [`Options::record_flows`]: per collective task, how it ran (`ring/LL128 x12`).
    pub collective_labels: Vec<(TaskId, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// A fixed-time task ends.
    TaskDone(TaskId),
    /// A compute task slowed by collectives beside it ends (valid only if the generation is its
    /// current one: `contention.rs`).
    ComputeDone(TaskId, u32),
    /// A flow's route latency has passed; its bytes start to move.
    FlowActivate(u32),
    /// A flow's last byte arrives (valid only if the version still matches).
    FlowDone(FlowId, u32),
    /// A collective on reserved links ends (valid only if the generation still matches).
    CollectiveDone(u32, u32),
    /// The reserved part of a partly reserved collective's step ends (same validity rule).
    PartialDone(u32, u32),
}

#[derive(Debug, Clone, Copy)]
enum Owner {
    Task(TaskId),
    Collective(u32),
}

/// Route id marking a [`Pending`] that is processor-shared compute, not a transfer.
const SHARED_ROUTE: u32 = u32::MAX;

/// A flow waiting out its route latency, or moving bytes.
#[derive(Debug, Clone, Copy)]
struct Pending {
    owner: Owner,
    route: u32,
    bytes: u64,
    src: DeviceId,
    dst: DeviceId,
    step: u32,
    /// When bytes start (or started) to move.
    start: Nanos,
    /// The transfer's own rate cap (bytes/ns), beyond its route's curve.
    cap: f64,
}

/// A collective on reserved links from step `first_step` on: when that step started, each step
/// class's duration, the links held, and per class the outside flows it was timed next to.
#[derive(Debug, Clone, Default)]
struct Reservation {
    first_step: u32,
    start: Nanos,
    end: Nanos,
    class_time: Vec<Nanos>,
    links: Vec<u32>,
    class_outside: Vec<Vec<Outside>>,
    /// The step classes it was reserved with (their routes and bytes, for the accounting at its end).
    classes: Option<std::rc::Rc<std::cell::RefCell<ReserveClasses>>>,
}

impl Reservation {
    fn has_outside(&self) -> bool {
        self.class_outside.iter().any(|o| !o.is_empty())
    }
}

/// A collective on partly reserved links, from some step to its end: per step, the transfers in
/// components of shared links that other traffic is on run as flows; the other components hold
/// their links reserved and are timed together, by class, as one pseudo-flow of the step.
#[derive(Debug, Clone, Default)]
struct Partial {
    /// Links held for the reserved part (of every class), while `held`.
    links: Vec<u32>,
    held: bool,
    classes: Vec<PartialClass>,
    /// Start of the current step, and whether its reserved part is still under way.
    step_start: Nanos,
    free_pending: bool,
}

/// One step class of a [`Partial`].
#[derive(Debug, Clone, Default)]
struct PartialClass {
    /// A step of the class (u32::MAX: the class does not occur in the remaining steps).
    rep: u32,
    /// When the last reserved transfer arrives, after the step's start.
    free_time: Nanos,
    /// Transfers run as flows: their indices in the step, with their routes.
    real: Vec<u32>,
    real_xfers: Vec<(Xfer, u32)>,
    /// Reserved transfers per step, and the steps whose reserved part ran to its end (their
    /// bytes are added to the links when the partial reservation ends).
    free_count: u64,
    runs: u64,
}

/// What reserving a collective from one step on needs to know of each step class, the same every
/// time that collective (group, operation, algorithm, bytes) is tried from that step: the class's
/// representative step (u32::MAX for a class with no step left), the route of each of its
/// transfers in step order, and its duration on links with no other traffic once timed; per
/// class, too, its steps left and its transfers' bytes in step order (a run that ends undisturbed
/// adds them to the links without lowering the step again).
#[derive(Debug, Default)]
struct ReserveClasses {
    classes: Vec<(u32, Vec<u32>, Option<Option<Nanos>>)>,
    counts: Vec<u64>,
    bytes: Vec<Vec<u64>>,
}

/// Key of [`ReserveClasses`]: the collective as the lowerer keys its plans, and the first step.
type ReserveKey = (u32, crate::collective::CollectiveOp, crate::collective::Algorithm, u64, u32);

/// [`Route::rate_cap`] by route and message size, found once: a run moves millions of messages of
/// a few sizes over a few thousand routes, and each cap walks the route's bandwidth curves.
#[derive(Debug, Default)]
struct RouteCaps {
    memo: HashMap<(u32, u64), f64>,
}

impl RouteCaps {
    fn get(&mut self, machine: &Machine, routes: &[Route], route: u32, bytes: u64) -> f64 {
        *self.memo.entry((route, bytes)).or_insert_with(|| routes[route as usize].rate_cap(machine, bytes))
    }
}

/// What an attempt to reserve a collective's links gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reserve {
    Done,
    /// Other flows on its links (or ones its steps would disturb).
    Busy,
    /// Another collective holds links it needs (or their component).
    Held,
}

#[derive(Debug, Clone)]
struct CollectiveRun {
    task: TaskId,
    plan: Plan,
    /// NCCL channels of each of its transfers between nodes on a host-staged network
    /// (`collective::model::net_channels`), which caps their rate.
    net_channels: Option<u32>,
    group: u32,
    step: u32,
    outstanding: u32,
    /// Bumped when a reservation ends early, so its pending end event is ignored.
    generation: u32,
    reservation: Option<Reservation>,
    /// When reserving failed or was interrupted, try again at this step (backing off).
    retry_step: u32,
    backoff: u32,
    partial: Option<Partial>,
}

/// One transfer of a collective step on devices: ends, bytes, rail, latency, rate cap.
#[derive(Debug, Clone, Copy)]
struct Xfer {
    src: DeviceId,
    dst: DeviceId,
    bytes: u64,
    rail: u32,
    latency: Latency,
    cap: f64,
}

impl Xfer {
    /// Its latency on `route`.
    fn latency(&self, route: &Route) -> Nanos {
        match self.latency {
            Latency::Route => route.latency_ns,
            Latency::Exact(ns) => ns,
        }
    }
}

/// Runs `dag` on `machine`.
pub fn simulate(dag: &Dag, machine: &Machine, options: Options) -> Result<Run> {
    TASKS_TOTAL.fetch_add(dag.len() as u64, Ordering::Relaxed);
    let mut engine = Engine::new(dag, machine, options);
    let outcome = engine.mirror_setup().and_then(|()| {
        engine.shadow_setup();
        engine.run()?;
        engine.shadow_bytes();
        Ok(())
    });
    // Every task counts as done once the run ends, even one that failed.
    TASKS_DONE.fetch_add((dag.len() - engine.reported) as u64, Ordering::Relaxed);
    outcome.map(|()| engine.into_run())
}

static TASKS_DONE: AtomicU64 = AtomicU64::new(0);
static TASKS_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Tasks finished and tasks started, summed over every simulation this process has run or is
/// running (for a display of progress; no result depends on it).
pub fn progress() -> (u64, u64) {
    (TASKS_DONE.load(Ordering::Relaxed), TASKS_TOTAL.load(Ordering::Relaxed))
}

/// How many flows a run of `dag` on `machine` moves (and records with
/// [`Options::record_flows`]): one per transfer task, and every transfer of every collective step
/// as the engine lowers it. Counts each distinct step class once, so it is cheap at any scale.
pub fn flow_count(dag: &Dag, machine: &Machine) -> Result<u64> {
    let mut flows = 0u64;
    let mut lowerer = Lowerer::new();
    for task in dag.tasks() {
        match task.work {
            Work::Transfer { .. } => flows += 1,
            Work::Collective { group, op, algorithm, bytes } => {
                let plan = lowerer.lower(machine, group, dag.group(group), op, algorithm, bytes)?;
                let mut per_class: HashMap<u32, u64> = HashMap::default();
                for step in 0..plan.step_count() {
                    flows += *per_class.entry(plan.step_class(step)).or_insert_with(|| {
                        let mut n = 0;
                        plan.for_each_transfer(step, |_| n += 1);
                        n
                    });
                }
            }
            Work::Fixed { .. } | Work::Shared { .. } => {}
        }
    }
    Ok(flows)
}

struct Engine<'a> {
    dag: &'a Dag,
    machine: &'a Machine,
    options: Options,
    now: Nanos,
    /// Pending events by instant. The order of events within an instant does not matter (see the
    /// module comment), so a calendar of buckets replaces a priority queue.
    events: BTreeMap<Nanos, Vec<EventKind>>,
    bucket_pool: Vec<Vec<EventKind>>,
    waiting_preds: Vec<u32>,
    start: Vec<Nanos>,
    end: Vec<Nanos>,
    done: usize,
    /// Tasks that became ready at this instant, and queues freed at it: settled in canonical order.
    ready_now: Vec<TaskId>,
    queues_now: Vec<u32>,
    queue_busy: Vec<bool>,
    /// Per queue: ready tasks keyed by (priority or 0, ready time, task id).
    queue_ready: Vec<BinaryHeap<Reverse<(i64, Nanos, TaskId)>>>,
    net: FluidNet,
    /// Pending/active flows by slot; `flow_slot[f]` maps a fluid flow back to its slot.
    pending: Vec<Pending>,
    free_pending: Vec<u32>,
    flow_slot: Vec<u32>,
    collectives: Vec<CollectiveRun>,
    free_collectives: Vec<u32>,
    /// Per link: 0, or 1 + the collective slot holding it reserved.
    reserved_by: Vec<u32>,
    routes: Vec<Route>,
    route_index: HashMap<(DeviceId, DeviceId, u32), u32>,
    completions: Vec<Completion>,
    /// Reused buffer: a step's transfers.
    step_scratch: Vec<Xfer>,
    lowerer: Lowerer,
    link_bytes: Vec<f64>,
    events_processed: u64,
    flows_created: u64,
    flow_records: Vec<FlowRecord>,
    collective_labels: Vec<(TaskId, String)>,
    reserved_count: u64,
    materialized_count: u64,
    partial_count: u64,
    reservation_pool: Vec<Reservation>,
    timer: StepTimer,
    /// Per collective and first step: its step classes' routes and undisturbed durations, so a
    /// collective tried again (every TP collective of every layer) is not lowered and timed anew.
    reserve_memo: HashMap<ReserveKey, std::rc::Rc<std::cell::RefCell<ReserveClasses>>>,
    route_caps: RouteCaps,
    /// Capacity of each machine link (bytes/ns).
    link_capacity: Vec<f64>,
    /// Collectives whose step found other flows on its links: tried on reserved links next to
    /// those flows once the instant's bandwidth is solved, else run by flows.
    deferred: Vec<u32>,
    /// Reservations timed next to outside flows (any change in their component ends them).
    outside_reservations: u32,
    seeds: Vec<u32>,
    /// Finished tasks already added to the process's progress count.
    reported: usize,
    mirror: mirror::Mirror,
    shadows: shadow::Shadows,
    /// Flows that passed their checks at this instant and wait to join the solver, bundled with
    /// their likes ([`Engine::flush_bundles`]); and per live bundle its members' slots (the first
    /// is `flow_slot`'s).
    to_bundle: Vec<(u32, f64)>,
    bundle_slots: HashMap<FlowId, Vec<u32>>,
    /// Scratch of [`Engine::flush_bundles`]: per link, the epoch it was last seen in and the
    /// waiting flow that crossed it then.
    bundle_stamp: Vec<(u32, u32)>,
    bundle_epoch: u32,
    bundle_parent: Vec<u32>,
    bundle_sets: Vec<(u32, u32)>,
    /// Bundles made, flows in them, bundles split.
    bundle_count: (u64, u64, u64),
    /// Compute slowed by the collectives in flight on its GPU, when the machine asks for it.
    contention: Option<Box<contention::Contention>>,
    retimed: Vec<contention::Retimed>,
}

impl<'a> Engine<'a> {
    fn new(dag: &'a Dag, machine: &'a Machine, options: Options) -> Self {
        let n = dag.len();
        let nlinks = machine.links.len();
        // Processor-shared resources follow the links, each of capacity one (ns of work per ns).
        let mut capacity: Vec<f64> = machine.links.iter().map(|l| l.capacity()).collect();
        capacity.extend(dag.resources().iter().map(|_| 1.0));
        Engine {
            dag,
            machine,
            options,
            now: 0,
            events: BTreeMap::new(),
            bucket_pool: Vec::new(),
            waiting_preds: (0..n as TaskId).map(|t| dag.pred_count(t)).collect(),
            start: vec![Nanos::MAX; n],
            end: vec![Nanos::MAX; n],
            done: 0,
            ready_now: Vec::new(),
            queues_now: Vec::new(),
            queue_busy: vec![false; dag.queues().len()],
            queue_ready: vec![BinaryHeap::new(); dag.queues().len()],
            net: FluidNet::new(capacity),
            pending: Vec::new(),
            free_pending: Vec::new(),
            flow_slot: Vec::new(),
            collectives: Vec::new(),
            free_collectives: Vec::new(),
            reserved_by: vec![0; nlinks],
            routes: Vec::new(),
            route_index: HashMap::default(),
            completions: Vec::new(),
            step_scratch: Vec::new(),
            lowerer: Lowerer::new(),
            link_bytes: vec![0.0; nlinks],
            events_processed: 0,
            flows_created: 0,
            flow_records: Vec::new(),
            collective_labels: Vec::new(),
            reserved_count: 0,
            materialized_count: 0,
            partial_count: 0,
            reservation_pool: Vec::new(),
            timer: StepTimer::new(nlinks),
            reserve_memo: HashMap::default(),
            route_caps: RouteCaps::default(),
            link_capacity: machine.links.iter().map(|l| l.capacity()).collect(),
            deferred: Vec::new(),
            outside_reservations: 0,
            seeds: Vec::new(),
            reported: 0,
            mirror: mirror::Mirror::default(),
            shadows: shadow::Shadows::default(),
            to_bundle: Vec::new(),
            bundle_slots: HashMap::default(),
            bundle_stamp: vec![(0, 0); nlinks],
            bundle_epoch: 0,
            bundle_parent: Vec::new(),
            bundle_sets: Vec::new(),
            bundle_count: (0, 0, 0),
            contention: contention::Contention::new(dag, machine),
            retimed: Vec::new(),
        }
    }

    fn push(&mut self, time: Nanos, kind: EventKind) {
        match self.events.get_mut(&time) {
            Some(bucket) => bucket.push(kind),
            None => {
                let mut bucket = self.bucket_pool.pop().unwrap_or_default();
                bucket.push(kind);
                self.events.insert(time, bucket);
            }
        }
    }

    /// Handles every event due at `now`, including those the handlers add at `now`.
    fn drain_instant(&mut self) -> Result<()> {
        while let Some(mut bucket) = self.events.remove(&self.now) {
            for &ev in &bucket {
                self.handle(ev)?;
            }
            bucket.clear();
            self.bucket_pool.push(bucket);
        }
        self.flush_bundles();
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        self.ready_now.extend((0..self.dag.len() as TaskId).filter(|&t| self.waiting_preds[t as usize] == 0));
        loop {
            // Everything at `now`: events first, then the canonical settling of ready tasks and
            // freed queues (which may add events at `now`), then bandwidth shares.
            self.drain_instant()?;
            if !self.ready_now.is_empty() || !self.queues_now.is_empty() {
                self.settle()?;
                continue;
            }
            // Reservations next to outside flows whose component is about to be re-solved go back
            // to flows first, so the solve sees what a step-by-step run would.
            if self.outside_reservations > 0 && self.materialize_disturbed()? {
                continue;
            }
            self.solve_flows();
            self.reserve_deferred()?;
            if self.events.contains_key(&self.now) {
                continue;
            }
            let Some((&next, bucket)) = self.events.first_key_value() else { break };
            debug_assert!(next > self.now, "time never goes back");
            if next > MAX_TIME_NS {
                return Err(self.overflowed(bucket[0]));
            }
            self.now = next;
            if self.done - self.reported >= 1 << 12 {
                TASKS_DONE.fetch_add((self.done - self.reported) as u64, Ordering::Relaxed);
                self.reported = self.done;
            }
        }
        if self.done < self.dag.len() {
            return Err(self.stalled());
        }
        Ok(())
    }

    fn into_run(self) -> Run {
        let mut flow_records = self.flow_records;
        flow_records.sort_by_key(|f| (f.start, f.end, f.task, f.step, f.src, f.dst));
        Run {
            makespan: self.end.iter().copied().max().unwrap_or(0),
            start: self.start,
            end: self.end,
            link_bytes: self.link_bytes,
            events: self.events_processed,
            flows: self.flows_created,
            flow_records,
            routes: self.routes,
            reserved_collectives: self.reserved_count,
            materialized_collectives: self.materialized_count,
            partial_collectives: self.partial_count,
            shadowed_transfers: self.mirror.shadowed,
            shadows_to_flows: self.mirror.unshadowed,
            collective_shadows: self.shadows.shadowed,
            collective_shadows_to_flows: self.shadows.unshadowed,
            bundles: self.bundle_count.0,
            bundled_flows: self.bundle_count.1,
            bundle_splits: self.bundle_count.2,
            collectives: self.lowerer.uses(),
            collective_labels: self.collective_labels,
        }
    }

    fn handle(&mut self, ev: EventKind) -> Result<()> {
        self.events_processed += 1;
        match ev {
            EventKind::TaskDone(t) => self.finish(t),
            EventKind::ComputeDone(t, generation) => {
                let (dag, now) = (self.dag, self.now);
                match self.contention.as_mut().map(|c| c.compute_done(dag, t, generation, now)) {
                    Some(contention::Due::Done) => self.finish(t),
                    Some(contention::Due::Later(r)) => {
                        self.push(r.at, EventKind::ComputeDone(r.task, r.generation));
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            EventKind::FlowActivate(slot) => self.activate(slot),
            EventKind::FlowDone(f, version) => {
                if self.net.is_live(f) && self.net.version(f) == version {
                    self.net.remove(f);
                    if let Some(slots) = self.bundle_slots.remove(&f) {
                        // Every member arrives at this instant, as k flows of one rate history.
                        for slot in slots {
                            self.mirror_arrived(slot);
                            self.flow_finished(slot)?;
                        }
                        return Ok(());
                    }
                    let slot = self.flow_slot[f as usize];
                    self.mirror_arrived(slot);
                    self.flow_finished(slot)?;
                }
                Ok(())
            }
            EventKind::CollectiveDone(c, generation) => {
                let run = &self.collectives[c as usize];
                if run.generation == generation && run.reservation.is_some() {
                    self.end_reservation(c)?;
                }
                Ok(())
            }
            EventKind::PartialDone(c, generation) => {
                let run = &mut self.collectives[c as usize];
                let class = run.plan.step_class(run.step) as usize;
                if run.generation != generation {
                    return Ok(());
                }
                let Some(p) = run.partial.as_mut().filter(|p| p.free_pending) else { return Ok(()) };
                p.free_pending = false;
                p.classes[class].runs += 1;
                run.outstanding -= 1;
                if run.outstanding == 0 {
                    self.step_done(c)?;
                }
                Ok(())
            }
        }
    }

    /// Starts the tasks that became ready at this instant (in task-id order) and dispatches freed
    /// queues (in queue-id order).
    fn settle(&mut self) -> Result<()> {
        let mut ready = std::mem::take(&mut self.ready_now);
        ready.sort_unstable();
        for &t in &ready {
            match self.dag.task(t).queue {
                Some(q) => {
                    let task = self.dag.task(t);
                    let key = match self.dag.queues()[q as usize].discipline {
                        Discipline::Fifo => 0,
                        Discipline::Priority => task.priority as i64,
                    };
                    self.queue_ready[q as usize].push(Reverse((key, self.now, t)));
                    self.queues_now.push(q);
                }
                None => self.begin(t)?,
            }
        }
        ready.clear();
        self.ready_now = ready;
        let mut queues = std::mem::take(&mut self.queues_now);
        queues.sort_unstable();
        queues.dedup();
        for &q in &queues {
            if !self.queue_busy[q as usize] {
                if let Some(Reverse((_, _, t))) = self.queue_ready[q as usize].pop() {
                    self.queue_busy[q as usize] = true;
                    self.begin(t)?;
                }
            }
        }
        queues.clear();
        self.queues_now = queues;
        Ok(())
    }

    fn solve_flows(&mut self) {
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        self.flush_bundles();
        self.net.solve(self.now, &mut completions);
        for c in &completions {
            self.push(c.time, EventKind::FlowDone(c.flow, c.version));
        }
        self.completions = completions;
        if !self.bundle_slots.is_empty() {
            // Bundles whose members part: each member's flow maps back to its own slot.
            for split in self.net.take_splits() {
                let slots = self.bundle_slots.remove(&split.bundle).expect("a live bundle has its slots");
                self.bundle_count.2 += 1;
                for (&f, &slot) in split.members.iter().zip(&slots) {
                    self.map_flow(f, slot);
                }
            }
        }
    }

    /// Adds the flows that passed their checks at this instant to the solver: those with the
    /// same bytes and cap (their start is this instant) that share links, directly or through one
    /// another, as one bundle each, members in the order they activated, the others as plain
    /// flows. A bundle is bit for bit its members as
    /// separate flows (`fluid.rs`, tested in `tests/weighted_flows.rs`) while their rates agree,
    /// and splits into them in its state when they would not; progressive filling is a function
    /// of the component, not of the order flows joined it, so adding them here rather than one
    /// by one as they activated changes nothing, provided nothing looks at the net in between:
    /// every reader of the net at an instant (reservations, partial reservations, outside flows,
    /// shadow checks, the solve) flushes first. Off under [`Options::unbundled_flows`] and with
    /// flow records.
    fn flush_bundles(&mut self) {
        match self.to_bundle.len() {
            0 => return,
            1 => {
                let (slot, cap) = self.to_bundle.pop().expect("one waits");
                let p = self.pending[slot as usize];
                let f = self.net.add(&self.routes[p.route as usize].links, p.bytes as f64, cap, self.now);
                self.map_flow(f, slot);
                self.mirror_moving(slot, f);
                return;
            }
            _ => {}
        }
        let waiting = std::mem::take(&mut self.to_bundle);
        // Members of a bundle share links (through one another): flows that would be apart in
        // the net stay apart, so a bundle never joins components a full run keeps separate.
        // Union-find over the waiting flows of one (bytes, cap), by the links they cross; the
        // root of a set is its first flow.
        let n = waiting.len();
        let mut parent = std::mem::take(&mut self.bundle_parent);
        parent.clear();
        parent.extend(0..n as u32);
        fn root(parent: &mut [u32], mut i: u32) -> u32 {
            while parent[i as usize] != i {
                let up = parent[parent[i as usize] as usize];
                parent[i as usize] = up;
                i = up;
            }
            i
        }
        self.bundle_epoch = self.bundle_epoch.wrapping_add(1);
        if self.bundle_epoch == 0 {
            self.bundle_stamp.iter_mut().for_each(|s| s.0 = 0);
            self.bundle_epoch = 1;
        }
        let epoch = self.bundle_epoch;
        for (i, &(slot, cap)) in waiting.iter().enumerate() {
            let p = self.pending[slot as usize];
            for &l in &self.routes[p.route as usize].links {
                let (stamp, holder) = self.bundle_stamp[l as usize];
                if stamp != epoch {
                    self.bundle_stamp[l as usize] = (epoch, i as u32);
                    continue;
                }
                let (w, c) = waiting[holder as usize];
                if c.to_bits() == cap.to_bits() && self.pending[w as usize].bytes == p.bytes {
                    let (a, b) = (root(&mut parent, i as u32), root(&mut parent, holder));
                    if a != b {
                        parent[a.max(b) as usize] = a.min(b);
                    }
                } else {
                    // A link held by a flow of another kind: the later flow of this kind there
                    // takes it over, so its own kind still meets on it.
                    self.bundle_stamp[l as usize] = (epoch, i as u32);
                }
            }
        }
        // (root, flow) sorted: the sets in the order of their first flows, each in activation order.
        let mut sets = std::mem::take(&mut self.bundle_sets);
        sets.clear();
        for i in 0..n as u32 {
            sets.push((root(&mut parent, i), i));
        }
        sets.sort_unstable();
        let mut a = 0;
        while a < n {
            let r = sets[a].0;
            let mut z = a + 1;
            while z < n && sets[z].0 == r {
                z += 1;
            }
            let (slot, cap) = waiting[r as usize];
            let p = self.pending[slot as usize];
            let f = if z - a == 1 {
                self.net.add(&self.routes[p.route as usize].links, p.bytes as f64, cap, self.now)
            } else {
                let routes: Vec<&[u32]> = sets[a..z]
                    .iter()
                    .map(|&(_, i)| {
                        self.routes[self.pending[waiting[i as usize].0 as usize].route as usize].links.as_slice()
                    })
                    .collect();
                let f = self.net.add_bundle(&routes, p.bytes as f64, cap, self.now);
                let members: Vec<u32> = sets[a..z].iter().map(|&(_, i)| waiting[i as usize].0).collect();
                self.bundle_count.0 += 1;
                self.bundle_count.1 += members.len() as u64;
                self.bundle_slots.insert(f, members);
                f
            };
            self.map_flow(f, slot);
            for &(_, i) in &sets[a..z] {
                self.mirror_moving(waiting[i as usize].0, f);
            }
            a = z;
        }
        self.bundle_sets = sets;
        self.bundle_parent = parent;
        let mut waiting = waiting;
        waiting.clear();
        self.to_bundle = waiting;
    }

    fn begin(&mut self, t: TaskId) -> Result<()> {
        self.start[t as usize] = self.now;
        match self.dag.task(t).work {
            Work::Fixed { ns } => {
                let ns = self.with_faults(t, ns);
                match self.contention.as_mut() {
                    Some(c) if contention::Contention::is_compute(self.dag, t) => {
                        let gpu = self.dag.task(t).gpu.unwrap_or(0);
                        let r = c.start_task(self.dag, t, gpu, self.now, ns);
                        self.push(r.at, EventKind::ComputeDone(t, r.generation))
                    }
                    _ => self.push(self.now.saturating_add(ns), EventKind::TaskDone(t)),
                }
            }
            Work::Transfer { src, dst, bytes } => self.begin_transfer(t, src, dst, bytes)?,
            Work::Shared { resource, work_ns, cap } => self.start_shared(t, resource, work_ns, cap),
            Work::Collective { group, op, algorithm, bytes } => {
                let plan = self.lowerer.lower(self.machine, group, self.dag.group(group), op, algorithm, bytes)?;
                if self.options.record_flows {
                    self.collective_labels.push((t, plan.label()));
                }
                if plan.step_count() == 0 {
                    self.push(self.now, EventKind::TaskDone(t));
                    return Ok(());
                }
                let net_channels = crate::collective::model::net_channels(self.machine, op, algorithm, &plan);
                let now = self.now;
                self.retime_with(|c, dag, machine, out| {
                    c.start_collective(dag, machine, t, group, &plan, op, algorithm, bytes, now, out)
                });
                let slot = match self.free_collectives.pop() {
                    Some(s) => s,
                    None => {
                        self.collectives.push(CollectiveRun {
                            task: t,
                            plan: plan.clone(),
                            net_channels,
                            group,
                            step: 0,
                            outstanding: 0,
                            generation: 0,
                            reservation: None,
                            retry_step: 0,
                            backoff: 1,
                            partial: None,
                        });
                        (self.collectives.len() - 1) as u32
                    }
                };
                let run = &mut self.collectives[slot as usize];
                run.task = t;
                run.plan = plan;
                run.net_channels = net_channels;
                run.group = group;
                run.step = 0;
                run.outstanding = 0;
                run.generation = run.generation.wrapping_add(1);
                run.retry_step = 0;
                run.backoff = 1;
                self.start_step(slot)?;
            }
        }
        Ok(())
    }

    /// Fills `step_scratch` with the transfers of a step, on devices.
    fn load_step(&mut self, slot: u32, step: u32) {
        let run = &self.collectives[slot as usize];
        let (plan, ranks) = (&run.plan, self.dag.group(run.group));
        let (machine, channels) = (self.machine, run.net_channels);
        let gpus = &machine.gpus;
        let scratch = &mut self.step_scratch;
        scratch.clear();
        plan.for_each_transfer(step, |x| {
            let dev = |r: u32| gpus[ranks[r as usize] as usize].device;
            let (src, dst) = (dev(x.src), dev(x.dst));
            let cap = match channels {
                Some(c) => x.cap.min(machine.net_channel_cap(src, dst, c)),
                None => x.cap,
            };
            scratch.push(Xfer { src, dst, bytes: x.bytes, rail: x.rail, latency: x.latency, cap });
        });
    }

    fn start_step(&mut self, slot: u32) -> Result<()> {
        if let Some(p) = &self.collectives[slot as usize].partial {
            if p.held {
                return self.start_partial_step(slot);
            }
            // Disturbed in an earlier step (and backed off then): back to the usual path.
            self.end_partial(slot)?;
        }
        let step = self.collectives[slot as usize].step;
        if !(self.options.record_flows || self.options.stepwise_collectives)
            && step >= self.collectives[slot as usize].retry_step
        {
            match self.try_reserve(slot, false)? {
                Reserve::Done => return Ok(()),
                Reserve::Busy => {
                    // Other flows on its links: try next to them once this instant is solved.
                    self.deferred.push(slot);
                    return Ok(());
                }
                Reserve::Held => {
                    if self.try_partial(slot)? {
                        return Ok(());
                    }
                    self.back_off(slot)
                }
            }
        }
        self.start_step_flows(slot)
    }

    /// Other traffic keeps a collective off reserved links: try again some steps later.
    fn back_off(&mut self, slot: u32) {
        let run = &mut self.collectives[slot as usize];
        run.backoff = run.backoff.saturating_mul(2).min(1 << 16);
        run.retry_step = run.step + run.backoff;
    }

    /// Runs a collective's current step by flows.
    fn start_step_flows(&mut self, slot: u32) -> Result<()> {
        if self.start_step_shadowed(slot)? {
            return Ok(());
        }
        let step = self.collectives[slot as usize].step;
        self.load_step(slot, step);
        let scratch = std::mem::take(&mut self.step_scratch);
        self.collectives[slot as usize].outstanding = scratch.len() as u32;
        for &x in &scratch {
            self.start_flow(Owner::Collective(slot), x, step)?;
        }
        self.step_scratch = scratch;
        Ok(())
    }

    /// The deferred collectives, after this instant's solve: on reserved links next to the flows
    /// now on them if their steps leave those flows' rates alone, else by flows.
    fn reserve_deferred(&mut self) -> Result<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let mut deferred = std::mem::take(&mut self.deferred);
        deferred.sort_unstable();
        for &slot in &deferred {
            if self.try_reserve(slot, true)? != Reserve::Done && !self.try_partial(slot)? {
                self.back_off(slot);
                self.start_step_flows(slot)?;
            }
        }
        deferred.clear();
        self.deferred = deferred;
        Ok(())
    }

    /// Before a solve: reservations timed next to outside flows whose component the solve touches
    /// go back to flows (the outside flows may change; a step-by-step run would re-solve its flows
    /// with them). Returns whether any did (their flows may activate at this instant).
    fn materialize_disturbed(&mut self) -> Result<bool> {
        let mut seeds = std::mem::take(&mut self.seeds);
        seeds.clear();
        seeds.extend_from_slice(self.net.dirty_links());
        let mut hit: Vec<u32> = Vec::new();
        if !seeds.is_empty() {
            let (links, _) = self.net.component(&seeds);
            for &l in links {
                let held = self.reserved_by.get(l as usize).copied().unwrap_or(0);
                // Only whole reservations are timed next to outside flows; a partly reserved
                // collective's held links carry none (traffic arriving there materialises it in
                // `activate`), so a re-solve leaves its reserved part alone. Counting it as hit
                // would return true forever at this instant (nothing is materialised).
                if held != 0 && self.collectives[held as usize - 1].reservation.is_some() {
                    hit.push(held - 1);
                }
            }
        }
        self.seeds = seeds;
        hit.sort_unstable();
        hit.dedup();
        for &slot in &hit {
            if self.collectives[slot as usize].reservation.is_some() {
                self.materialize(slot)?;
            }
        }
        Ok(!hit.is_empty())
    }

    /// Runs collective `slot` on reserved links from its current step on, if each step's
    /// transfers use disjoint links and its links are free of other traffic (or, `with_outside`,
    /// carry flows whose rates its steps leave alone: their whole component is timed with it).
    fn try_reserve(&mut self, slot: u32, with_outside: bool) -> Result<Reserve> {
        const PROVISIONAL: u32 = u32::MAX;
        self.flush_bundles();
        self.mirror_before_reserve(slot)?;
        let plan = self.collectives[slot as usize].plan.clone();
        let first = self.collectives[slot as usize].step;
        let memo_rc = self.reserve_classes(slot, &plan, first)?;
        let mut memo = memo_rc.borrow_mut();
        let mut res = self.reservation_pool.pop().unwrap_or_default();
        res.class_time.clear();
        res.links.clear();
        res.class_outside.clear();
        res.classes = None;
        let mut outcome = Reserve::Done;
        for (rep, routes, alone) in memo.classes.iter_mut() {
            res.class_outside.push(Vec::new());
            if *rep == u32::MAX {
                res.class_time.push(0);
                continue;
            }
            'members: for &route in routes.iter() {
                for &l in &self.routes[route as usize].links {
                    let li = l as usize;
                    // Held by another collective (or carrying live shadows: they stay, see
                    // `shadow.rs`), or busy: not eligible (busy: unless timed next to the flows).
                    let held = self.reserved_by[li];
                    if (held != 0 && held != PROVISIONAL) || self.shadows.is_marked(l) {
                        outcome = Reserve::Held;
                        break 'members;
                    }
                    if self.net.flows_on(l) > 0 && !with_outside {
                        outcome = Reserve::Busy;
                        break 'members;
                    }
                    if held == 0 {
                        self.reserved_by[li] = PROVISIONAL;
                        self.mirror.hold(li, false, true);
                        res.links.push(l);
                    }
                }
            }
            let mut longest = None;
            if outcome == Reserve::Done {
                let outside = if with_outside {
                    self.load_step(slot, *rep);
                    let scratch = std::mem::take(&mut self.step_scratch);
                    let outside = self.outside_flows(&scratch, routes);
                    self.step_scratch = scratch;
                    outside
                } else {
                    Some(Vec::new())
                };
                match outside {
                    Some(outside) if outside.is_empty() => {
                        if alone.is_none() {
                            self.load_step(slot, *rep);
                            let scratch = std::mem::take(&mut self.step_scratch);
                            *alone = Some(self.time_step(&scratch, routes, &[]));
                            self.step_scratch = scratch;
                        }
                        longest = alone.expect("timed above");
                    }
                    Some(outside) => {
                        self.load_step(slot, *rep);
                        let scratch = std::mem::take(&mut self.step_scratch);
                        longest = self.time_step(&scratch, routes, &outside);
                        self.step_scratch = scratch;
                        *res.class_outside.last_mut().expect("pushed above") = outside;
                    }
                    None => outcome = Reserve::Held,
                }
                if longest.is_none() && outcome == Reserve::Done {
                    outcome = Reserve::Busy;
                }
            }
            let Some(longest) = longest else { break };
            res.class_time.push(longest);
        }
        drop(memo);
        if outcome != Reserve::Done {
            for &l in &res.links {
                self.hold(l as usize, 0);
            }
            self.reservation_pool.push(res);
            return Ok(outcome);
        }
        for &l in &res.links {
            self.hold(l as usize, slot + 1);
        }
        res.classes = Some(memo_rc);
        let total: Nanos = (first..plan.step_count())
            .map(|s| res.class_time[plan.step_class(s) as usize])
            .fold(0, Nanos::saturating_add);
        res.first_step = first;
        res.start = self.now;
        res.end = self.now.saturating_add(total);
        let generation = self.collectives[slot as usize].generation;
        self.push(res.end, EventKind::CollectiveDone(slot, generation));
        if res.has_outside() {
            self.outside_reservations += 1;
        }
        self.collectives[slot as usize].reservation = Some(res);
        self.reserved_count += 1;
        Ok(Reserve::Done)
    }

    /// The step classes of the collective in `slot` from step `first` on, with their routes (found
    /// once per collective and first step, see [`ReserveClasses`]).
    fn reserve_classes(
        &mut self,
        slot: u32,
        plan: &Plan,
        first: u32,
    ) -> Result<std::rc::Rc<std::cell::RefCell<ReserveClasses>>> {
        let run = &self.collectives[slot as usize];
        let Work::Collective { group, op, algorithm, bytes } = self.dag.task(run.task).work else {
            unreachable!("a collective slot runs a collective task")
        };
        let key = (group, op, algorithm, bytes, first);
        if let Some(m) = self.reserve_memo.get(&key) {
            return Ok(m.clone());
        }
        let (mut classes, mut counts, mut all_bytes) = (Vec::new(), Vec::new(), Vec::new());
        for (rep, count) in Self::steps_per_class(plan, first, plan.step_count()) {
            let (routes, bytes) = if rep == u32::MAX {
                (Vec::new(), Vec::new())
            } else {
                self.load_step(slot, rep);
                let scratch = std::mem::take(&mut self.step_scratch);
                let routes = self.routes_of(&scratch);
                let bytes = scratch.iter().map(|x| x.bytes).collect();
                self.step_scratch = scratch;
                (routes?, bytes)
            };
            classes.push((rep, routes, None));
            counts.push(count);
            all_bytes.push(bytes);
        }
        let m = std::rc::Rc::new(std::cell::RefCell::new(ReserveClasses { classes, counts, bytes: all_bytes }));
        self.reserve_memo.insert(key, m.clone());
        Ok(m)
    }

    /// The flows in the component of a step's links (as they are now), or None if that component
    /// reaches links another collective holds, or a transfer that moves has no latency (its flow
    /// would join this instant's solve, which has already run).
    fn outside_flows(&mut self, transfers: &[Xfer], route_ids: &[u32]) -> Option<Vec<Outside>> {
        let mut seeds = std::mem::take(&mut self.seeds);
        seeds.clear();
        let mut instant = false;
        for (x, &r) in transfers.iter().zip(route_ids) {
            let route = &self.routes[r as usize];
            seeds.extend_from_slice(&route.links);
            instant |= x.bytes > 0 && !route.links.is_empty() && x.latency(route) == 0;
        }
        let (links, flows) = self.net.component(&seeds);
        let held_elsewhere = links.iter().any(|&l| {
            let held = self.reserved_by.get(l as usize).copied().unwrap_or(0);
            held != 0 && held != u32::MAX
        });
        let flows = flows.to_vec();
        self.seeds = seeds;
        if held_elsewhere || (instant && !flows.is_empty()) {
            return None;
        }
        // A bundle is its members, each on its own route, to the private run.
        let mut outside = Vec::with_capacity(flows.len());
        for f in flows {
            let (cap, rate) = (self.net.state(f).cap, self.net.rate(f));
            match self.net.member_routes(f) {
                Some(routes) => outside.extend(routes.iter().map(|r| Outside { links: r.clone(), cap, rate })),
                None => outside.push(Outside { links: self.net.links(f).to_vec(), cap, rate }),
            }
        }
        Some(outside)
    }

    /// Members of a step for the step timer: the transfers with their routes, latency and cap.
    fn members<'r>(
        machine: &Machine,
        routes: &'r [Route],
        caps: &mut RouteCaps,
        transfers: &[Xfer],
        route_ids: &[u32],
    ) -> Vec<Member<'r>> {
        transfers
            .iter()
            .zip(route_ids)
            .map(|(x, &r)| {
                let route = &routes[r as usize];
                let cap = if x.bytes == 0 || route.links.is_empty() {
                    f64::INFINITY
                } else {
                    caps.get(machine, routes, r, x.bytes).min(x.cap)
                };
                Member { links: &route.links, latency: x.latency(route), bytes: x.bytes, cap }
            })
            .collect()
    }

    /// Duration of a step's transfers next to `outside` flows (none: links with no other traffic),
    /// or None if the step would change an outside flow's rate.
    fn time_step(&mut self, transfers: &[Xfer], route_ids: &[u32], outside: &[Outside]) -> Option<Nanos> {
        let members = Self::members(self.machine, &self.routes, &mut self.route_caps, transfers, route_ids);
        self.timer.duration_with(&members, outside, &self.link_capacity)
    }

    /// The route of each of `transfers`, in order.
    fn routes_of(&mut self, transfers: &[Xfer]) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(transfers.len());
        for x in transfers {
            ids.push(self.route(x.src, x.dst, x.rail)?);
        }
        Ok(ids)
    }

    /// Adds the bytes and transfer count of `count` runs of `step` (all its transfers finished).
    fn account_steps(&mut self, slot: u32, step: u32, count: u64) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.load_step(slot, step);
        let scratch = std::mem::take(&mut self.step_scratch);
        for x in &scratch {
            let route = self.route(x.src, x.dst, x.rail)?;
            for &l in &self.routes[route as usize].links {
                self.link_bytes[l as usize] += (x.bytes * count) as f64;
            }
        }
        self.flows_created += scratch.len() as u64 * count;
        self.step_scratch = scratch;
        Ok(())
    }

    /// [`Engine::account_steps`] of a step whose transfers' routes and bytes are known, in step order.
    fn account_routes(&mut self, routes: &[u32], bytes: &[u64], count: u64) {
        if count == 0 {
            return;
        }
        for (&r, &b) in routes.iter().zip(bytes) {
            for &l in &self.routes[r as usize].links {
                self.link_bytes[l as usize] += (b * count) as f64;
            }
        }
        self.flows_created += routes.len() as u64 * count;
    }

    /// Per class, how many of the steps `from..upto` belong to it, with a representative step.
    fn steps_per_class(plan: &Plan, from: u32, upto: u32) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = Vec::new();
        for s in from..upto {
            let c = plan.step_class(s) as usize;
            if out.len() <= c {
                out.resize(c + 1, (u32::MAX, 0));
            }
            if out[c].0 == u32::MAX {
                out[c].0 = s;
            }
            out[c].1 += 1;
        }
        out
    }

    /// Frees the links of a reserved collective; returns (first step, its start, class times, the
    /// outside flows each class was timed next to).
    fn release(&mut self, slot: u32) -> (u32, Nanos, Vec<Nanos>, Vec<Vec<Outside>>) {
        let mut res = self.collectives[slot as usize].reservation.take().expect("reserved");
        for &l in &res.links {
            self.hold(l as usize, 0);
        }
        if res.has_outside() {
            self.outside_reservations -= 1;
        }
        let class_time = std::mem::take(&mut res.class_time);
        let class_outside = std::mem::take(&mut res.class_outside);
        let out = (res.first_step, res.start, class_time, class_outside);
        self.reservation_pool.push(res);
        out
    }

    /// A reserved collective ran to its end undisturbed.
    fn end_reservation(&mut self, slot: u32) -> Result<()> {
        let memo = self.collectives[slot as usize].reservation.as_mut().and_then(|r| r.classes.take());
        let (first, _, class_time, class_outside) = self.release(slot);
        // Back to the pooled reservation `release` just made, to be refilled without allocating.
        if let Some(pooled) = self.reservation_pool.last_mut() {
            (pooled.class_time, pooled.class_outside) = (class_time, class_outside);
        }
        if let Some(memo) = memo {
            // The classes it was reserved with are those of steps `first..` (the same transfers, in
            // step order, as `account_steps` lowers again).
            let memo = memo.borrow();
            for (i, (rep, routes, _)) in memo.classes.iter().enumerate() {
                if *rep != u32::MAX {
                    self.account_routes(routes, &memo.bytes[i], memo.counts[i]);
                }
            }
        } else {
            let plan = self.collectives[slot as usize].plan.clone();
            for (rep, count) in Self::steps_per_class(&plan, first, plan.step_count()) {
                if rep != u32::MAX {
                    self.account_steps(slot, rep, count)?;
                }
            }
        }
        let t = self.collectives[slot as usize].task;
        self.free_collectives.push(slot);
        self.finish(t)
    }

    /// Turns a reserved collective back into the flows a step-by-step run would hold now: steps
    /// before the current one are done; in the current one, each transfer is done, waiting out its
    /// latency, or moving alone since its start at its solo rate.
    fn materialize(&mut self, slot: u32) -> Result<()> {
        if self.collectives[slot as usize].partial.is_some() {
            return self.materialize_partial(slot);
        }
        self.materialized_count += 1;
        let now = self.now;
        let plan = self.collectives[slot as usize].plan.clone();
        let end = self.collectives[slot as usize].reservation.as_ref().expect("reserved").end;
        if now >= end {
            // Its end event is due at this very instant: finish it here instead.
            let run = &mut self.collectives[slot as usize];
            run.generation = run.generation.wrapping_add(1);
            return self.end_reservation(slot);
        }
        let (first, start, class_time, class_outside) = self.release(slot);
        let mut step = first;
        let mut step_start = start;
        loop {
            let t = class_time[plan.step_class(step) as usize];
            if now < step_start.saturating_add(t) {
                break;
            }
            step_start = step_start.saturating_add(t);
            step += 1;
        }
        for (rep, count) in Self::steps_per_class(&plan, first, step) {
            if rep != u32::MAX {
                self.account_steps(slot, rep, count)?;
            }
        }
        let run = &mut self.collectives[slot as usize];
        run.generation = run.generation.wrapping_add(1);
        run.step = step;
        run.backoff = 1;
        run.retry_step = step + 1;
        self.load_step(slot, step);
        let scratch = std::mem::take(&mut self.step_scratch);
        let route_ids = self.routes_of(&scratch)?;
        let (states, dirty) = {
            let members = Self::members(self.machine, &self.routes, &mut self.route_caps, &scratch, &route_ids);
            let outside = &class_outside[plan.step_class(step) as usize];
            self.timer.states_at(&members, outside, &self.link_capacity, now - step_start)
        };
        let outstanding = self.spawn_states(slot, step, step_start, &scratch, &route_ids, &states, &dirty);
        self.step_scratch = scratch;
        debug_assert!(outstanding > 0, "the current step has a transfer still under way");
        self.collectives[slot as usize].outstanding = outstanding;
        Ok(())
    }

    /// Turns a step's transfers, in the states [`StepTimer::states_at`] gave, into what a
    /// step-by-step run holds: done ones are accounted, the others become pending or moving flows.
    /// Returns how many are still under way.
    #[allow(clippy::too_many_arguments)]
    fn spawn_states(
        &mut self,
        slot: u32,
        step: u32,
        step_start: Nanos,
        transfers: &[Xfer],
        route_ids: &[u32],
        states: &[MemberState],
        dirty: &[u32],
    ) -> u32 {
        let mut outstanding = 0;
        for ((x, &route), &state) in transfers.iter().zip(route_ids).zip(states) {
            let (src, dst, bytes) = (x.src, x.dst, x.bytes);
            let began = match state {
                MemberState::Done => {
                    for &l in &self.routes[route as usize].links {
                        self.link_bytes[l as usize] += bytes as f64;
                    }
                    self.flows_created += 1;
                    continue;
                }
                MemberState::Waiting(offset) => step_start.saturating_add(offset),
                MemberState::Moving(_) => step_start.saturating_add(x.latency(&self.routes[route as usize])),
            };
            outstanding += 1;
            let p = Pending { owner: Owner::Collective(slot), route, bytes, src, dst, step, start: began, cap: x.cap };
            let pslot = self.new_pending(p);
            match state {
                MemberState::Moving(mut fs) => {
                    fs.last = fs.last.saturating_add(step_start);
                    fs.due = fs.due.map(|d| d.saturating_add(step_start));
                    let links = std::mem::take(&mut self.routes[route as usize].links);
                    let (f, version) = self.net.insert_state(&links, fs);
                    self.routes[route as usize].links = links;
                    self.map_flow(f, pslot);
                    self.mirror_moving(pslot, f);
                    if let Some(due) = fs.due {
                        self.push(due, EventKind::FlowDone(f, version));
                    }
                }
                _ => self.push(began, EventKind::FlowActivate(pslot)),
            }
        }
        for &l in dirty {
            self.net.mark_dirty(l);
        }
        outstanding
    }

    /// Runs collective `slot` on partly reserved links from its current step on (see
    /// [`Partial`]): the transfers in components of links that carry other flows, or that another
    /// collective holds, run as flows; the rest are timed per class. Returns false (nothing
    /// changed) if no transfer could be reserved.
    fn try_partial(&mut self, slot: u32) -> Result<bool> {
        const PROVISIONAL: u32 = u32::MAX;
        self.flush_bundles();
        self.mirror_before_reserve(slot)?;
        let plan = self.collectives[slot as usize].plan.clone();
        let first = self.collectives[slot as usize].step;
        let mut partial = Partial::default();
        let mut any_free = false;
        for (rep, _) in Self::steps_per_class(&plan, first, plan.step_count()) {
            if rep == u32::MAX {
                partial.classes.push(PartialClass { rep, ..Default::default() });
                continue;
            }
            self.load_step(slot, rep);
            let scratch = std::mem::take(&mut self.step_scratch);
            let route_ids = self.routes_of(&scratch)?;
            let (real, free_time) = {
                let members = Self::members(self.machine, &self.routes, &mut self.route_caps, &scratch, &route_ids);
                let (net, reserved_by, shadows) = (&self.net, &self.reserved_by, &self.shadows);
                let touched = |l: u32| {
                    let held = reserved_by[l as usize];
                    net.flows_on(l) > 0 || (held != 0 && held != PROVISIONAL) || shadows.is_marked(l)
                };
                self.timer.split(&members, touched, &self.link_capacity)
            };
            let mut next_real = real.iter().peekable();
            for (i, &r) in route_ids.iter().enumerate() {
                if next_real.next_if_eq(&&(i as u32)).is_some() {
                    continue;
                }
                for &l in &self.routes[r as usize].links {
                    if self.reserved_by[l as usize] == 0 {
                        self.reserved_by[l as usize] = PROVISIONAL;
                        self.mirror.hold(l as usize, false, true);
                        partial.links.push(l);
                    }
                }
            }
            let free_count = (scratch.len() - real.len()) as u64;
            any_free |= free_count > 0;
            let real_xfers = real.iter().map(|&i| (scratch[i as usize], route_ids[i as usize])).collect();
            partial.classes.push(PartialClass { rep, free_time, real, real_xfers, free_count, runs: 0 });
            self.step_scratch = scratch;
        }
        let mark = if any_free { slot + 1 } else { 0 };
        for &l in &partial.links {
            self.hold(l as usize, mark);
        }
        if !any_free {
            return Ok(false);
        }
        partial.held = true;
        self.collectives[slot as usize].partial = Some(partial);
        self.partial_count += 1;
        self.start_partial_step(slot)?;
        Ok(true)
    }

    /// Starts the current step of a partly reserved collective: its flows, and one event at the
    /// end of its reserved part.
    fn start_partial_step(&mut self, slot: u32) -> Result<()> {
        let now = self.now;
        let run = &mut self.collectives[slot as usize];
        let (step, generation) = (run.step, run.generation);
        let class = run.plan.step_class(step) as usize;
        let p = run.partial.as_mut().expect("partly reserved");
        let pc = &p.classes[class];
        let (free_time, real) = (pc.free_time, pc.real_xfers.len());
        // A step with no transfer at all still ends through its (empty) reserved part.
        let free = pc.free_count > 0 || real == 0;
        p.step_start = now;
        p.free_pending = free;
        run.outstanding = real as u32 + free as u32;
        if free {
            self.push(now.saturating_add(free_time), EventKind::PartialDone(slot, generation));
        }
        for i in 0..real {
            let p = self.collectives[slot as usize].partial.as_ref().expect("partly reserved");
            let (x, route) = p.classes[class].real_xfers[i];
            self.start_flow_on(Owner::Collective(slot), x, step, route);
        }
        Ok(())
    }

    /// Traffic arrives on a link a partly reserved collective holds: the reserved part of its
    /// current step becomes the flows a step-by-step run would hold now, and the links are freed.
    /// The partial reservation ends when this step does (the collective backs off).
    fn materialize_partial(&mut self, slot: u32) -> Result<()> {
        self.materialized_count += 1;
        let now = self.now;
        let run = &mut self.collectives[slot as usize];
        let step = run.step;
        let class = run.plan.step_class(step) as usize;
        let p = run.partial.as_mut().expect("partly reserved");
        let links = std::mem::take(&mut p.links);
        p.held = false;
        let step_start = p.step_start;
        let pc = &p.classes[class];
        // At the reserved part's very end its event is due at this instant and accounts for it.
        let under_way = p.free_pending && now < step_start.saturating_add(pc.free_time);
        let real = if under_way { pc.real.clone() } else { Vec::new() };
        if under_way {
            p.free_pending = false;
            run.generation = run.generation.wrapping_add(1);
        }
        for &l in &links {
            self.hold(l as usize, 0);
        }
        self.back_off(slot);
        if !under_way {
            return Ok(());
        }
        self.load_step(slot, step);
        let all = std::mem::take(&mut self.step_scratch);
        let mut next_real = real.iter().peekable();
        let mut free = Vec::with_capacity(all.len() - real.len());
        for (i, x) in all.iter().enumerate() {
            if next_real.next_if_eq(&&(i as u32)).is_none() {
                free.push(*x);
            }
        }
        self.step_scratch = all;
        let route_ids = self.routes_of(&free)?;
        let (states, dirty) = {
            let members = Self::members(self.machine, &self.routes, &mut self.route_caps, &free, &route_ids);
            self.timer.states_at(&members, &[], &self.link_capacity, now - step_start)
        };
        let spawned = self.spawn_states(slot, step, step_start, &free, &route_ids, &states, &dirty);
        debug_assert!(spawned > 0, "the reserved part has a transfer still under way");
        let run = &mut self.collectives[slot as usize];
        run.outstanding = run.outstanding - 1 + spawned;
        Ok(())
    }

    /// Ends a partial reservation (if any): frees its links and adds the bytes and transfers of
    /// the reserved parts that ran to their end.
    fn end_partial(&mut self, slot: u32) -> Result<()> {
        let Some(p) = self.collectives[slot as usize].partial.take() else { return Ok(()) };
        if p.held {
            for &l in &p.links {
                self.hold(l as usize, 0);
            }
        }
        for pc in p.classes.iter().filter(|pc| pc.runs > 0) {
            self.load_step(slot, pc.rep);
            let scratch = std::mem::take(&mut self.step_scratch);
            let mut next_real = pc.real.iter().peekable();
            for (i, x) in scratch.iter().enumerate() {
                if next_real.next_if_eq(&&(i as u32)).is_some() {
                    continue;
                }
                let route = self.route(x.src, x.dst, x.rail)?;
                for &l in &self.routes[route as usize].links {
                    self.link_bytes[l as usize] += (x.bytes * pc.runs) as f64;
                }
            }
            self.flows_created += pc.free_count * pc.runs;
            self.step_scratch = scratch;
        }
        Ok(())
    }

    /// A compute task's time on its GPU, stretched by the GPU's fault factor (whole nanoseconds,
    /// rounded, so runs stay reproducible).
    fn with_faults(&self, t: TaskId, ns: Nanos) -> Nanos {
        if self.machine.compute_factor.is_empty() {
            return ns; // no faults: the common case, on every fixed task
        }
        let task = self.dag.task(t);
        match (task.gpu, task.phase.category()) {
            (Some(g), crate::dag::Category::Compute) => match self.machine.compute_factor.get(g as usize) {
                Some(&f) if f != 1.0 => (ns as f64 * f).round() as Nanos,
                _ => ns,
            },
            _ => ns,
        }
    }

    fn route(&mut self, src: DeviceId, dst: DeviceId, rail: u32) -> Result<u32> {
        if let Some(&r) = self.route_index.get(&(src, dst, rail)) {
            return Ok(r);
        }
        let route = if rail == NO_RAIL {
            self.machine.railless_route(src, dst)
        } else {
            self.machine.route_via_rail(src, dst, rail)
        };
        let route = route.ok_or_else(|| {
            Error::topology(
                self.machine.name.clone(),
                format!("no route from {} to {}", self.machine.device_name(src), self.machine.device_name(dst)),
            )
        })?;
        self.mirror.add_route(&route.links);
        self.routes.push(route);
        let id = (self.routes.len() - 1) as u32;
        self.route_index.insert((src, dst, rail), id);
        Ok(id)
    }

    fn new_pending(&mut self, p: Pending) -> u32 {
        self.flows_created += 1;
        match self.free_pending.pop() {
            Some(s) => {
                self.pending[s as usize] = p;
                s
            }
            None => {
                self.pending.push(p);
                (self.pending.len() - 1) as u32
            }
        }
    }

    /// Starts pending `slot` as a flow on `route` in a live flow's `state` (a shadow turned into a
    /// flow: `mirror.rs`, `shadow.rs`). Its links are marked for the next solve, which leaves an
    /// unchanged component as it is and re-solves one that did change as a full run would.
    fn flow_in_state(&mut self, route: u32, state: fluid::FlowState, slot: u32) {
        let links = std::mem::take(&mut self.routes[route as usize].links);
        let (g, version) = self.net.insert_state(&links, state);
        for &l in &links {
            self.net.mark_dirty(l);
        }
        self.routes[route as usize].links = links;
        self.map_flow(g, slot);
        if let Some(due) = state.due {
            self.push(due, EventKind::FlowDone(g, version));
        }
    }

    fn map_flow(&mut self, f: FlowId, slot: u32) {
        if self.flow_slot.len() <= f as usize {
            self.flow_slot.resize(f as usize + 1, 0);
        }
        self.flow_slot[f as usize] = slot;
    }

    fn start_flow(&mut self, owner: Owner, x: Xfer, step: u32) -> Result<()> {
        let route = self.route(x.src, x.dst, x.rail)?;
        self.start_flow_on(owner, x, step, route);
        Ok(())
    }

    /// [`Engine::start_flow`] on a route already found; returns its pending slot.
    fn start_flow_on(&mut self, owner: Owner, x: Xfer, step: u32, route: u32) -> u32 {
        let latency = x.latency(&self.routes[route as usize]);
        let (src, dst, bytes, cap) = (x.src, x.dst, x.bytes, x.cap);
        let at = self.now.saturating_add(latency);
        let slot = self.new_pending(Pending { owner, route, bytes, src, dst, step, start: at, cap });
        self.push(at, EventKind::FlowActivate(slot));
        slot
    }

    /// Sets who holds link `l` (0: nobody), keeping count of the images' links held.
    fn hold(&mut self, l: usize, holder: u32) {
        let was = self.reserved_by[l] != 0;
        self.reserved_by[l] = holder;
        self.mirror.hold(l, was, holder != 0);
    }

    /// Processor-shared compute: a flow of `work_ns` over the resource's capacity-one "link".
    fn start_shared(&mut self, t: TaskId, resource: u32, work_ns: Nanos, cap: f64) {
        if work_ns == 0 {
            return self.push(self.now, EventKind::TaskDone(t));
        }
        let p = Pending {
            owner: Owner::Task(t),
            route: SHARED_ROUTE,
            bytes: work_ns,
            src: 0,
            dst: 0,
            step: 0,
            start: self.now,
            cap: f64::INFINITY,
        };
        let slot = self.new_pending(p);
        self.flows_created -= 1; // compute, not a transfer
        let link = self.machine.links.len() as u32 + resource;
        let f = self.net.add(&[link], work_ns as f64, cap, self.now);
        self.map_flow(f, slot);
    }

    fn activate(&mut self, slot: u32) -> Result<()> {
        let p = self.pending[slot as usize];
        let nlinks = self.routes[p.route as usize].links.len();
        if p.bytes == 0 || nlinks == 0 {
            return self.flow_finished(slot);
        }
        self.mirror_before_move(slot)?;
        let rep_live = self.shadow_before_move(slot)?;
        // Traffic arriving on a reserved link: the collective holding it goes back to flows first.
        // (A partly reserved collective's own flows may cross links it holds for another class.)
        for i in 0..nlinks {
            let l = self.routes[p.route as usize].links[i] as usize;
            let holder = self.reserved_by[l];
            if holder != 0 && !matches!(p.owner, Owner::Collective(c) if c + 1 == holder) {
                self.materialize(holder - 1)?;
            }
        }
        let cap = self.route_caps.get(self.machine, &self.routes, p.route, p.bytes).min(p.cap);
        // Joins the solver with the flows like it at this instant (a shadowing original or
        // representative needs its own flow id at once; flow records keep the plain path).
        if !(rep_live || self.mirror.shadowing() || self.options.unbundled_flows || self.options.record_flows) {
            self.to_bundle.push((slot, cap));
            return Ok(());
        }
        self.flush_bundles();
        let route = &self.routes[p.route as usize];
        let f = self.net.add(&route.links, p.bytes as f64, cap, self.now);
        self.map_flow(f, slot);
        self.mirror_moving(slot, f);
        if rep_live {
            self.shadow_moving(slot, f);
        }
        Ok(())
    }

    fn flow_finished(&mut self, slot: u32) -> Result<()> {
        let p = self.pending[slot as usize];
        self.free_pending.push(slot);
        if p.route == SHARED_ROUTE {
            let Owner::Task(t) = p.owner else { unreachable!("shared compute belongs to a task") };
            return self.finish(t);
        }
        self.shadows_arrive(slot);
        for &l in &self.routes[p.route as usize].links {
            self.link_bytes[l as usize] += p.bytes as f64;
        }
        let task = match p.owner {
            Owner::Task(t) => t,
            Owner::Collective(c) => self.collectives[c as usize].task,
        };
        if self.options.record_flows {
            self.flow_records.push(FlowRecord {
                task,
                step: p.step,
                src: p.src,
                dst: p.dst,
                bytes: p.bytes,
                start: p.start,
                end: self.now,
                route: p.route,
            });
        }
        match p.owner {
            Owner::Task(t) => {
                self.finish(t)?;
                self.mirror_finished(t)
            }
            Owner::Collective(c) => {
                let run = &mut self.collectives[c as usize];
                run.outstanding -= 1;
                if run.outstanding > 0 {
                    return Ok(());
                }
                self.step_done(c)
            }
        }
    }

    /// Every transfer of a collective's current step has arrived: the next step, or the end.
    fn step_done(&mut self, c: u32) -> Result<()> {
        let run = &mut self.collectives[c as usize];
        run.step += 1;
        if run.step < run.plan.step_count() {
            return self.start_step(c);
        }
        self.end_partial(c)?;
        let t = self.collectives[c as usize].task;
        self.free_collectives.push(c);
        self.finish(t)
    }

    /// Under compute contention, lets `f` re-time the compute a collective starting or ending
    /// slows, then posts the new ends (the stale ones are dropped by their generation).
    fn retime_with(
        &mut self,
        f: impl FnOnce(&mut contention::Contention, &'a Dag, &'a Machine, &mut Vec<contention::Retimed>),
    ) {
        let Some(c) = self.contention.as_mut() else { return };
        let mut out = std::mem::take(&mut self.retimed);
        f(c, self.dag, self.machine, &mut out);
        for r in out.drain(..) {
            self.push(r.at, EventKind::ComputeDone(r.task, r.generation));
        }
        self.retimed = out;
    }

    fn finish(&mut self, t: TaskId) -> Result<()> {
        self.end[t as usize] = self.now;
        self.done += 1;
        let now = self.now;
        self.retime_with(|c, dag, _, out| c.task_finished(dag, t, now, out));
        if let Some(q) = self.dag.task(t).queue {
            self.queue_busy[q as usize] = false;
            self.queues_now.push(q);
        }
        let dag = self.dag;
        for &s in dag.successors(t) {
            let w = &mut self.waiting_preds[s as usize];
            *w -= 1;
            if *w == 0 {
                self.ready_now.push(s);
            }
        }
        Ok(())
    }

    /// An event past the engine's range: names the task it belongs to. Durations and rates are
    /// range-checked where they are read, so this takes many long tasks in a row (or a huge
    /// iteration count); the time is never wrapped into a smaller one.
    fn overflowed(&self, ev: EventKind) -> Error {
        let task = match ev {
            EventKind::TaskDone(t) | EventKind::ComputeDone(t, _) => Some(t),
            EventKind::FlowActivate(slot) => Some(self.owner_task(self.pending[slot as usize].owner)),
            EventKind::FlowDone(f, _) => Some(self.owner_task(self.pending[self.flow_slot[f as usize] as usize].owner)),
            EventKind::CollectiveDone(c, _) | EventKind::PartialDone(c, _) => Some(self.collectives[c as usize].task),
        };
        let what = match task {
            Some(t) => format!("task {t} ({})", self.dag.task(t).label()),
            None => "an event".to_string(),
        };
        Error::overflow(
            format!("simulated time in {what}"),
            format!(
                "it would end after 2^62 ns (146 years of simulated time), at {:.3e} s or later; a duration, size or rate \
                 in the input is out of scale",
                self.now as f64 * 1e-9
            ),
        )
    }

    fn owner_task(&self, owner: Owner) -> TaskId {
        match owner {
            Owner::Task(t) => t,
            Owner::Collective(c) => self.collectives[c as usize].task,
        }
    }

    fn stalled(&self) -> Error {
        let pending = self.dag.len() - self.done;
        let stuck = (0..self.dag.len()).find(|&t| self.end[t] == Nanos::MAX).expect("some task is unfinished");
        let example = format!(
            "task {stuck} ({}) waits on {} predecessors",
            self.dag.task(stuck as TaskId).label(),
            self.waiting_preds[stuck]
        );
        Error::Stalled { time_ns: self.now, pending, example }
    }
}
