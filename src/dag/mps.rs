//! Several training processes per GPU under NVIDIA MPS (AccDP, Sec. IV-A). Each GPU is a
//! processor-shared resource; each of its `k` clients runs the whole S-SGD iteration on its own
//! mini-batch in its own stream, and is one rank of the all-reduce (#procs = nodes x GPUs/node x
//! clients/GPU). A kernel that reaches utilisation `u` alone needs `u x t` of the GPU (t its traced
//! time) and runs no faster than `min(u, active-thread share)`: alone it takes `t`; next to other
//! clients it gets a max-min fair share. So a small model (low `u`) gains from more clients and a
//! large one (`u` near 1) does not. `u` is the strategy's `util=U`, else each layer's forward and
//! backward utilisation as the workload carries it (synthesis derives it from the layer sizes).
//! Gradients go through the S-SGD builder's exchange ([`super::exchange::add_gradient_exchange`]):
//! buckets, codecs and sparse chunks as for one process per GPU, with each client's codec kernels
//! on its own stream as shared GPU work. Data-loading workers (AccDP Sec. V), when modelled, are
//! CPU work on a processor-shared resource per node: each process's loader gets at most its
//! workers' share of the node's cores, so too few workers, or too many processes per node, starve
//! the GPUs. Builds graphs only.

use super::build::BuildInput;
use super::exchange::{self, add_gradient_exchange, Exchange, Queues};
use super::{Dag, DagBuilder, DagMeta, Discipline, Phase, Task, TaskId, Work};
use crate::error::{Error, Result};
use crate::strategy::Util;
use crate::units::Nanos;

