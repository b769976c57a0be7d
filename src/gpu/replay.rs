//! Replaying a simulated DAG on real GPUs, to check a prediction against the hardware.
//!
//! [`plan`] (pure, tested without a GPU) turns the DAG, the machine and the simulated run into
//! steps in an order that respects every edge and, among ready tasks, the simulated start times:
//! compute and other fixed-time tasks become proxy kernels of the same duration, host-device
//! transfers become memcpys from pinned memory, GPU-GPU transfers peer copies, collectives NCCL
//! calls, and work the GPUs cannot do themselves (storage reads, transfers between hosts) waits its
//! simulated duration. [`execute`] enqueues the steps on one CUDA stream per (GPU, serial queue)
//! with the DAG's edges as events, and times iteration ends the way the report does (mean period
//! between iteration ends after the first). Never touches the engine or the builder.

use super::calibration::DeviceInfo;
use super::device::{
    compile_spin, cuda, describe, enable_peer, ensure_driver, ensure_library, open, select_devices, Spinner,
    PAGE_LOCKED,
};
use super::stats::Summary;
use crate::collective::CollectiveOp;
use crate::dag::{Dag, Phase, QueueId, TaskId, Work};
use crate::error::{Error, Result};
use crate::hw::{DeviceKind, Machine};
use crate::report::steady_state;
use crate::sim::Run;
use crate::units::Nanos;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Which stream of a GPU a step runs on: its DAG queue, or (tasks without a queue) one stream
/// per phase; collectives all run on the GPU's NCCL stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    Queue(QueueId),
    Unqueued(Phase),
    Collectives,
}

/// What a step does on the GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// A proxy kernel occupying the whole GPU for the task's time (compute, update).
    Kernel {
        ns: Nanos,
    },
    /// Work the GPUs cannot reproduce (a storage read, a transfer between hosts): waits the
    /// simulated duration with a kernel that occupies almost nothing. Not a measurement.
    StandIn {
        ns: Nanos,
    },
    HostToDevice {
        bytes: u64,
    },
    DeviceToHost {
        bytes: u64,
    },
    /// From the step's GPU to `dst_rank`.
    PeerCopy {
        dst_rank: u32,
        bytes: u64,
    },
    Collective {
        op: CollectiveOp,
        bytes: u64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub task: TaskId,
    pub action: Action,
    /// GPU ranks the step runs on (several for a collective or a group-wide fixed task).
    pub ranks: Vec<u32>,
    pub lane: Lane,
    /// Steps (indices into [`ReplayPlan::steps`], all earlier) that must finish first.
    pub after: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPlan {
    pub steps: Vec<Step>,
    pub gpus: u32,
    pub iterations: u32,
    /// Step index of the task ending iteration `i` on GPU `g`: `iteration_end[i * gpus + g]`.
    pub iteration_end: Vec<usize>,
    /// dagsim's steady-state iteration time for this DAG, seconds.
    pub predicted_iteration_s: f64,
}

/// How many steps of each kind a plan holds (for the report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCounts {
    pub kernels: usize,
    pub stand_ins: usize,
    pub host_copies: usize,
    pub peer_copies: usize,
    pub collectives: usize,
}

impl ReplayPlan {
    pub fn counts(&self) -> PlanCounts {
        let mut c = PlanCounts::default();
        for s in &self.steps {
            match s.action {
                Action::Kernel { .. } => c.kernels += 1,
                Action::StandIn { .. } => c.stand_ins += 1,
                Action::HostToDevice { .. } | Action::DeviceToHost { .. } => c.host_copies += 1,
                Action::PeerCopy { .. } => c.peer_copies += 1,
                Action::Collective { .. } => c.collectives += 1,
            }
        }
        c
    }
}

