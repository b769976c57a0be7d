//! Master-GPU data parallelism (PyTorch DataParallel, ScaleDNN Sec. II-B and Fig. 2) and
//! ScaleDNN's optimisations of it (Sec. IV). Per iteration:
//!
//! 1. the host reads the batch (`io`); the whole batch goes host-to-device to the master (rank 0),
//!    which scatters the other GPUs' mini-batches peer-to-peer — or, with CPU-side splitting
//!    (IV-A), each GPU receives its own mini-batch straight from host memory and there is no PtoP;
//! 2. the master broadcasts the weights (optionally compressed on the master and decompressed on
//!    every other GPU, IV-C);
//! 3. every GPU runs forward; the master gathers the outputs, computes the loss and scatters the
//!    loss gradients back; every GPU runs backward;
//! 4. gradients are reduced to the master, which updates the weights.
//!
//! Pre-loading (IV-B) puts the copies of batch i+1 on a separate stream that runs during batch i's
//! compute: they wait only for the previous copy and for the previous batch's forward pass to have
//! consumed its input buffer (one extra mini-batch of GPU memory). Without it a copy waits for the
//! previous update. Builds graphs only.

use super::build::BuildInput;
use super::{Dag, DagBuilder, DagMeta, Discipline, Phase, Task, TaskId, Work};
use crate::collective::{Algorithm, CollectiveOp};
use crate::error::{Error, Result};
use crate::strategy::compress::Codec;

