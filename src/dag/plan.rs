//! The one DAG builder for a parallel plan: tensor, pipeline and data parallelism (with ZeRO or
//! FSDP sharding) over a workload, for several iterations. Plain data parallelism, the S-SGD DAG
//! of Shi, Wang & Chu (Fig. 1), is the plan tp = 1, pp = 1, dp = N with one micro-batch: per GPU
//! and iteration, read a batch (`io`), copy it to the GPU (`h2d`), forward layer 1..L, backward
//! layer L..1, update; one gradient aggregation per bucket shared by all GPUs, with the edges the
//! paper gives for no overlap (Eq. 2), I/O overlap (Eq. 3) and WFBP (Eq. 4-5).
//!
//! In general, each stage runs its steps (a pass of one micro-batch through one of its model
//! chunks) in the order [`super::schedule`] gives, chained on its compute stream. A layer carrying
//! tensor-parallel collectives is followed by them, over its TP group. Steps that need another
//! stage's output wait for a transfer from it (activations forward, their gradients backward).
//! Gradients of the last micro-batch go through the data-parallel exchange
//! ([`super::exchange`], the strategy's runtime grouping the gradients) per DP group (routed
//! experts' gradients under EP per expert-DP group); ZeRO-1/2 reduce-scatter them and
//! all-gather the updated parameters, which the next iteration's first forward of each layer waits
//! for; ZeRO-3/FSDP gather each layer's parameters before each use (prefetching one layer ahead)
//! and reduce-scatter its gradient after every micro-batch. Tied embeddings are all-reduced between
//! the first and last stage.
//!
//! Only the ranks a [`PlanLayout`] represents get tasks of their own; the others behave as one of
//! them by symmetry, and every collective still spans all its ranks, so contention on shared
//! links is modelled.

use super::build::{check_input, BuildInput};
use super::exchange::{self, add_gradient_exchange, add_server_exchange, Bucket, Exchange, Queues, ServerSetup};
use super::schedule::{stage_order, upstream, Pass, Step};
use super::{Dag, DagBuilder, DagMeta, Discipline, GroupId, Phase, QueueId, Task, TaskId, Work};
use crate::collective::{Algorithm, CollectiveOp};
use crate::error::{Error, Result};
use crate::parallel::{Coords, MpOptimizer, ParallelPlan, Sharding};
use crate::strategy::CommSource;
use crate::units::Nanos;
use crate::workload::llm::Launches;
use crate::workload::{CommGroup, TpCollective, TpComm, Workload};
use std::collections::HashMap;

/// The DAG builder's view of a parallel plan over one workload.
#[derive(Debug, Clone)]
pub struct PlanLayout {
    pub plan: ParallelPlan,
    /// Per stage, per model chunk: the workload layers it runs, in forward order.
    pub chunks: Vec<Vec<Vec<usize>>>,
    /// Ranks that get tasks, ascending; the others are symmetric images of them.
    pub represented: Vec<u32>,
    /// Bytes each TP rank sends to the next stage per micro-batch (and the gradient back).
    pub pp_bytes: u64,
    /// The whole activation of a micro-batch at a stage boundary (what `pipe-engine=deepspeed`
    /// all-gathers over the TP group).
    pub pp_gathered_bytes: u64,
    /// Bytes of a parameter as gathered, per byte of its gradient (ZeRO and FSDP all-gathers).
    pub param_per_grad_byte: f64,
    /// Gradient bytes of tied embedding weights all-reduced between the first and the last stage
    /// (0: none).
    pub tied_bytes: u64,
    /// GPUs per FSDP shard group (hybrid sharding); the DP degree otherwise.
    pub shard_group: u32,
    /// DP replicas simulated (those with DP index below it); each stands for the replicas whose
    /// index is the same modulo it. The DP degree when every replica is simulated.
    pub dp_block: u32,
    /// Per DP replica, the replica whose ranks drive it (itself when it is simulated), when the
    /// replicas left out are images of representatives of their timeline class rather than of
    /// `d % dp_block`; every class's representative is its lowest replica. Empty: by `dp_block`.
    pub replica_of: Vec<u32>,
    /// Per workload layer, the gradient tensors (bytes) of routed experts' weights among the
    /// layer's own (empty: none, or a workload without MoE layers). With ep > 1 they are reduced
    /// over the expert-data-parallel group instead of the DP group (see [`build_plan`]).
    pub expert_grads: Vec<Vec<u64>>,
    /// Per workload layer, the module ZeRO-3/FSDP wraps it in (layers of one unit are consecutive):
    /// its parameters are gathered together before its first layer runs and its gradients
    /// reduce-scattered together once its last backward layer is done. Empty: each layer alone.
    pub fsdp_units: Vec<u32>,
    /// The host thread that launches each GPU's kernels one by one (an eager framework); None:
    /// the host always runs ahead of the GPU.
    pub host: Option<HostModel>,
}

/// Each simulated GPU's host thread as the DAG sees it: one chain of launch tasks per GPU, in
/// program order. A GPU task of a layer waits for the launch of its first kernel; the host goes
/// on with the rest of the layer's launches while the GPU runs it, so a block of many short
/// kernels takes the host's time, not the GPU's. Where the framework reads a value off the GPU
/// the host blocks: after a layer marked `sync` in its forward pass (the next launch waits for
/// the layer's GPU task, and the layer's collectives for that launch), and before each
/// iteration's first launch (the gradient norm's `.item()` before the optimizer step,
/// Megatron-Core core_v0.14.0 megatron/core/optimizer/clip_grads.py l.133: the host waits for
/// the update, which the next forward waits for anyway).
#[derive(Debug, Clone)]
pub struct HostModel {
    /// Host time per kernel launch.
    pub launch_ns: Nanos,
    /// Host time per Transformer Engine module call in a forward pass beyond its launches
    /// ([`crate::workload::llm::Launches::modules`]), charged before the module's kernels.
    pub module_ns: Nanos,
    /// Per workload layer: its kernels per pass and whether the host syncs after its forward.
    pub layers: Vec<Launches>,
    /// `CUDA_LAUNCH_BLOCKING=1`: every launch returns only when its kernel is done, so the host
    /// cannot run ahead: a block's launches come before its GPU task and the next block's
    /// launches after it (host and GPU time add up instead of overlapping).
    pub blocking: bool,
    /// Under `blocking`, the host's wait per launch beyond `launch_ns` (the synchronous launch's
    /// round trip to the GPU; `parallel::BLOCKING_WAIT_NS`).
    pub blocking_wait_ns: Nanos,
}

impl PlanLayout {
    /// Data parallelism over `gpus` GPUs of which the first `represented` get tasks.
    pub fn data_parallel(gpus: u32, represented: u32, layers: usize) -> Self {
        PlanLayout {
            plan: ParallelPlan::data_parallel(gpus, 1),
            chunks: vec![vec![(0..layers).collect()]],
            represented: (0..represented).collect(),
            pp_bytes: 0,
            pp_gathered_bytes: 0,
            param_per_grad_byte: 0.0,
            tied_bytes: 0,
            shard_group: gpus,
            dp_block: gpus,
            replica_of: Vec::new(),
            expert_grads: Vec::new(),
            fsdp_units: Vec::new(),
            host: None,
        }
    }

    /// The DP replica that drives replica `d` (see [`PlanLayout::replica_of`]).
    pub fn replica(&self, d: u32) -> u32 {
        match self.replica_of.get(d as usize) {
            Some(&r) => r,
            None => d % self.dp_block,
        }
    }

    /// Per DP replica that drives others, the replicas it drives, ascending (itself first);
    /// empty for the others.
    fn class_members(&self) -> Vec<Vec<u32>> {
        let mut members = vec![Vec::new(); self.plan.dp as usize];
        for d in 0..self.plan.dp {
            members[self.replica(d) as usize].push(d);
        }
        members
    }

    /// Layers of a stage over all its chunks, ascending.
    fn stage_layers(&self, stage: u32) -> Vec<usize> {
        let mut v: Vec<usize> = self.chunks[stage as usize].iter().flatten().copied().collect();
        v.sort_unstable();
        v
    }
}

/// A layer-group collective: (kind, stage, group in the stage, layer, micro-batch, forward,
/// position among the layer's collectives of that pass).
type GroupKey = (CommGroup, u32, u32, usize, u32, bool, usize);

/// The groups other than the TP group that a layer's collectives can run over: expert-parallel
/// groups (`size` ranks of a stage's TP x DP ranks, `stride` = etp apart: Megatron-Core's expert
/// rank order etp-ep-dp), expert-tensor-parallel groups (`size` = etp consecutive ranks) and
/// context-parallel groups (the ranks of one TP rank in `size` consecutive DP ranks of the
/// builder's plan, where CP is folded into DP: `stride` = tp). With DP replicas left out
/// (`dp_block` < dp), a group in the simulated block stands for its images in the others.
struct LayerGroups {
    kind: CommGroup,
    size: u32,
    stride: u32,
    width: u32,
    /// Per group index in a stage: the groups it stands for (itself first, ascending), empty for
    /// a group left out.
    images: Vec<Vec<u32>>,
}

impl LayerGroups {
    fn new(kind: CommGroup, size: u32, plan: &ParallelPlan, layout: &PlanLayout) -> Result<Self> {
        let (tp, dp, dp_block) = (plan.tp, plan.dp, layout.dp_block);
        let stride = match kind {
            CommGroup::Context => tp,
            CommGroup::Expert => plan.etp.max(1),
            _ => 1,
        };
        let straddle = || {
            Error::invalid(
                "represented GPUs",
                format!("groups of {size} straddle the simulated block of {dp_block} DP replicas"),
            )
        };
        if layout.replica_of.is_empty() && dp_block < dp && (dp_block * tp) % (size * stride) != 0 {
            return Err(straddle());
        }
        let mut lg = LayerGroups { kind, size, stride, width: tp * dp, images: Vec::new() };
        // Each group's image under the replica map: the group whose ranks are those of its
        // replicas' drivers, which must make a whole group.
        let count = lg.count();
        let mut images = vec![Vec::new(); count as usize];
        for i in 0..count {
            let driven: Vec<u32> = lg
                .ranks(0, i)
                .into_iter()
                .map(|r| {
                    let c = plan.coords(r);
                    plan.rank(Coords { dp: layout.replica(c.dp), ..c })
                })
                .collect();
            let j = lg.index(driven[0]);
            if lg.ranks(0, j) != driven {
                return Err(straddle());
            }
            images[j as usize].push(i);
        }
        lg.images = images;
        Ok(lg)
    }

    fn name(&self) -> &'static str {
        match self.kind {
            CommGroup::Context => "cp",
            CommGroup::ExpertTensor => "etp",
            _ => "ep",
        }
    }

    fn phase(&self) -> Phase {
        match self.kind {
            CommGroup::Context => Phase::ContextParallel,
            _ => Phase::ExpertParallel,
        }
    }

    /// Groups per stage.
    fn count(&self) -> u32 {
        self.width / self.size
    }

    /// The group of `rank` within its stage.
    fn index(&self, rank: u32) -> u32 {
        let r = rank % self.width;
        r % self.stride + self.stride * (r / self.stride / self.size)
    }

    /// The ranks of group `index` of `stage`.
    fn ranks(&self, stage: u32, index: u32) -> Vec<u32> {
        let base = stage * self.width;
        let (t, q) = (index % self.stride, index / self.stride);
        (0..self.size).map(|c| base + t + self.stride * (q * self.size + c)).collect()
    }

    /// Group `index` of the simulated replicas and its images in the replicas left out.
    fn images(&self, index: u32) -> impl Iterator<Item = u32> + '_ {
        self.images[index as usize].iter().copied()
    }
}