/// Orders and classifies the DAG's tasks for replay. Order: Kahn's algorithm taking, among ready
/// tasks, the earliest simulated start (then the lowest id), so each GPU stream receives its tasks
/// in the order the simulation ran them.
pub fn plan(dag: &Dag, machine: &Machine, run: &Run) -> Result<ReplayPlan> {
    let n = dag.len();
    let mut preds: Vec<Vec<TaskId>> = vec![Vec::new(); n];
    for t in 0..n as TaskId {
        for &s in dag.successors(t) {
            preds[s as usize].push(t);
        }
    }
    let mut waiting: Vec<u32> = (0..n as TaskId).map(|t| dag.pred_count(t)).collect();
    let mut ready: BinaryHeap<Reverse<(Nanos, TaskId)>> =
        (0..n as TaskId).filter(|&t| waiting[t as usize] == 0).map(|t| Reverse((run.start[t as usize], t))).collect();
    let mut step_of = vec![usize::MAX; n];
    let mut steps = Vec::with_capacity(n);
    let all_ranks: Vec<u32> = (0..dag.meta.gpus).collect();
    while let Some(Reverse((_, t))) = ready.pop() {
        let task = dag.task(t);
        let (action, ranks) = classify(dag, machine, run, t, &all_ranks)?;
        let lane = match (action, task.queue) {
            (Action::Collective { .. }, _) => Lane::Collectives,
            (_, Some(q)) => Lane::Queue(q),
            (_, None) => Lane::Unqueued(task.phase),
        };
        let after = preds[t as usize].iter().map(|&p| step_of[p as usize]).collect();
        step_of[t as usize] = steps.len();
        steps.push(Step { task: t, action, ranks, lane, after });
        for &s in dag.successors(t) {
            waiting[s as usize] -= 1;
            if waiting[s as usize] == 0 {
                ready.push(Reverse((run.start[s as usize], s)));
            }
        }
    }
    debug_assert_eq!(steps.len(), n, "a frozen Dag is acyclic");
    Ok(ReplayPlan {
        steps,
        gpus: dag.meta.gpus,
        iterations: dag.meta.iterations,
        iteration_end: dag.meta.iteration_end.iter().map(|&t| step_of[t as usize]).collect(),
        predicted_iteration_s: steady_state(dag, run).iteration_ns * 1e-9,
    })
}

fn classify(dag: &Dag, machine: &Machine, run: &Run, t: TaskId, all_ranks: &[u32]) -> Result<(Action, Vec<u32>)> {
    let task = dag.task(t);
    let own = || task.gpu.map_or_else(|| all_ranks.to_vec(), |g| vec![g]);
    let simulated = run.end[t as usize] - run.start[t as usize];
    let rank_of = |d| machine.gpus.iter().position(|g| g.device == d).map(|r| r as u32);
    Ok(match task.work {
        Work::Fixed { ns } => (Action::Kernel { ns }, own()),
        // Processor-shared (MPS) compute: a kernel of the task's standalone work; concurrent
        // streams share the GPU on the hardware as the fluid model shares it in the simulation.
        Work::Shared { work_ns, .. } => (Action::Kernel { ns: work_ns }, own()),
        Work::Collective { group, op, bytes, .. } => (Action::Collective { op, bytes }, dag.group(group).to_vec()),
        Work::Transfer { src, dst, bytes } => {
            let kind = |d: u32| machine.devices[d as usize].kind;
            match (kind(src), kind(dst), rank_of(src), rank_of(dst)) {
                (DeviceKind::Gpu, DeviceKind::Gpu, Some(s), Some(d)) => {
                    (Action::PeerCopy { dst_rank: d, bytes }, vec![s])
                }
                (DeviceKind::Cpu, DeviceKind::Gpu, _, Some(d)) => (Action::HostToDevice { bytes }, vec![d]),
                (DeviceKind::Gpu, DeviceKind::Cpu, Some(s), _) => (Action::DeviceToHost { bytes }, vec![s]),
                _ => (Action::StandIn { ns: simulated }, own()),
            }
        }
    })
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// CUDA ordinals to use, rank order; empty means the first N GPUs.
    pub devices: Vec<u32>,
    /// Untimed replays of the whole DAG first.
    pub warmup: u32,
    /// Timed replays; the reported iteration time is their median.
    pub repetitions: u32,
}

