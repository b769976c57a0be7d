//! The discrete-event engine. Runs a [`Dag`] on a [`Machine`]: a task starts when its predecessors
//! are done and its serial queue (if any) is free; fixed-time tasks end after their duration;
//! transfers become flows that share link bandwidth ([`fluid`]); collectives run their lowered
//! steps one after another. Time is integer nanoseconds and every tie is broken by insertion
//! order, so the same inputs give the same [`Run`], bit for bit.
//!
//! The engine does no I/O and knows no strategy: it sees tasks, queues, flows and link capacities.

pub mod fluid;

use crate::collective::{Layout, Plan};
use crate::dag::{Dag, Discipline, TaskId, Work};
use crate::error::{Error, Result};
use crate::hw::{DeviceId, Machine, Route};
use crate::units::Nanos;
use fluid::{Completion, FlowId, FluidNet};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// What the engine records beyond task spans.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep one record per flow (start, end, bytes, links) for timelines. Costs memory.
    pub record_flows: bool,
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
    /// Events processed, and flows created.
    pub events: u64,
    pub flows: u64,
    pub flow_records: Vec<FlowRecord>,
    /// Routes used by flows (indexed by [`FlowRecord::route`]).
    pub routes: Vec<Route>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// A fixed-time task ends.
    TaskDone(TaskId),
    /// A flow's route latency has passed; its bytes start to move.
    FlowActivate(u32),
    /// A flow's last byte arrives (valid only if the version still matches).
    FlowDone(FlowId, u32),
}

/// Ordered by time, then by insertion sequence: the deterministic tie-break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    time: Nanos,
    seq: u64,
    kind: EventKind,
}

#[derive(Debug, Clone, Copy)]
enum Owner {
    Task(TaskId),
    Collective(u32),
}

/// A flow waiting out its route latency, or moving bytes.
#[derive(Debug, Clone, Copy)]
struct Pending {
    owner: Owner,
    route: u32,
    bytes: u64,
    src: DeviceId,
    dst: DeviceId,
    step: u32,
    /// Set once activated.
    flow: Option<FlowId>,
    start: Nanos,
}

#[derive(Debug, Clone, Copy)]
struct CollectiveRun {
    task: TaskId,
    plan: Plan,
    group: u32,
    step: u32,
    outstanding: u32,
}

/// Runs `dag` on `machine`.
pub fn simulate(dag: &Dag, machine: &Machine, options: Options) -> Result<Run> {
    Engine::new(dag, machine, options).run()
}

struct Engine<'a> {
    dag: &'a Dag,
    machine: &'a Machine,
    options: Options,
    now: Nanos,
    seq: u64,
    events: BinaryHeap<Reverse<Event>>,
    waiting_preds: Vec<u32>,
    start: Vec<Nanos>,
    end: Vec<Nanos>,
    done: usize,
    queue_busy: Vec<bool>,
    /// Per queue: ready tasks keyed by (priority or 0, readiness sequence).
    queue_ready: Vec<BinaryHeap<Reverse<(i64, u64, TaskId)>>>,
    net: FluidNet,
    /// Pending/active flows, indexed by slot; `flow_slot[f]` maps a fluid flow back to its slot.
    pending: Vec<Pending>,
    free_pending: Vec<u32>,
    flow_slot: Vec<u32>,
    collectives: Vec<CollectiveRun>,
    free_collectives: Vec<u32>,
    routes: Vec<Route>,
    route_index: HashMap<(DeviceId, DeviceId), u32>,
    completions: Vec<Completion>,
    /// Reused buffer for a collective step's transfers (device pairs and bytes).
    step_scratch: Vec<(DeviceId, DeviceId, u64)>,
    link_bytes: Vec<f64>,
    events_processed: u64,
    flows_created: u64,
    flow_records: Vec<FlowRecord>,
}

