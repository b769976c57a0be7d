//! A lower bound on a parallel plan's simulated step time, from the cost model alone (no DAG, no
//! machine): what `dagsim plan` ranks plans by before simulating them, so that it can stop once
//! no plan left can enter the best k ([`crate::plan_search::search_best`]).
//!
//! # Why it is a lower bound
//!
//! The step time is `max_g E1(g) - max_g E0(g)` ([`crate::report::steady_state`], one period
//! per pair of iterations: with more iterations it is the mean of such differences, so a bound on
//! each is a bound on the mean), where `Ek(g)` is the end of the update task of simulated GPU `g`
//! in iteration `k` (the DAG's `iteration_end`). Let `g*` be a GPU with the largest `E0`, on
//! stage `s*`. The plan builder ([`crate::dag::plan::build_plan`]) gives, as DAG edges (so in any
//! run of the engine, whatever the machine, contention or collective model):
//!
//! 1. each GPU's first compute task of iteration 1 after its own iteration-0 update (unless the
//!    strategy schedules by priority: then the bound is 0);
//! 2. each GPU's steps (a pass of one micro-batch through one model chunk) in the schedule's
//!    order ([`crate::dag::schedule::stage_order`]), each step's layers one after another, each
//!    layer's compute before whatever follows it (its TP/CP/EP collectives, the next layer), and
//!    the GPU's update after its last step;
//! 3. a step after the step of another stage (or chunk) whose output it needs
//!    ([`crate::dag::schedule::upstream`]), through a pipeline transfer or directly.
//!
//! Every task lasts at least its nominal time: a compute task its cost (a slow GPU's factor is
//! at least 1), a host launch or join at least 0, and a collective at least what one rank must
//! move of its data through its own links ([`GpuPorts::collective_floor_ns`]). So the longest
//! path from `g*`'s first step of iteration 1 through the graph of steps (nodes weighted by
//! their compute and by the floors of the collectives the builder chains after a layer: TP
//! collectives unless they overlap the GEMMs, EP and CP collectives, a CP ring's sends beside
//! their chunks; edges 2 and 3) ends no earlier than `E0(g*)` plus its length, and that end is
//! before some simulated GPU's `E1`: `max E1 - max E0 >= LB(s*)`. `s*` is not known in advance,
//! so the bound is the least of `LB(s)` over the stages. Every GPU of a stage runs the same steps
//! with the same costs (TP ranks hold equal shares; the symmetric reduction keeps whole stages),
//! so one GPU per stage stands for all.
//!
//! A collective over a CP or TP group is floored, besides, by what the engine's own lowering and
//! routes give it on the machine ([`MachineFloors`], under the ideal collective model): steps
//! one after another, each at least its slowest transfer alone (latency, then bytes at the least
//! peak rate of its route, a route between nodes crossing one NIC; inside a node, a ring
//! all-reduce's 2 (n - 1) steps at one NVLink route's rate, where the ports' floor has the
//! (n - 1) / n share at every port's). Groups of a stage sit at different places (inside a node,
//! across two), so a stage takes the least such floor over its groups, and one GPU still stands
//! for all.
//!
//! # The data-parallel queues
//!
//! Each stage's `LB(s)` is also raised to what a GPU of the stage's DP communicator must run
//! inside the period (`data_parallel_bound`; for the default runtime, nominal GPU speed, no
//! expert or hybrid groups), so the bound is the least over stages of the larger of the two. Each DP group's
//! collectives of one kind run one at a time on one FIFO queue, the engine starting a ready
//! task whenever the queue is free. For tasks on one such queue with releases at least `r_j`
//! after an anchor, floors `p_j` and tails `q_j` (the least time from a task's end to the end
//! of the period): for any x, those released at x or later all start after x, so the last of
//! them ends no earlier than x + their floors, and the period no earlier than that plus the
//! least of their tails (`queue_bound`). Floors are the collective's over the DP group, as
//! above (ports, and the engine's lowering and routes on the stage's group that does best: a
//! ring over 1,024 ranks pays its 1,023 steps' latency).
//!
//! - The gradient reduce-scatters (all-reduces without ZeRO) of iteration 1 on `g*`'s DP group
//!   each wait for `g*`'s backward of the bucket's last layer (or its whole backward without
//!   WFBP) and precede its update: anchored at `E0(g*)`, released no earlier than the chain of
//!   `g*`'s own layers before that layer in its stage's order (edges 1 and 2), tail 0.
//!   Buckets as the builder plans them on the stage's layers.
//! - With one stage, ZeRO-3/FSDP parameter all-gathers of iteration 1 on `g*`'s DP group G (one
//!   per layer, micro-batch and pass) on G's gather queue: the iteration's first two wait for
//!   every member's iteration-0 update, `g*`'s among them; each later one for the compute of the
//!   layer two before on the replica `r0` that made it, whose first compute of the iteration
//!   waits for G's first gather. So every one starts after `E0(g*)`, the j-th no earlier than
//!   `r0`'s chain up to the layer two before (the same chain as `g*`'s: same stage, same costs),
//!   and `g*`'s compute of the layer waits for it: released at that chain, tail `g*`'s chain from
//!   the layer to its end. Step by step besides: a GPU's layer starts after its previous layer
//!   and its gather; a gather ends no earlier than its floor after the start of the layer two
//!   before (on `r0`, whose chain and groups' floors are `g*`'s) and, on the FIFO queue (tasks
//!   start in the order they became ready), after the gather before it, which became ready
//!   strictly earlier wherever the layer between has compute to do; the first two are ready
//!   together, so unordered. Not under PyTorch FSDP's syncs, which hold some gathers back.
//! - ZeRO-1/2: after the update, each bucket's updated parameters are all-gathered over the
//!   group, one at a time on its gather queue, each once every member's update is done (so after
//!   `E0(g*)`); the first forward of micro-batch 0 of each of the bucket's layers (of every layer
//!   of the stage, for DeepSpeed's optimizers, which gather inside their step) waits for it. From
//!   there the longest path through the graph of steps still runs (the path from the step, less
//!   the step's layers before it): the last of any set of these gathers ends no earlier than
//!   their floors summed, and the period after it by the least of their tails.
//!
//! Without pipeline parallelism this is one GPU's compute per step. With it, `LB(s)` is the part
//! of the pipeline's fill and drain that lies downstream of stage `s`'s first step: for the first
//! stage, the whole pipeline (fill, steady phase, drain). Left out (so the bound is lower than
//! the step): the pipeline transfers, the data-parallel gradient reduction and ZeRO/FSDP
//! parameter gathers where the conditions above fail, the optimizer's update, host
//! launches, codec tasks, and all contention.