#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    pub devices: Vec<DeviceInfo>,
    /// Steady-state iteration time of each timed replay, summarised (seconds).
    pub measured_iteration_s: Summary,
    pub predicted_iteration_s: f64,
    /// Host time to enqueue one whole replay (median over the timed replays). When it is not
    /// well below the measured time, the CPU issuing work, not the GPUs, may set the pace.
    pub enqueue_s: f64,
    /// Measured span from the end of iteration 0 to the end of the last (median).
    pub measured_span_s: f64,
}

impl ReplayOutcome {
    /// (predicted - measured) / measured, on the median.
    pub fn relative_error(&self) -> f64 {
        (self.predicted_iteration_s - self.measured_iteration_s.median) / self.measured_iteration_s.median
    }
}

/// Runs the plan on this machine's GPUs.
pub fn execute(plan: &ReplayPlan, opts: &ReplayOptions) -> Result<ReplayOutcome> {
    let present = ensure_driver()?;
    let chosen = select_devices(&opts.devices, present)?;
    if chosen.len() < plan.gpus as usize {
        return Err(Error::Gpu(format!(
            "the DAG is for {} GPUs but only {} {} available",
            plan.gpus,
            chosen.len(),
            if opts.devices.is_empty() { "are" } else { "were chosen with --devices and" }
        )));
    }
    if plan.iterations < 2 {
        return Err(Error::invalid("iterations", "replay needs at least 2 (the first is warm-up)"));
    }
    let devices = &chosen[..plan.gpus as usize];
    let ctxs = open(devices)?;
    let mut gpu = Gpus::prepare(plan, &ctxs)?;
    for _ in 0..opts.warmup {
        gpu.run_once(plan)?;
    }
    let runs = (0..opts.repetitions.max(1)).map(|_| gpu.run_once(plan)).collect::<Result<Vec<Timed>>>()?;
    let summary = |xs: Vec<f64>| Summary::of(&xs).ok_or_else(|| Error::Gpu("replay gave no usable time".into()));
    let measured_iteration_s = summary(runs.iter().map(|r| r.iteration_s).collect())?;
    Ok(ReplayOutcome {
        devices: ctxs.iter().map(describe).collect::<Result<_>>()?,
        measured_iteration_s,
        predicted_iteration_s: plan.predicted_iteration_s,
        enqueue_s: summary(runs.iter().map(|r| r.enqueue_s).collect())?.median,
        measured_span_s: measured_iteration_s.median * (plan.iterations - 1) as f64,
    })
}

use cudarc::driver::{result as cu, sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtrMut};
use std::sync::Arc;

/// One timed replay: steady-state iteration time and host enqueue time, seconds.
struct Timed {
    iteration_s: f64,
    enqueue_s: f64,
}

/// Everything one replay needs on the GPUs, created once and reused by every run.
struct Gpus {
    ctxs: Vec<Arc<CudaContext>>,
    spinners: Vec<Spinner>,
    streams: Vec<Arc<CudaStream>>,
    stream_of: BTreeMap<(u32, Lane), usize>,
    /// Per step, per rank it runs on: (stream index, event recorded when it is done).
    done: Vec<Vec<(usize, CudaEvent)>>,
    /// Owns the memory `device_ptrs` point into.
    _device_bufs: Vec<CudaSlice<u8>>,
    device_ptrs: Vec<sys::CUdeviceptr>,
    /// Owns the page-locked memory `host_ptrs` point into.
    _pinned: Vec<cudarc::driver::PinnedHostSlice<u8>>,
    host_ptrs: Vec<*mut u8>,
    comms: Vec<cudarc::nccl::Comm>,
    nccl_bufs: Vec<CudaSlice<f32>>,
    clock: Arc<CudaStream>,
    clock_events: Vec<CudaEvent>,
}

