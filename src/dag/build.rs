//! The S-SGD DAG of Shi, Wang & Chu (Fig. 1), for several iterations.
//!
//! Per GPU `g` and iteration `i`: read a batch from storage (`io`), copy it to the GPU (`h2d`),
//! forward layer 1..L, backward layer L..1, then the model update. Per learnable layer, one
//! gradient-aggregation task shared by all GPUs (the paper's T32-T34). Edges as the paper gives them:
//!
//! * no overlap (CNTK, Eq. 2): the next read waits for the update; aggregation starts after the
//!   whole backward pass.
//! * I/O overlap (Caffe-MPI, Eq. 3): the loader reads batch i+1 right after copying batch i and
//!   copies it once batch i's first layer has consumed the input buffer.
//! * WFBP (Eq. 4-5): layer l's aggregation waits only for layer l's backward on every GPU;
//!   aggregations run one at a time in order on the communicator.

use super::exchange::{self, add_gradient_exchange, add_server_exchange, Bucket, Exchange, Queues, ServerSetup};
use super::{Dag, DagBuilder, DagMeta, Discipline, Phase, Task, TaskId, Work};
use crate::error::{Error, Result};
use crate::hw::Machine;
use crate::strategy::{CommSource, Strategy};
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
}

/// Builds the DAG the strategy asks for: master-GPU data parallelism ([`super::master`]) or the
/// all-reduce S-SGD graph below.
pub fn build_dag(input: &BuildInput) -> Result<Dag> {
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

/// Builds the S-SGD DAG.
pub fn build_ssgd(input: &BuildInput) -> Result<Dag> {
    let BuildInput { workload: w, machine: m, gpus: ranks, strategy: s, iterations, represented: n } = *input;
    check_input(input)?;
    if n == 0 || n > ranks {
        return Err(Error::invalid("represented GPUs", format!("{n} is not between 1 and {ranks}")));
    }
    if s.comm_source == CommSource::Trace && ranks > 1 {
        if let Some(l) = w.layers.iter().find(|l| l.is_learnable() && l.comm.is_none()) {
            return Err(Error::invalid(
                "strategy",
                format!("comm=trace needs measured communication times, but layer `{}` has none", l.name),
            ));
        }
    }

    let layers = &w.layers;
    let nl = layers.len();
    let mut b = DagBuilder::new();
    let compute_q: Vec<_> = (0..n).map(|g| b.add_queue(format!("gpu{g}.compute"), Discipline::Fifo, Some(g))).collect();
    let plan = exchange::plan(w, s, m, ranks)?;
    // Each node's CPU cores, shared by its processes' loader workers (when loading is modelled).
    let node_cpu: Option<Vec<_>> = s.loader.map(|_| {
        let nodes = m.gpus[..n as usize].iter().map(|g| g.node).max().map_or(1, |x| x + 1);
        (0..nodes).map(|x| b.add_resource(format!("node{x}.cpu"))).collect()
    });
    let queues = Queues::new(&mut b, &plan);
    let group = b.add_group((0..ranks).collect());
    let servers = match (plan.servers, ranks > 1) {
        (Some(srv), true) if n == ranks => Some(ServerSetup::new(&mut b, m, ranks, &srv)),
        (Some(_), true) => {
            return Err(Error::invalid("represented GPUs", "parameter-server runtimes need every GPU simulated"))
        }
        _ => None,
    };

    let task = |work, queue, phase, gpu, iteration, layer: Option<usize>| Task {
        work,
        queue,
        phase,
        gpu,
        iteration,
        layer: layer.map(|l| l as u32),
        priority: layer.map(|l| l as i32).unwrap_or(0),
    };

    let mut iteration_end = Vec::with_capacity((iterations * n) as usize);
    // Per GPU, the previous iteration's tasks that the next one hangs off.
    let mut prev_update: Vec<Option<TaskId>> = vec![None; n as usize];
    let mut prev_h2d: Vec<Option<TaskId>> = vec![None; n as usize];
    let mut prev_first_fwd: Vec<Option<TaskId>> = vec![None; n as usize];
    // Priority scheduling: per GPU and layer, what the next forward of that layer waits for.
    let per_layer_sync = plan.priority && ranks > 1;
    let mut layer_ready: Vec<Vec<Vec<TaskId>>> = vec![vec![Vec::new(); nl]; n as usize];
    let mut prev_picks: Option<TaskId> = None;

    for it in 0..iterations {
        let mut bwd: Vec<Vec<TaskId>> = Vec::with_capacity(n as usize);
        let mut updates = Vec::with_capacity(n as usize);
        let mut backward_start = None;
        for g in 0..n {
            let gi = g as usize;
            let info = m.gpus[gi];
            let batch = w.batch_per_gpu as u64;
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
            // The input pipeline: the process's loader workers decode and augment the batch on
            // its node's CPU cores, shared with the node's other processes.
            let decoded = match (s.loader, &node_cpu) {
                (Some(l), Some(cpu)) => {
                    let cores = l.cores as f64;
                    let work = Work::Shared {
                        resource: cpu[info.node as usize],
                        work_ns: (batch as f64 * l.load_ns_per_sample as f64 / cores).round() as u64,
                        cap: l.workers.min(l.cores) as f64 / cores,
                    };
                    let d = b.add_task(task(work, None, Phase::Io, Some(g), it, None));
                    b.add_edge(io, d);
                    d
                }
                _ => io,
            };
            b.add_edge(decoded, h2d);
            if s.io_overlap {
                if let Some(p) = prev_h2d[gi] {
                    b.add_edge(p, io);
                }
                if let Some(p) = prev_first_fwd[gi] {
                    b.add_edge(p, h2d);
                }
            } else if let Some(p) = prev_update[gi] {
                b.add_edge(p, io);
            }

            let q = Some(compute_q[gi]);
            let mut last = h2d;
            let mut first_fwd = None;
            for (l, layer) in layers.iter().enumerate() {
                let t = b.add_task(task(
                    Work::Fixed { ns: s.compute_ns(layer.forward.mean_ns) },
                    q,
                    Phase::Forward,
                    Some(g),
                    it,
                    Some(l),
                ));
                b.add_edge(last, t);
                for &p in &layer_ready[gi][l] {
                    b.add_edge(p, t);
                }
                if l == 0 {
                    if let (Some(p), false) = (prev_update[gi], per_layer_sync) {
                        b.add_edge(p, t);
                    }
                    first_fwd = Some(t);
                }
                last = t;
            }
            if g == 0 {
                backward_start = Some(last);
            }
            let mut bwd_g = vec![0; nl];
            for l in (0..nl).rev() {
                let t = b.add_task(task(
                    Work::Fixed { ns: s.compute_ns(layers[l].backward.mean_ns) },
                    q,
                    Phase::Backward,
                    Some(g),
                    it,
                    Some(l),
                ));
                b.add_edge(last, t);
                bwd_g[l] = t;
                last = t;
            }
            let upd = b.add_task(task(Work::Fixed { ns: w.update.mean_ns }, q, Phase::Update, Some(g), it, None));
            b.add_edge(last, upd);
            bwd.push(bwd_g);
            updates.push(upd);
            prev_h2d[gi] = Some(h2d);
            prev_first_fwd[gi] = first_fwd;
        }

        // Gradient aggregation: one all-reduce per bucket for all GPUs together, with codec tasks
        // on every GPU around it when gradients are compressed.
        if let (true, Some(setup)) = (ranks > 1, &servers) {
            let exchange = Exchange {
                workload: w,
                strategy: s,
                plan: &plan,
                group,
                queues: &queues,
                iteration: it,
                backward_start,
            };
            add_server_exchange(&mut b, &exchange, setup, m, &bwd, &updates);
        } else if ranks > 1 {
            let exchange = Exchange {
                workload: w,
                strategy: s,
                plan: &plan,
                group,
                queues: &queues,
                iteration: it,
                backward_start,
            };
            let mut codec_task = |b: &mut DagBuilder, g: usize, ns, l| {
                b.add_task(task(Work::Fixed { ns }, Some(compute_q[g]), Phase::Codec, Some(g as u32), it, Some(l)))
            };
            let mut on_done = |g: usize, bucket: &Bucket, done: TaskId| {
                if per_layer_sync {
                    let l = bucket.last;
                    if exchange::bucket_starts_layer(&plan.buckets, bucket) {
                        layer_ready[g][l].clear();
                    }
                    layer_ready[g][l].push(done);
                }
            };
            add_gradient_exchange(&mut b, &exchange, &bwd, &updates, &mut prev_picks, &mut codec_task, &mut on_done);
        }
        for g in 0..n as usize {
            prev_update[g] = Some(updates[g]);
        }
        iteration_end.extend_from_slice(&updates);
    }
    b.build(DagMeta { gpus: n, iterations, iteration_end })
}