use crate::collective::{Algorithm, CollectiveModel, CollectiveOp, Latency, Lowerer, NO_RAIL};
use crate::dag::exchange;
use crate::dag::plan::collective_op;
use crate::dag::schedule::{stage_order, upstream, Pass, Step};
use crate::error::Result;
use crate::hw::{DeviceId, Machine};
use crate::parallel::{MpOptimizer, Sharding};
use crate::predict_plan::PlanSetup;
use crate::strategy::CommSource;
use crate::units::Nanos;
use crate::workload::{CommGroup, Workload};
use std::collections::HashMap;
use std::sync::Mutex;

/// The most bytes per ns any one GPU of a machine can send (the sum of the peak rates of the links
/// leaving its device) and receive (of the links entering it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPorts {
    pub egress: f64,
    pub ingress: f64,
}

impl GpuPorts {
    pub fn of(machine: &Machine) -> GpuPorts {
        let n = machine.devices.len();
        let (mut out, mut inn) = (vec![0.0; n], vec![0.0; n]);
        for l in &machine.links {
            out[l.from as usize] += l.capacity();
            inn[l.to as usize] += l.capacity();
        }
        let most = |v: &[f64]| machine.gpus.iter().map(|g| v[g.device as usize]).fold(0.0, f64::max);
        GpuPorts { egress: most(&out), ingress: most(&inn) }
    }

    /// A floor on the time of a collective of `bytes` (as [`CollectiveOp`] counts them) over `n`
    /// ranks, whatever its algorithm: what one rank must send or receive of the data, at no more
    /// than its ports' rate. An all-reduce or reduce-scatter rank sends at least its part of the
    /// other ranks' shares ((n - 1) / n of the buffer; a switch that reduced in flight would not
    /// remove that); an all-gather or all-reduce rank receives the other ranks' shares; an
    /// all-to-all sends (n - 1) / n of its buffer; a ring step sends its buffer. Every transfer
    /// the engine runs crosses its source's and destination's links, whose shared rate never
    /// exceeds their peak (the fluid model's capacity is the curve's peak; rate caps only lower
    /// it), and ends no earlier than its last byte ([`crate::units::transfer_ns`] rounds up).
    /// Rounded down, less 1 ns, so that float rounding cannot lift it above the engine's integer
    /// time.
    pub fn collective_floor_ns(&self, op: CollectiveOp, bytes: u64, n: u32) -> Nanos {
        if n < 2 {
            return 0;
        }
        let share = bytes as f64 * (n - 1) as f64 / n as f64;
        let (send, receive) = match op {
            CollectiveOp::AllReduce => (share, share),
            CollectiveOp::AllGather => (0.0, share),
            CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => (share, 0.0),
            CollectiveOp::SendRecv => (bytes as f64, 0.0),
            _ => (0.0, 0.0),
        };
        let at = |b: f64, rate: f64| if rate > 0.0 && b > 0.0 { b / rate } else { 0.0 };
        let t = at(send, self.egress).max(at(receive, self.ingress));
        if t.is_finite() {
            (t.floor() as Nanos).saturating_sub(1)
        } else {
            0
        }
    }
}

