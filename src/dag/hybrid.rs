//! The hybrid DAG of Krizhevsky's "one weird trick" as Dettmers models it (8-bit approximations,
//! Sec. 2.4 and Appendix 5.1): data-parallel convolutions with each layer's gradient synchronised
//! during the rest of the backward pass, and model-parallel fully connected layers fed K sub-batches
//! (one per GPU's convolutional activations), each exchange overlapping the next sub-batch's
//! compute. Every task is fixed-time: kernel and sync times come from a [`HybridTable`]. Builds
//! graphs only; never simulates.

use super::{Dag, DagBuilder, DagMeta, Discipline, Phase, QueueId, Task, TaskId, Work};
use crate::error::{Error, Result};
use crate::strategy::hybrid::{HybridTable, Precision, RowKind};
use crate::units::Nanos;

/// How the model-parallel exchanges share the PCIe fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channels {
    /// One serial channel: an exchange waits for the previous one (each sync time already fills
    /// the switch with all GPUs' messages).
    Shared,
    /// One channel per layer boundary and direction: exchanges of different layers overlap, as in
    /// Dettmers' per-layer penalty accounting.
    PerBoundary,
    /// One serial channel per direction, since PCIe links are full duplex: forward (activation)
    /// exchanges queue behind each other, and so do backward (error) exchanges, but the two kinds
    /// overlap. Between the other two in concurrency.
    PerDirection,
}

impl Channels {
    /// Parses `per-boundary`, `per-direction` or `shared`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "per-boundary" => Channels::PerBoundary,
            "per-direction" => Channels::PerDirection,
            "shared" => Channels::Shared,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Channels::PerBoundary => "per-boundary",
            Channels::PerDirection => "per-direction",
            Channels::Shared => "shared",
        }
    }
}

