//! What a parallel-plan prediction reports beyond the common fields: step time, tokens/s (total
//! and per GPU), model TFLOP/s per GPU, MFU and HFU, memory per GPU at the schedule's peak, the
//! pipeline bubble, and a breakdown of the step into compute, exposed tensor-, pipeline- and
//! data-parallel communication, I/O, bubble and idle time, overall and per pipeline stage. Reads
//! the DAG and the run; never simulates.

use super::exposed;
use crate::dag::{Dag, Phase};
use crate::sim::Run;
use crate::units::{ns_to_s, Nanos};
use serde::Serialize;

/// Seconds per step on an average GPU; the fields sum to the step time.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct PlanBreakdown {
    pub compute: f64,
    /// Tensor-parallel collectives, MoE expert-parallel all-to-alls and context-parallel key-value
    /// exchanges the GPU waits for.
    pub tp_comm: f64,
    /// Pipeline transfers the GPU waits for (nothing else of its own running).
    pub pp_comm: f64,
    /// Data-parallel gradient exchange and parameter gathers not hidden behind compute.
    pub dp_comm: f64,
    pub io: f64,
    /// Waiting for other pipeline stages (filling, draining): nothing of the GPU's own runs.
    pub bubble: f64,
    /// Nothing of the GPU's own runs, without pipeline stages (waiting for other GPUs).
    pub idle: f64,
}

impl PlanBreakdown {
    pub fn total(&self) -> f64 {
        self.compute + self.tp_comm + self.pp_comm + self.dp_comm + self.io + self.bubble + self.idle
    }
}

/// One pipeline stage's breakdown (averaged over its simulated GPUs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageBreakdown {
    pub stage: u32,
    pub gpus_simulated: u32,
    #[serde(flatten)]
    pub breakdown: PlanBreakdown,
}

/// Memory per GPU on the stage that needs the most, bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryReport {
    pub stage: u32,
    pub weights: u64,
    pub gradients: u64,
    /// The optimizer's state (`optimizer_state`: `optimizer` names the algorithm elsewhere).
    #[serde(rename = "optimizer_state")]
    pub optimizer: u64,
    pub gathered_parameters: u64,
    pub activations: u64,
    pub total: u64,
    pub capacity: u64,
    /// Micro-batch chunks whose activations the stage holds at its peak.
    pub micro_batches_in_flight: u32,
}

/// The parallel-plan figures of a prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// The plan, e.g. `tp=8,pp=4,dp=8,mb=1,gbs=512,recompute=selective`.
    pub plan: String,
    pub model: String,
    pub parameters: u64,
    pub precision: String,
    pub seq_len: u32,
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub vp: u32,
    pub micro_batch: u32,
    pub global_batch: u32,
    pub micro_batches: u32,
    pub schedule: String,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    /// Model FLOPs (6 per parameter per token plus attention, no recomputation) per second per GPU.
    pub model_tflops_per_gpu: f64,
    /// Model FLOP/s over the GPU's dense peak at the training precision.
    pub mfu: f64,
    /// Hardware FLOP/s (recomputation included) over the same peak.
    pub hfu: f64,
    pub memory: MemoryReport,
    /// Bubble time over the step time.
    pub bubble_fraction: f64,
    pub breakdown: PlanBreakdown,
    pub stages: Vec<StageBreakdown>,
    /// GPUs with tasks of their own (the others are their symmetric images).
    pub gpus_simulated: u32,
    /// How the DP replicas were simulated.
    pub replicas: ReplicaReport,
}

/// How a plan's DP replicas were simulated: all, a block standing for the rest, or one replica
/// per timeline class (on a fat-tree fabric) with or without the check that makes it exact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaReport {
    /// DP replicas with tasks of their own (of `dp`).
    pub dp_replicas_simulated: u32,
    /// `exact`, `approximate`, or `none` (no timeline classes).
    pub replica_classes: String,
    /// The exact classes' check: `passed`, `failed` (every replica was simulated again), or
    /// `none` (approximate classes, or none).
    pub class_check: String,
    /// Largest gap between the end of a replica's image of a transfer or collective and its
    /// original's, ns (0 when exact).
    pub image_gap_ns: u64,
    /// Times the exact classes were split after a failed check and run again.
    pub class_splits: u32,
    /// One line for reports.
    #[serde(skip)]
    pub describe: String,
}

fn category(p: Phase) -> u8 {
    match p {
        Phase::Forward | Phase::Backward | Phase::Update | Phase::Codec => 0,
        // Expert- and context-parallel exchanges count with the tensor-parallel collectives: all sit
        // inside a layer.
        Phase::TensorParallel | Phase::ExpertParallel | Phase::ContextParallel => 1,
        Phase::PipelineTransfer => 2,
        Phase::Io | Phase::HostToDevice | Phase::PeerToPeer => 4,
        _ => 3,
    }
}

/// Per simulated GPU, ns within `window`: [compute, tp, pp, dp, io, bubble, idle]. With pipeline
/// stages, time with nothing of the GPU's own running is bubble: it waits for another stage (to
/// fill, to drain, or for the tied-embedding exchange at the end); without, it is idle.
pub fn plan_breakdown_per_gpu(dag: &Dag, run: &Run, window: (Nanos, Nanos), pipeline: bool) -> Vec<[Nanos; 7]> {
    exposed(dag, run, window, 5, &category)
        .into_iter()
        .map(|t| {
            let (bubble, idle) = if pipeline { (t[5], 0) } else { (0, t[5]) };
            [t[0], t[1], t[2], t[3], t[4], bubble, idle]
        })
        .collect()
}