/// The groups of one kind on one stage, as the plan builder lays them out
/// ([`crate::dag::plan`]'s `LayerGroups`): `width` ranks from `first`, each group `size` ranks
/// `stride` apart (a CP group: the ranks of one TP rank in `size` consecutive DP ranks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct StageGroups {
    first: u32,
    width: u32,
    stride: u32,
    size: u32,
}

impl StageGroups {
    fn ranks(&self, index: u32) -> Vec<u32> {
        let (t, q) = (index % self.stride, index / self.stride);
        (0..self.size).map(|c| self.first + t + self.stride * (q * self.size + c)).collect()
    }
}

/// A route's latency and least peak rate, bytes per ns.
type RouteFloor = (Nanos, f64);

/// A machine's floors on collectives: its GPUs' ports ([`GpuPorts`]) and, under the ideal
/// collective model, what the engine's own lowering ([`Lowerer`]) and routes give a collective
/// over given GPUs. The engine runs a collective's steps one after another; a step ends when
/// the last of its transfers does; a transfer waits out its latency (its route's, or the
/// lowering's exact figure) before its bytes move, and then moves no faster than its own cap or
/// any link of its route at that link's peak ([`crate::units::transfer_ns`] rounds up). So a
/// collective lasts at least the sum over its steps of the most any one of its transfers needs
/// alone: latency plus bytes at the least of those rates (less 1 ns per step against float
/// rounding). A transfer between nodes takes one route, so one NIC: where a group spans nodes
/// that is the rate that counts, not the sum of the GPU's ports. Memoised per search (routes and
/// per-stage results), so the thousands of plans of a search share them.
pub struct MachineFloors<'m> {
    machine: &'m Machine,
    pub ports: GpuPorts,
    routes: Mutex<HashMap<(DeviceId, DeviceId, u32), Option<RouteFloor>>>,
    least: Mutex<HashMap<(StageGroups, CollectiveOp, Algorithm, u64), Nanos>>,
}

impl<'m> MachineFloors<'m> {
    pub fn new(machine: &'m Machine) -> Self {
        MachineFloors {
            machine,
            ports: GpuPorts::of(machine),
            routes: Mutex::new(HashMap::new()),
            least: Mutex::new(HashMap::new()),
        }
    }

    /// The latency and least peak rate (with the transfer's own cap) of the route the engine
    /// gives a transfer (`Engine::route`: the railless route, or the one through `rail`).
    fn route(&self, src: DeviceId, dst: DeviceId, rail: u32) -> Option<RouteFloor> {
        if let Some(&r) = self.routes.lock().expect("no thread panics holding it").get(&(src, dst, rail)) {
            return r;
        }
        let m = self.machine;
        let route = if rail == NO_RAIL { m.railless_route(src, dst) } else { m.route_via_rail(src, dst, rail) };
        let r = route.map(|r| {
            let rate = r.links.iter().map(|&l| m.links[l as usize].capacity()).fold(f64::INFINITY, f64::min);
            (r.latency_ns, rate)
        });
        self.routes.lock().expect("no thread panics holding it").insert((src, dst, rail), r);
        r
    }

    /// The floor on `op` of `bytes` over the GPUs `ranks` (0 where it cannot be worked out: the
    /// NCCL collective model, a lowering or route the engine would refuse).
    fn floor(&self, ranks: &[u32], op: CollectiveOp, algorithm: Algorithm, bytes: u64) -> Nanos {
        let m = self.machine;
        if m.collectives != CollectiveModel::Ideal || ranks.len() < 2 || bytes == 0 {
            return 0;
        }
        let Ok(plan) = Lowerer::new().lower(m, 0, ranks, op, algorithm, bytes) else { return 0 };
        // Steps of a class move the same transfers: each class is timed once.
        let mut by_class: HashMap<u32, Nanos> = HashMap::new();
        let mut total: Nanos = 0;
        for step in 0..plan.step_count() {
            let class = plan.step_class(step);
            let t = match by_class.get(&class) {
                Some(&t) => t,
                None => {
                    let mut most: Option<Nanos> = Some(0);
                    plan.for_each_transfer(step, |x| {
                        let dev = |r: u32| m.gpus[ranks[r as usize] as usize].device;
                        let Some((route_latency, rate)) = self.route(dev(x.src), dev(x.dst), x.rail) else {
                            most = None;
                            return;
                        };
                        let latency = match x.latency {
                            Latency::Route => route_latency,
                            Latency::Exact(ns) => ns,
                        };
                        let rate = rate.min(x.cap);
                        let moving = if x.bytes > 0 && rate > 0.0 && rate.is_finite() {
                            (x.bytes as f64 / rate).floor() as Nanos
                        } else {
                            0
                        };
                        most = most.map(|t| t.max(latency.saturating_add(moving)));
                    });
                    let Some(t) = most else { return 0 };
                    let t = t.saturating_sub(1);
                    by_class.insert(class, t);
                    t
                }
            };
            total = total.saturating_add(t);
        }
        total
    }

