//! The gradient exchange of one iteration: which gradients travel together, when they leave and
//! what each framework pays around them. [`plan`] groups the workload's per-tensor gradients the
//! way the strategy's runtime does (one all-reduce per layer; Horovod's cycles and fusion
//! buffers; DDP's buckets; ByteScheduler's prioritised partitions; BytePS and TF/MXNet parameter
//! servers), and [`add_gradient_exchange`] / [`add_server_exchange`] turn a plan into tasks for
//! the ranks' backward passes. The S-SGD and MPS builders call these; nothing here knows about
//! forward passes, data loading or the engine.

use super::{DagBuilder, GroupId, Phase, QueueId, Task, TaskId, Work};
use crate::collective::{Algorithm, CollectiveOp};
use crate::error::{Error, Result};
use crate::hw::Machine;
use crate::strategy::runtime::{BytePs, Ddp, Horovod, Ps};
use crate::strategy::{CommSource, Runtime, Strategy, SPARSE_CHUNK_ELEMENTS};
use crate::units::Nanos;
use crate::workload::Workload;

/// One all-reduce (or one partition pushed to a server): the learnable layers whose gradients it
/// carries, or a piece of one layer's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bucket {
    /// Layers in the order their gradients are produced (backward order).
    pub layers: Vec<usize>,
    pub fp32_bytes: u64,
    /// Lowest layer in the bucket: its backward completes the bucket; it sets the priority.
    pub last: usize,
    /// Gradient tensors (or pieces of one) the bucket carries.
    pub tensors: u64,
    /// Horovod: the cycle that launches it (index into [`Plan::cycles`]).
    pub cycle: Option<usize>,
    /// Server runtimes: the server that holds it.
    pub server: u32,
}

/// How one iteration's gradients are exchanged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub buckets: Vec<Bucket>,
    /// Horovod: each cycle that launches buckets, as (offset from the start of the backward pass
    /// of the cycle's tick, the negotiation that follows it).
    pub cycles: Vec<(Nanos, Nanos)>,
    /// Framework cost of launching one collective or push.
    pub call_ns: Nanos,
    /// Horovod: time to copy one byte into and back out of its fusion buffer (fused buckets only).
    pub copy_ns_per_byte: f64,
    /// ByteScheduler: scheduler cost per partition.
    pub sched_ns: Nanos,
    /// Buckets leave lowest layer first rather than in order of readiness, and the next forward
    /// pass of a layer waits only for that layer's gradients (P3, ByteScheduler).
    pub priority: bool,
    /// Gradients go to parameter servers ([`add_server_exchange`]).
    pub servers: Option<Servers>,
    /// CUDA-aware MPI: each all-reduce is staged through host memory and summed on the CPUs.
    pub host_stage: Option<HostStage>,
}

/// What staging an all-reduce through host memory costs each rank, per byte of the buffer: the
/// copy to the host (and the same back) at the rank's share of its PCIe path when every GPU of
/// its node copies at once, and the CPU's sum of what it receives (per byte of the buffer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HostStage {
    pub copy_ns_per_byte: f64,
    pub sum_ns_per_byte: f64,
}

/// Parameter servers: how many (one per node from the first, each on its node's first host),
/// how gradients reach them and how fast they sum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Servers {
    pub count: u32,
    /// BytePS: reduce-scatter inside the node, every GPU copies its share to the host, one push
    /// per node; the reverse on the way back. Otherwise see `local_reduce`.
    pub byteps: bool,
    /// TF/MXNet: reduce to the node's first GPU and push once per node (MXNet kvstore); false:
    /// every GPU pushes its own gradient (TF parameter_server).
    pub local_reduce: bool,
    /// The server also applies the optimizer to the parameters it holds (TF/MXNet, not BytePS).
    pub server_update: bool,
    pub sum_bytes_per_s: f64,
    /// Pushes start as backward produces each gradient; false: after the GPU's whole backward.
    pub overlap: bool,
}

/// ns one rank spends summing, per byte of the buffer, at `rate` bytes/s: it sums the (n-1)/n it
/// receives under halving-doubling and the ring; under recursive doubling the whole buffer at each
/// of the log2 N steps of the largest power of two, plus once more on the ranks that take in a
/// folded rank's buffer.
fn sum_ns_per_byte(rate: f64, algorithm: Algorithm, ranks: u32) -> f64 {
    let n = ranks.max(1);
    match algorithm {
        Algorithm::RecursiveDoubling => {
            let pow2 = crate::collective::largest_pow2(n);
            1e9 / rate * (pow2.trailing_zeros() + (n > pow2) as u32) as f64
        }
        _ => 1e9 / rate * (n - 1) as f64 / n as f64,
    }
}

