//! Picks the builder a setup needs ([`build_dag`]) and holds what the builders share: the
//! gradient buckets and the data-parallel gradient exchange ([`add_gradient_exchange`]).
//!
//! The S-SGD DAG of Shi, Wang & Chu (Fig. 1) is the parallel-plan builder ([`super::plan`]) with
//! the plan tp = 1, pp = 1, dp = N. Per GPU `g` and iteration `i`: read a batch from storage
//! (`io`), copy it to the GPU (`h2d`), forward layer 1..L, backward layer L..1, then the model
//! update. Per learnable layer, one gradient-aggregation task shared by all GPUs (the paper's
//! T32-T34). Edges as the paper gives them:
//!
//! * no overlap (CNTK, Eq. 2): the next read waits for the update; aggregation starts after the
//!   whole backward pass.
//! * I/O overlap (Caffe-MPI, Eq. 3): the loader reads batch i+1 right after copying batch i and
//!   copies it once batch i's first layer has consumed the input buffer.
//! * WFBP (Eq. 4-5): layer l's aggregation waits only for layer l's backward on every GPU;
//!   aggregations run one at a time in order on the communicator.

use super::plan::{build_plan, PlanLayout};
use super::{Dag, DagBuilder, GroupId, Phase, QueueId, Task, TaskId, Work};
use crate::collective::CollectiveOp;
use crate::error::{Error, Result};
use crate::hw::Machine;
use crate::strategy::{CommSource, Strategy, SPARSE_CHUNK_ELEMENTS};
use crate::units::Nanos;
use crate::workload::Workload;

/// Everything the builder reads.
pub struct BuildInput<'a> {
    pub workload: &'a Workload,
    pub machine: &'a Machine,
    /// Number of GPUs used: the first `gpus` GPUs of the machine in rank order.
    pub gpus: u32,
    pub strategy: &'a Strategy,
    pub iterations: u32,
    /// GPUs whose own tasks are built: the first `represented` ranks stand for all `gpus` when
    /// the setup is symmetric (see `predict::symmetric_representatives`); collectives still span
    /// every rank. Equal to `gpus` for a full graph; only the all-reduce builder uses fewer.
    pub represented: u32,
    /// A parallel plan (tensor, pipeline, data parallelism; its represented ranks replace
    /// `represented`); `None` is plain data parallelism.
    pub plan: Option<&'a PlanLayout>,
}

/// Builds the DAG the strategy asks for: master-GPU data parallelism ([`super::master`]) or the
/// all-reduce S-SGD graph below.
pub fn build_dag(input: &BuildInput) -> Result<Dag> {
    if let Some(layout) = input.plan {
        if input.strategy.master || input.strategy.mps.is_some() {
            return Err(Error::invalid("strategy", "master and mps strategies do not combine with --parallel"));
        }
        return build_plan(input, layout);
    }
    if input.strategy.master {
        super::master::build_master(input)
    } else if input.strategy.mps.is_some() {
        super::mps::build_mps(input)
    } else {
        build_ssgd(input)
    }
}

/// Checks shared by the builders: GPU count, iterations.
pub(super) fn check_input(input: &BuildInput) -> Result<()> {
    let BuildInput { machine: m, gpus: n, iterations, .. } = *input;
    if n == 0 {
        return Err(Error::invalid("GPU count", "must be at least 1"));
    }
    if n as usize > m.gpus.len() {
        return Err(Error::invalid(
            "GPU count",
            format!("{n} GPUs asked for, machine `{}` has {}", m.name, m.gpus.len()),
        ));
    }
    if iterations < 2 {
        return Err(Error::invalid("iterations", "at least 2 are needed to measure a steady-state iteration"));
    }
    Ok(())
}

/// One all-reduce: the learnable layers whose gradients it carries (or a piece of one layer's).
pub(super) struct Bucket {
    /// Layers in the order their gradients are produced (backward order).
    pub(super) layers: Vec<usize>,
    pub(super) fp32_bytes: u64,
    /// Lowest layer in the bucket: it decides when the bucket is complete and its priority.
    pub(super) last: usize,
}