    /// The least floor of `op` over the groups of `groups` (one GPU of the stage stands for all,
    /// so the bound takes the group that does best).
    fn least_floor(&self, groups: StageGroups, op: CollectiveOp, algorithm: Algorithm, bytes: u64) -> Nanos {
        let key = (groups, op, algorithm, bytes);
        if let Some(&t) = self.least.lock().expect("no thread panics holding it").get(&key) {
            return t;
        }
        let count = groups.width / groups.size.max(1);
        let mut least = Nanos::MAX;
        for index in 0..count {
            least = least.min(self.floor(&groups.ranks(index), op, algorithm, bytes));
            if least == 0 {
                break;
            }
        }
        let least = if count == 0 { 0 } else { least };
        self.least.lock().expect("no thread panics holding it").insert(key, least);
        least
    }
}

/// The lower bound on `setup`'s simulated step time, ns (see the module's documentation), on a
/// machine whose GPUs have at most `ports`.
pub fn step_lower_bound_ns(setup: &PlanSetup, ports: GpuPorts) -> Result<Nanos> {
    bound(setup, ports, None)
}

/// [`step_lower_bound_ns`] on `machine`, with the context-parallel sends floored as the engine
/// lowers and routes them there ([`MachineFloors`]): tighter where a CP group spans nodes.
pub fn step_lower_bound_on(setup: &PlanSetup, machine: &MachineFloors) -> Result<Nanos> {
    bound(setup, machine.ports, Some(machine))
}