/// Transformer Engine's default splits of a pipelined GEMM + reduce-scatter overlap
/// (`num_splits` 4 for the "pipeline" method: TE v1.8 transformer_engine/pytorch/module/base.py).
const TE_PIPELINE_SPLITS: u64 = 4;

/// A block's TP collectives in a pass.
fn ops_of(comm: &TpComm, pass: Pass) -> &[TpCollective] {
    if pass == Pass::Forward {
        &comm.forward
    } else {
        &comm.backward
    }
}

pub(crate) fn collective_op(op: TpCollective) -> CollectiveOp {
    match op {
        TpCollective::AllReduce => CollectiveOp::AllReduce,
        TpCollective::AllGather => CollectiveOp::AllGather,
        TpCollective::ReduceScatter => CollectiveOp::ReduceScatter,
        TpCollective::AllToAll => CollectiveOp::AllToAll,
        TpCollective::HybridAllToAll { experts, top_k } => CollectiveOp::HybridAllToAll { experts, top_k },
    }
}

/// One DP communicator: a (stage, TP rank) pair's data-parallel ranks (or an FSDP shard group).
struct DpGroup {
    stage: u32,
    group: GroupId,
    queues: Queues,
    gather: Option<QueueId>,
    /// The GPU indices that drive its members (see `driver` in [`build_plan`]), in group order.
    members: Vec<u32>,
    /// Whether each driven member has tasks of its own (else its TP group's first rank drives it).
    own: Vec<bool>,
    /// The global ranks driven, in group order.
    driven: Vec<u32>,
    tp_rank: u32,
}

/// Builds the DAG of `input` under `layout`.
/// Refuses a plan whose DAG grows past the task limit while it is built (checked per TP group,
/// so memory stays near the limit): a plan's task count depends on its schedule, its simulated
/// ranks and the pipeline transfers of the replicas left out, which no formula ahead of the build
/// counts exactly.
fn check_task_limit(b: &DagBuilder, iteration: u32, iterations: u32, simulated: usize) -> Result<()> {
    let bound = crate::limits::get().tasks;
    if b.task_count() as u64 <= bound {
        return Ok(());
    }
    Err(Error::invalid(
        "size (tasks in one DAG)",
        format!(
            "the plan's DAG passed the limit of {bound} tasks while being built (iteration {} of {iterations}, {simulated} \
             ranks simulated); raise it with `--limit tasks=N` if the machine has the memory (about 200 bytes a task) and time",
            iteration + 1
        ),
    ))
}