impl Gpus {
    fn prepare(plan: &ReplayPlan, ctxs: &[Arc<CudaContext>]) -> Result<Gpus> {
        let n = ctxs.len();
        let ptx = compile_spin()?;
        let mut spinners = Vec::with_capacity(n);
        for ctx in ctxs {
            spinners.push(Spinner::load(ctx, &ptx)?);
        }
        // Buffer sizes: the largest message of each kind per rank.
        let (mut dev_bytes, mut host_bytes, mut nccl_bytes) = (vec![1u64; n], vec![1u64; n], 4u64);
        let mut any_collective = false;
        for s in &plan.steps {
            for &r in &s.ranks {
                let r = r as usize;
                match s.action {
                    Action::HostToDevice { bytes } | Action::DeviceToHost { bytes } => {
                        dev_bytes[r] = dev_bytes[r].max(bytes);
                        host_bytes[r] = host_bytes[r].max(bytes);
                    }
                    Action::PeerCopy { dst_rank, bytes } => {
                        dev_bytes[r] = dev_bytes[r].max(bytes);
                        dev_bytes[dst_rank as usize] = dev_bytes[dst_rank as usize].max(bytes);
                    }
                    Action::Collective { op, bytes } => {
                        if !matches!(op, CollectiveOp::AllReduce | CollectiveOp::Broadcast | CollectiveOp::Reduce) {
                            return Err(Error::Gpu(format!("replay cannot run a {op:?} collective with NCCL")));
                        }
                        if s.ranks.len() != n {
                            return Err(Error::Gpu("replay runs collectives over all GPUs only".into()));
                        }
                        any_collective = true;
                        nccl_bytes = nccl_bytes.max(bytes);
                    }
                    Action::Kernel { .. } | Action::StandIn { .. } => {}
                }
            }
        }
        let mut streams = Vec::new();
        let mut stream_of = BTreeMap::new();
        for s in &plan.steps {
            for &r in &s.ranks {
                if let std::collections::btree_map::Entry::Vacant(e) = stream_of.entry((r, s.lane)) {
                    e.insert(streams.len());
                    streams.push(ctxs[r as usize].new_stream().map_err(cuda("cuStreamCreate"))?);
                }
            }
        }
        if plan.steps.iter().any(|s| matches!(s.action, Action::PeerCopy { .. })) {
            for a in ctxs {
                for b in ctxs {
                    if !Arc::ptr_eq(a, b) {
                        enable_peer(a, b)?;
                    }
                }
            }
        }
        let mut device_bufs = Vec::with_capacity(n);
        let mut device_ptrs = Vec::with_capacity(n);
        let mut pinned = Vec::with_capacity(n);
        let mut host_ptrs = Vec::with_capacity(n);
        for (r, ctx) in ctxs.iter().enumerate() {
            let stream = ctx.default_stream();
            let mut buf = stream.alloc_zeros::<u8>(dev_bytes[r] as usize).map_err(cuda("cuMemAlloc"))?;
            device_ptrs.push(buf.device_ptr_mut(&stream).0);
            device_bufs.push(buf);
            // SAFETY: zeroed right away, before any copy reads it.
            let mut host = unsafe { ctx.alloc_pinned_with_flags::<u8>(host_bytes[r] as usize, PAGE_LOCKED) }
                .map_err(cuda("cuMemHostAlloc"))?;
            host.as_mut_slice().map_err(cuda("cuEventSynchronize"))?.fill(0);
            host_ptrs.push(host.as_mut_ptr().map_err(cuda("cuEventSynchronize"))?);
            pinned.push(host);
        }
        let (mut comms, mut nccl_bufs) = (Vec::new(), Vec::new());
        if any_collective {
            // SAFETY: only tries to dlopen NCCL.
            ensure_library(unsafe { cudarc::nccl::sys::is_culib_present() }, "NCCL", "replaying collectives")?;
            let nccl_streams: Vec<Arc<CudaStream>> =
                (0..n as u32).map(|r| streams[stream_of[&(r, Lane::Collectives)]].clone()).collect();
            comms = cudarc::nccl::Comm::from_devices(nccl_streams.clone()).map_err(cuda("ncclCommInitAll"))?;
            for s in &nccl_streams {
                nccl_bufs.push(s.alloc_zeros::<f32>((nccl_bytes as usize).div_ceil(4)).map_err(cuda("cuMemAlloc"))?);
            }
        }
        let mut done = Vec::with_capacity(plan.steps.len());
        for s in &plan.steps {
            let mut evs = Vec::with_capacity(s.ranks.len());
            for &r in &s.ranks {
                let ev = ctxs[r as usize].new_event(None).map_err(cuda("cuEventCreate"))?;
                evs.push((stream_of[&(r, s.lane)], ev));
            }
            done.push(evs);
        }
        let clock = ctxs[0].new_stream().map_err(cuda("cuStreamCreate"))?;
        let clock_events =
            (0..plan.iterations).map(|_| super::device::timing_event(&ctxs[0])).collect::<Result<Vec<_>>>()?;
        for ctx in ctxs {
            ctx.synchronize().map_err(cuda("cuCtxSynchronize"))?;
        }
        Ok(Gpus {
            ctxs: ctxs.to_vec(),
            spinners,
            streams,
            stream_of,
            done,
            _device_bufs: device_bufs,
            device_ptrs,
            _pinned: pinned,
            host_ptrs,
            comms,
            nccl_bufs,
            clock,
            clock_events,
        })
    }