fn bound(setup: &PlanSetup, ports: GpuPorts, machine: Option<&MachineFloors>) -> Result<Nanos> {
    if setup.plan.cp > 1 {
        // Simulated as the folded plan (CP folded into DP), as `PlanSetup::simulate` does.
        setup.plan.check(setup.plan.gpus(), setup.model.layers)?;
        return bound(&setup.folded()?, ports, machine);
    }
    let s = &setup.strategy;
    // Priority scheduling lets a layer's next forward start once its own gradients are in, before
    // the update (edge 1 does not hold).
    if s.priority_partition.is_some() || matches!(s.runtime, Some(crate::strategy::Runtime::ByteScheduler(_))) {
        return Ok(0);
    }
    let p = &setup.plan;
    let cost = setup.cost()?;
    // The workload `PlanSetup::simulate` runs (the tied head's copy in the DP exchange's buckets).
    let workload = setup.plan_workload(&cost);
    let chunks = setup.chunks(workload.layers.len());
    // The ranks of the group a layer's collectives run over, where the builder puts them on the
    // layer's chain (after its compute): TP collectives unless they overlap the GEMMs.
    let group_size = |g: CommGroup| match g {
        CommGroup::Tensor if p.tp_overlap => 1,
        CommGroup::Tensor => p.tp,
        CommGroup::Expert => p.ep,
        CommGroup::ExpertTensor => p.etp,
        CommGroup::Context => p.cp_folded,
    };
    // A collective of a layer of `stage` over its `group` of n ranks: at least what one rank must
    // move through its ports, and, over a CP or TP group, what the engine's own lowering and
    // routes give the group of the stage that does best (one GPU stands for the whole stage).
    let floor = |stage: u32, group: CommGroup, op: CollectiveOp, bytes: u64, n: u32| -> Nanos {
        let own = ports.collective_floor_ns(op, bytes, n);
        let lowered = match (machine, group) {
            (Some(m), CommGroup::Context) => {
                let groups = StageGroups { first: stage * p.tp * p.dp, width: p.tp * p.dp, stride: p.tp, size: n };
                m.least_floor(groups, op, s.allreduce, bytes)
            }
            // A TP group: tp consecutive ranks (`ParallelPlan::rank`, TP fastest).
            (Some(m), CommGroup::Tensor) => {
                let groups = StageGroups { first: stage * p.tp * p.dp, width: p.tp * p.dp, stride: 1, size: n };
                m.least_floor(groups, op, s.allreduce, bytes)
            }
            _ => 0,
        };
        own.max(lowered)
    };
    // One layer's time on the chain in a pass: its compute (under a CP ring, each chunk beside
    // its send: the next waits for both), then its collectives.
    let layer_ns = |stage: u32, l: usize, pass: Pass| -> Nanos {
        let layer = &workload.layers[l];
        let total = s.compute_ns(match pass {
            Pass::Forward => layer.forward.mean_ns,
            Pass::Backward => layer.backward.mean_ns,
        });
        let Some(comm) = &layer.tp else { return total };
        let n = group_size(comm.group).max(1);
        if n < 2 {
            return total;
        }
        let compute = match &comm.ring {
            Some(ring) => {
                let sends = if pass == Pass::Forward { &ring.forward } else { &ring.backward };
                let steps = ring.steps().max(1) as u64;
                (0..steps)
                    .map(|j| {
                        let chunk = total * (j + 1) / steps - total * j / steps;
                        let send = sends.get(j as usize).copied().unwrap_or(0);
                        chunk.max(floor(stage, comm.group, CollectiveOp::SendRecv, send, n))
                    })
                    .sum()
            }
            None => total,
        };
        let ops = if pass == Pass::Forward { &comm.forward } else { &comm.backward };
        compute + ops.iter().map(|&op| floor(stage, comm.group, collective_op(op), comm.bytes, n)).sum::<Nanos>()
    };
    // Each (stage, chunk, pass), as the builder chains it: the same for every micro-batch, so
    // summed once.
    let sums: Vec<Vec<[Nanos; 2]>> = chunks
        .iter()
        .zip(0..)
        .map(|(stage_chunks, stage)| {
            stage_chunks
                .iter()
                .map(|chunk| {
                    [Pass::Forward, Pass::Backward].map(|pass| chunk.iter().map(|&l| layer_ns(stage, l, pass)).sum())
                })
                .collect()
        })
        .collect();
    let time = |stage: u32, step: &Step| -> Nanos {
        sums[stage as usize][step.chunk as usize][usize::from(step.pass == Pass::Backward)]
    };
    // Each stage's chain, and with the machine its DP queues: the least over stages.
    let graph = PipelineTails::new(p.pp, p.vp, p.micro_batches().max(1), p.schedule, &time);
    let step_tail = |stage: u32, step: &Step| graph.of(stage, step);
    Ok((0..p.pp)
        .filter_map(|st| {
            let exchange = match machine {
                Some(m) => data_parallel_bound(setup, &workload, &chunks, st, m, &layer_ns, &step_tail),
                None => 0,
            };
            graph.first(st).map(|t| t.max(exchange))
        })
        .min()
        .unwrap_or(0))
}