/// Groups the workload's gradients as the strategy's runtime does. `ranks` all-reduce (or push),
/// on `machine`.
pub(crate) fn plan(w: &Workload, s: &Strategy, machine: &Machine, ranks: u32) -> Result<Plan> {
    let mut p = Plan {
        buckets: Vec::new(),
        cycles: Vec::new(),
        call_ns: 0,
        copy_ns_per_byte: 0.0,
        sched_ns: 0,
        priority: s.priority_partition.is_some(),
        servers: None,
        host_stage: None,
    };
    let Some(rt) = &s.runtime else {
        p.buckets = legacy_buckets(w, s);
        return Ok(p);
    };
    let total = w.grad_bytes();
    for (field, unit) in rt.chosen_sizes(gradient_element_bytes(w)) {
        if unit > total && total > 0 {
            return Err(Error::invalid(
                format!("strategy field `{field}`"),
                format!(
                    "runtime `{}`: {field} of {unit} bytes is larger than the {total} bytes of gradients of `{}`",
                    rt.kind_name(),
                    w.name
                ),
            ));
        }
    }
    p.call_ns = rt.call_ns();
    p.buckets = match rt {
        Runtime::CaffeMpi => legacy_buckets(w, s),
        Runtime::OpenMpi(o) => {
            p.host_stage = Some(HostStage {
                copy_ns_per_byte: 1.0 / host_copy_rate(machine, ranks),
                sum_ns_per_byte: sum_ns_per_byte(o.sum_bytes_per_s, s.allreduce, ranks),
            });
            legacy_buckets(w, s)
        }
        Runtime::Gloo(g) => {
            p.host_stage = Some(HostStage {
                copy_ns_per_byte: 1.0 / host_copy_rate(machine, ranks),
                sum_ns_per_byte: 1e9 / g.sum_bytes_per_s * (ranks.max(1) - 1) as f64 / ranks.max(1) as f64,
            });
            gloo_buckets(w, g.bucket)
        }
        Runtime::Nccl(_) => per_tensor(w),
        Runtime::Horovod(h) => {
            let (buckets, cycles) = horovod(w, s, h, machine, ranks);
            p.cycles = cycles;
            p.copy_ns_per_byte = copy_ns_per_byte(machine);
            buckets
        }
        Runtime::Ddp(d) => ddp(w, d),
        Runtime::ByteScheduler(b) => {
            p.priority = true;
            p.sched_ns = b.sched_ns;
            pieces(w, b.partition.saturating_mul(gradient_element_bytes(w)))
        }
        Runtime::BytePs(b) => {
            let count = server_count(b.servers, machine, ranks)?;
            p.servers = Some(Servers {
                count,
                byteps: true,
                local_reduce: true,
                server_update: false,
                sum_bytes_per_s: b.sum_bytes_per_s,
                overlap: true,
            });
            byteps(w, b, count)
        }
        Runtime::Ps(x) => {
            let count = server_count(x.servers, machine, ranks)?;
            p.servers = Some(Servers {
                count,
                byteps: false,
                local_reduce: x.local,
                server_update: true,
                sum_bytes_per_s: x.sum_bytes_per_s,
                overlap: x.overlap,
            });
            parameter_servers(w, x, count)
        }
    };
    Ok(p)
}

/// Learnable layers' gradient tensors in the order backward produces them: layers from last to
/// first; within a layer in reverse registration order (bias before weight), as autograd
/// accumulates them.
fn tensors_in_backward_order(w: &Workload) -> impl Iterator<Item = (usize, u64)> + '_ {
    (0..w.layers.len()).rev().flat_map(move |l| w.layers[l].tensors().iter().rev().map(move |&b| (l, b)))
}

fn bucket(layers: Vec<usize>, fp32_bytes: u64, last: usize, tensors: u64) -> Bucket {
    Bucket { layers, fp32_bytes, last, tensors, cycle: None, server: 0 }
}

/// Without a runtime (and with `runtime=caffe-mpi`): one all-reduce per layer; fused until θ
/// bytes (lazy all-reduce); or each layer cut into pieces (priority scheduling).
fn legacy_buckets(w: &Workload, s: &Strategy) -> Vec<Bucket> {
    let learnable: Vec<usize> = (0..w.layers.len()).rev().filter(|&l| w.layers[l].is_learnable()).collect();
    let mut out = Vec::new();
    if let Some(piece) = s.priority_partition {
        for &l in &learnable {
            let mut left = w.layers[l].grad_bytes;
            while left > 0 {
                let bytes = left.min(piece);
                out.push(bucket(vec![l], bytes, l, 1));
                left -= bytes;
            }
        }
        return out;
    }
    let theta = s.fusion.unwrap_or(0);
    let mut open = bucket(Vec::new(), 0, 0, 0);
    for &l in &learnable {
        open.layers.push(l);
        open.fp32_bytes += w.layers[l].grad_bytes;
        open.tensors += w.layers[l].tensors().len() as u64;
        open.last = l;
        if open.fp32_bytes >= theta {
            out.push(std::mem::replace(&mut open, bucket(Vec::new(), 0, 0, 0)));
        }
    }
    if !open.layers.is_empty() {
        out.push(open);
    }
    out
}

/// Bytes of one gradient element: FP16 for mixed-precision workloads, else FP32.
fn gradient_element_bytes(w: &Workload) -> u64 {
    if w.fp16 {
        2
    } else {
        4
    }
}

/// One all-reduce per tensor, as produced.
fn per_tensor(w: &Workload) -> Vec<Bucket> {
    tensors_in_backward_order(w).map(|(l, b)| bucket(vec![l], b, l, 1)).collect()
}

/// Each tensor cut into pieces of at most `piece` bytes, in backward order.
fn pieces(w: &Workload, piece: u64) -> Vec<Bucket> {
    let mut out = Vec::new();
    for (l, bytes) in tensors_in_backward_order(w) {
        let mut left = bytes;
        while left > 0 {
            let b = left.min(piece);
            out.push(bucket(vec![l], b, l, 1));
            left -= b;
        }
    }
    out
}

/// Adds a tensor to an open bucket.
fn add_tensor(open: &mut Bucket, l: usize, bytes: u64) {
    if open.layers.last() != Some(&l) {
        open.layers.push(l);
    }
    open.fp32_bytes += bytes;
    open.tensors += 1;
    open.last = l;
}

/// DDP's buckets (PyTorch `reducer.cpp`, `compute_bucket_assignment_by_size`, after the first
/// iteration's rebuild in gradient-ready order): tensors in the order backward produces them fill
/// a bucket until it holds at least its cap (the first bucket's cap is `first_bucket`, every later
/// one `bucket`); a bucket is all-reduced once all its tensors are ready, buckets in order.
fn ddp(w: &Workload, d: &Ddp) -> Vec<Bucket> {
    let mut out = Vec::new();
    let mut open = bucket(Vec::new(), 0, 0, 0);
    for (l, bytes) in tensors_in_backward_order(w) {
        add_tensor(&mut open, l, bytes);
        let cap = if out.is_empty() { d.first_bucket } else { d.bucket };
        if open.fp32_bytes >= cap {
            out.push(std::mem::replace(&mut open, bucket(Vec::new(), 0, 0, 0)));
        }
    }
    if open.tensors > 0 {
        out.push(open);
    }
    out
}