    /// Enqueues the whole DAG once, waits for it, returns its steady-state iteration time.
    fn run_once(&mut self, plan: &ReplayPlan) -> Result<Timed> {
        // Iteration i ends when every GPU's last task of it is done: the clock stream waits for
        // those tasks and records a timing event. Each iteration's wait and record are enqueued
        // as soon as its last end task is, not after the whole DAG: recorded at the end, an event
        // whose tasks had already finished took the time the host finished enqueueing, and the
        // replay reported 9.2 ms for a DAG of 20.1 ms of serial kernels per iteration (BERT-Large
        // on an H200, docs/gpu.md).
        let gpus = plan.gpus as usize;
        let mut clock_after: Vec<(usize, usize)> = (0..plan.iterations as usize)
            .map(|it| (plan.iteration_end[it * gpus..(it + 1) * gpus].iter().copied().max().unwrap_or(0), it))
            .collect();
        clock_after.sort_unstable();
        let mut next_clock = 0;
        let enqueue_start = std::time::Instant::now();
        for (i, step) in plan.steps.iter().enumerate() {
            // Wait for predecessors recorded on other streams (same-stream order is implicit).
            for &(sid, _) in &self.done[i] {
                for &p in &step.after {
                    for (psid, ev) in &self.done[p] {
                        if *psid != sid {
                            self.streams[sid].wait(ev).map_err(cuda("cuStreamWaitEvent"))?;
                        }
                    }
                }
            }
            self.enqueue(step)?;
            for (sid, ev) in &self.done[i] {
                ev.record(&self.streams[*sid]).map_err(cuda("cuEventRecord"))?;
            }
            while next_clock < clock_after.len() && clock_after[next_clock].0 == i {
                let it = clock_after[next_clock].1;
                for g in 0..gpus {
                    for (_, ev) in &self.done[plan.iteration_end[it * gpus + g]] {
                        self.clock.wait(ev).map_err(cuda("cuStreamWaitEvent"))?;
                    }
                }
                self.clock_events[it].record(&self.clock).map_err(cuda("cuEventRecord"))?;
                next_clock += 1;
            }
        }
        let enqueue_s = enqueue_start.elapsed().as_secs_f64();
        for s in &self.streams {
            s.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        }
        self.clock.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        let last = self.clock_events.len() - 1;
        let span_ms =
            self.clock_events[0].elapsed_ms(&self.clock_events[last]).map_err(cuda("cuEventElapsedTime"))? as f64;
        Ok(Timed { iteration_s: span_ms * 1e-3 / last as f64, enqueue_s })
    }