/// The floor that the DP communicator of a GPU of `stage` puts on the step (see the module's
/// documentation, "The data-parallel queues"): 0 where its conditions do not hold.
#[allow(clippy::too_many_arguments)]
fn data_parallel_bound(
    setup: &PlanSetup,
    workload: &Workload,
    chunks: &[Vec<Vec<usize>>],
    stage: u32,
    machine: &MachineFloors,
    layer_ns: &dyn Fn(u32, usize, Pass) -> Nanos,
    step_tail: &dyn Fn(u32, &Step) -> Option<Nanos>,
) -> Nanos {
    let (p, s, m) = (&setup.plan, &setup.strategy, machine.machine);
    // One DP group per (stage, TP rank) holding every dense gradient, buckets of the default
    // runtime, collectives of the model, GPUs at their nominal speed.
    if p.dp < 2
        || p.ep > 1
        || p.sharding == Sharding::FsdpHybrid
        || (p.fsdp_wrap_layer && p.sharding.shards_params())
        || s.runtime.is_some()
        || s.comm_source != CommSource::Model
        || s.sparse.is_some()
        || !s.grad_codec().is_free()
        || !m.compute_factor.is_empty()
    {
        return 0;
    }
    // The stage's layers (global indices, in order) and the workload the exchange is planned on
    // (the builder's stage workload).
    let own: Vec<usize> = {
        let mut v: Vec<usize> = chunks[stage as usize].iter().flatten().copied().collect();
        v.sort_unstable();
        v
    };
    let staged;
    let view = if p.pp > 1 {
        staged = Workload { layers: own.iter().map(|&l| workload.layers[l].clone()).collect(), ..workload.clone() };
        &staged
    } else {
        workload
    };
    let Ok(exchange) = exchange::plan(view, s, m, p.dp) else { return 0 };
    let micro_batches = p.micro_batches().max(1);
    let layers = workload.layers.len();
    // The GPU's layers of an iteration in the order it runs them, (layer, pass), with start[j]
    // the least time from the end of the GPU's update to the start of its j-th (its own steps'
    // chain, edges 1 and 2), and where each micro-batch's backward runs each layer.
    // (Only the micro-batches whose gradients are reduced: every one under ZeRO-2/3, else the last.)
    let reduced: Vec<u32> =
        if p.sharding.shards_grads() { (0..micro_batches).collect() } else { vec![micro_batches - 1] };
    let first_reduced = reduced[0];
    let mut seq: Vec<(usize, Pass)> = Vec::new();
    let mut backward_at: Vec<Option<usize>> = vec![None; reduced.len() * layers];
    for step in stage_order(p.schedule, p.pp, p.vp, micro_batches, stage) {
        let chunk = &chunks[stage as usize][step.chunk as usize];
        if step.pass == Pass::Backward && step.micro_batch >= first_reduced {
            let row = (step.micro_batch - first_reduced) as usize * layers;
            for &l in chunk.iter().rev() {
                backward_at[row + l] = Some(seq.len());
                seq.push((l, step.pass));
            }
        } else if step.pass == Pass::Backward {
            seq.extend(chunk.iter().rev().map(|&l| (l, step.pass)));
        } else {
            seq.extend(chunk.iter().map(|&l| (l, step.pass)));
        }
    }
    let at_backward = |mb: u32, l: usize| backward_at[(mb - first_reduced) as usize * layers + l];
    // Each layer's floor on the chain, per pass (indexed by global layer).
    let times: [Vec<Nanos>; 2] = [Pass::Forward, Pass::Backward].map(|pass| {
        let mut v = vec![0; layers];
        for &l in &own {
            v[l] = layer_ns(stage, l, pass);
        }
        v
    });
    let mut start: Vec<Nanos> = Vec::with_capacity(seq.len() + 1);
    let mut at: Nanos = 0;
    for &(l, pass) in &seq {
        start.push(at);
        at = at.saturating_add(times[usize::from(pass == Pass::Backward)][l]);
    }
    start.push(at);
    let end = at;
    let groups = StageGroups { first: stage * p.tp * p.dp, width: p.tp * p.dp, stride: p.tp, size: p.dp };
    let floor = |op: CollectiveOp, bytes: u64| -> Nanos {
        machine.ports.collective_floor_ns(op, bytes, p.dp).max(machine.least_floor(groups, op, s.allreduce, bytes))
    };
    // The gradient reduction, on the communicator's queue: every bucket of every micro-batch
    // under ZeRO-2/3, of the last one otherwise, each once the GPU's backward has produced the
    // bucket's last gradient (or its whole backward, without WFBP).
    let op = if p.sharding.shards_optimizer() && p.mp_optimizer != MpOptimizer::DsBf16 {
        CollectiveOp::ReduceScatter
    } else {
        CollectiveOp::AllReduce
    };
    let bucket_floors: Vec<Nanos> =
        exchange.buckets.iter().map(|b| floor(op, exchange::wire_bytes(s, b.fp32_bytes))).collect();
    let mut reductions: Vec<Job> = Vec::new();
    for &mb in &reduced {
        for (bucket, &floor) in exchange.buckets.iter().zip(&bucket_floors) {
            let waits_for = own[if s.wfbp { bucket.last } else { 0 }];
            if let Some(j) = at_backward(mb, waits_for) {
                reductions.push(Job { release: start[j], floor, tail: 0 });
            }
        }
    }
    let mut bound = queue_bound(reductions);
    let param_per_grad = setup.precision.bytes() as f64 / p.grad_bytes as f64;
    let param_bytes = |grad_bytes: u64| (grad_bytes as f64 * param_per_grad).round() as u64;
    // ZeRO-3/FSDP parameter gathers (one stage) of iteration 1, on their queue: the first two
    // wait for every member's iteration-0 update, so for `g*`'s; each later one for the compute
    // of the layer two before on the replica that made it, which follows that replica's first
    // compute, which waits for the first gather: so every one starts after `E0(g*)`, the j-th
    // no earlier than the replica's chain up to the layer two before. `g*`'s layer waits for it.
    if p.pp == 1 && p.sharding.shards_params() {
        let gather_floors: Vec<Nanos> =
            workload.layers.iter().map(|x| floor(CollectiveOp::AllGather, param_bytes(x.grad_bytes))).collect();
        let gathers: Vec<Job> = (2..seq.len())
            .filter(|&j| workload.layers[seq[j].0].grad_bytes > 0)
            .map(|j| Job { release: start[j - 2], floor: gather_floors[seq[j].0], tail: end - start[j] })
            .collect();
        bound = bound.max(queue_bound(gathers));
        // The same gathers step by step: a GPU's layer starts after the gather of its parameters
        // and after its previous layer; a gather (the j-th) ends no earlier than its floor after
        // the start of the layer two before on the replica that made it (same chain) and, on the
        // FIFO queue, after the gather before it, which became ready strictly earlier where the
        // layer between has compute to do (readiness order: `Discipline::Fifo`); the first two
        // both wait for the updates, so no order between them. Not with PyTorch FSDP's syncs,
        // which hold some gathers back to a step's start.
        if p.mp_optimizer != MpOptimizer::TorchFsdp {
            // The compute of the task a gather waits for: the layer's first (a CP ring's first
            // chunk, as the builder splits it).
            let compute = |j: usize| {
                let (l, pass) = seq[j];
                let layer = &workload.layers[l];
                let total =
                    s.compute_ns(if pass == Pass::Forward { layer.forward.mean_ns } else { layer.backward.mean_ns });
                let chunks = layer.tp.as_ref().and_then(|c| c.ring.as_ref()).map_or(1, |r| r.steps().max(1));
                total / chunks as u64
            };
            let mut layer_start: Vec<Nanos> = Vec::with_capacity(seq.len());
            let mut previous: Option<Nanos> = None;
            let mut at: Nanos = 0;
            for (j, &(l, pass)) in seq.iter().enumerate() {
                if workload.layers[l].grad_bytes > 0 {
                    let release = if j >= 2 { layer_start[j - 2] } else { 0 };
                    let after = match previous {
                        Some(end) if j >= 2 && compute(j - 2) > 0 => end,
                        _ => 0,
                    };
                    let end = release.max(after).saturating_add(gather_floors[l]);
                    at = at.max(end);
                    previous = Some(end);
                }
                layer_start.push(at);
                at = at.saturating_add(times[usize::from(pass == Pass::Backward)][l]);
            }
            bound = bound.max(at);
        }
    }
    // ZeRO-1/2: after the update, each bucket's parameters are all-gathered over the group, one
    // at a time on its queue, each once every member's update is done (so after `E0(g*)`), and
    // the first forward of micro-batch 0 of each of the bucket's layers (of every layer of the
    // stage under DeepSpeed, whose optimizer gathers inside its step) waits for it: from there
    // the longest path through the steps still runs (`step_tail`, less the step's layers before
    // it).
    if matches!(p.sharding, Sharding::Zero1 | Sharding::Zero2) && exchange.servers.is_none() {
        let mut first_forward: HashMap<usize, Nanos> = HashMap::new();
        for (c, chunk) in chunks[stage as usize].iter().enumerate() {
            let step = Step { micro_batch: 0, chunk: c as u32, pass: Pass::Forward };
            let Some(mut tail) = step_tail(stage, &step) else { continue };
            for &l in chunk {
                first_forward.insert(l, tail);
                tail = tail.saturating_sub(times[0][l]);
            }
        }
        let whole = first_forward.values().copied().max();
        let gathers: Vec<(Nanos, Nanos)> = exchange
            .buckets
            .iter()
            .filter_map(|b| {
                let tail = if p.mp_optimizer.is_deepspeed() {
                    whole
                } else {
                    b.layers.iter().filter_map(|&l| first_forward.get(&own[l]).copied()).max()
                };
                tail.map(|t| (floor(CollectiveOp::AllGather, param_bytes(b.fp32_bytes)), t))
            })
            .collect();
        bound = bound.max(released_together_bound(gathers));
    }
    bound
}