pub fn build_plan(input: &BuildInput, layout: &PlanLayout) -> Result<Dag> {
    let BuildInput { workload: w, machine: m, gpus: ranks, strategy: s, iterations, .. } = *input;
    check_input(input)?;
    let plan = &layout.plan;
    let rep = &layout.represented;
    let n = rep.len() as u32;
    if n == 0 || n > ranks || rep.iter().any(|&r| r >= ranks) || plan.gpus() != ranks {
        return Err(Error::invalid("represented GPUs", format!("{n} ranks of {ranks} cannot stand for the plan")));
    }
    // Replicas at or past the DP block are driven as images of those below it: none may also have
    // tasks of its own (its pipeline sends would be counted twice).
    let block = layout.dp_block;
    let classes_ok = layout.replica_of.is_empty()
        || (layout.replica_of.len() == plan.dp as usize
            && layout.replica_of.iter().enumerate().all(|(d, &r)| r <= d as u32 && layout.replica_of[r as usize] == r));
    if block == 0
        || plan.dp % block != 0
        || !classes_ok
        || rep.iter().any(|&r| layout.replica(plan.coords(r).dp) != plan.coords(r).dp)
    {
        return Err(Error::invalid(
            "represented GPUs",
            format!("a block of {block} of {} DP replicas cannot stand for the represented ranks", plan.dp),
        ));
    }
    if s.comm_source == CommSource::Trace && ranks > 1 {
        if let Some(l) = w.layers.iter().find(|l| l.is_learnable() && l.comm.is_none()) {
            return Err(Error::invalid(
                "strategy",
                format!("comm=trace needs measured communication times, but layer `{}` has none", l.name),
            ));
        }
    }
    let identity = rep.iter().enumerate().all(|(i, &r)| i as u32 == r);
    let local: HashMap<u32, u32> = rep.iter().enumerate().map(|(i, &r)| (r, i as u32)).collect();
    // Every rank's driver: the GPU index of the rank itself when it has tasks, else of its TP
    // group's first rank when that one has (the members of a TP group run in lockstep: every block
    // ends with a collective over all of them), else none (a symmetric image of a simulated rank).
    // A rank of a DP replica left out (index at or past `dp_block`) is driven as its image in the
    // simulated block.
    let driver = |r: u32| -> Option<u32> {
        let mut c = plan.coords(r);
        c.dp = layout.replica(c.dp);
        let image = plan.rank(c);
        local
            .get(&image)
            .copied()
            .or_else(|| (c.tp != 0).then(|| local.get(&plan.rank(Coords { tp: 0, ..c })).copied()).flatten())
    };
    let class_members = layout.class_members();
    let layers = &w.layers;
    let nl = layers.len();
    let (tp, pp, dp) = (plan.tp, plan.pp, plan.dp);
    let micro_batches = plan.micro_batches().max(1);

    let mut b = DagBuilder::new();
    if !identity {
        b.set_ranks(rep.clone());
    }
    let compute_q: Vec<_> = (0..n).map(|g| b.add_queue(format!("gpu{g}.compute"), Discipline::Fifo, Some(g))).collect();
    // Each node's CPU cores, shared by its processes' loader workers (when loading is modelled).
    let node_cpu: Option<Vec<_>> = s.loader.map(|_| {
        let nodes = rep.iter().map(|&r| m.gpus[r as usize].node).max().map_or(1, |x| x + 1);
        (0..nodes).map(|x| b.add_resource(format!("node{x}.cpu"))).collect()
    });

    // Per stage: its layers, a workload of just those, and how the strategy's runtime groups its
    // gradients for the DP exchange.
    let shard = layout.shard_group.clamp(1, dp);
    let stage_layers: Vec<Vec<usize>> = (0..pp).map(|st| layout.stage_layers(st)).collect();
    let stage_workloads: Vec<Option<Workload>> = stage_layers
        .iter()
        .map(|ls| (pp > 1).then(|| Workload { layers: ls.iter().map(|&l| layers[l].clone()).collect(), ..w.clone() }))
        .collect();
    let stage_w = |st: u32| stage_workloads[st as usize].as_ref().unwrap_or(w);
    let dp_width = if plan.sharding == Sharding::FsdpHybrid { shard } else { dp };
    // Routed experts' gradients (ep > 1) are reduced apart from the dense ones. Megatron-Core
    // (core_r0.11.0, 7c00175) marks expert weights `allreduce = False` when ep > 1
    // (megatron/core/extensions/transformer_engine.py l.863, 905) and gives them param-and-grad
    // buffers of their own, reduced over the expert-data-parallel group, the dense ones over the
    // DP group with CP (megatron/core/distributed/distributed_data_parallel.py l.98, 246-260);
    // the distributed optimizer shards them over that group too (megatron/core/optimizer/
    // __init__.py l.478). That group has tp x cp x dp / (ep x etp) ranks holding the same experts,
    // ep x etp ranks apart (parallel_state.py l.684-705: the expert ranks are ordered
    // etp-ep-dp-pp). Same bucket size for both. Sharded parameters (ZeRO-3,
    // FSDP) keep every gradient in the DP group.
    let experts_apart = plan.ep > 1
        && matches!(plan.sharding, Sharding::None | Sharding::Zero1 | Sharding::Zero2)
        && layout.expert_grads.iter().any(|t| !t.is_empty());
    let expert_span = plan.ep * plan.etp.max(1);
    let expert_dp = if experts_apart { tp * dp / expert_span } else { 0 };
    // Per stage, the gradients the DP groups reduce and those the expert-DP groups reduce.
    let views: Vec<Option<(Workload, Workload)>> = (0..pp)
        .map(|st| {
            if !experts_apart {
                return Ok(None);
            }
            let globals: Vec<usize> = if pp > 1 { stage_layers[st as usize].clone() } else { (0..nl).collect() };
            let moved: Vec<&[u64]> =
                globals.iter().map(|&l| layout.expert_grads.get(l).map_or(&[][..], Vec::as_slice)).collect();
            split_expert_grads(stage_w(st), &moved).map(Some)
        })
        .collect::<Result<_>>()?;
    let dense_w = |st: u32| views[st as usize].as_ref().map_or(stage_w(st), |v| &v.0);
    let expert_w = |st: u32| views[st as usize].as_ref().map_or(stage_w(st), |v| &v.1);
    // The wrapped module of each layer (each layer its own without a grouping).
    let unit_of = |l: usize| layout.fsdp_units.get(l).copied().unwrap_or(l as u32);
    let by_unit = plan.sharding.shards_params() && !layout.fsdp_units.is_empty();
    let mut exchange_plans: Vec<exchange::Plan> =
        (0..pp).map(|st| exchange::plan(dense_w(st), s, m, dp_width)).collect::<Result<_>>()?;
    // PyTorch FSDP reduce-scatters each wrapped module's flat gradient in the module's
    // post-backward hook, whatever a DDP bucket size says (torch/distributed/fsdp/_runtime_utils.py
    // `_post_backward_hook` @ 00ae0bc, PyTorch 2.1 era).
    if by_unit {
        for (st, x) in exchange_plans.iter_mut().enumerate() {
            let globals: Vec<usize> = if pp > 1 { stage_layers[st].clone() } else { (0..nl).collect() };
            x.buckets = unit_buckets(dense_w(st as u32), &globals.iter().map(|&l| unit_of(l)).collect::<Vec<_>>());
        }
    }
    let mut expert_plans: Vec<exchange::Plan> = if expert_dp > 1 {
        (0..pp).map(|st| exchange::plan(expert_w(st), s, m, expert_dp)).collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    // Megatron-Core buckets only the first model chunk of the first pipeline stage: on a later
    // stage (`get_pipeline_model_parallel_rank() > 0`) and for every model chunk after the first
    // (`disable_bucketing=(model_chunk_idx > 0)`) a chunk's gradients are one bucket, reduced
    // once the chunk's last backward is done ("not on the critical path"): core_r0.8.0
    // megatron/core/distributed/distributed_data_parallel.py l.66-74 and
    // megatron/training/training.py l.453-458; the same in core_r0.9.0 to core_r0.11.0
    // (distributed_data_parallel.py l.74-77). Under `ddp=mcore`, for Megatron's own gradient
    // buckets (the default strategy: no runtime, no priority partition).
    let megatron_chunks = plan.mcore_ddp && !by_unit && s.runtime.is_none() && s.priority_partition.is_none() && pp > 1;
    if megatron_chunks {
        for (st, x) in exchange_plans.iter_mut().enumerate() {
            x.buckets = megatron_chunk_buckets(dense_w(st as u32), &layout.chunks[st], st == 0, |w| {
                exchange::plan(w, s, m, dp_width).map(|p| p.buckets)
            })?;
        }
        for (st, x) in expert_plans.iter_mut().enumerate() {
            x.buckets = megatron_chunk_buckets(expert_w(st as u32), &layout.chunks[st], st == 0, |w| {
                exchange::plan(w, s, m, expert_dp).map(|p| p.buckets)
            })?;
        }
    }
    // Apex's DistributedFusedAdam as NeMo builds it (`ddp=apex`): one group of buckets per
    // transformer layer (see [`apex_buckets`]).
    if let Some(cap) = plan.apex_bucket_bytes {
        if s.runtime.is_some() || s.priority_partition.is_some() || by_unit {
            return Err(Error::invalid(
                "parallel",
                "ddp=apex is the plan's own data-parallel exchange: it takes the default strategy (no runtime, no priority partition)",
            ));
        }
        for (st, x) in exchange_plans.iter_mut().enumerate() {
            x.buckets = apex_buckets(dense_w(st as u32), cap, plan.grad_bytes, dp_width);
        }
    }
    let servers_wanted = exchange_plans[0].servers;
    if servers_wanted.is_some() && (tp > 1 || pp > 1 || plan.sharding != Sharding::None || plan.ep > 1) && dp > 1 {
        return Err(Error::invalid("strategy", "parameter-server runtimes apply to plain data parallelism only"));
    }

    // Whether a DP group's gathers and reduce-scatters share its one queue.
    let one_queue = nccl_communicators(s, m) || by_unit;
    // One gradient communicator over `ranks_of` (with its queues), unless no rank of it is driven.
    let dp_group =
        |b: &mut DagBuilder, stage: u32, tp_rank: u32, ranks_of: Vec<u32>, explan: &exchange::Plan, name: String| {
            let members: Vec<u32> = ranks_of.iter().filter_map(|&r| driver(r)).collect();
            let own: Vec<bool> =
                ranks_of.iter().filter(|&&r| driver(r).is_some()).map(|r| local.contains_key(r)).collect();
            if members.is_empty() {
                return None;
            }
            let driven: Vec<u32> = ranks_of.iter().copied().filter(|&r| driver(r).is_some()).collect();
            let queues = Queues::new(b, explan);
            let group = b.add_group(ranks_of);
            // The parameter all-gathers (ZeRO-1/2 after the update, ZeRO-3/FSDP before each use)
            // and the gradient reduce-scatters go over the same process group (Megatron-Core
            // core_r0.8.0 `data_parallel_group` in param_and_grad_buffer.py l.135 and
            // distrib_optimizer.py l.1400; PyTorch FSDP its one process group), so one NCCL
            // communicator, which runs its operations one at a time in launch order whatever the
            // stream: each launch waits on the communicator's device stream and the device stream
            // on it (NCCL v2.21.5-1 src/enqueue.cc l.1285-1303; v2.8.4-1 src/enqueue.cc
            // l.197-199: a stream change waits on the last launch's `doneEvent`). One queue for
            // both wherever NCCL runs them (see `nccl_communicators`).
            let gather = if plan.sharding.shards_optimizer() && one_queue {
                Some(queues.comm)
            } else {
                plan.sharding.shards_optimizer().then(|| b.add_queue(name, Discipline::Fifo, None))
            };
            Some(DpGroup { stage, tp_rank, group, queues, gather, members, own, driven })
        };
    // Data-parallel communicators, one per (stage, TP rank) (FSDP hybrid: per shard group).
    let hybrid = plan.sharding == Sharding::FsdpHybrid && shard < dp;
    let mut dp_groups: Vec<DpGroup> = Vec::new();
    let mut replica_groups: HashMap<(u32, u32), Vec<(GroupId, QueueId)>> = HashMap::new();
    for stage in 0..pp {
        for t in 0..tp {
            for first in (0..dp).step_by(if hybrid { shard as usize } else { dp as usize }) {
                let width = if hybrid { shard } else { dp };
                let ranks_of: Vec<u32> =
                    (first..first + width).map(|d| plan.rank(Coords { tp: t, dp: d, stage })).collect();
                let name = format!("dp{stage}.{t}.{first}.gather");
                dp_groups.extend(dp_group(&mut b, stage, t, ranks_of, &exchange_plans[stage as usize], name));
            }
            // FSDP hybrid: the j-th GPU of every shard group all-reduce their shards together.
            if hybrid {
                let groups = (0..shard)
                    .map(|j| {
                        let ranks_of: Vec<u32> = (j..dp)
                            .step_by(shard as usize)
                            .map(|d| plan.rank(Coords { tp: t, dp: d, stage }))
                            .collect();
                        (
                            b.add_group(ranks_of),
                            b.add_queue(format!("dp{stage}.{t}.replicas{j}"), Discipline::Fifo, None),
                        )
                    })
                    .collect();
                replica_groups.insert((stage, t), groups);
            }
        }
    }
    // Expert-data-parallel communicators: per stage, the ranks at the same place in every EP group.
    let mut expert_groups: Vec<DpGroup> = Vec::new();
    if expert_dp > 1 {
        for stage in 0..pp {
            for q in 0..expert_span {
                let ranks_of: Vec<u32> = (0..expert_dp).map(|j| stage * tp * dp + q + expert_span * j).collect();
                let name = format!("edp{stage}.{q}.gather");
                expert_groups.extend(dp_group(&mut b, stage, q % tp, ranks_of, &expert_plans[stage as usize], name));
            }
        }
    }
    // Parameter servers (plain data parallelism): set up once, as the S-SGD builder does.
    let servers = match (servers_wanted, ranks > 1) {
        (Some(srv), true) if n == ranks => Some(ServerSetup::new(&mut b, m, ranks, &srv)),
        (Some(_), true) => {
            return Err(Error::invalid("represented GPUs", "parameter-server runtimes need every GPU simulated"))
        }
        _ => None,
    };
    // Each driven rank's DP group.
    let mut dp_group_of: HashMap<u32, usize> = HashMap::new();
    for (i, dpg) in dp_groups.iter().enumerate() {
        for &r in &dpg.driven {
            dp_group_of.insert(r, i);
        }
    }
    // Tensor-parallel groups of the represented ranks: (group, queue) by the group's first rank.
    let mut tp_groups: Vec<(Vec<u32>, Vec<u32>, GroupId, QueueId)> = Vec::new();
    for &r in rep {
        let c = plan.coords(r);
        if c.tp != 0 {
            continue;
        }
        let members = plan.tp_group(r);
        let locals: Vec<u32> = members.iter().filter_map(|x| local.get(x).copied()).collect();
        if locals.len() != 1 && locals.len() != members.len() {
            return Err(Error::invalid(
                "represented GPUs",
                "a TP group is simulated whole or through its first rank".to_string(),
            ));
        }
        let (group, queue) = if tp > 1 {
            (b.add_group(members.clone()), b.add_queue(format!("tp{}.{}.comm", c.stage, c.dp), Discipline::Fifo, None))
        } else {
            (0, 0)
        };
        tp_groups.push((locals, members, group, queue));
    }
    // Tied embeddings: the first and last stage of each pipeline all-reduce the shared gradient.
    let mut tied: HashMap<(u32, u32), (GroupId, QueueId)> = HashMap::new();
    if layout.tied_bytes > 0 && pp > 1 {
        let driven: Vec<u32> = (0..ranks).filter(|&r| plan.coords(r).stage == 0 && driver(r).is_some()).collect();
        for r in driven {
            let c = plan.coords(r);
            {
                let last = plan.rank(Coords { stage: pp - 1, ..c });
                let g = b.add_group(vec![r, last]);
                let q = b.add_queue(format!("tied{}.{}", c.tp, c.dp), Discipline::Fifo, None);
                tied.insert((c.tp, c.dp), (g, q));
            }
        }
    }

    // Groups other than the TP group that layers' collectives run over (MoE all-to-alls over the
    // EP group, key-value exchange over the CP group), all of them: (group, queue) by (kind,
    // stage, index of the group in its stage). With DP replicas left out, each simulated group's
    // collective is sent by its images in the other blocks of replicas at the same instants (so
    // the network carries the full load), as the left-out replicas' pipeline transfers are.
    let mut layer_groups: Vec<LayerGroups> = Vec::new();
    for (kind, size) in [
        (CommGroup::Expert, plan.ep.max(1)),
        (CommGroup::ExpertTensor, plan.etp.max(1)),
        (CommGroup::Context, plan.cp_folded.max(1)),
    ] {
        if size > 1 && layers.iter().any(|l| l.tp.as_ref().is_some_and(|c| c.group == kind)) {
            layer_groups.push(LayerGroups::new(kind, size, plan, layout)?);
        }
    }
    let mut group_ids: HashMap<(CommGroup, u32, u32), (GroupId, QueueId)> = HashMap::new();
    for lg in &layer_groups {
        for stage in 0..pp {
            for i in 0..lg.count() {
                let g = b.add_group(lg.ranks(stage, i));
                let q = b.add_queue(format!("{}{stage}.{i}.comm", lg.name()), Discipline::Fifo, None);
                group_ids.insert((lg.kind, stage, i), (g, q));
            }
        }
    }

    let task = |work, queue, phase, gpu, iteration, layer: Option<usize>| Task {
        work,
        queue,
        phase,
        gpu,
        iteration,
        layer: layer.map(|l| l as u32),
        priority: layer.map(|l| l as i32).unwrap_or(0),
    };

    let total_grad = w.grad_bytes().max(1);
    let update_ns: Vec<Nanos> = (0..pp)
        .map(|st| {
            // The distributed optimizer updates 1/shard of the dense parameters and 1/expert-DP of
            // the experts'.
            let sharded = if plan.sharding.shards_optimizer() { shard } else { 1 };
            let expert_sharded = if plan.sharding.shards_optimizer() { expert_dp.max(1) } else { 1 };
            if pp == 1 && sharded == 1 && expert_sharded == 1 {
                w.update.mean_ns
            } else {
                let sl = &stage_layers[st as usize];
                let bytes: u64 = sl.iter().map(|&l| layers[l].grad_bytes).sum();
                let experts: u64 = if experts_apart {
                    sl.iter().filter_map(|&l| layout.expert_grads.get(l)).flatten().sum()
                } else {
                    0
                };
                let mean = w.update.mean_ns as f64;
                (mean * (bytes - experts) as f64 / total_grad as f64 / sharded as f64
                    + mean * experts as f64 / total_grad as f64 / expert_sharded as f64)
                    .round() as Nanos
            }
        })
        .collect();
    let param_bytes = |grad_bytes: u64| (grad_bytes as f64 * layout.param_per_grad_byte).round() as u64;
    // Gradient (and parameter) bytes of each wrapped module.
    let mut unit_bytes: HashMap<u32, u64> = HashMap::new();
    for (l, layer) in layers.iter().enumerate() {
        *unit_bytes.entry(unit_of(l)).or_default() += layer.grad_bytes;
    }
    let orders: Vec<Vec<Step>> = (0..pp).map(|st| stage_order(plan.schedule, pp, plan.vp, micro_batches, st)).collect();

    let mut iteration_end = Vec::with_capacity((iterations * n) as usize);
    let mut prev_update: Vec<Option<TaskId>> = vec![None; n as usize];
    let mut prev_h2d: Vec<Option<TaskId>> = vec![None; n as usize];
    let mut prev_first_fwd: Vec<Option<TaskId>> = vec![None; n as usize];
    // Priority scheduling and ZeRO parameter gathers: per GPU and layer, what the next forward of
    // that layer waits for.
    let per_layer_sync = exchange_plans[0].priority && ranks > 1;
    let mut layer_ready: Vec<Vec<Vec<TaskId>>> = vec![vec![Vec::new(); nl]; n as usize];
    let mut param_ready: Vec<Vec<Vec<TaskId>>> = vec![vec![Vec::new(); nl]; n as usize];
    // Megatron's chained parameter gathers: per GPU and layer, the gathers dispatched when the GPU
    // reaches the layer's next forward (they wait for the compute before it).
    let mut param_next: Vec<Vec<Vec<TaskId>>> = vec![vec![Vec::new(); nl]; n as usize];
    let mut prev_picks: Vec<Option<TaskId>> = vec![None; dp_groups.len() + expert_groups.len()];
    let mut last_forward: Vec<Option<TaskId>> = vec![None; n as usize];
    let gather_params = plan.sharding.shards_params() && dp > 1;
    // PyTorch FSDP syncs on every backward call (Composer skips no micro-batch's sync): its final
    // callback has the compute stream wait for the post-backward stream, so for every reduce-scatter
    // of the pass (`_post_backward_final_callback`, `current_stream().wait_stream(post_backward)`),
    // and the next forward's root pre-forward has the unshard stream wait for the compute stream
    // (`_root_pre_forward` -> `_wait_for_computation_stream`; torch/distributed/fsdp/_runtime_utils.py,
    // PyTorch 2.0-2.1). So what follows a backward on a GPU, its compute and its forward's
    // gathers, waits for that micro-batch's reduce-scatters on the GPU.
    let fsdp_syncs = plan.mp_optimizer == MpOptimizer::TorchFsdp && gather_params;
    // The host model: per GPU, the host's last task (or the GPU task it last waited for) and the
    // launch time still owed for the kernels of the last GPU task it started.
    let host = layout.host.as_ref();
    let mut host_prev: Vec<Option<TaskId>> = vec![None; n as usize];
    let mut host_owed: Vec<Nanos> = vec![0; n as usize];

    for it in 0..iterations {
        // Per GPU: the backward task of every layer in each micro-batch, the update, and where
        // each step starts and ends (for pipeline transfers).
        let mut bwd: Vec<Vec<Vec<TaskId>>> = vec![vec![Vec::new(); micro_batches as usize]; n as usize];
        let mut updates: Vec<TaskId> = vec![0; n as usize];
        let mut step_ends: Vec<HashMap<Step, (TaskId, TaskId)>> = vec![HashMap::new(); n as usize];
        let mut gathers: HashMap<(usize, usize, u32, bool), TaskId> = HashMap::new();
        // PyTorch FSDP: per (GPU, micro-batch), the tasks that wait for the micro-batch's
        // reduce-scatters on the GPU (see `fsdp_syncs`).
        let mut after_backward: HashMap<(u32, u32), Vec<TaskId>> = HashMap::new();
        // One collective per layer group, layer, micro-batch, pass and position, with its images.
        let mut group_colls: HashMap<GroupKey, Vec<TaskId>> = HashMap::new();
        for (members, tp_ranks, tp_group, tp_queue) in &tp_groups {
            check_task_limit(&b, it, iterations, rep.len())?;
            let whole = members.len() == tp_ranks.len();
            let stage = plan.coords(rep[members[0] as usize]).stage;
            let mut last: Vec<Option<TaskId>> = vec![None; members.len()];
            let mut first_compute: Vec<Option<TaskId>> = vec![None; members.len()];
            // The first stage reads the batch; in a TP group only its first rank does and
            // broadcasts it (Megatron's `get_batch`), inside the group's first collective's time.
            for (k, &g) in members.iter().enumerate() {
                let gi = g as usize;
                if stage != 0 || k > 0 {
                    continue;
                }
                let info = m.gpus[rep[gi] as usize];
                let batch = w.batch_per_gpu as u64 * micro_batches as u64;
                let io = b.add_task(task(
                    Work::Transfer { src: info.storage, dst: info.host, bytes: batch.saturating_mul(w.sample_bytes) },
                    None,
                    Phase::Io,
                    Some(g),
                    it,
                    None,
                ));
                let h2d_work = match (s.comm_source, w.data_load) {
                    (CommSource::Trace, Some(load)) => Work::Fixed { ns: load.mean_ns },
                    _ => Work::Transfer {
                        src: info.host,
                        dst: info.device,
                        bytes: batch.saturating_mul(w.device_sample_bytes),
                    },
                };
                let h2d = b.add_task(task(h2d_work, None, Phase::HostToDevice, Some(g), it, None));
                // The input pipeline: the process's loader workers decode and augment the batch
                // on its node's CPU cores, shared with the node's other processes. Each worker
                // reads and decodes one sample after another and several work at once, so the
                // batch's reads overlap its decoding: both start together and the copy waits
                // for both (the slower one sets the pace).
                let decoded = match (s.loader, &node_cpu) {
                    (Some(l), Some(cpu)) => {
                        let cores = l.cores as f64;
                        let work = Work::Shared {
                            resource: cpu[info.node as usize],
                            work_ns: (batch as f64 * l.load_ns_per_sample as f64 / cores).round() as u64,
                            cap: l.workers.min(l.cores) as f64 / cores,
                        };
                        Some(b.add_task(task(work, None, Phase::Io, Some(g), it, None)))
                    }
                    _ => None,
                };
                let starts = std::iter::once(io).chain(decoded);
                for t in starts.clone() {
                    b.add_edge(t, h2d);
                }
                if s.io_overlap {
                    if let Some(p) = prev_h2d[gi] {
                        for t in starts {
                            b.add_edge(p, t);
                        }
                    }
                    if let Some(p) = prev_first_fwd[gi] {
                        b.add_edge(p, h2d);
                    }
                } else if let Some(p) = prev_update[gi] {
                    for t in starts {
                        b.add_edge(p, t);
                    }
                }
                prev_h2d[gi] = Some(h2d);
                last[k] = Some(h2d);
            }
            // The last compute task of each module run so far, for ZeRO-3/FSDP prefetch: a module's
            // parameters are gathered once the module two before it is done, so at most two are
            // gathered at a time. PyTorch FSDP with `limit_all_gathers` issues an all-gather only
            // after the free of the module two back (`_unshard` synchronizes on
            // `_FreeEventQueue.dequeue_if_needed`, torch/distributed/fsdp/_runtime_utils.py @
            // 00ae0bc; `_limiter_utils.py` `_max_num_inflight_all_gathers = 2`); without forward
            // prefetch the CPU, running ahead of the GPU, issues the next module's all-gather as
            // soon as that allows, and backward prefetch (BACKWARD_POST: in a module's
            // post-backward hook, before its reduce-scatter) does the same in backward order.
            // Composer v0.17.2 `composer/trainer/dist_strategy.py` l.135-142 defaults to
            // BACKWARD_POST, no forward prefetch and `limit_all_gathers` on (PyTorch's own
            // constructor default is BACKWARD_PRE); llm-foundry's MPT yamls @ 5e85bd6 set only
            // FULL_SHARD, checkpointing and `limit_all_gathers: true`.
            let mut recent: Vec<TaskId> = Vec::new();
            let first_member_h2d = last[0];
            for l in last.iter_mut().skip(1) {
                *l = first_member_h2d;
            }
            let mut prev_backward: Option<u32> = None;
            for step in &orders[stage as usize] {
                // The micro-batch whose backward this step follows (PyTorch FSDP's syncs), and
                // where each member's stream stood when the step began.
                let synced =
                    std::mem::replace(&mut prev_backward, (step.pass == Pass::Backward).then_some(step.micro_batch))
                        .filter(|_| fsdp_syncs);
                let step_start = last.clone();
                let mut step_started = vec![false; members.len()];
                let chunk = &layout.chunks[stage as usize][step.chunk as usize];
                let seq: Vec<usize> = match step.pass {
                    Pass::Forward => chunk.clone(),
                    Pass::Backward => chunk.iter().rev().copied().collect(),
                };
                let mut entry: Vec<Option<TaskId>> = vec![None; members.len()];
                // DeepSpeed's pipeline engine rebuilds the activations it partitioned over the TP
                // group before using them: the received input before a forward (not on the first
                // stage); its own output and the received gradient before a backward (not on the
                // last stage). Each is an all-gather of the whole activation on the TP group.
                let pipe_gathers = match step.pass {
                    _ if !plan.deepspeed_pipe || tp == 1 => 0,
                    Pass::Forward if stage > 0 => 1,
                    Pass::Backward if stage + 1 < pp => 2,
                    _ => 0,
                };
                for _ in 0..pipe_gathers {
                    let c = b.add_task(task(
                        Work::Collective {
                            group: *tp_group,
                            op: CollectiveOp::AllGather,
                            algorithm: s.allreduce,
                            bytes: layout.pp_gathered_bytes,
                        },
                        Some(*tp_queue),
                        Phase::PipelineTransfer,
                        None,
                        it,
                        None,
                    ));
                    for (p, e) in last.iter_mut().zip(entry.iter_mut()) {
                        if let Some(x) = *p {
                            b.add_edge(x, c);
                        }
                        *p = Some(c);
                        e.get_or_insert(c);
                    }
                }
                // Each step starts a module (a pass through it frees it at the end).
                let mut current_unit: Option<u32> = None;
                for &l in &seq {
                    let layer = &layers[l];
                    let unit = unit_of(l);
                    let new_unit = current_unit != Some(unit);
                    current_unit = Some(unit);
                    let (phase, ns) = match step.pass {
                        Pass::Forward => (Phase::Forward, layer.forward.mean_ns),
                        Pass::Backward => (Phase::Backward, layer.backward.mean_ns),
                    };
                    let memory_share = layer.memory.map_or(0.0, |m| match step.pass {
                        Pass::Forward => m.forward,
                        Pass::Backward => m.backward,
                    });
                    // ZeRO-3 / FSDP: every TP rank gathers the layer's parameters over its own DP
                    // group before each use, once the layer two before it is done (one ahead).
                    let gathered: Vec<(u32, TaskId)> = if gather_params && new_unit && unit_bytes[&unit] > 0 {
                        tp_ranks
                            .iter()
                            .map(|&r| {
                                let gidx = dp_group_of[&r];
                                let key = (gidx, unit as usize, step.micro_batch, step.pass == Pass::Forward);
                                // One gather per DP group, made by its first replica to get here.
                                let ag = *gathers.entry(key).or_insert_with(|| {
                                    let dpg = &dp_groups[gidx];
                                    let ag = b.add_task(task(
                                        Work::Collective {
                                            group: dpg.group,
                                            op: CollectiveOp::AllGather,
                                            algorithm: s.allreduce,
                                            bytes: param_bytes(unit_bytes[&unit]),
                                        },
                                        dpg.gather,
                                        Phase::ParamGather,
                                        None,
                                        it,
                                        Some(l),
                                    ));
                                    if let (Some(mb), Pass::Forward) = (synced, step.pass) {
                                        // Issued after the root pre-forward's wait on the compute
                                        // stream, which waits for the last backward's reduce-scatters.
                                        if let Some(p) = step_start[0] {
                                            b.add_edge(p, ag);
                                        }
                                        after_backward.entry((members[0], mb)).or_default().push(ag);
                                    }
                                    if recent.len() >= 2 {
                                        b.add_edge(recent[recent.len() - 2], ag);
                                    } else {
                                        // The iteration's first two gathers come from its first
                                        // forward, after the optimizer step on every member: FSDP's
                                        // root pre-forward has the unshard stream wait for the
                                        // compute stream ("to respect optimizer step computation",
                                        // `_root_pre_forward` -> `_wait_for_computation_stream`,
                                        // torch/distributed/fsdp/_runtime_utils.py, PyTorch 2.0-2.1).
                                        for &g in &dpg.members {
                                            if let Some(u) = prev_update[g as usize] {
                                                b.add_edge(u, ag);
                                            }
                                        }
                                    }
                                    ag
                                });
                                (r, ag)
                            })
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let before = last.clone();
                    let mut made = Vec::with_capacity(members.len());
                    let mut host_sync: Vec<Option<TaskId>> = vec![None; members.len()];
                    // A context-parallel ring splits the layer's compute into its steps (the
                    // first made here, the others with the ring's sends below).
                    let ring = layer.tp.as_ref().and_then(|c| c.ring.as_ref());
                    let total_ns = s.compute_ns(ns);
                    let steps = ring.map_or(1, |r| r.steps().max(1)) as u64;
                    let chunk_ns = |j: u64| total_ns * (j + 1) / steps - total_ns * j / steps;
                    for (k, &g) in members.iter().enumerate() {
                        let gi = g as usize;
                        let t = b.add_task(task(
                            Work::Fixed { ns: chunk_ns(0) },
                            Some(compute_q[gi]),
                            phase,
                            Some(g),
                            it,
                            Some(l),
                        ));
                        b.set_memory_share(t, memory_share);
                        if let Some(p) = last[k] {
                            b.add_edge(p, t);
                        }
                        if let Some(mb) = synced.filter(|_| !std::mem::replace(&mut step_started[k], true)) {
                            after_backward.entry((g, mb)).or_default().push(t);
                        }
                        if let Some(h) = host {
                            let kernels = h.layers.get(l).map_or(1, |x| match step.pass {
                                Pass::Forward => x.forward,
                                Pass::Backward => x.backward,
                            });
                            let modules = match step.pass {
                                Pass::Forward => h.layers.get(l).map_or(0, |x| x.modules),
                                Pass::Backward => 0,
                            };
                            let module_ns = modules as Nanos * h.module_ns;
                            if h.blocking {
                                let ns = kernels as Nanos * (h.launch_ns + h.blocking_wait_ns) + module_ns;
                                let launch = host_chain(&mut b, &mut host_prev[gi], ns, g, it, l);
                                b.add_edge(launch, t);
                                // A blocking collective or receive before the block holds the host too.
                                if let Some(p) = last[k] {
                                    b.add_edge(p, launch);
                                }
                                let wait = host_chain(&mut b, &mut host_prev[gi], 0, g, it, l);
                                b.add_edge(t, wait);
                                host_sync[k] = Some(wait);
                            } else {
                                // The block's first module runs its Python before its first launch;
                                // the others' is owed with the rest of the launches.
                                let first = if modules > 0 { h.module_ns } else { 0 };
                                host_owed[gi] += first;
                                let launch =
                                    host_task(&mut b, h, &mut host_prev[gi], &mut host_owed[gi], kernels, g, it, l);
                                host_owed[gi] += module_ns - first;
                                b.add_edge(launch, t);
                            }
                            // Reading the layer's result: the host launches the rest of the layer,
                            // waits for the GPU to finish it, then launches what follows (its
                            // collectives wait for that launch).
                            if !h.blocking && step.pass == Pass::Forward && h.layers.get(l).is_some_and(|x| x.sync) {
                                if host_owed[gi] > 0 {
                                    let rest = std::mem::take(&mut host_owed[gi]);
                                    host_chain(&mut b, &mut host_prev[gi], rest, g, it, l);
                                }
                                let wait = host_task(&mut b, h, &mut host_prev[gi], &mut host_owed[gi], 0, g, it, l);
                                b.add_edge(t, wait);
                                host_sync[k] = Some(wait);
                            }
                        }
                        // A TP group simulated through its first rank waits for every member's gather.
                        for &(r, ag) in &gathered {
                            if !whole || r == rep[gi] {
                                b.add_edge(ag, t);
                            }
                        }
                        if step.pass == Pass::Forward && step.micro_batch == 0 {
                            for &p in layer_ready[gi][l].iter().chain(&param_ready[gi][l]) {
                                b.add_edge(p, t);
                            }
                            if let Some(p) = before[k] {
                                param_next[gi][l].iter().for_each(|&ag| b.add_edge(p, ag));
                            }
                        }
                        if first_compute[k].is_none() {
                            if let (Some(p), false) = (prev_update[gi], per_layer_sync) {
                                b.add_edge(p, t);
                            }
                            first_compute[k] = Some(t);
                        }
                        if step.pass == Pass::Forward {
                            last_forward[gi] = Some(t);
                        }
                        if step.pass == Pass::Backward {
                            if bwd[gi][step.micro_batch as usize].is_empty() {
                                bwd[gi][step.micro_batch as usize] = vec![0; nl];
                            }
                            bwd[gi][step.micro_batch as usize][l] = t;
                        }
                        entry[k].get_or_insert(t);
                        last[k] = Some(t);
                        made.push(t);
                    }
                    match recent.last_mut() {
                        Some(x) if !new_unit => *x = made[0],
                        _ => recent.push(made[0]),
                    }
                    // The layer's tensor-parallel collectives follow it on every member.
                    if let Some((comm, lg)) =
                        layer.tp.as_ref().and_then(|c| layer_groups.iter().find(|g| g.kind == c.group).map(|g| (c, g)))
                    {
                        let ops = if step.pass == Pass::Forward { &comm.forward } else { &comm.backward };
                        // The groups of this TP group's ranks (one for EP, whose groups hold whole TP
                        // groups; one per TP rank for CP), and each simulated member's own.
                        let own: Vec<u32> = members.iter().map(|&g| lg.index(rep[g as usize])).collect();
                        let mut all: Vec<u32> = tp_ranks.iter().map(|&r| lg.index(r)).collect();
                        all.sort_unstable();
                        all.dedup();
                        if let Some(ring) = &comm.ring {
                            // Transformer Engine's CP ring: at each step the chunk's kernels and the
                            // send of keys and values (and their gradients) to the next CP rank
                            // start together; the next step waits for both on every rank.
                            let sends = if step.pass == Pass::Forward { &ring.forward } else { &ring.backward };
                            let forward = step.pass == Pass::Forward;
                            let mut start = before.clone();
                            let mut comp = made.clone();
                            for (j, &bytes) in sends.iter().enumerate() {
                                if j > 0 {
                                    comp = members
                                        .iter()
                                        .enumerate()
                                        .map(|(k, &g)| {
                                            let t = b.add_task(task(
                                                Work::Fixed { ns: chunk_ns(j as u64) },
                                                Some(compute_q[g as usize]),
                                                phase,
                                                Some(g),
                                                it,
                                                Some(l),
                                            ));
                                            b.set_memory_share(t, memory_share);
                                            if let Some(p) = start[k] {
                                                b.add_edge(p, t);
                                            }
                                            t
                                        })
                                        .collect();
                                }
                                let mut sent: HashMap<u32, TaskId> = HashMap::new();
                                if bytes > 0 {
                                    for &idx in &all {
                                        let key = (lg.kind, stage, idx, l, step.micro_batch, forward, j);
                                        let c = GroupCollective {
                                            op: CollectiveOp::SendRecv,
                                            algorithm: s.allreduce,
                                            bytes,
                                        };
                                        let x = c.add(
                                            &mut b,
                                            &mut group_colls,
                                            key,
                                            lg,
                                            &group_ids,
                                            it,
                                            start.iter().flatten(),
                                        );
                                        sent.insert(idx, x);
                                    }
                                }
                                for k in 0..members.len() {
                                    start[k] = Some(match sent.get(&own[k]) {
                                        Some(&x) => {
                                            let join = b.add_task(task(
                                                Work::Fixed { ns: 0 },
                                                None,
                                                lg.phase(),
                                                None,
                                                it,
                                                Some(l),
                                            ));
                                            b.add_edge(comp[k], join);
                                            b.add_edge(x, join);
                                            join
                                        }
                                        None => comp[k],
                                    });
                                }
                            }
                            last = start;
                        }
                        for (pos, &op) in ops.iter().enumerate() {
                            let mut first: HashMap<u32, TaskId> = HashMap::new();
                            for &idx in &all {
                                let key = (lg.kind, stage, idx, l, step.micro_batch, step.pass == Pass::Forward, pos);
                                let c = GroupCollective {
                                    op: collective_op(op),
                                    algorithm: s.allreduce,
                                    bytes: comm.bytes,
                                };
                                let preds = last.iter().chain(&host_sync).flatten();
                                first.insert(idx, c.add(&mut b, &mut group_colls, key, lg, &group_ids, it, preds));
                            }
                            for (k, p) in last.iter_mut().enumerate() {
                                *p = Some(first[&own[k]]);
                            }
                        }
                    }
                    let tensor_comm = layer.tp.as_ref().filter(|c| c.group == CommGroup::Tensor);
                    if let (Some(comm), true, true) = (tensor_comm, tp > 1, plan.tp_overlap) {
                        // Megatron's --tp-comm-overlap through Transformer Engine's userbuffers
                        // (TE v1.8 pytorch/module/base.py `initialize_ub`): the forward all-gather
                        // is a ring exchange under the GEMM's chunks; the forward reduce-scatter
                        // is pipelined with the GEMM in 4 splits (num_splits 4), the last split
                        // after it; the backward ones run in bulk beside the dgrad/wgrad GEMMs.
                        // So each runs alongside the block's compute, from its start, and the
                        // next block waits for both. Not modelled: the SMs the comm kernels take
                        // (16 for bulk and pipeline by default, none for a ring exchange on copy
                        // engines); they are marked as not NCCL's, so they hold no NCCL channels
                        // under `--compute-contention sms`.
                        let mut hidden = Vec::new();
                        let mut tail_bytes = 0;
                        for &op in ops_of(comm, step.pass) {
                            let split = step.pass == Pass::Forward && op == TpCollective::ReduceScatter;
                            let tail = if split { comm.bytes / TE_PIPELINE_SPLITS } else { 0 };
                            tail_bytes += tail;
                            let c = b.add_task(task(
                                Work::Collective {
                                    group: *tp_group,
                                    op: collective_op(op),
                                    algorithm: s.allreduce,
                                    bytes: comm.bytes - tail,
                                },
                                Some(*tp_queue),
                                Phase::TensorParallel,
                                None,
                                it,
                                Some(l),
                            ));
                            before.iter().flatten().for_each(|&p| b.add_edge(p, c));
                            b.mark_not_nccl(c);
                            hidden.push(c);
                        }
                        let work = if tail_bytes > 0 {
                            Work::Collective {
                                group: *tp_group,
                                op: CollectiveOp::ReduceScatter,
                                algorithm: s.allreduce,
                                bytes: tail_bytes,
                            }
                        } else {
                            Work::Fixed { ns: 0 }
                        };
                        let queue = (tail_bytes > 0).then_some(*tp_queue);
                        let join = b.add_task(task(work, queue, Phase::TensorParallel, None, it, Some(l)));
                        b.mark_not_nccl(join);
                        hidden.iter().for_each(|&c| b.add_edge(c, join));
                        for p in last.iter_mut() {
                            if let Some(x) = *p {
                                b.add_edge(x, join);
                            }
                            *p = Some(join);
                        }
                    } else if let (Some(comm), true) = (tensor_comm, tp > 1) {
                        for &op in ops_of(comm, step.pass) {
                            let op = collective_op(op);
                            let c = b.add_task(task(
                                Work::Collective { group: *tp_group, op, algorithm: s.allreduce, bytes: comm.bytes },
                                Some(*tp_queue),
                                Phase::TensorParallel,
                                None,
                                it,
                                Some(l),
                            ));
                            for p in last.iter_mut() {
                                if let Some(x) = *p {
                                    b.add_edge(x, c);
                                }
                                *p = Some(c);
                            }
                        }
                    }
                }
                for (k, &g) in members.iter().enumerate() {
                    if let (Some(e), Some(x)) = (entry[k], last[k]) {
                        step_ends[g as usize].insert(*step, (e, x));
                    }
                }
            }
            for (k, &g) in members.iter().enumerate() {
                let gi = g as usize;
                let upd = b.add_task(task(
                    Work::Fixed { ns: update_ns[stage as usize] },
                    Some(compute_q[gi]),
                    Phase::Update,
                    Some(g),
                    it,
                    None,
                ));
                if let Some(p) = last[k] {
                    b.add_edge(p, upd);
                }
                // The optimizer's launches; the next iteration's wait for the gradient norm.
                if let Some(h) = host {
                    let launch = if h.blocking {
                        host_chain(&mut b, &mut host_prev[gi], h.launch_ns + h.blocking_wait_ns, g, it, 0)
                    } else {
                        host_task(&mut b, h, &mut host_prev[gi], &mut host_owed[gi], 1, g, it, 0)
                    };
                    b.add_edge(launch, upd);
                    host_prev[gi] = Some(upd);
                    host_owed[gi] = 0;
                }
                updates[gi] = upd;
                prev_first_fwd[gi] = first_compute[k];
            }
        }

        // Pipeline transfers: a step that needs another stage's output waits for it to arrive.
        // A rank driving its TP group receives every member's share.
        if pp > 1 {
            for (gi, &r) in rep.iter().enumerate() {
                let c = plan.coords(r);
                let whole_group = plan.tp_group(r).iter().all(|x| local.contains_key(x));
                let group: Vec<u32> = if whole_group { vec![r] } else { plan.tp_group(r) };
                // The DP replicas this one stands for send theirs at the same instants: their
                // transfers load the network as in a full simulation.
                let receivers: Vec<u32> = group
                    .iter()
                    .flat_map(|&x| {
                        let cx = plan.coords(x);
                        class_members[cx.dp as usize].iter().map(move |&d| plan.rank(Coords { dp: d, ..cx }))
                    })
                    .collect();
                for step in &orders[c.stage as usize] {
                    let Some((src_stage, src_step)) = upstream(*step, c.stage, pp, plan.vp) else { continue };
                    let Some(&(entry, _)) = step_ends[gi].get(step) else { continue };
                    let src_local = local[&plan.rank(Coords { stage: src_stage, ..c })] as usize;
                    let Some(&(_, exit)) = step_ends[src_local].get(&src_step) else { continue };
                    if src_stage == c.stage {
                        b.add_edge(exit, entry);
                        continue;
                    }
                    // Each member's receivers: its own replica's, then its images in the blocks
                    // of replicas left out (block j is copy j of the engine's images).
                    let (per_member, mut original, mut images) = (receivers.len() / group.len(), 0, Vec::new());
                    for (k, &x) in receivers.iter().enumerate() {
                        let src_rank = plan.rank(Coords { stage: src_stage, ..plan.coords(x) });
                        let t = b.add_task(task(
                            Work::Transfer {
                                src: m.gpus[src_rank as usize].device,
                                dst: m.gpus[x as usize].device,
                                bytes: layout.pp_bytes,
                            },
                            None,
                            Phase::PipelineTransfer,
                            Some(gi as u32),
                            it,
                            None,
                        ));
                        b.add_edge(exit, t);
                        b.add_edge(t, entry);
                        let copy = (k % per_member) as u32;
                        if copy == 0 {
                            original = t;
                            images.clear();
                        } else {
                            images.push((t, copy));
                        }
                        if copy + 1 == per_member as u32 && !images.is_empty() {
                            b.add_images(original, &images);
                        }
                    }
                }
            }
        }

        // Gradient exchange per DP group: all-reduce (or reduce-scatter under ZeRO) per bucket of
        // the last micro-batch's gradients; every micro-batch's under ZeRO-2/3.
        // DeepSpeed's BF16_Optimizer all-reduces its whole FP32 buffer though it shards the
        // optimizer as ZeRO-1 (56c5223 `runtime/pipe/engine.py` `_bf16_reduce_grads`:
        // `buffered_allreduce_fallback(grads=get_grads_for_reduction())`).
        let op = if plan.sharding.shards_optimizer() && dp > 1 && plan.mp_optimizer != MpOptimizer::DsBf16 {
            CollectiveOp::ReduceScatter
        } else {
            CollectiveOp::AllReduce
        };
        let every_micro_batch = plan.sharding.shards_grads();
        let mut hybrid_done: HashMap<(u32, u32, usize), Vec<TaskId>> = HashMap::new();
        let mut hybrid_upd: HashMap<(u32, u32), Vec<TaskId>> = HashMap::new();
        // The DP groups with the dense gradients, then the expert-DP groups with the experts'.
        let communicators = dp_groups
            .iter()
            .map(|g| (g, &exchange_plans[g.stage as usize], dense_w(g.stage), false))
            .chain(expert_groups.iter().map(|g| (g, &expert_plans[g.stage as usize], expert_w(g.stage), true)));
        for (gidx, (dpg, explan, view, expert)) in communicators.enumerate() {
            if ranks <= 1 || dp == 1 && !hybrid {
                break;
            }
            let st = dpg.stage;
            let sl = &stage_layers[st as usize];
            let to_global = |l: usize| if pp > 1 { sl[l] } else { l };
            let bucket_plan = &explan.buckets;
            let members = &dpg.members;
            let upd: Vec<TaskId> = members.iter().map(|&g| updates[g as usize]).collect();
            let mbs: Vec<u32> = if every_micro_batch { (0..micro_batches).collect() } else { vec![micro_batches - 1] };
            // `ddp=apex` under pipeline parallelism: a layer's gradients leave when Megatron's
            // schedule calls NeMo's grad sync for its chunk, after the backward step
            // `apex_sync_steps` names (the step's task that ends it: its chunk's first layer).
            let apex_steps = plan
                .apex_bucket_bytes
                .and_then(|_| apex_sync_steps(&orders[st as usize], st, plan.vp.max(1)))
                .filter(|_| pp > 1);
            let chunk_of: HashMap<usize, usize> = layout.chunks[st as usize]
                .iter()
                .enumerate()
                .flat_map(|(c, ls)| ls.iter().map(move |&l| (l, c)))
                .collect();
            for mb in mbs {
                let grads: Vec<Vec<TaskId>> = members
                    .iter()
                    .map(|&g| {
                        sl.iter()
                            .map(|&l| match &apex_steps {
                                Some(steps) => {
                                    let at = steps[chunk_of.get(&l).copied().unwrap_or(0)];
                                    bwd[g as usize][at.micro_batch as usize]
                                        [layout.chunks[st as usize][at.chunk as usize][0]]
                                }
                                None => bwd[g as usize][mb as usize][l],
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let exchange = Exchange {
                    workload: view,
                    strategy: s,
                    plan: explan,
                    group: dpg.group,
                    queues: &dpg.queues,
                    iteration: it,
                    backward_start: last_forward[members[0] as usize],
                    op,
                };
                if let Some(setup) = &servers {
                    add_server_exchange(&mut b, &exchange, setup, m, &grads, &upd);
                    continue;
                }
                // A member driven by its TP group's first rank codes on its own GPU: off that
                // rank's stream.
                let own = &dpg.own;
                let mut codec_task = |b: &mut DagBuilder, r: usize, ns, l: usize| {
                    let g = members[r];
                    b.add_task(task(
                        Work::Fixed { ns },
                        own[r].then(|| compute_q[g as usize]),
                        Phase::Codec,
                        Some(g),
                        it,
                        Some(to_global(l)),
                    ))
                };
                let mut done_tasks: Vec<(usize, usize, TaskId)> = Vec::new();
                let mut on_done = |r: usize, bucket: &Bucket, done: TaskId| {
                    let g = members[r] as usize;
                    if per_layer_sync {
                        let l = to_global(bucket.last);
                        // (The experts' buckets come after the layer's dense ones.)
                        if !expert && exchange::bucket_starts_layer(bucket_plan, bucket) {
                            layer_ready[g][l].clear();
                        }
                        layer_ready[g][l].push(done);
                    }
                    done_tasks.push((r, bucket.last, done));
                };
                add_gradient_exchange(
                    &mut b,
                    &exchange,
                    &grads,
                    &upd,
                    &mut prev_picks[gidx],
                    &mut codec_task,
                    &mut on_done,
                );
                if fsdp_syncs {
                    for &(r, _, done) in &done_tasks {
                        for &w in after_backward.get(&(members[r], mb)).into_iter().flatten() {
                            b.add_edge(done, w);
                        }
                    }
                }
                // FSDP hybrid: the shard groups' reduced gradients meet across replicas below.
                if hybrid && mb == micro_batches - 1 {
                    for (i, bucket) in bucket_plan.iter().enumerate() {
                        let done = hybrid_done.entry((st, dpg.tp_rank, i)).or_default();
                        done.extend(done_tasks.iter().filter(|d| d.1 == bucket.last).map(|d| d.2));
                    }
                    hybrid_upd.entry((st, dpg.tp_rank)).or_default().extend(&upd);
                }
            }
            // ZeRO-1/2: every rank's updated shard is all-gathered per bucket; the next iteration's
            // first forward of each layer waits for it (Megatron's overlapped parameter gather).
            // DeepSpeed's optimizers gather inside their `step()`, before it returns: the next
            // forward waits for every bucket (v0.5.10 `runtime/zero/stage_1_and_2.py` `step`,
            // `dist.all_gather` per shard; 56c5223 `runtime/bf16_optimizer.py` `step`,
            // `all_gather_dp_groups`).
            // `ddp=mcore`: Megatron-Core gathers in forward order, one bucket at a time: the first bucket's
            // gather is dispatched as the next step begins (`zero_grad`), each next one by the
            // forward pre-hook of the module that waits for the one before it, so not before the
            // GPU reaches that module ("to ensure that the communication kernels don't
            // head-of-line block the compute kernels since we run with
            // CUDA_DEVICE_MAX_CONNECTIONS=1"): core_r0.8.0 megatron/core/optimizer/
            // distrib_optimizer.py l.1330-1337 (first dispatch), l.1356-1372 (buckets in reverse
            // within each model chunk, chunks in order), l.1466-1487 (wait, then dispatch the
            // next); core_r0.10.0 param_and_grad_buffer.py l.234-244 (`finish_param_sync`
            // dispatches `next_param_gather_bucket_group`).
            let gather_in_step = plan.mp_optimizer.is_deepspeed();
            // `ddp=apex` the same, layer by layer: `DistributedFusedAdam.step` launches the first
            // layer's gather (with the embedding's), and each parameter's pre-forward hook waits
            // for its own bucket, then starts the next unsynced one if none is in flight (apex
            // f3f04924 distributed_fused_adam.py l.2382-2426 `step`, l.875-883 the hook,
            // l.1929-1983 `_try_start_bucket_param_sync`; buckets in forward order because NeMo
            // registers the layers last first, megatron_gpt_model.py l.628 @ NeMo v2.0.0rc0, and
            // `step` lists them last bucket first, l.2324).
            let forward_order = (plan.mcore_ddp || plan.apex_bucket_bytes.is_some()) && !gather_in_step;
            if matches!(plan.sharding, Sharding::Zero1 | Sharding::Zero2) && dp > 1 {
                for &g in members.iter().filter(|_| !expert) {
                    for &l in sl {
                        param_ready[g as usize][l].clear();
                        param_next[g as usize][l].clear();
                    }
                }
                let order: Vec<&Bucket> =
                    if forward_order { bucket_plan.iter().rev().collect() } else { bucket_plan.iter().collect() };
                // The first layer (forward order) of the bucket gathered before this one.
                let mut prev_first: Option<usize> = None;
                for bucket in order {
                    let ag = b.add_task(task(
                        Work::Collective {
                            group: dpg.group,
                            op: CollectiveOp::AllGather,
                            algorithm: s.allreduce,
                            bytes: param_bytes(bucket.fp32_bytes),
                        },
                        dpg.gather,
                        Phase::ParamGather,
                        None,
                        it,
                        Some(to_global(bucket.last)),
                    ));
                    upd.iter().for_each(|&u| b.add_edge(u, ag));
                    if forward_order {
                        if let Some(l) = prev_first {
                            members.iter().for_each(|&g| param_next[g as usize][l].push(ag));
                        }
                        prev_first = Some(to_global(bucket.last));
                    }
                    for &g in members {
                        if gather_in_step {
                            sl.iter().for_each(|&l| param_ready[g as usize][l].push(ag));
                        } else {
                            for &l in &bucket.layers {
                                param_ready[g as usize][to_global(l)].push(ag);
                            }
                        }
                    }
                }
            }
        }

        // FSDP hybrid: per bucket, the j-th GPUs of the shard groups all-reduce their shard once
        // every shard group has reduce-scattered it.
        for ((st, t), groups) in sorted_vec(&replica_groups) {
            let bucket_plan = &exchange_plans[st as usize].buckets;
            let sl = &stage_layers[st as usize];
            for (i, bucket) in bucket_plan.iter().enumerate() {
                for &(group, queue) in groups {
                    let ar = b.add_task(task(
                        Work::Collective {
                            group,
                            op: CollectiveOp::AllReduce,
                            algorithm: s.allreduce,
                            bytes: bucket.fp32_bytes / shard as u64,
                        },
                        Some(queue),
                        Phase::GradientAggregation,
                        None,
                        it,
                        Some(if pp > 1 { sl[bucket.last] } else { bucket.last }),
                    ));
                    hybrid_done.get(&(st, t, i)).into_iter().flatten().for_each(|&d| b.add_edge(d, ar));
                    hybrid_upd.get(&(st, t)).into_iter().flatten().for_each(|&u| b.add_edge(ar, u));
                }
            }
        }

        // Tied embeddings: after both ends' last backward, before both updates.
        for ((t, d), (group, queue)) in sorted(&tied) {
            let first = driver(plan.rank(Coords { tp: t, dp: d, stage: 0 })).expect("driven") as usize;
            let last = driver(plan.rank(Coords { tp: t, dp: d, stage: pp - 1 })).expect("driven") as usize;
            let ar = b.add_task(task(
                Work::Collective {
                    group,
                    op: CollectiveOp::AllReduce,
                    algorithm: s.allreduce,
                    bytes: layout.tied_bytes,
                },
                Some(queue),
                Phase::ParamGather,
                None,
                it,
                None,
            ));
            for g in [first, last] {
                let stage = plan.coords(rep[g]).stage;
                if let Some(step) = orders[stage as usize].last() {
                    if let Some(&(_, exit)) = step_ends[g].get(step) {
                        b.add_edge(exit, ar);
                    }
                }
                b.add_edge(ar, updates[g]);
            }
        }

        for g in 0..n as usize {
            prev_update[g] = Some(updates[g]);
        }
        iteration_end.extend_from_slice(&updates);
    }
    b.build(DagMeta { gpus: n, iterations, iteration_end })
}

/// Adds the host's next launch task on GPU `g`: the launches still owed for the last GPU task,
/// then the first of `kernels` (none: a wait, which launches what follows), after the host's last
/// task; what it leaves owed is the rest of `kernels`.
#[allow(clippy::too_many_arguments)]
fn host_task(
    b: &mut DagBuilder,
    h: &HostModel,
    prev: &mut Option<TaskId>,
    owed: &mut Nanos,
    kernels: u32,
    g: u32,
    iteration: u32,
    layer: usize,
) -> TaskId {
    let t = host_chain(b, prev, *owed + h.launch_ns, g, iteration, layer);
    *owed = kernels.saturating_sub(1) as Nanos * h.launch_ns;
    t
}

/// Adds `ns` of host work on GPU `g` after the host's last task.
fn host_chain(
    b: &mut DagBuilder,
    prev: &mut Option<TaskId>,
    ns: Nanos,
    g: u32,
    iteration: u32,
    layer: usize,
) -> TaskId {
    let t = b.add_task(Task {
        work: Work::Fixed { ns },
        queue: None,
        phase: Phase::Host,
        gpu: Some(g),
        iteration,
        layer: Some(layer as u32),
        priority: 0,
    });
    if let Some(p) = *prev {
        b.add_edge(p, t);
    }
    *prev = Some(t);
    t
}

/// One collective of a layer group (a TP or EP collective, or a step of a CP ring), made once per
/// [`GroupKey`] on every image of the group (by the first simulated member to get there).
struct GroupCollective {
    op: CollectiveOp,
    algorithm: Algorithm,
    bytes: u64,
}

impl GroupCollective {
    /// The collective at `key` (stage and group index in it) on every image of its group, each
    /// after `preds`; returns the first image's task, the one the group's own members wait for.
    #[allow(clippy::too_many_arguments)]
    fn add<'a>(
        &self,
        b: &mut DagBuilder,
        made: &mut HashMap<GroupKey, Vec<TaskId>>,
        key: GroupKey,
        lg: &LayerGroups,
        group_ids: &HashMap<(CommGroup, u32, u32), (GroupId, QueueId)>,
        iteration: u32,
        preds: impl Iterator<Item = &'a TaskId>,
    ) -> TaskId {
        let (kind, stage, idx, layer) = (key.0, key.1, key.2, key.3);
        let made_now = !made.contains_key(&key);
        let colls = made.entry(key).or_insert_with(|| {
            lg.images(idx)
                .map(|i| {
                    let (group, queue) = group_ids[&(kind, stage, i)];
                    b.add_task(Task {
                        work: Work::Collective { group, op: self.op, algorithm: self.algorithm, bytes: self.bytes },
                        queue: Some(queue),
                        phase: lg.phase(),
                        gpu: None,
                        iteration,
                        layer: Some(layer as u32),
                        priority: layer as i32,
                    })
                })
                .collect::<Vec<_>>()
        });
        if colls.len() > 1 && made_now {
            for &c in &colls[1..] {
                b.add_collective_image(colls[0], c);
            }
        }
        for &x in preds {
            for &c in colls.iter() {
                b.add_edge(x, c);
            }
        }
        colls[0]
    }
}

/// A map's entries in key order, values borrowed.
fn sorted_vec<K: Ord + Copy, V>(m: &HashMap<K, V>) -> Vec<(K, &V)> {
    let mut v: Vec<(K, &V)> = m.iter().map(|(k, v)| (*k, v)).collect();
    v.sort_by_key(|x| x.0);
    v
}

/// A map's entries in key order (deterministic task ids).
fn sorted<K: Ord + Copy, V: Copy>(m: &HashMap<K, V>) -> Vec<(K, V)> {
    let mut v: Vec<(K, V)> = m.iter().map(|(k, v)| (*k, *v)).collect();
    v.sort_by_key(|x| x.0);
    v
}

/// `w`'s gradients split by the group that reduces them: (the DP group's, the expert-DP group's),
/// with the same layers in both; `experts[l]` (some of layer l's gradient tensors) move from the
/// first to the second.
fn split_expert_grads(w: &Workload, experts: &[&[u64]]) -> Result<(Workload, Workload)> {
    let (mut dense, mut apart) = (w.clone(), w.clone());
    for ((d, e), &moved) in dense.layers.iter_mut().zip(apart.layers.iter_mut()).zip(experts) {
        e.grad_bytes = moved.iter().sum();
        e.grad_tensors = moved.to_vec();
        if moved.is_empty() {
            continue;
        }
        let mut left = d.tensors().to_vec();
        for t in moved {
            let Some(i) = left.iter().position(|x| x == t) else {
                return Err(Error::invalid(
                    format!("layer `{}`", d.name),
                    format!("an expert gradient of {t} bytes is not one of the layer's gradient tensors"),
                ));
            };
            left.remove(i);
        }
        d.grad_bytes = left.iter().sum();
        d.grad_tensors = left;
    }
    Ok((dense, apart))
}

/// Whether the plan's collectives are NCCL's, which runs one communicator's operations one at a
/// time: under the NCCL collective model, or with a runtime whose GPU collectives are NCCL's
/// (`runtime=ddp`, `nccl`, `horovod`, ...). `fsdp-wrap=layer` (PyTorch FSDP's wrapping, so its
/// NCCL process group) serialises too. A strategy that names no runtime under the ideal model
/// keeps the textbook DAG's independent gather queue: the idealised collectives assume no
/// library.
fn nccl_communicators(s: &crate::strategy::Strategy, m: &crate::hw::Machine) -> bool {
    matches!(m.collectives, crate::collective::CollectiveModel::Nccl(_))
        || s.runtime.as_ref().is_some_and(|r| r.launches_nccl())
}

/// One bucket per wrapped module of `w` (`units[l]` for each of its layers), in backward order:
/// FSDP reduce-scatters each module's flat gradient once its backward is done.
fn unit_buckets(w: &Workload, units: &[u32]) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    let mut open: Option<(u32, Bucket)> = None;
    for l in (0..w.layers.len()).rev() {
        let layer = &w.layers[l];
        if !layer.is_learnable() {
            continue;
        }
        let tensors = layer.tensors().len() as u64;
        if let Some((_, bk)) = open.as_mut().filter(|(u, _)| *u == units[l]) {
            bk.layers.push(l);
            bk.fp32_bytes += layer.grad_bytes;
            bk.last = l;
            bk.tensors += tensors;
            continue;
        }
        out.extend(open.take().map(|x| x.1));
        let bucket = Bucket { layers: vec![l], fp32_bytes: layer.grad_bytes, last: l, tensors, cycle: None, server: 0 };
        open = Some((units[l], bucket));
    }
    out.extend(open.map(|x| x.1));
    out
}

/// Megatron-Core's gradient buckets of one pipeline stage (see `megatron_chunks` in
/// [`build_plan`]): one bucket per model chunk, except the first chunk of the first stage
/// (`first_stage`), which keeps the buckets `fused` makes of its layers. `w` is the stage's
/// workload (layers in ascending global order, so each chunk's layers are consecutive and the
/// first chunk's come first); `chunks` the stage's chunks as global layers.
fn megatron_chunk_buckets(
    w: &Workload,
    chunks: &[Vec<usize>],
    first_stage: bool,
    fused: impl Fn(&Workload) -> Result<Vec<Bucket>>,
) -> Result<Vec<Bucket>> {
    let mut chunk_of: Vec<u32> = Vec::with_capacity(w.layers.len());
    for (c, chunk) in chunks.iter().enumerate() {
        chunk_of.extend(std::iter::repeat_n(c as u32, chunk.len()));
    }
    if chunk_of.len() != w.layers.len() {
        return Err(Error::invalid(
            "parallel",
            format!("a stage of {} layers does not match its chunks of {} layers", w.layers.len(), chunk_of.len()),
        ));
    }
    // Backward order: the last chunk's bucket first.
    let mut buckets = unit_buckets(w, &chunk_of);
    if first_stage {
        let first = chunks.first().map_or(0, Vec::len);
        buckets.retain(|bk| chunk_of[bk.last] != 0);
        buckets.extend(fused(&Workload { layers: w.layers[..first].to_vec(), ..w.clone() })?);
    }
    Ok(buckets)
}

/// Apex `DistributedFusedAdam`'s buckets of one stage's workload `w` as NeMo registers them
/// (`ddp=apex`), in backward order. NeMo hands the optimizer one parameter list per transformer
/// layer, the last layer first, with every parameter outside them (embedding, final norm, output
/// layer) added to the stage's first layer (NeMo v2.0.0rc0
/// nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py l.611-631), each list
/// through `init_params_bucket` (megatron_base_model.py l.858-861). That starts a new bucket for
/// each list and makes every bucket of the list wait for all its parameters (apex f3f04924
/// distributed_fused_adam.py l.1217-1287), so a layer is reduced and gathered as one group of
/// buckets. Every bucket has the same size, whatever it holds (`_init_param_state` l.1383-1447
/// splits parameters across buckets; `_try_start_bucket_grad_sync` reduces the whole
/// `bucket_size` buffer, l.1804-1811): `cap` bytes of `elem_bytes`-byte gradient elements
/// (`grad_sync_dtype`), a shard of 128 bytes' multiple per rank of the `ranks` that share it
/// (l.709-716). A group is one [`Bucket`] of its buckets' padded bytes.
fn apex_buckets(w: &Workload, cap: u64, elem_bytes: u64, ranks: u32) -> Vec<Bucket> {
    let elem_bytes = elem_bytes.max(1);
    let bucket_elems = apex_bucket_elems(cap, elem_bytes, ranks);
    // `L<i>.attn`, `L<i>.mlp`, ...: transformer layer i (see `workload::llm`).
    let layer_of =
        |name: &str| name.strip_prefix('L').and_then(|r| r.split_once('.')).and_then(|(i, _)| i.parse::<u32>().ok());
    let units: Vec<Option<u32>> = w.layers.iter().map(|l| layer_of(&l.name)).collect();
    let first = units.iter().flatten().next().copied();
    let mut groups: Vec<(Option<u32>, Bucket)> = Vec::new();
    for (l, layer) in w.layers.iter().enumerate() {
        if !layer.is_learnable() {
            continue;
        }
        let unit = units[l].or(first);
        let tensors = layer.tensors().len() as u64;
        match groups.iter_mut().find(|(u, _)| *u == unit) {
            Some((_, bk)) => {
                bk.layers.push(l);
                bk.fp32_bytes += layer.grad_bytes;
                bk.last = bk.last.min(l);
                bk.tensors += tensors;
            }
            None => groups.push((
                unit,
                Bucket { layers: vec![l], fp32_bytes: layer.grad_bytes, last: l, tensors, cycle: None, server: 0 },
            )),
        }
    }
    let mut out: Vec<Bucket> = groups.into_iter().map(|(_, b)| b).collect();
    for b in &mut out {
        b.layers.sort_unstable_by_key(|&l| std::cmp::Reverse(l));
        let elems = b.fp32_bytes.div_ceil(elem_bytes);
        b.fp32_bytes = elems.div_ceil(bucket_elems).max(1) * bucket_elems * elem_bytes;
    }
    out.sort_by_key(|b| std::cmp::Reverse(b.last));
    out
}

/// Elements of one Apex bucket of `cap` bytes of `elem_bytes`-byte elements shared by `ranks`:
/// `bucket_size = cap / dtype_size`, each rank's shard rounded down to a multiple of
/// `128 / dtype_size` elements (at least one such), the bucket `ranks` shards (apex f3f04924
/// distributed_fused_adam.py l.709-716, `make_bucket` calls l.1377-1380 and l.1406-1410).
fn apex_bucket_elems(cap: u64, elem_bytes: u64, ranks: u32) -> u64 {
    let ranks = ranks.max(1) as u64;
    let align = (128 / elem_bytes).max(1);
    let shard = (cap / elem_bytes / ranks) / align * align;
    shard.max(align) * ranks
}

/// Under pipeline parallelism with `ddp=apex`, per model chunk of `stage`, the backward step of
/// its `order` after which its gradients are reduced: NeMo passes `no_sync` and its own grad sync
/// to Megatron's schedules (megatron_gpt_model.py l.650-655 @ NeMo v2.0.0rc0). The interleaved
/// schedule calls it for a chunk `stage` backward steps after the chunk's last one, or after the
/// last step when that is past the end (Megatron-LM core_r0.8.0
/// megatron/core/pipeline_parallel/schedules.py l.797-805, l.1121-1126); 1F1B lets the first
/// stage reduce during its last backward (each layer as it is done: None) and the others after
/// it (l.1463, l.1488, l.1504-1506).
fn apex_sync_steps(order: &[Step], stage: u32, vp: u32) -> Option<Vec<Step>> {
    let backward: Vec<Step> = order.iter().copied().filter(|s| s.pass == Pass::Backward).collect();
    let last = *backward.last()?;
    if vp <= 1 {
        return (stage > 0).then(|| vec![last]);
    }
    (0..vp)
        .map(|c| {
            let k = backward.iter().rposition(|s| s.chunk == c)?;
            Some(backward.get(k + stage as usize).copied().unwrap_or(last))
        })
        .collect()
}

#[cfg(test)]
mod apex_tests {
    use super::*;
    use crate::dag::schedule::Schedule;
    use crate::workload::{Layer, Stat};

    fn layer(name: &str, elems: u64) -> Layer {
        Layer {
            name: name.into(),
            forward: Stat::exact(0),
            backward: Stat::exact(0),
            comm: None,
            grad_bytes: 4 * elems,
            grad_tensors: vec![4 * elems],
            util: None,
            tp: None,
            memory: None,
        }
    }

    #[test]
    fn apex_buckets_are_whole_per_layer_with_the_rest_in_the_first_layer() {
        // 125 MiB of FP32 over 4 ranks: 32,768,000 elements, 8,192,000 a shard (a multiple of 32).
        assert_eq!(apex_bucket_elems(125 << 20, 4, 4), 32_768_000);
        // Over 3 ranks each shard rounds down to 32 elements: 10,922,666 -> 10,922,656.
        assert_eq!(apex_bucket_elems(125 << 20, 4, 3), 3 * 10_922_656);
        // 220 MiB of BF16 over 16 ranks: 115,343,360 elements, shards of 7,208,960 (64 | it).
        assert_eq!(apex_bucket_elems(220 << 20, 2, 16), 115_343_360);
        // A cap below one aligned shard: 64 BF16 elements a rank.
        assert_eq!(apex_bucket_elems(100, 2, 8), 512);

        // Buckets of 32 FP32 elements (128 bytes, one rank). Layer 1 (30 + 50 elements) fills 3
        // buckets (96 elements); layer 0 takes the embedding and the head: 10 + 30 + 50 + 20 =
        // 110 elements, 4 buckets (128). Layer 1 first (backward order).
        let w = Workload {
            name: "w".into(),
            batch_per_gpu: 1,
            sample_bytes: 0,
            device_sample_bytes: 0,
            layers: vec![
                layer("embedding", 10),
                layer("L0.attn", 30),
                layer("L0.mlp", 50),
                layer("L1.attn", 30),
                layer("L1.mlp", 50),
                layer("head", 20),
            ],
            update: Stat::exact(0),
            data_load: None,
            trace_iterations: 1,
            fp16: false,
        };
        let b = apex_buckets(&w, 128, 4, 1);
        let got: Vec<(Vec<usize>, u64, usize)> = b.iter().map(|x| (x.layers.clone(), x.fp32_bytes, x.last)).collect();
        assert_eq!(got, [(vec![4, 3], 96 * 4, 3), (vec![5, 2, 1, 0], 128 * 4, 0)]);
        assert_eq!((b[0].tensors, b[1].tensors), (2, 4));
        // A cap of 80 elements rounds down to 64 (128-byte shards): layer 1 takes 2 buckets.
        let b = apex_buckets(&w, 80 * 4, 4, 1);
        assert_eq!(b[0].fp32_bytes, 2 * 64 * 4);
    }

    #[test]
    fn apex_grad_sync_follows_megatrons_schedule_calls() {
        let step = |micro_batch, chunk| Step { micro_batch, chunk, pass: Pass::Backward };
        // Interleaved, pp 2, vp 2, 2 micro-batches: every forward first, then the backwards
        // (mb 0, chunk 1), (1, 1), (0, 0), (1, 0). Stage 0 reduces a chunk after its last backward;
        // stage 1 one backward later: chunk 1 after (0, 0), chunk 0 past the end, after (1, 0).
        let order = |st| stage_order(Schedule::Interleaved, 2, 2, 2, st);
        assert_eq!(apex_sync_steps(&order(0), 0, 2), Some(vec![step(1, 0), step(1, 1)]));
        assert_eq!(apex_sync_steps(&order(1), 1, 2), Some(vec![step(1, 0), step(0, 0)]));
        // 1F1B: the first stage reduces each layer as its last backward produces it; the others
        // after their last backward (micro-batch 2).
        let order = |st| stage_order(Schedule::OneFOneB, 2, 1, 3, st);
        assert_eq!(apex_sync_steps(&order(0), 0, 1), None);
        assert_eq!(apex_sync_steps(&order(1), 1, 1), Some(vec![step(2, 0)]));
    }
}