/// Builds the MPS DAG (the strategy's `mps` clients per GPU).
pub fn build_mps(input: &BuildInput) -> Result<Dag> {
    let BuildInput { workload: w, machine: m, gpus: n, strategy: s, iterations, .. } = *input;
    super::build::check_input(input)?;
    let k = s.clients_per_gpu();
    let ranks = n * k;
    let nl = w.layers.len();
    let mut b = DagBuilder::new();
    let gpu_res: Vec<_> = (0..n).map(|g| b.add_resource(format!("gpu{g}.sm"))).collect();
    let nodes = m.gpus[..n as usize].iter().map(|g| g.node).max().map_or(1, |x| x + 1);
    let cpu_res: Vec<_> = (0..nodes).map(|x| b.add_resource(format!("node{x}.cpu"))).collect();
    let node_of = |g: u32| m.gpus[g as usize].node as usize;
    let stream: Vec<_> = (0..ranks)
        .map(|r| b.add_queue(format!("gpu{}.client{}", r / k, r % k), Discipline::Fifo, Some(r / k)))
        .collect();
    let plan = exchange::plan(w, s, m, ranks)?;
    let queues = Queues::new(&mut b, &plan);
    // Rank r is client r % k of GPU r / k: consecutive ranks share a GPU, as MPI places them.
    let group = b.add_group((0..ranks).map(|r| r / k).collect());
    if s.util == Util::Auto && w.layers.iter().all(|l| l.util.is_none()) {
        return Err(Error::invalid(
            "strategy",
            format!(
                "util=auto needs per-layer utilisation, which `{}` does not carry (only a zoo model synthesised \
                 with --model/--gpu/--batch does); give util=U instead",
                w.name
            ),
        ));
    }
    // Utilisation alone of a layer's forward or backward kernels, and of the other kernels
    // (update, codecs: streaming kernels, which the roofline times at full memory bandwidth).
    let fixed = match s.util {
        Util::Fixed(u) => Some(u),
        Util::Default | Util::Auto => None,
    };
    let layer_util = |l: usize, backward: bool| {
        let derived = w.layers[l].util.map(|u| if backward { u.backward } else { u.forward });
        fixed.or(derived).unwrap_or(1.0)
    };
    let other_util = fixed.unwrap_or(1.0);
    let task = |work, queue, phase, gpu: u32, it, layer: Option<usize>| Task {
        work,
        queue,
        phase,
        gpu: Some(gpu),
        iteration: it,
        layer: layer.map(|l| l as u32),
        priority: 0,
    };
    // A kernel of `ns` alone at utilisation `u` needs `u x ns` of the GPU, at most `u` of it at once.
    let shared = |g: u32, ns: Nanos, u: f64| Work::Shared {
        resource: gpu_res[g as usize],
        work_ns: (u * ns as f64).round() as Nanos,
        cap: u.min(s.threads),
    };
    let add = |b: &mut DagBuilder, t: Task, after: &[TaskId]| {
        let id = b.add_task(t);
        after.iter().for_each(|&p| b.add_edge(p, id));
        id
    };

    let mut iteration_end = Vec::new();
    let mut prev_update: Vec<Option<TaskId>> = vec![None; ranks as usize];
    let mut prev_h2d: Vec<Option<TaskId>> = vec![None; ranks as usize];
    let mut prev_first_fwd: Vec<Option<TaskId>> = vec![None; ranks as usize];
    let mut prev_picks: Option<TaskId> = None;
    for it in 0..iterations {
        let mut bwd: Vec<Vec<TaskId>> = Vec::with_capacity(ranks as usize);
        let mut updates = Vec::with_capacity(ranks as usize);
        for r in 0..ranks as usize {
            let g = r as u32 / k;
            let info = m.gpus[g as usize];
            let batch = w.batch_per_gpu as u64;
            // As in the S-SGD DAG: with I/O overlap the next read follows the previous copy and the
            // next copy waits for the input buffer to be consumed; without, both wait for the update.
            let io_after = if s.io_overlap { prev_h2d[r] } else { prev_update[r] };
            let io = Work::Transfer { src: info.storage, dst: info.host, bytes: batch.saturating_mul(w.sample_bytes) };
            let mut loaded = vec![add(&mut b, task(io, None, Phase::Io, g, it, None), &Vec::from_iter(io_after))];
            if let Some(l) = s.loader {
                // The process's workers decode and augment the batch on the node's shared cores,
                // alongside its reads (sample by sample, several workers at once: see plan.rs).
                let cores = l.cores as f64;
                let work = Work::Shared {
                    resource: cpu_res[node_of(g)],
                    work_ns: (batch as f64 * l.load_ns_per_sample as f64 / cores).round() as Nanos,
                    cap: l.workers.min(l.cores) as f64 / cores,
                };
                loaded.push(add(&mut b, task(work, None, Phase::Io, g, it, None), &Vec::from_iter(io_after)));
            }
            let h2d =
                Work::Transfer { src: info.host, dst: info.device, bytes: batch.saturating_mul(w.device_sample_bytes) };
            let mut last = add(&mut b, task(h2d, None, Phase::HostToDevice, g, it, None), &loaded);
            if s.io_overlap {
                if let Some(f) = prev_first_fwd[r] {
                    b.add_edge(f, last);
                }
            }
            prev_h2d[r] = Some(last);
            for (l, layer) in w.layers.iter().enumerate() {
                let after: Vec<TaskId> = std::iter::once(last).chain(prev_update[r].filter(|_| l == 0)).collect();
                last = add(
                    &mut b,
                    task(
                        shared(g, s.compute_ns(layer.forward.mean_ns), layer_util(l, false)),
                        Some(stream[r]),
                        Phase::Forward,
                        g,
                        it,
                        Some(l),
                    ),
                    &after,
                );
                if l == 0 {
                    prev_first_fwd[r] = Some(last);
                }
            }
            let mut bwd_r = vec![0; nl];
            for l in (0..nl).rev() {
                let work = shared(g, s.compute_ns(w.layers[l].backward.mean_ns), layer_util(l, true));
                let t = task(work, Some(stream[r]), Phase::Backward, g, it, Some(l));
                last = add(&mut b, t, &[last]);
                bwd_r[l] = last;
            }
            updates.push(add(
                &mut b,
                task(shared(g, w.update.mean_ns, other_util), Some(stream[r]), Phase::Update, g, it, None),
                &[last],
            ));
            bwd.push(bwd_r);
        }
        if ranks > 1 {
            // Each client encodes and decodes its own gradients on its stream, as GPU work shared
            // with the other clients' kernels.
            let exchange = Exchange {
                workload: w,
                strategy: s,
                plan: &plan,
                group,
                queues: &queues,
                iteration: it,
                backward_start: None,
                op: crate::collective::CollectiveOp::AllReduce,
            };
            let mut codec_task = |b: &mut DagBuilder, r: usize, ns, l| {
                let g = r as u32 / k;
                b.add_task(task(shared(g, ns, other_util), Some(stream[r]), Phase::Codec, g, it, Some(l)))
            };
            add_gradient_exchange(
                &mut b,
                &exchange,
                &bwd,
                &updates,
                &mut prev_picks,
                &mut codec_task,
                &mut |_, _, _| {},
            );
        }
        // A GPU's iteration ends when all its clients have updated.
        for g in 0..n {
            let mine: Vec<TaskId> = (0..k).map(|c| updates[(g * k + c) as usize]).collect();
            iteration_end.push(add(&mut b, task(Work::Fixed { ns: 0 }, None, Phase::Update, g, it, None), &mine));
        }
        for (r, &u) in updates.iter().enumerate() {
            prev_update[r] = Some(u);
        }
    }
    b.build(DagMeta { gpus: n, iterations, iteration_end })
}