impl<'a> Engine<'a> {
    fn new(dag: &'a Dag, machine: &'a Machine, options: Options) -> Self {
        let n = dag.len();
        let capacity: Vec<f64> = machine.links.iter().map(|l| l.capacity()).collect();
        Engine {
            dag,
            machine,
            options,
            now: 0,
            seq: 0,
            events: BinaryHeap::with_capacity(1024),
            waiting_preds: (0..n as TaskId).map(|t| dag.pred_count(t)).collect(),
            start: vec![Nanos::MAX; n],
            end: vec![Nanos::MAX; n],
            done: 0,
            queue_busy: vec![false; dag.queues().len()],
            queue_ready: vec![BinaryHeap::new(); dag.queues().len()],
            net: FluidNet::new(capacity),
            pending: Vec::new(),
            free_pending: Vec::new(),
            flow_slot: Vec::new(),
            collectives: Vec::new(),
            free_collectives: Vec::new(),
            routes: Vec::new(),
            route_index: HashMap::new(),
            completions: Vec::new(),
            step_scratch: Vec::new(),
            link_bytes: vec![0.0; machine.links.len()],
            events_processed: 0,
            flows_created: 0,
            flow_records: Vec::new(),
        }
    }

    fn push(&mut self, time: Nanos, kind: EventKind) {
        self.seq += 1;
        self.events.push(Reverse(Event { time, seq: self.seq, kind }));
    }

    fn run(mut self) -> Result<Run> {
        for t in 0..self.dag.len() as TaskId {
            if self.waiting_preds[t as usize] == 0 {
                self.make_ready(t)?;
            }
        }
        loop {
            // Settle bandwidth shares once per instant, after every event at `now` is handled.
            let next = self.events.peek().map(|e| e.0.time);
            if next != Some(self.now) {
                self.solve_flows();
            }
            let Some(Reverse(ev)) = self.events.pop() else { break };
            debug_assert!(ev.time >= self.now, "time never goes back");
            self.now = ev.time;
            self.events_processed += 1;
            match ev.kind {
                EventKind::TaskDone(t) => self.finish(t)?,
                EventKind::FlowActivate(slot) => self.activate(slot)?,
                EventKind::FlowDone(f, version) => {
                    if self.net.is_live(f) && self.net.version(f) == version {
                        let slot = self.flow_slot[f as usize];
                        self.net.remove(f);
                        self.flow_finished(slot)?;
                    }
                }
            }
        }
        if self.done < self.dag.len() {
            return Err(self.stalled());
        }
        Ok(Run {
            makespan: self.end.iter().copied().max().unwrap_or(0),
            start: self.start,
            end: self.end,
            link_bytes: self.link_bytes,
            events: self.events_processed,
            flows: self.flows_created,
            flow_records: self.flow_records,
            routes: self.routes,
        })
    }

    fn solve_flows(&mut self) {
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        self.net.solve(self.now, &mut completions);
        for c in &completions {
            self.push(c.time, EventKind::FlowDone(c.flow, c.version));
        }
        self.completions = completions;
    }

    fn make_ready(&mut self, t: TaskId) -> Result<()> {
        let task = self.dag.task(t);
        match task.queue {
            Some(q) => {
                let key = match self.dag.queues()[q as usize].discipline {
                    Discipline::Fifo => 0,
                    Discipline::Priority => task.priority as i64,
                };
                self.seq += 1;
                self.queue_ready[q as usize].push(Reverse((key, self.seq, t)));
                if !self.queue_busy[q as usize] {
                    self.dispatch(q)?;
                }
                Ok(())
            }
            None => self.begin(t),
        }
    }

    fn dispatch(&mut self, q: u32) -> Result<()> {
        if let Some(Reverse((_, _, t))) = self.queue_ready[q as usize].pop() {
            self.queue_busy[q as usize] = true;
            self.begin(t)?;
        }
        Ok(())
    }

    fn begin(&mut self, t: TaskId) -> Result<()> {
        self.start[t as usize] = self.now;
        match self.dag.task(t).work {
            Work::Fixed { ns } => self.push(self.now + ns, EventKind::TaskDone(t)),
            Work::Transfer { src, dst, bytes } => self.start_flow(Owner::Task(t), src, dst, bytes, 0)?,
            Work::Collective { group, op, algorithm, bytes } => {
                let gpus = &self.machine.gpus;
                let layout = Layout::from_nodes(self.dag.group(group).iter().map(|&r| gpus[r as usize].node));
                // A calibrated efficiency below 1 stands for time the library loses beyond the links.
                let bytes = (bytes as f64 / self.machine.efficiency(op, algorithm)).round() as u64;
                let plan = Plan::lower_on(op, algorithm, layout, bytes);
                if plan.step_count() == 0 {
                    self.push(self.now, EventKind::TaskDone(t));
                } else {
                    let run = CollectiveRun { task: t, plan, group, step: 0, outstanding: 0 };
                    let slot = match self.free_collectives.pop() {
                        Some(s) => {
                            self.collectives[s as usize] = run;
                            s
                        }
                        None => {
                            self.collectives.push(run);
                            (self.collectives.len() - 1) as u32
                        }
                    };
                    self.start_step(slot)?;
                }
            }
        }
        Ok(())
    }