/// Builds `iterations` iterations of the hybrid scheme on `gpus` GPUs (= sub-batches K). One GPU
/// runs the baseline: every row's full-layer times in sequence, no exchanges.
pub fn build_hybrid(
    table: &HybridTable,
    gpus: u32,
    precision: Precision,
    channels: Channels,
    iterations: u32,
) -> Result<Dag> {
    if gpus == 0 {
        return Err(Error::invalid("GPU count", "must be at least 1"));
    }
    if iterations < 2 {
        return Err(Error::invalid("iterations", "at least 2 are needed to measure a steady-state iteration"));
    }
    let n = gpus as usize;
    let rows = &table.rows;
    let convs: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].kind == RowKind::Conv).collect();
    let act = rows.iter().position(|r| r.kind == RowKind::Activation).expect("table checked on read");
    let fcs: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].kind == RowKind::Fc).collect();

    let mut b = DagBuilder::new();
    let compute: Vec<QueueId> =
        (0..gpus).map(|g| b.add_queue(format!("gpu{g}.compute"), Discipline::Fifo, Some(g))).collect();
    // Boundary k (0 = activation, k = after fc k-1), forward and backward direction.
    let boundaries = fcs.len() + 1;
    let channel: Vec<QueueId> = match channels {
        Channels::Shared => vec![b.add_queue("pcie", Discipline::Fifo, None); 2 * boundaries],
        Channels::PerDirection => {
            let (f, bk) =
                (b.add_queue("pcie.fwd", Discipline::Fifo, None), b.add_queue("pcie.bwd", Discipline::Fifo, None));
            (0..2 * boundaries).map(|k| if k % 2 == 0 { f } else { bk }).collect()
        }
        Channels::PerBoundary => {
            (0..2 * boundaries).map(|k| b.add_queue(format!("pcie.{k}"), Discipline::Fifo, None)).collect()
        }
    };
    let sync_q = b.add_queue("gradient-sync", Discipline::Fifo, None);
    let boundary_row = |k: usize| if k == 0 { act } else { fcs[k - 1] };

    let fixed = |ns: Nanos, queue, phase, gpu, it, layer: Option<usize>| Task {
        work: Work::Fixed { ns },
        queue: Some(queue),
        phase,
        gpu,
        iteration: it,
        layer: layer.map(|l| l as u32),
        priority: 0,
    };
    // Adds a task after `after` (all of them).
    let chain = |b: &mut DagBuilder, t: Task, after: &[TaskId]| {
        let id = b.add_task(t);
        after.iter().for_each(|&p| b.add_edge(p, id));
        id
    };

    let mut iteration_end = Vec::with_capacity(iterations as usize * n);
    let mut prev_end: Vec<Vec<TaskId>> = vec![Vec::new(); n];
    for it in 0..iterations {
        // Data-parallel forward: the residual, then the convolutions.
        let mut conv_fwd_end = Vec::with_capacity(n);
        for g in 0..gpus {
            let gi = g as usize;
            let mut last = chain(
                &mut b,
                fixed(table.residual_ns(), compute[gi], Phase::Forward, Some(g), it, None),
                &prev_end[gi],
            );
            for &l in &convs {
                last =
                    chain(&mut b, fixed(rows[l].fprop_ns, compute[gi], Phase::Forward, Some(g), it, Some(l)), &[last]);
            }
            conv_fwd_end.push(last);
        }

        // Fully connected part: whole layers on one GPU, else K sub-batches through the slices.
        let mut conv_bwd_start: Vec<Vec<TaskId>> = vec![Vec::new(); n];
        if gpus == 1 {
            let mut last = conv_fwd_end[0];
            for &l in &fcs {
                last =
                    chain(&mut b, fixed(rows[l].fprop_ns, compute[0], Phase::Forward, Some(0), it, Some(l)), &[last]);
            }
            for &l in fcs.iter().rev() {
                let ns = rows[l].bprop_ns + rows[l].update_ns;
                last = chain(&mut b, fixed(ns, compute[0], Phase::Backward, Some(0), it, Some(l)), &[last]);
            }
            conv_bwd_start[0].push(last);
        } else {
            let mut last_slice = Vec::new();
            for s in 0..n {
                let exchange = |b: &mut DagBuilder, k: usize, dir: usize, after: &[TaskId]| {
                    let row = boundary_row(k);
                    let t = fixed(
                        rows[row].sync_ns(precision),
                        channel[2 * k + dir],
                        Phase::ModelParallelExchange,
                        None,
                        it,
                        Some(row),
                    );
                    let id = b.add_task(t);
                    after.iter().for_each(|&p| b.add_edge(p, id));
                    id
                };
                // Forward: sub-batch s's activations from GPU s to all, then each layer's outputs.
                let mut x = exchange(&mut b, 0, 0, &[conv_fwd_end[s]]);
                for (k, &l) in fcs.iter().enumerate() {
                    let slices: Vec<TaskId> = (0..gpus)
                        .map(|g| {
                            chain(
                                &mut b,
                                fixed(rows[l].par_fprop_ns, compute[g as usize], Phase::Forward, Some(g), it, Some(l)),
                                &[x],
                            )
                        })
                        .collect();
                    x = exchange(&mut b, k + 1, 0, &slices);
                }
                // Backward: errors from the loss back through the slices to GPU s's activations.
                for (k, &l) in fcs.iter().enumerate().rev() {
                    let ns = rows[l].par_bprop_ns + rows[l].par_update_ns;
                    let slices: Vec<TaskId> = (0..gpus)
                        .map(|g| {
                            chain(&mut b, fixed(ns, compute[g as usize], Phase::Backward, Some(g), it, Some(l)), &[x])
                        })
                        .collect();
                    x = exchange(&mut b, k, 1, &slices);
                    if k == 0 {
                        last_slice = slices;
                    }
                }
                conv_bwd_start[s].push(x);
            }
            // A GPU turns to its convolutions' backward pass once its model-parallel work is done.
            for (g, &t) in last_slice.iter().enumerate() {
                conv_bwd_start[g].push(t);
            }
        }

        // Data-parallel backward with each convolution's gradient synchronised as soon as every
        // GPU has it (wait-free backprop); the step ends when every sync is done.
        let mut conv_bwd: Vec<Vec<TaskId>> = vec![Vec::new(); n];
        for g in 0..gpus {
            let gi = g as usize;
            let mut after = std::mem::take(&mut conv_bwd_start[gi]);
            for &l in convs.iter().rev() {
                let ns = rows[l].bprop_ns + rows[l].update_ns;
                let last = chain(&mut b, fixed(ns, compute[gi], Phase::Backward, Some(g), it, Some(l)), &after);
                after = vec![last];
                conv_bwd[gi].push(last);
            }
        }
        let mut syncs = Vec::new();
        if gpus > 1 {
            for (i, &l) in convs.iter().rev().enumerate() {
                let after: Vec<TaskId> = conv_bwd.iter().map(|v| v[i]).collect();
                let ns = rows[l].sync_ns(precision);
                syncs.push(chain(&mut b, fixed(ns, sync_q, Phase::GradientAggregation, None, it, Some(l)), &after));
            }
        }
        for g in 0..gpus {
            let gi = g as usize;
            let mut after = syncs.clone();
            after.push(*conv_bwd[gi].last().expect("at least one conv row"));
            let end = chain(&mut b, fixed(0, compute[gi], Phase::Update, Some(g), it, None), &after);
            iteration_end.push(end);
            prev_end[gi] = vec![end];
        }
    }
    b.build(DagMeta { gpus, iterations, iteration_end })
}