/// PyTorch 0.4 DDP's buckets for non-NCCL backends (`_take_tensors` in `torch/_utils.py` v0.4):
/// tensors in parameter (forward) order; a tensor that would take a non-empty bucket past `cap`
/// bytes starts the next one. Each is ready when backward reaches its first layer, so they are
/// issued last bucket first.
fn gloo_buckets(w: &Workload, cap: u64) -> Vec<Bucket> {
    let mut out = Vec::new();
    let mut open = bucket(Vec::new(), 0, 0, 0);
    for (l, layer) in w.layers.iter().enumerate() {
        for &bytes in layer.tensors() {
            if open.tensors > 0 && open.fp32_bytes.saturating_add(bytes) > cap {
                out.push(std::mem::replace(&mut open, bucket(Vec::new(), 0, 0, 0)));
            }
            if open.layers.last() != Some(&l) {
                open.layers.push(l);
            }
            if open.tensors == 0 {
                open.last = l;
            }
            open.fp32_bytes += bytes;
            open.tensors += 1;
        }
    }
    if open.tensors > 0 {
        out.push(open);
    }
    out.reverse();
    for b in &mut out {
        b.layers.reverse();
    }
    out
}

/// Horovod's cycles. The background thread wakes every `cycle` (HOROVOD_CYCLE_TIME), agrees with
/// every rank on the tensors ready everywhere, and launches them fused into buffers of at most
/// `fusion` bytes in the order they became ready (a tensor larger than the buffer goes alone).
/// The wake-ups are not synchronised with the backward pass; the model puts the first tick half a
/// cycle after the first gradient is ready (the expected wait) and the next ones a cycle apart, and
/// groups the tensors by the backward pass's own timeline (layer times as the workload gives them).
/// Each tick is followed by the negotiation: with the response cache, one bit-vector all-reduce
/// among all ranks (ceil(log2 N) latencies between hosts, recursive doubling); without it, rank 0
/// gathers every rank's requests (one per ready tensor) and broadcasts the responses.
fn horovod(w: &Workload, s: &Strategy, h: &Horovod, m: &Machine, ranks: u32) -> (Vec<Bucket>, Vec<(Nanos, Nanos)>) {
    // When each layer's gradients are ready, from the start of the backward pass.
    let mut ready = vec![0 as Nanos; w.layers.len()];
    let mut t = 0;
    for l in (0..w.layers.len()).rev() {
        t += s.compute_ns(w.layers[l].backward.mean_ns);
        ready[l] = t;
    }
    let tensors: Vec<(usize, u64)> = tensors_in_backward_order(w).collect();
    let Some(&(first, _)) = tensors.first() else { return (Vec::new(), Vec::new()) };
    let cycle = h.cycle_ns;
    let tick_after = |r: Nanos| -> Nanos {
        let t0 = ready[first] + cycle / 2;
        if cycle == 0 || r <= t0 {
            t0.max(r)
        } else {
            t0 + (r - t0).div_ceil(cycle) * cycle
        }
    };
    let (alpha, rate) = control_path(m, ranks);
    let rounds = (ranks.max(1) as f64).log2().ceil() as u64;
    let mut buckets: Vec<Bucket> = Vec::new();
    let mut cycles: Vec<(Nanos, Nanos)> = Vec::new();
    let mut i = 0;
    while i < tensors.len() {
        let tick = tick_after(ready[tensors[i].0]);
        let mut j = i;
        while j < tensors.len() && ready[tensors[j].0] <= tick {
            j += 1;
        }
        let negotiation = if h.cache {
            rounds * alpha
        } else {
            // Gather of request sizes, gather of the requests, broadcast of the responses; rank 0
            // receives every other rank's requests for this cycle's tensors.
            let request_bytes = ((ranks.saturating_sub(1) as u64) * (j - i) as u64 * HOROVOD_REQUEST_BYTES) as f64;
            3 * rounds * alpha + (request_bytes / rate).round() as Nanos
        };
        let c = cycles.len();
        cycles.push((tick, negotiation));
        let mut open = bucket(Vec::new(), 0, 0, 0);
        for &(l, bytes) in &tensors[i..j] {
            if open.tensors > 0 && open.fp32_bytes + bytes > h.fusion {
                buckets.push(std::mem::replace(&mut open, bucket(Vec::new(), 0, 0, 0)));
            }
            add_tensor(&mut open, l, bytes);
            open.cycle = Some(c);
        }
        buckets.push(open);
        i = j;
    }
    (buckets, cycles)
}

/// Bytes of one Horovod request message (horovod/common/message.h, 0.13: rank, type, dtype,
/// root rank and device as 4-byte fields, the tensor's shape as 8-byte dimensions, and its name,
/// e.g. `allreduce.layer4.2.bn3.weight`): about 64 bytes with a 4-d shape and a 30-character name.
const HOROVOD_REQUEST_BYTES: u64 = 64;

/// Latency and rate between rank 0's host and the last rank's host: the path Horovod's control
/// messages (MPI) take. One node: the host to itself (shared memory), no latency.
fn control_path(m: &Machine, ranks: u32) -> (Nanos, f64) {
    let (a, b) = (m.gpus[0].host, m.gpus[(ranks.max(1) - 1) as usize].host);
    match m.shortest_path(a, b) {
        Some(r) if !r.links.is_empty() => (r.latency_ns, r.rate_cap(m, 1 << 20)),
        _ => (0, f64::INFINITY),
    }
}

/// Time per byte to copy a gradient into a fusion buffer and back out (two passes that each read
/// and write it) at the GPU's memory bandwidth; 0 when the machine's GPU is not a known model.
fn copy_ns_per_byte(m: &Machine) -> f64 {
    match crate::workload::GpuSpec::by_name(&m.gpu_model) {
        Ok(g) => 4.0 / (g.mem_bytes_per_ns() * COPY_EFFICIENCY),
        Err(_) => 0.0,
    }
}