/// A task on a serial queue: the least time from the anchor to its release, its floor, and the
/// least time from its end to the end of the period.
struct Job {
    release: Nanos,
    floor: Nanos,
    tail: Nanos,
}

/// A floor on the end of the period for jobs run one at a time, all released at the anchor, given
/// as (floor, tail): the last of any set of them ends no earlier than their floors summed, and the
/// period after that by the least of their tails. The sets worth taking are those with the
/// longest tails.
fn released_together_bound(mut jobs: Vec<(Nanos, Nanos)>) -> Nanos {
    jobs.sort_by_key(|&(_, tail)| std::cmp::Reverse(tail));
    let (mut sum, mut best): (Nanos, Nanos) = (0, 0);
    for (floor, tail) in jobs {
        sum = sum.saturating_add(floor);
        best = best.max(sum.saturating_add(tail));
    }
    best
}

/// A floor on the end of the period for `jobs` run one at a time: for any x, the jobs released
/// at x or later all start after x, so the last of them to end ends no earlier than x plus their
/// floors, and the period after that by the least of their tails.
fn queue_bound(mut jobs: Vec<Job>) -> Nanos {
    jobs.sort_by_key(|j| std::cmp::Reverse(j.release));
    let (mut sum, mut tail, mut best): (Nanos, Nanos, Nanos) = (0, Nanos::MAX, 0);
    for j in &jobs {
        sum = sum.saturating_add(j.floor);
        tail = tail.min(j.tail);
        best = best.max(j.release.saturating_add(sum).saturating_add(tail));
    }
    best
}