    fn start_step(&mut self, slot: u32) -> Result<()> {
        let CollectiveRun { plan, group, step, .. } = self.collectives[slot as usize];
        let mut scratch = std::mem::take(&mut self.step_scratch);
        scratch.clear();
        let ranks = self.dag.group(group);
        let gpus = &self.machine.gpus;
        plan.for_each_transfer(step, |x| {
            let dev = |r: u32| gpus[ranks[r as usize] as usize].device;
            scratch.push((dev(x.src), dev(x.dst), x.bytes));
        });
        self.collectives[slot as usize].outstanding = scratch.len() as u32;
        for &(src, dst, bytes) in &scratch {
            self.start_flow(Owner::Collective(slot), src, dst, bytes, step)?;
        }
        self.step_scratch = scratch;
        Ok(())
    }

    fn route(&mut self, src: DeviceId, dst: DeviceId) -> Result<u32> {
        if let Some(&r) = self.route_index.get(&(src, dst)) {
            return Ok(r);
        }
        let route = self.machine.shortest_path(src, dst).ok_or_else(|| {
            Error::topology(
                self.machine.name.clone(),
                format!("no route from {} to {}", self.machine.device_name(src), self.machine.device_name(dst)),
            )
        })?;
        self.routes.push(route);
        let id = (self.routes.len() - 1) as u32;
        self.route_index.insert((src, dst), id);
        Ok(id)
    }

    fn start_flow(&mut self, owner: Owner, src: DeviceId, dst: DeviceId, bytes: u64, step: u32) -> Result<()> {
        let route = self.route(src, dst)?;
        let p = Pending { owner, route, bytes, src, dst, step, flow: None, start: self.now };
        let slot = match self.free_pending.pop() {
            Some(s) => {
                self.pending[s as usize] = p;
                s
            }
            None => {
                self.pending.push(p);
                (self.pending.len() - 1) as u32
            }
        };
        self.flows_created += 1;
        let latency = self.routes[route as usize].latency_ns;
        self.push(self.now + latency, EventKind::FlowActivate(slot));
        Ok(())
    }

    fn activate(&mut self, slot: u32) -> Result<()> {
        let p = self.pending[slot as usize];
        let route = &self.routes[p.route as usize];
        self.pending[slot as usize].start = self.now;
        if p.bytes == 0 || route.links.is_empty() {
            return self.flow_finished(slot);
        }
        let cap = route.rate_cap(self.machine, p.bytes);
        let f = self.net.add(&route.links, p.bytes as f64, cap, self.now);
        if self.flow_slot.len() <= f as usize {
            self.flow_slot.resize(f as usize + 1, 0);
        }
        self.flow_slot[f as usize] = slot;
        self.pending[slot as usize].flow = Some(f);
        Ok(())
    }

    fn flow_finished(&mut self, slot: u32) -> Result<()> {
        let p = self.pending[slot as usize];
        self.free_pending.push(slot);
        let route = &self.routes[p.route as usize];
        for &l in &route.links {
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
            Owner::Task(t) => self.finish(t),
            Owner::Collective(c) => {
                let run = &mut self.collectives[c as usize];
                run.outstanding -= 1;
                if run.outstanding > 0 {
                    return Ok(());
                }
                run.step += 1;
                if run.step < run.plan.step_count() {
                    self.start_step(c)
                } else {
                    let t = run.task;
                    self.free_collectives.push(c);
                    self.finish(t)
                }
            }
        }
    }

    fn finish(&mut self, t: TaskId) -> Result<()> {
        self.end[t as usize] = self.now;
        self.done += 1;
        if let Some(q) = self.dag.task(t).queue {
            self.queue_busy[q as usize] = false;
            self.dispatch(q)?;
        }
        let dag = self.dag;
        for &s in dag.successors(t) {
            let w = &mut self.waiting_preds[s as usize];
            *w -= 1;
            if *w == 0 {
                self.make_ready(s)?;
            }
        }
        Ok(())
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