/// Bytes/ns each GPU of rank 0's node gets copying to its host while all of them copy at once:
/// on every link of its path, the link's rate over the number of those GPUs whose paths cross it.
/// OpenMPI copies into `malloc`ed (pageable) memory, which the links' pinned rates overstate.
fn host_copy_rate(m: &Machine, ranks: u32) -> f64 {
    let node = m.gpus[0].node;
    let paths: Vec<Vec<crate::hw::LinkId>> = m.gpus[..ranks.max(1) as usize]
        .iter()
        .filter(|g| g.node == node)
        .filter_map(|g| m.shortest_path(g.device, g.host))
        .map(|r| r.links)
        .collect();
    let Some(own) = paths.first() else { return f64::INFINITY };
    own.iter()
        .map(|l| {
            let sharing = paths.iter().filter(|p| p.contains(l)).count().max(1);
            m.links[*l as usize].bandwidth.peak() / sharing as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Fraction of peak memory bandwidth a device-to-device copy reaches (the roofline's streaming
/// efficiency, `synth::MEMORY_EFFICIENCY`).
const COPY_EFFICIENCY: f64 = 0.75;

/// Servers one per node from the first; more servers than nodes do not fit.
fn server_count(asked: Option<u32>, m: &Machine, ranks: u32) -> Result<u32> {
    let nodes = m.gpus[..ranks as usize].iter().map(|g| g.node).max().map_or(1, |x| x + 1);
    match asked {
        None => Ok(nodes),
        Some(k) if k <= nodes => Ok(k),
        Some(k) => Err(Error::invalid(
            "strategy field `servers`",
            format!(
                "{k} servers do not fit: servers run one per node beside the workers, and {ranks} GPUs of `{}` \
                 span {nodes} node(s)",
                m.name
            ),
        )),
    }
}

/// BytePS: every tensor cut into partitions of at most `partition` bytes; partitions go to the
/// servers round robin (BytePS hashes partition keys, which spreads them evenly).
fn byteps(w: &Workload, b: &BytePs, servers: u32) -> Vec<Bucket> {
    let mut out = pieces(w, b.partition);
    for (k, p) in out.iter_mut().enumerate() {
        p.server = k as u32 % servers;
    }
    out
}

/// TF/MXNet: each tensor lives on one server, round robin over tensors; a tensor larger than
/// `split_above` is split evenly over all servers (MXNet's big arrays).
fn parameter_servers(w: &Workload, x: &Ps, servers: u32) -> Vec<Bucket> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for (l, bytes) in tensors_in_backward_order(w) {
        if bytes > x.split_above && servers > 1 {
            let share = bytes.div_ceil(servers as u64);
            let mut left = bytes;
            for srv in 0..servers {
                let b = left.min(share);
                if b > 0 {
                    out.push(Bucket { server: srv, ..bucket(vec![l], b, l, 1) });
                }
                left -= b;
            }
        } else {
            out.push(Bucket { server: next, ..bucket(vec![l], bytes, l, 1) });
            next = (next + 1) % servers;
        }
    }
    out
}

/// Bytes on the wire for a bucket: compressed, and with sparse chunks only the chosen fraction of
/// its 32K-gradient chunks (the chosen chunks are taken as spread evenly over the pool).
pub(crate) fn wire_bytes(s: &Strategy, fp32_bytes: u64) -> u64 {
    let codec = s.grad_codec().codec;
    match s.sparse {
        None => codec.wire_bytes(fp32_bytes),
        Some(f) => {
            let elements = fp32_bytes / 4;
            let chunks = elements.div_ceil(SPARSE_CHUNK_ELEMENTS);
            let sent = ((chunks as f64 * f).ceil() as u64).clamp(1, chunks);
            codec.wire_bytes((sent * SPARSE_CHUNK_ELEMENTS).min(elements) * 4)
        }
    }
}

/// Bytes of the per-iteration all-reduce of chunk norms that picks the important chunks
/// (GradientFlow 3.2: one FP32 norm per 32K-gradient chunk of the whole pool).
fn chunk_norm_bytes(w: &Workload) -> u64 {
    (w.grad_bytes() / 4).div_ceil(SPARSE_CHUNK_ELEMENTS) * 4
}

/// Queues an exchange runs on, made once per DAG by [`Queues::new`].
pub(super) struct Queues {
    /// The communicator all-reduces run on (priority-ordered for priority plans).
    pub comm: QueueId,
    /// The framework's thread that launches collectives (calls, scheduler overhead), when the
    /// runtime pays for launches.
    pub launch: Option<QueueId>,
    /// Horovod's coordinator (negotiation after each tick).
    pub coordinator: Option<QueueId>,
}

impl Queues {
    pub fn new(b: &mut DagBuilder, plan: &Plan) -> Self {
        let discipline = if plan.priority { super::Discipline::Priority } else { super::Discipline::Fifo };
        let comm = b.add_queue("comm", discipline, None);
        let launch = (plan.call_ns + plan.sched_ns > 0).then(|| b.add_queue("framework", discipline, None));
        let coordinator = (!plan.cycles.is_empty()).then(|| b.add_queue("coordinator", super::Discipline::Fifo, None));
        Queues { comm, launch, coordinator }
    }
}

/// What one iteration's gradient exchange needs besides the ranks' tasks.
pub(super) struct Exchange<'a> {
    pub workload: &'a Workload,
    pub strategy: &'a Strategy,
    pub plan: &'a Plan,
    /// The all-reduce group (every rank).
    pub group: GroupId,
    pub queues: &'a Queues,
    pub iteration: u32,
    /// The task that ends rank 0's forward pass: Horovod's cycles count from it.
    pub backward_start: Option<TaskId>,
    /// All-reduce, or reduce-scatter when the optimizer state is sharded (ZeRO, FSDP).
    pub op: CollectiveOp,
}

/// Adds one iteration's gradient exchange for the ranks whose backward tasks are `bwd[r][layer]`:
/// per bucket an encode task on every rank (made by `codec_task(builder, rank, ns, layer)`) when
/// gradients are compressed, the framework's launch and cycle costs, the all-reduce, a decode task
/// on every rank, and an edge into every rank's update; `on_done(rank, bucket, task)` hears which
/// task makes the bucket usable. With sparse chunks, the chunk-norm all-reduce follows and gates
/// the next iteration's exchange through `prev_picks`. Shared by the S-SGD and MPS builders.
pub(super) fn add_gradient_exchange(
    b: &mut DagBuilder,
    x: &Exchange,
    bwd: &[Vec<TaskId>],
    updates: &[TaskId],
    prev_picks: &mut Option<TaskId>,
    codec_task: &mut dyn FnMut(&mut DagBuilder, usize, Nanos, usize) -> TaskId,
    on_done: &mut dyn FnMut(usize, &Bucket, TaskId),
) {
    let Exchange { workload: w, strategy: s, plan, group, queues, iteration: it, backward_start, op } = *x;
    let codec = s.grad_codec();
    let coded = !codec.is_free();
    let aggregation = |work, queue, phase, layer: Option<usize>| Task {
        work,
        queue: Some(queue),
        phase,
        gpu: None,
        iteration: it,
        layer: layer.map(|l| l as u32),
        priority: layer.map(|l| l as i32).unwrap_or(0),
    };
    // Horovod: a clock from the start of the backward pass ticking at each launching cycle, each
    // tick followed by the negotiation.
    let mut negotiated: Vec<TaskId> = Vec::with_capacity(plan.cycles.len());
    let mut clock = backward_start;
    let mut at = 0;
    for &(tick, negotiation) in &plan.cycles {
        let wait = b.add_task(Task {
            work: Work::Fixed { ns: tick - at },
            queue: None,
            phase: Phase::Coordination,
            gpu: None,
            iteration: it,
            layer: None,
            priority: 0,
        });
        if let Some(c) = clock {
            b.add_edge(c, wait);
        }
        let coordinator = queues.coordinator.expect("made for plans with cycles");
        let n = b.add_task(aggregation(Work::Fixed { ns: negotiation }, coordinator, Phase::Coordination, None));
        b.add_edge(wait, n);
        negotiated.push(n);
        (clock, at) = (Some(wait), tick);
    }
    let mut prev_comm: Option<TaskId> = None;
    for bucket in &plan.buckets {
        let l = bucket.last;
        let work = match s.comm_source {
            CommSource::Model => {
                Work::Collective { group, op, algorithm: s.allreduce, bytes: wire_bytes(s, bucket.fp32_bytes) }
            }
            CommSource::Trace => Work::Fixed {
                ns: bucket.layers.iter().map(|&x| w.layers[x].comm.map(|c| c.mean_ns).unwrap_or(0)).sum(),
            },
        };
        // What the all-reduce waits for on each rank: the bucket's last gradient (WFBP), or the
        // previous all-reduce / the whole backward pass (no overlap).
        let mut before: Vec<TaskId> = if s.wfbp {
            bwd.iter().map(|bwd_r| bwd_r[l]).collect()
        } else {
            match prev_comm {
                Some(p) => vec![p],
                None => bwd.iter().map(|bwd_r| bwd_r[0]).collect(),
            }
        };
        if coded {
            let ns = codec.encode_ns(bucket.fp32_bytes, bucket.tensors);
            before = (0..bwd.len())
                .map(|r| {
                    let e = codec_task(b, r, ns, l);
                    b.add_edge(if s.wfbp { bwd[r][l] } else { bwd[r][0] }, e);
                    e
                })
                .collect();
        }
        if let Some(c) = bucket.cycle {
            before.push(negotiated[c]);
        }
        // The framework's side: the scheduler's turn and the launch call, on its own thread.
        let launch_ns = plan.sched_ns + plan.call_ns;
        if let (true, Some(queue)) = (launch_ns > 0, queues.launch) {
            let call = b.add_task(aggregation(Work::Fixed { ns: launch_ns }, queue, Phase::Coordination, Some(l)));
            before.iter().for_each(|&p| b.add_edge(p, call));
            before = vec![call];
        }
        // Horovod copies the tensors of a fused response into the fusion buffer and back out.
        let copy_ns = if bucket.tensors > 1 {
            (bucket.fp32_bytes as f64 * plan.copy_ns_per_byte / 2.0).round() as Nanos
        } else {
            0
        };
        if copy_ns > 0 {
            let copy =
                b.add_task(aggregation(Work::Fixed { ns: copy_ns }, queues.comm, Phase::GradientAggregation, Some(l)));
            before.iter().for_each(|&p| b.add_edge(p, copy));
            before = vec![copy];
        }
        // CUDA-aware MPI: the buffer goes to host memory first (a blocking copy).
        let wire = wire_bytes(s, bucket.fp32_bytes);
        if let Some(h) = plan.host_stage {
            let ns = (wire as f64 * h.copy_ns_per_byte).round() as Nanos;
            let d2h = b.add_task(aggregation(Work::Fixed { ns }, queues.comm, Phase::GradientAggregation, Some(l)));
            before.iter().for_each(|&p| b.add_edge(p, d2h));
            before = vec![d2h];
        }
        let mut c = b.add_task(aggregation(work, queues.comm, Phase::GradientAggregation, Some(l)));
        before.iter().chain(&*prev_picks).for_each(|&p| b.add_edge(p, c));
        if let Some(p) = prev_comm.filter(|_| !s.wfbp) {
            b.add_edge(p, c);
        }
        // ... the ranks sum on their CPUs during the all-reduce, and the result is copied back.
        if let Some(h) = plan.host_stage {
            let ns = (wire as f64 * (h.sum_ns_per_byte + h.copy_ns_per_byte)).round() as Nanos;
            let h2d = b.add_task(aggregation(Work::Fixed { ns }, queues.comm, Phase::GradientAggregation, Some(l)));
            b.add_edge(c, h2d);
            c = h2d;
        }
        if copy_ns > 0 {
            let out =
                b.add_task(aggregation(Work::Fixed { ns: copy_ns }, queues.comm, Phase::GradientAggregation, Some(l)));
            b.add_edge(c, out);
            c = out;
        }
        for (r, &update) in updates.iter().enumerate() {
            let done = if coded {
                let d = codec_task(b, r, codec.decode_ns(bucket.fp32_bytes, bucket.tensors), l);
                b.add_edge(c, d);
                d
            } else {
                c
            };
            b.add_edge(done, update);
            on_done(r, bucket, done);
        }
        prev_comm = Some(c);
    }
    // Sparse chunks: at the end of the iteration all ranks agree on the next important chunks by
    // all-reducing every chunk's norm.
    if let (Some(_), CommSource::Model, Some(p)) = (s.sparse, s.comm_source, prev_comm) {
        let work =
            Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: s.allreduce, bytes: chunk_norm_bytes(w) };
        let picks = b.add_task(aggregation(work, queues.comm, Phase::GradientAggregation, None));
        b.add_edge(p, picks);
        bwd.iter().for_each(|bwd_r| b.add_edge(bwd_r[0], picks));
        // The picks steer the next iteration's all-reduces, not this update.
        *prev_picks = Some(picks);
    }
}

/// True for the first bucket (piece) of its layer.
pub(super) fn bucket_starts_layer(plan: &[Bucket], bucket: &Bucket) -> bool {
    plan.iter().find(|x| x.last == bucket.last).is_some_and(|first| std::ptr::eq(first, bucket))
}

/// Per-node groups and queues for exchanges through parameter servers, made once per DAG.
pub(super) struct ServerSetup {
    /// Ranks of each node, in order.
    pub nodes: Vec<Vec<u32>>,
    /// Each node's GPUs as a collective group, and the NCCL stream local collectives run on.
    pub node_group: Vec<GroupId>,
    pub node_comm: Vec<QueueId>,
    /// Each server's CPU (its summation engine).
    pub server_cpu: Vec<QueueId>,
    /// Each rank's client thread (calls to push and pull).
    pub client: Vec<QueueId>,
}

impl ServerSetup {
    pub fn new(b: &mut DagBuilder, m: &Machine, ranks: u32, servers: &Servers) -> Self {
        let mut nodes: Vec<Vec<u32>> = Vec::new();
        for r in 0..ranks {
            let node = m.gpus[r as usize].node as usize;
            if nodes.len() <= node {
                nodes.resize(node + 1, Vec::new());
            }
            nodes[node].push(r);
        }
        nodes.retain(|n| !n.is_empty());
        let node_group = nodes.iter().map(|n| b.add_group(n.clone())).collect();
        let node_comm =
            (0..nodes.len()).map(|x| b.add_queue(format!("node{x}.nccl"), super::Discipline::Fifo, None)).collect();
        let server_cpu =
            (0..servers.count).map(|k| b.add_queue(format!("server{k}.cpu"), super::Discipline::Fifo, None)).collect();
        let client =
            (0..ranks).map(|r| b.add_queue(format!("gpu{r}.ps-client"), super::Discipline::Fifo, Some(r))).collect();
        ServerSetup { nodes, node_group, node_comm, server_cpu, client }
    }
}

/// Adds one iteration's exchange through parameter servers for every rank (the graph must hold
/// every rank: `bwd[r]` for all of them). Per bucket (a partition or a tensor's share on one
/// server), by node: the gradient is summed inside the node (BytePS: reduce-scatter, then every
/// GPU copies its share to the host; MXNet: reduce to the node's first GPU, which copies it to the
/// host) and pushed once, or every GPU pushes its own (TF); the server sums each push on its CPU
/// (and, TF/MXNet, applies the optimizer); then the same way back (pull, copy to the GPU(s),
/// all-gather or broadcast inside the node). Every rank's update waits for all its buckets.
pub(super) fn add_server_exchange(
    b: &mut DagBuilder,
    x: &Exchange,
    setup: &ServerSetup,
    m: &Machine,
    bwd: &[Vec<TaskId>],
    updates: &[TaskId],
) {
    let Exchange { plan, iteration: it, .. } = *x;
    let servers = plan.servers.expect("a server plan");
    let single_node = setup.nodes.len() == 1;
    let task = |work, queue, phase, gpu: Option<u32>, l: usize| Task {
        work,
        queue,
        phase,
        gpu,
        iteration: it,
        layer: Some(l as u32),
        priority: l as i32,
    };
    let add = |b: &mut DagBuilder, t: Task, after: &[TaskId]| {
        let id = b.add_task(t);
        after.iter().for_each(|&p| b.add_edge(p, id));
        id
    };
    let call = plan.call_ns;
    let sum_ns = |bytes: u64| (bytes as f64 / servers.sum_bytes_per_s * 1e9).round() as Nanos;
    let server_host = |k: u32| m.gpus[setup.nodes[k as usize][0] as usize].host;
    for bucket in &plan.buckets {
        let (l, bytes) = (bucket.last, bucket.fp32_bytes);
        let srv = bucket.server;
        let host = server_host(srv);
        // Per node: what the push waits for, who pushes, and who gets the pull.
        let mut arrivals: Vec<TaskId> = Vec::new();
        let mut returns: Vec<(usize, Vec<u32>)> = Vec::new();
        for (x, ranks) in setup.nodes.iter().enumerate() {
            let root = ranks[0];
            // A gradient is ready when backward produced it, or when backward ended (no overlap).
            let at = if servers.overlap { l } else { 0 };
            let ready: Vec<TaskId> = ranks.iter().map(|&r| bwd[r as usize][at]).collect();
            let comm = Some(setup.node_comm[x]);
            let grp = setup.node_group[x];
            if servers.byteps || servers.local_reduce {
                let op = if servers.byteps { CollectiveOp::ReduceScatter } else { CollectiveOp::Reduce };
                let algorithm = crate::collective::Algorithm::Ring;
                let local = if ranks.len() > 1 {
                    let c = Work::Collective { group: grp, op, algorithm, bytes };
                    add(b, task(c, comm, Phase::GradientAggregation, None, l), &ready)
                } else {
                    ready[0]
                };
                if single_node && servers.byteps {
                    // One machine: BytePS does not use servers (an all-reduce in two halves).
                    let ag = Work::Collective { group: grp, op: CollectiveOp::AllGather, algorithm, bytes };
                    let ag = add(b, task(ag, comm, Phase::GradientAggregation, None, l), &[local]);
                    ranks.iter().for_each(|&r| b.add_edge(ag, updates[r as usize]));
                    continue;
                }
                // To host memory: every GPU its share (BytePS) or the root everything (MXNet).
                let copiers: Vec<(u32, u64)> = if servers.byteps {
                    let share = bytes.div_ceil(ranks.len() as u64);
                    ranks.iter().map(|&r| (r, share)).collect()
                } else {
                    vec![(root, bytes)]
                };
                let d2h: Vec<TaskId> = copiers
                    .iter()
                    .map(|&(r, share)| {
                        let g = m.gpus[r as usize];
                        let w = Work::Transfer { src: g.device, dst: g.host, bytes: share };
                        add(b, task(w, None, Phase::GradientAggregation, Some(r), l), &[local])
                    })
                    .collect();
                let launch = add(
                    b,
                    task(
                        Work::Fixed { ns: call },
                        Some(setup.client[root as usize]),
                        Phase::Coordination,
                        Some(root),
                        l,
                    ),
                    &d2h,
                );
                let push = Work::Transfer { src: m.gpus[root as usize].host, dst: host, bytes };
                let push = add(b, task(push, None, Phase::GradientAggregation, Some(root), l), &[launch]);
                arrivals.push(add(
                    b,
                    task(
                        Work::Fixed { ns: sum_ns(bytes) },
                        Some(setup.server_cpu[srv as usize]),
                        Phase::ServerReduce,
                        None,
                        l,
                    ),
                    &[push],
                ));
                returns.push((x, vec![root]));
            } else {
                for &r in ranks {
                    let g = m.gpus[r as usize];
                    let launch = add(
                        b,
                        task(Work::Fixed { ns: call }, Some(setup.client[r as usize]), Phase::Coordination, Some(r), l),
                        &[bwd[r as usize][at]],
                    );
                    let push = Work::Transfer { src: g.device, dst: host, bytes };
                    let push = add(b, task(push, None, Phase::GradientAggregation, Some(r), l), &[launch]);
                    arrivals.push(add(
                        b,
                        task(
                            Work::Fixed { ns: sum_ns(bytes) },
                            Some(setup.server_cpu[srv as usize]),
                            Phase::ServerReduce,
                            None,
                            l,
                        ),
                        &[push],
                    ));
                }
                returns.push((x, ranks.clone()));
            }
        }
        if single_node && servers.byteps {
            continue;
        }
        // TF and MXNet servers apply the optimizer once every push is summed (read the summed
        // gradient, the parameters and the momentum, write both back: one more pass).
        let summed = if servers.server_update {
            vec![add(
                b,
                task(
                    Work::Fixed { ns: sum_ns(bytes) },
                    Some(setup.server_cpu[srv as usize]),
                    Phase::ServerReduce,
                    None,
                    l,
                ),
                &arrivals,
            )]
        } else {
            arrivals
        };
        for (x, receivers) in returns {
            let ranks = &setup.nodes[x];
            for &r in &receivers {
                let g = m.gpus[r as usize];
                let dst =
                    if receivers.len() == 1 && (servers.byteps || servers.local_reduce) { g.host } else { g.device };
                // TF and MXNet servers serialise every response on their CPU (gRPC, ps-lite), as
                // they do every push; BytePS's servers reply from a buffer.
                let served = if servers.server_update {
                    let cpu = Some(setup.server_cpu[srv as usize]);
                    vec![add(b, task(Work::Fixed { ns: sum_ns(bytes) }, cpu, Phase::ServerReduce, None, l), &summed)]
                } else {
                    summed.clone()
                };
                let pull = Work::Transfer { src: host, dst, bytes };
                let pull = add(b, task(pull, None, Phase::GradientAggregation, Some(r), l), &served);
                if dst == g.device {
                    b.add_edge(pull, updates[r as usize]);
                    continue;
                }
                // Back to the GPUs: BytePS copies each share up and all-gathers; MXNet copies to
                // the root and broadcasts.
                let algorithm = crate::collective::Algorithm::Ring;
                let copiers: Vec<(u32, u64)> = if servers.byteps {
                    let share = bytes.div_ceil(ranks.len() as u64);
                    ranks.iter().map(|&r| (r, share)).collect()
                } else {
                    vec![(r, bytes)]
                };
                let h2d: Vec<TaskId> = copiers
                    .iter()
                    .map(|&(c, share)| {
                        let gc = m.gpus[c as usize];
                        let w = Work::Transfer { src: gc.host, dst: gc.device, bytes: share };
                        add(b, task(w, None, Phase::GradientAggregation, Some(c), l), &[pull])
                    })
                    .collect();
                let done = if ranks.len() > 1 {
                    let op = if servers.byteps { CollectiveOp::AllGather } else { CollectiveOp::Broadcast };
                    let c = Work::Collective { group: setup.node_group[x], op, algorithm, bytes };
                    add(b, task(c, Some(setup.node_comm[x]), Phase::GradientAggregation, None, l), &h2d)
                } else {
                    h2d[0]
                };
                ranks.iter().for_each(|&r| b.add_edge(done, updates[r as usize]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Layer, Stat};

    fn layer(bwd_us: u64, tensors: &[u64]) -> Layer {
        Layer {
            name: "l".into(),
            forward: Stat::exact(0),
            backward: Stat::exact(bwd_us * 1000),
            comm: None,
            grad_bytes: tensors.iter().sum(),
            grad_tensors: tensors.to_vec(),
            util: None,
            memory: None,
            tp: None,
        }
    }

    fn workload(layers: Vec<Layer>) -> Workload {
        Workload {
            name: "w".into(),
            batch_per_gpu: 1,
            sample_bytes: 0,
            device_sample_bytes: 0,
            layers,
            update: Stat::exact(0),
            data_load: None,
            trace_iterations: 1,
            fp16: false,
        }
    }

    /// GradientFlow's nodes: 4 GPUs under each PCIe switch, 12 GB/s links (GPU to switch, switch
    /// to CPU). All 8 copy at once: the switch's uplink is shared by 4, so 3 GB/s each. 16 ranks:
    /// each sums 15/16 of the buffer at OpenMPI's one-core 4 GB/s.
    #[test]
    fn openmpi_stages_through_the_host_at_a_share_of_the_pcie_uplink() {
        let m = crate::hw::load_topology("gradientflow-cluster").unwrap().instantiate(16).unwrap();
        assert_eq!(host_copy_rate(&m, 16), 3.0);
        let s = Strategy::parse("io+allreduce=halving-doubling+runtime=openmpi").unwrap();
        let w = workload(vec![layer(1, &[1000]), layer(1, &[2000])]);
        let p = plan(&w, &s, &m, 16).unwrap();
        let h = p.host_stage.expect("openmpi stages through the host");
        assert_eq!(h.copy_ns_per_byte, 1.0 / 3.0);
        assert_eq!(h.sum_ns_per_byte, 0.25 * 15.0 / 16.0);
        assert_eq!(p.buckets, legacy_buckets(&w, &s));
    }

    /// Recursive doubling on 16 ranks: every rank sums the whole buffer at each of 4 steps, at
    /// OpenMPI's one-core 4 GB/s (0.25 ns per byte): 1 ns per byte; on 24 ranks (16 + 8 folded in)
    /// 5 sums. Halving-doubling sums 15/16 of it.
    #[test]
    fn openmpi_recursive_doubling_sums_the_whole_buffer_each_step() {
        let m = crate::hw::load_topology("gradientflow-cluster").unwrap().instantiate(16).unwrap();
        let w = workload(vec![layer(1, &[1000])]);
        let s = Strategy::parse("io+allreduce=recursive-doubling+runtime=openmpi").unwrap();
        let h = plan(&w, &s, &m, 16).unwrap().host_stage.expect("openmpi stages through the host");
        assert_eq!(h.sum_ns_per_byte, 0.25 * 4.0);
        assert_eq!(sum_ns_per_byte(4e9, Algorithm::RecursiveDoubling, 24), 0.25 * 5.0);
        assert_eq!(sum_ns_per_byte(4e9, Algorithm::HalvingDoubling, 16), 0.25 * 15.0 / 16.0);
    }

    #[test]
    fn gloo_cuts_1_mib_buckets_in_parameter_order_and_stages_through_the_host() {
        let mb = 1u64 << 20;
        // Forward order: layer 0 [0.5 MiB, 0.5 MiB, 4 B], layer 1 [3 MiB], layer 2 [0.25 MiB, 4 B].
        // Cut at 1 MiB in that order: {0.5, 0.5 MiB} (exactly 1 MiB; the 4 B would pass it), {4 B},
        // {3 MiB} (alone: larger than the cap), {0.25 MiB + 4 B}. Issued last bucket first.
        let w = workload(vec![layer(1, &[mb / 2, mb / 2, 4]), layer(1, &[3 * mb]), layer(1, &[mb / 4, 4])]);
        let b = gloo_buckets(&w, mb);
        let sizes: Vec<u64> = b.iter().map(|x| x.fp32_bytes).collect();
        assert_eq!(sizes, [mb / 4 + 4, 3 * mb, 4, mb]);
        let last: Vec<usize> = b.iter().map(|x| x.last).collect();
        assert_eq!(last, [2, 1, 0, 0]);
        let tensors: Vec<u64> = b.iter().map(|x| x.tensors).collect();
        assert_eq!(tensors, [2, 1, 1, 2]);
        // The plan: those buckets, the host copy and a one-thread sum as OpenMPI's.
        let m = crate::hw::load_topology("gradientflow-cluster").unwrap().instantiate(16).unwrap();
        let s = Strategy::parse("io+allreduce=halving-doubling+runtime=gloo").unwrap();
        assert!(s.wfbp, "DDP's reduction thread all-reduces a bucket while backward goes on");
        let p = plan(&w, &s, &m, 16).unwrap();
        let h = p.host_stage.expect("gloo stages through the host");
        assert_eq!(h.copy_ns_per_byte, 1.0 / 3.0);
        assert_eq!(h.sum_ns_per_byte, 0.25 * 15.0 / 16.0);
        assert_eq!(p.buckets, b);
    }

    #[test]
    fn ddp_fills_buckets_in_backward_order_with_a_small_first_one() {
        let mb = 1u64 << 20;
        // Forward order: a 3 MiB layer (weight 3 MiB), then two 10 MiB layers, then a 0.5 MiB one.
        let w = workload(vec![layer(1, &[3 * mb]), layer(1, &[10 * mb, 4]), layer(1, &[10 * mb]), layer(1, &[mb / 2])]);
        let d = Ddp { bucket: 12 * mb, first_bucket: mb, call_ns: 0 };
        let b = ddp(&w, &d);
        // Backward order: 0.5 MiB (layer 3), 10 MiB (2) -> first bucket closes at >= 1 MiB with both;
        // then bias 4 B + 10 MiB (1) + 3 MiB (0) -> the second closes at >= 12 MiB with all three.
        let sizes: Vec<u64> = b.iter().map(|x| x.fp32_bytes).collect();
        assert_eq!(sizes, [mb / 2 + 10 * mb, 4 + 13 * mb]);
        assert_eq!((b[0].last, b[1].last), (2, 0));
        assert_eq!((b[0].tensors, b[1].tensors), (2, 3));
    }
}