/// Averages per-GPU breakdowns (ns over `periods` steps) into seconds per step.
pub fn average(rows: &[&[Nanos; 7]], periods: f64) -> PlanBreakdown {
    let n = rows.len().max(1) as f64;
    let mut sum = [0.0f64; 7];
    for r in rows {
        for (s, v) in sum.iter_mut().zip(r.iter()) {
            *s += *v as f64;
        }
    }
    let [compute, tp_comm, pp_comm, dp_comm, io, bubble, idle] = sum.map(|x| ns_to_s(x / n / periods));
    PlanBreakdown { compute, tp_comm, pp_comm, dp_comm, io, bubble, idle }
}

/// The CSV columns of a plan report, in order.
pub fn plan_csv_fields(r: &PlanReport) -> Vec<(&'static str, String)> {
    let b = &r.breakdown;
    vec![
        ("plan", r.plan.clone()),
        ("precision", r.precision.clone()),
        ("seq_len", r.seq_len.to_string()),
        ("micro_batches", r.micro_batches.to_string()),
        ("step_time_s", super::seconds_cell(r.step_time_s)),
        ("tokens_per_s", super::rate_cell(r.tokens_per_s)),
        ("tokens_per_s_per_gpu", super::rate_cell(r.tokens_per_s_per_gpu)),
        ("model_tflops_per_gpu", format!("{:.3}", r.model_tflops_per_gpu)),
        ("mfu", super::ratio_cell(r.mfu)),
        ("hfu", super::ratio_cell(r.hfu)),
        ("memory_per_gpu_bytes", r.memory.total.to_string()),
        ("memory_capacity_bytes", r.memory.capacity.to_string()),
        ("bubble_fraction", super::ratio_cell(r.bubble_fraction)),
        ("plan_compute_s", super::seconds_cell(b.compute)),
        ("tp_comm_s", super::seconds_cell(b.tp_comm)),
        ("pp_comm_s", super::seconds_cell(b.pp_comm)),
        ("dp_comm_s", super::seconds_cell(b.dp_comm)),
        ("plan_io_s", super::seconds_cell(b.io)),
        ("bubble_s", super::seconds_cell(b.bubble)),
        ("plan_idle_s", super::seconds_cell(b.idle)),
        ("dp_replicas_simulated", r.replicas.dp_replicas_simulated.to_string()),
        ("replica_classes", r.replicas.replica_classes.clone()),
        ("class_check", r.replicas.class_check.clone()),
        ("image_gap_ns", r.replicas.image_gap_ns.to_string()),
        ("class_splits", r.replicas.class_splits.to_string()),
    ]
}

/// The text summary of one plan prediction.
pub fn write_plan_text(out: &mut dyn std::io::Write, p: &super::Prediction, r: &PlanReport) -> std::io::Result<()> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    writeln!(
        out,
        "model {} ({:.1} B parameters, {}, seq {}) on {} x {} | topology {} | plan {} ({} schedule, {} micro-batches) | strategy {}",
        r.model,
        r.parameters as f64 / 1e9,
        r.precision,
        r.seq_len,
        p.gpus,
        p.gpu_model,
        p.topology,
        r.plan,
        r.schedule,
        r.micro_batches,
        p.strategy
    )?;
    writeln!(
        out,
        "step time {:.4} s | {:.1} tokens/s ({:.1} per GPU) | {:.1} model TFLOP/s per GPU | MFU {:.1}% | HFU {:.1}%",
        r.step_time_s,
        r.tokens_per_s,
        r.tokens_per_s_per_gpu,
        r.model_tflops_per_gpu,
        100.0 * r.mfu,
        100.0 * r.hfu
    )?;
    let m = &r.memory;
    writeln!(
        out,
        "memory per GPU {:.1} GiB of {:.1} on stage {} (weights {:.1}, gradients {:.1}, optimizer {:.1}, gathered {:.1}, \
         activations {:.1} for {} micro-batch chunks in flight)",
        gib(m.total),
        gib(m.capacity),
        m.stage,
        gib(m.weights),
        gib(m.gradients),
        gib(m.optimizer),
        gib(m.gathered_parameters),
        gib(m.activations),
        m.micro_batches_in_flight
    )?;
    writeln!(
        out,
        "bubble {:.1}% of the step | {} of {} GPUs simulated (the others are symmetric)",
        100.0 * r.bubble_fraction,
        r.gpus_simulated,
        p.gpus
    )?;
    writeln!(out, "{}", r.replicas.describe)?;
    writeln!(
        out,
        "{:>6} {:>5} | {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "stage", "gpus", "compute_s", "tp_s", "pp_s", "dp_s", "io_s", "bubble_s", "idle_s"
    )?;
    let row = |out: &mut dyn std::io::Write, name: &str, gpus: u32, b: &PlanBreakdown| {
        writeln!(
            out,
            "{name:>6} {gpus:>5} | {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>10.4}",
            b.compute, b.tp_comm, b.pp_comm, b.dp_comm, b.io, b.bubble, b.idle
        )
    };
    row(out, "all", r.gpus_simulated, &r.breakdown)?;
    for s in &r.stages {
        row(out, &s.stage.to_string(), s.gpus_simulated, &s.breakdown)?;
    }
    Ok(())
}