/// The least over stages s of the longest path from stage s's first step through the graph of
/// steps (each stage's order, and each step after its upstream step), nodes weighted by `time`.
#[cfg(test)]
fn pipeline_bound(
    pp: u32,
    vp: u32,
    micro_batches: u32,
    schedule: crate::dag::schedule::Schedule,
    time: &dyn Fn(u32, &Step) -> Nanos,
) -> Nanos {
    let graph = PipelineTails::new(pp, vp, micro_batches, schedule, time);
    (0..pp).filter_map(|st| graph.first(st)).min().unwrap_or(0)
}

/// The longest path from each step of each stage through the graph of steps (each stage's order,
/// and each step after its upstream step), nodes weighted by `time`.
struct PipelineTails {
    positions: Vec<HashMap<Step, usize>>,
    base: Vec<usize>,
    tail: Vec<Nanos>,
}

impl PipelineTails {
    fn new(
        pp: u32,
        vp: u32,
        micro_batches: u32,
        schedule: crate::dag::schedule::Schedule,
        time: &dyn Fn(u32, &Step) -> Nanos,
    ) -> Self {
        let orders: Vec<Vec<Step>> = (0..pp).map(|st| stage_order(schedule, pp, vp, micro_batches, st)).collect();
        // Nodes numbered stage by stage.
        let base: Vec<usize> = orders
            .iter()
            .scan(0, |acc, o| {
                let b = *acc;
                *acc += o.len();
                Some(b)
            })
            .collect();
        let n: usize = orders.iter().map(Vec::len).sum();
        let mut weight = vec![0; n];
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
        let positions: Vec<HashMap<Step, usize>> =
            orders.iter().map(|o| o.iter().enumerate().map(|(i, s)| (*s, i)).collect()).collect();
        for (st, order) in orders.iter().enumerate() {
            for (i, step) in order.iter().enumerate() {
                let v = base[st] + i;
                weight[v] = time(st as u32, step);
                if i > 0 {
                    preds[v].push(v - 1);
                }
                if let Some((src, src_step)) = upstream(*step, st as u32, pp, vp) {
                    if let Some(&j) = positions[src as usize].get(&src_step) {
                        preds[v].push(base[src as usize] + j);
                    }
                }
            }
        }
        for (v, ps) in preds.iter().enumerate() {
            for &u in ps {
                succs[u].push(v);
            }
        }
        // One topological order (Kahn), then, in reverse, the longest path from each step to the
        // end (the heaviest path from a stage's first step runs through the steps reachable from
        // it).
        let mut indegree: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut topo: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
        let mut next = 0;
        while next < topo.len() {
            let u = topo[next];
            next += 1;
            for &v in &succs[u] {
                indegree[v] -= 1;
                if indegree[v] == 0 {
                    topo.push(v);
                }
            }
        }
        debug_assert_eq!(topo.len(), n, "the schedule's steps form a DAG");
        let mut tail: Vec<Nanos> = vec![0; n];
        for &v in topo.iter().rev() {
            tail[v] = weight[v] + succs[v].iter().map(|&u| tail[u]).max().unwrap_or(0);
        }
        PipelineTails { positions, base, tail }
    }

    /// The longest path from `stage`'s `step` (`None`: the stage has no such step).
    fn of(&self, stage: u32, step: &Step) -> Option<Nanos> {
        let i = *self.positions.get(stage as usize)?.get(step)?;
        Some(self.tail[self.base[stage as usize] + i])
    }

    /// The longest path from `stage`'s first step (`None`: no steps).
    fn first(&self, stage: u32) -> Option<Nanos> {
        let positions = self.positions.get(stage as usize)?;
        (!positions.is_empty()).then(|| self.tail[self.base[stage as usize]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::schedule::Schedule;

    #[test]
    fn a_uniform_pipeline_bound_is_its_downstream_fill_and_drain() {
        // 4 stages, 8 micro-batches, f = 1, b = 2 on every stage. From the first stage's first
        // step the compute-only 1F1B pipeline takes (m + p - 1)(f + b) = 33; from stage s's, the
        // forwards of micro-batch 0 on the s stages before it are upstream, not downstream: 33 - s,
        // so the least is the last stage's, 30 (worked out by hand as a fixpoint of the steps'
        // ends).
        let t = |_: u32, s: &Step| if s.pass == Pass::Forward { 1 } else { 2 };
        assert_eq!(pipeline_bound(4, 1, 8, Schedule::OneFOneB, &t), 30);
        // One stage: its own compute.
        assert_eq!(pipeline_bound(1, 1, 8, Schedule::OneFOneB, &t), 24);
    }
}