    fn enqueue(&mut self, step: &Step) -> Result<()> {
        let stream = |r: u32| &self.streams[self.stream_of[&(r, step.lane)]];
        match step.action {
            Action::Kernel { ns } | Action::StandIn { ns } => {
                let full = matches!(step.action, Action::Kernel { .. });
                for &r in &step.ranks {
                    self.spinners[r as usize].launch(stream(r), ns, full)?;
                }
            }
            // An empty copy has nothing to time (and CUDA need not accept it).
            Action::HostToDevice { bytes: 0 }
            | Action::DeviceToHost { bytes: 0 }
            | Action::PeerCopy { bytes: 0, .. } => {}
            Action::HostToDevice { bytes } | Action::DeviceToHost { bytes } => {
                let r = step.ranks[0];
                // SAFETY: both buffers were sized for the largest copy of this rank; the host
                // buffer lives as long as `self`.
                let host = unsafe { std::slice::from_raw_parts_mut(self.host_ptrs[r as usize], bytes as usize) };
                let (dptr, s) = (self.device_ptrs[r as usize], stream(r).cu_stream());
                unsafe {
                    match step.action {
                        Action::HostToDevice { .. } => cu::memcpy_htod_async(dptr, host, s),
                        _ => cu::memcpy_dtoh_async(host, dptr, s),
                    }
                }
                .map_err(cuda("cuMemcpyAsync"))?;
            }
            Action::PeerCopy { dst_rank, bytes } => {
                let (src, dst) = (step.ranks[0] as usize, dst_rank as usize);
                // SAFETY: both device buffers were sized for the largest peer copy touching them.
                unsafe {
                    cu::memcpy_peer_async(
                        self.ctxs[dst].cu_ctx(),
                        self.device_ptrs[dst],
                        self.ctxs[src].cu_ctx(),
                        self.device_ptrs[src],
                        bytes as usize,
                        stream(step.ranks[0]).cu_stream(),
                    )
                }
                .map_err(cuda("cuMemcpyPeerAsync"))?;
            }
            Action::Collective { op, bytes } => {
                use cudarc::nccl::{group_end, group_start, ReduceOp};
                let count = (bytes as usize).div_ceil(4).max(1);
                group_start().map_err(cuda("ncclGroupStart"))?;
                for (comm, buf) in self.comms.iter().zip(self.nccl_bufs.iter_mut()) {
                    let mut view = buf.slice_mut(..count);
                    match op {
                        CollectiveOp::AllReduce => comm.all_reduce_in_place(&mut view, &ReduceOp::Sum),
                        CollectiveOp::Broadcast => comm.broadcast_in_place(&mut view, 0),
                        _ => comm.reduce_in_place(&mut view, &ReduceOp::Sum, 0),
                    }
                    .map_err(cuda("NCCL collective"))?;
                }
                group_end().map_err(cuda("ncclGroupEnd"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::Setup;
    use crate::sim::Options;

    fn simulated(gpus: u32, strategy: &str) -> crate::predict::Simulated {
        let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/alexnet_k80.csv");
        let setup = Setup {
            workload: crate::workload::read_trace(&trace, crate::workload::TraceFormat::Auto).unwrap(),
            topology: crate::hw::load_topology("k80-cluster").unwrap(),
            strategy: crate::strategy::Strategy::parse(strategy).unwrap(),
            iterations: 3,
        };
        setup.simulate(gpus, Options::default()).unwrap()
    }

    #[test]
    fn plan_orders_every_task_after_its_predecessors() {
        let sim = simulated(4, "io+wfbp");
        let p = plan(&sim.dag, &sim.machine, &sim.run).unwrap();
        assert_eq!(p.steps.len(), sim.dag.len());
        let mut seen = vec![false; sim.dag.len()];
        for (i, s) in p.steps.iter().enumerate() {
            assert!(!seen[s.task as usize], "task {} twice", s.task);
            seen[s.task as usize] = true;
            assert_eq!(s.after.len() as u32, sim.dag.pred_count(s.task));
            assert!(s.after.iter().all(|&a| a < i), "step {i} waits on a later step");
        }
        // Tasks sharing a GPU stream are enqueued in the order the simulation started them.
        let mut last_start: BTreeMap<(u32, Lane), Nanos> = BTreeMap::new();
        for s in &p.steps {
            for &r in &s.ranks {
                let start = sim.run.start[s.task as usize];
                let prev = last_start.insert((r, s.lane), start).unwrap_or(0);
                assert!(prev <= start, "stream ({r}, {:?}) out of simulated order", s.lane);
            }
        }
        assert_eq!(p.iteration_end.len(), 3 * 4);
        assert!(p.iteration_end.iter().all(|&i| matches!(sim.dag.task(p.steps[i].task).phase, Phase::Update)));
    }

    #[test]
    fn plan_maps_each_task_kind_to_a_gpu_action() {
        let sim = simulated(2, "io+wfbp");
        let p = plan(&sim.dag, &sim.machine, &sim.run).unwrap();
        for s in &p.steps {
            let task = sim.dag.task(s.task);
            match (task.phase, s.action) {
                (Phase::Forward | Phase::Backward | Phase::Update, Action::Kernel { ns }) => {
                    assert_eq!(Work::Fixed { ns }, task.work);
                    assert_eq!(s.ranks, vec![task.gpu.unwrap()]);
                }
                (Phase::Io, Action::StandIn { ns }) => {
                    assert_eq!(ns, sim.run.end[s.task as usize] - sim.run.start[s.task as usize]);
                }
                (Phase::HostToDevice, Action::HostToDevice { bytes }) => {
                    assert!(matches!(task.work, Work::Transfer { bytes: b, .. } if b == bytes));
                    assert_eq!(s.ranks, vec![task.gpu.unwrap()]);
                }
                (Phase::GradientAggregation, Action::Collective { op: CollectiveOp::AllReduce, bytes }) => {
                    assert!(bytes > 0);
                    assert_eq!(s.ranks, vec![0, 1]);
                    assert_eq!(s.lane, Lane::Collectives);
                }
                other => panic!("unexpected mapping {other:?}"),
            }
        }
        let c = p.counts();
        assert_eq!(c.collectives, 3 * sim.dag.tasks().iter().filter(|t| t.iteration == 0 && t.gpu.is_none()).count());
        assert!(c.kernels > 0 && c.host_copies == 2 * 3 && c.stand_ins == 2 * 3 && c.peer_copies == 0);
    }

    #[test]
    fn measured_communication_runs_as_kernels_on_every_gpu() {
        // With comm=trace the all-reduce is the trace's measured time: a fixed task of the whole
        // group, replayed as a kernel of that time on every GPU's communication stream.
        let sim = simulated(2, "wfbp+comm=trace");
        let p = plan(&sim.dag, &sim.machine, &sim.run).unwrap();
        let comm: Vec<&Step> =
            p.steps.iter().filter(|s| sim.dag.task(s.task).phase == Phase::GradientAggregation).collect();
        assert!(!comm.is_empty());
        for s in comm {
            assert!(matches!(s.action, Action::Kernel { .. }), "{s:?}");
            assert_eq!(s.ranks, vec![0, 1]);
            assert!(matches!(s.lane, Lane::Queue(_)));
        }
        assert_eq!(p.counts().collectives, 0);
    }

    #[test]
    fn plan_carries_the_prediction_it_checks() {
        let sim = simulated(2, "none");
        let p = plan(&sim.dag, &sim.machine, &sim.run).unwrap();
        let steady = steady_state(&sim.dag, &sim.run);
        assert_eq!(p.predicted_iteration_s, steady.iteration_ns * 1e-9);
        assert!(p.predicted_iteration_s > 0.0);
    }
}