/// Builds the master-GPU DAG for `input.iterations` iterations.
pub fn build_master(input: &BuildInput) -> Result<Dag> {
    let BuildInput { workload: w, machine: m, gpus: n, strategy: s, iterations, .. } = *input;
    super::build::check_input(input)?;
    if s.wfbp {
        return Err(Error::invalid(
            "strategy",
            "master-GPU data parallelism reduces gradients after backward; drop `wfbp`",
        ));
    }
    let nl = w.layers.len();
    let mut b = DagBuilder::new();
    let compute: Vec<_> = (0..n).map(|g| b.add_queue(format!("gpu{g}.compute"), Discipline::Fifo, Some(g))).collect();
    let copy: Vec<_> = (0..n).map(|g| b.add_queue(format!("gpu{g}.copy"), Discipline::Fifo, Some(g))).collect();
    let comm = b.add_queue("nccl", Discipline::Fifo, None);
    let all = b.add_group((0..n).collect());
    let task = |work, queue, phase, gpu: Option<u32>, it| Task {
        work,
        queue,
        phase,
        gpu,
        iteration: it,
        layer: None,
        priority: 0,
    };
    let add = |b: &mut DagBuilder, t: Task, after: &[TaskId]| {
        let id = b.add_task(t);
        after.iter().for_each(|&p| b.add_edge(p, id));
        id
    };
    let collective = |op, bytes| Work::Collective { group: all, op, algorithm: Algorithm::default(), bytes };

    let master = m.gpus[0];
    let mini = (w.batch_per_gpu as u64).saturating_mul(w.device_sample_bytes);
    let model_bytes = w.grad_bytes();
    let tensors = w.layers.iter().filter(|l| l.is_learnable()).count() as u64;
    let codec = s.weight_codec();
    let wire = codec.codec.wire_bytes(model_bytes);
    let output_bytes = (w.batch_per_gpu as u64).saturating_mul(s.output_bytes_per_sample).saturating_mul(n as u64);

    let mut iteration_end = Vec::new();
    let mut prev_update: Option<TaskId> = None;
    let mut prev_copy: Vec<Option<TaskId>> = vec![None; n as usize];
    let mut prev_first_fwd: Vec<Option<TaskId>> = vec![None; n as usize];
    for it in 0..iterations {
        // The copy of batch i+1 may start once batch i's input buffer is free.
        let gate = |g: usize| -> Vec<TaskId> {
            match (s.preload, prev_first_fwd[g], prev_update) {
                (true, Some(f), _) => [Some(f), prev_copy[g]].into_iter().flatten().collect(),
                (false, _, Some(u)) => vec![u],
                _ => vec![],
            }
        };
        let read_bytes = (w.batch_per_gpu as u64).saturating_mul(w.sample_bytes).saturating_mul(n as u64);
        let io_after: Vec<TaskId> = (0..n as usize).flat_map(gate).collect();
        let io = add(
            &mut b,
            task(
                Work::Transfer { src: master.storage, dst: master.host, bytes: read_bytes },
                None,
                Phase::Io,
                None,
                it,
            ),
            &io_after,
        );
        // Per GPU: the task after which its mini-batch is on the GPU.
        let mut input_ready: Vec<TaskId> = Vec::with_capacity(n as usize);
        if s.split || n == 1 {
            for g in 0..n {
                let info = m.gpus[g as usize];
                let mut after = gate(g as usize);
                after.push(io);
                let h2d = Work::Transfer { src: info.host, dst: info.device, bytes: mini };
                input_ready.push(add(
                    &mut b,
                    task(h2d, Some(copy[g as usize]), Phase::HostToDevice, Some(g), it),
                    &after,
                ));
            }
        } else {
            let mut after = gate(0);
            after.push(io);
            let whole = Work::Transfer { src: master.host, dst: master.device, bytes: mini.saturating_mul(n as u64) };
            // The whole batch holds every GPU up, so it counts for all of them (no GPU of its own).
            let h2d = add(&mut b, task(whole, Some(copy[0]), Phase::HostToDevice, None, it), &after);
            // Scatter moves (n-1)/n of the whole batch from the master to its peers.
            let p2p = add(
                &mut b,
                task(
                    collective(CollectiveOp::Scatter, mini.saturating_mul(n as u64)),
                    None,
                    Phase::PeerToPeer,
                    None,
                    it,
                ),
                &[h2d],
            );
            input_ready = vec![p2p; n as usize];
            input_ready[0] = h2d;
        }

        // Weights: the master's (updated) copy to every GPU, compressed if asked.
        let mut weights_ready: Vec<Vec<TaskId>> = vec![prev_update.into_iter().collect(); n as usize];
        if n > 1 {
            // PyTorch scatters the inputs, then replicates the module (Fig. 2, steps 1-3 in
            // order); with pre-loading the inputs are already there.
            let mut before_bcast: Vec<TaskId> = prev_update.into_iter().collect();
            if !s.preload {
                before_bcast.extend(&input_ready);
            }
            if codec.codec != Codec::None {
                let enc = Work::Fixed { ns: codec.encode_ns(model_bytes, tensors) };
                before_bcast = vec![add(&mut b, task(enc, Some(compute[0]), Phase::Codec, Some(0), it), &before_bcast)];
            }
            let bcast = add(
                &mut b,
                task(collective(CollectiveOp::Broadcast, wire), Some(comm), Phase::WeightBroadcast, None, it),
                &before_bcast,
            );
            // PyTorch launches every replica, the master's included, once replication is done.
            weights_ready[0] = vec![bcast];
            for g in 1..n {
                weights_ready[g as usize] = vec![bcast];
                if codec.codec != Codec::None {
                    let dec = Work::Fixed { ns: codec.decode_ns(model_bytes, tensors) };
                    weights_ready[g as usize] =
                        vec![add(&mut b, task(dec, Some(compute[g as usize]), Phase::Codec, Some(g), it), &[bcast])];
                }
            }
        }

        // Forward on every GPU, loss on the master, backward on every GPU.
        let mut fwd_end = Vec::new();
        for g in 0..n as usize {
            let mut after = weights_ready[g].clone();
            after.push(input_ready[g]);
            let mut last = None;
            for (l, layer) in w.layers.iter().enumerate() {
                let mut t = task(
                    Work::Fixed { ns: s.compute_ns(layer.forward.mean_ns) },
                    Some(compute[g]),
                    Phase::Forward,
                    Some(g as u32),
                    it,
                );
                t.layer = Some(l as u32);
                let id = add(&mut b, t, &last.map_or(after.clone(), |p| vec![p]));
                if l == 0 {
                    prev_first_fwd[g] = Some(id);
                }
                last = Some(id);
            }
            fwd_end.push(last.expect("a workload has layers"));
        }
        let loss_ready = if n > 1 {
            let gather = add(
                &mut b,
                task(collective(CollectiveOp::Gather, output_bytes), Some(comm), Phase::LossExchange, None, it),
                &fwd_end,
            );
            let back = add(
                &mut b,
                task(collective(CollectiveOp::Scatter, output_bytes), Some(comm), Phase::LossExchange, None, it),
                &[gather],
            );
            vec![back; n as usize]
        } else {
            fwd_end.clone()
        };
        let mut bwd_end = Vec::new();
        for g in 0..n as usize {
            let mut last = loss_ready[g];
            for l in (0..nl).rev() {
                let mut t = task(
                    Work::Fixed { ns: s.compute_ns(w.layers[l].backward.mean_ns) },
                    Some(compute[g]),
                    Phase::Backward,
                    Some(g as u32),
                    it,
                );
                t.layer = Some(l as u32);
                last = add(&mut b, t, &[last]);
            }
            bwd_end.push(last);
        }
        let reduced = if n > 1 {
            vec![add(
                &mut b,
                task(collective(CollectiveOp::Reduce, model_bytes), Some(comm), Phase::GradientAggregation, None, it),
                &bwd_end,
            )]
        } else {
            bwd_end.clone()
        };
        let upd = add(
            &mut b,
            task(Work::Fixed { ns: w.update.mean_ns }, Some(compute[0]), Phase::Update, Some(0), it),
            &reduced,
        );
        // Every GPU's iteration ends with the master's update.
        iteration_end.extend(std::iter::repeat_n(upd, n as usize));
        for g in 0..n as usize {
            prev_copy[g] = Some(input_ready[g]);
        }
        prev_update = Some(upd);
    }
    b.build(DagMeta { gpus: n, iterations, iteration_end })
}