/// Groups gradients, in the order backward produces them, into all-reduces: one per layer; fused
/// until θ bytes (lazy all-reduce); or each layer cut into pieces (priority scheduling).
pub(super) fn buckets(w: &Workload, s: &Strategy) -> Vec<Bucket> {
    let learnable: Vec<usize> = (0..w.layers.len()).rev().filter(|&l| w.layers[l].is_learnable()).collect();
    let mut out = Vec::new();
    if let Some(piece) = s.priority_partition {
        for &l in &learnable {
            let mut left = w.layers[l].grad_bytes;
            while left > 0 {
                let bytes = left.min(piece);
                out.push(Bucket { layers: vec![l], fp32_bytes: bytes, last: l });
                left -= bytes;
            }
        }
        return out;
    }
    let theta = s.fusion.unwrap_or(0);
    let mut open = Bucket { layers: Vec::new(), fp32_bytes: 0, last: 0 };
    for &l in &learnable {
        open.layers.push(l);
        open.fp32_bytes += w.layers[l].grad_bytes;
        open.last = l;
        if open.fp32_bytes >= theta {
            out.push(std::mem::replace(&mut open, Bucket { layers: Vec::new(), fp32_bytes: 0, last: 0 }));
        }
    }
    if !open.layers.is_empty() {
        out.push(open);
    }
    out
}

/// Bytes on the wire for a bucket: compressed, and with sparse chunks only the chosen fraction of
/// its 32K-gradient chunks (the chosen chunks are taken as spread evenly over the pool).
fn wire_bytes(s: &Strategy, fp32_bytes: u64) -> u64 {
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

/// Builds the S-SGD DAG: the parallel-plan builder with the plan tp = 1, pp = 1, dp = N.
pub fn build_ssgd(input: &BuildInput) -> Result<Dag> {
    let (ranks, n) = (input.gpus, input.represented);
    if n == 0 || n > ranks {
        return Err(Error::invalid("represented GPUs", format!("{n} is not between 1 and {ranks}")));
    }
    build_plan(input, &PlanLayout::data_parallel(ranks, n, input.workload.layers.len()))
}

/// What one iteration's gradient exchange needs besides the ranks' tasks.
pub(super) struct Exchange<'a> {
    pub workload: &'a Workload,
    pub strategy: &'a Strategy,
    pub buckets: &'a [Bucket],
    /// The all-reduce group (every rank) and the communicator queue the all-reduces run on.
    pub group: GroupId,
    pub comm: QueueId,
    pub iteration: u32,
    /// All-reduce, or reduce-scatter when the optimizer state is sharded (ZeRO, FSDP).
    pub op: CollectiveOp,
}

/// Adds one iteration's gradient exchange for the ranks whose backward tasks are `bwd[r][layer]`:
/// per bucket an encode task on every rank (made by `codec_task(builder, rank, ns, layer)`) when
/// gradients are compressed, the all-reduce, a decode task on every rank, and an edge into every
/// rank's update; `on_done(rank, bucket, task)` hears which task makes the bucket usable. With
/// sparse chunks, the chunk-norm all-reduce follows and gates the next iteration's exchange
/// through `prev_picks`. Shared by the S-SGD and MPS builders so both follow the same mechanics.
pub(super) fn add_gradient_exchange(
    b: &mut DagBuilder,
    x: &Exchange,
    bwd: &[Vec<TaskId>],
    updates: &[TaskId],
    prev_picks: &mut Option<TaskId>,
    codec_task: &mut dyn FnMut(&mut DagBuilder, usize, Nanos, usize) -> TaskId,
    on_done: &mut dyn FnMut(usize, &Bucket, TaskId),
) {
    let Exchange { workload: w, strategy: s, buckets, group, comm, iteration: it, op } = *x;
    let codec = s.grad_codec();
    let coded = !codec.is_free();
    let aggregation = |work, layer: Option<usize>| Task {
        work,
        queue: Some(comm),
        phase: Phase::GradientAggregation,
        gpu: None,
        iteration: it,
        layer: layer.map(|l| l as u32),
        priority: layer.map(|l| l as i32).unwrap_or(0),
    };
    let mut prev_comm: Option<TaskId> = None;
    for bucket in buckets {
        let l = bucket.last;
        let tensors = if s.priority_partition.is_some() { 1 } else { bucket.layers.len() as u64 };
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
            let ns = codec.encode_ns(bucket.fp32_bytes, tensors);
            before = (0..bwd.len())
                .map(|r| {
                    let e = codec_task(b, r, ns, l);
                    b.add_edge(if s.wfbp { bwd[r][l] } else { bwd[r][0] }, e);
                    e
                })
                .collect();
        }
        let c = b.add_task(aggregation(work, Some(l)));
        before.iter().chain(&*prev_picks).for_each(|&p| b.add_edge(p, c));
        if let Some(p) = prev_comm.filter(|_| !s.wfbp) {
            b.add_edge(p, c);
        }
        for (r, &update) in updates.iter().enumerate() {
            let done = if coded {
                let d = codec_task(b, r, codec.decode_ns(bucket.fp32_bytes, tensors), l);
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
        let picks = b.add_task(aggregation(work, None));
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
