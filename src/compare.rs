//! Strategies side by side: each is simulated on the same workload, machine and GPU count, and
//! its steady-state iteration is split into ScaleDNN's categories (Sec. III-B: HtoD, PtoP, weight
//! broadcast, FP+BP, gradient reduce, other), with the saving against the first strategy. Reads
//! runs through [`crate::predict`]; prints nothing.

use crate::dag::{Dag, Phase, Work};
use crate::error::Result;
use crate::predict::{Setup, Simulated};
use crate::report::steady_state;
use crate::sim::{Options, Run};
use crate::strategy::Strategy;
use crate::units::Nanos;
use serde::Serialize;

/// ScaleDNN's categories, in the order a moment is attributed: when several kinds of work for a
/// GPU overlap, the earlier category wins (so the categories sum to the iteration time and show
/// only exposed data movement).
pub const CATEGORIES: [&str; 6] = ["fp_bp", "gradient_reduce", "weight_broadcast", "ptop", "htod", "other"];

/// The [`CATEGORIES`] column of a phase; None for host launches, which are not GPU time.
fn category(phase: Phase) -> Option<usize> {
    Some(match phase {
        Phase::Forward | Phase::Backward | Phase::Update | Phase::Codec => 0,
        Phase::GradientAggregation | Phase::Coordination | Phase::ServerReduce | Phase::ParamGather => 1,
        Phase::WeightBroadcast => 2,
        Phase::PeerToPeer => 3,
        Phase::HostToDevice | Phase::Io => 4,
        Phase::ModelParallelExchange
        | Phase::LossExchange
        | Phase::TensorParallel
        | Phase::PipelineTransfer
        | Phase::ExpertParallel
        | Phase::ContextParallel => 5,
        Phase::Host => return None,
    })
}

/// One strategy's row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub strategy: String,
    pub gpus: u32,
    pub iteration_time_s: f64,
    pub throughput_samples_per_s: f64,
    /// Seconds per iteration in [`CATEGORIES`] order, averaged over GPUs; sums to the iteration.
    /// JSON: `breakdown`, an object by category name, as in predictions.
    #[serde(rename = "breakdown", serialize_with = "by_category")]
    pub categories: [f64; 6],
    /// Time saved against the first strategy, as a fraction of its iteration time.
    pub saving: f64,
    /// Extra GPU memory the strategy reserves per GPU (pre-loading's second mini-batch buffer).
    pub extra_gpu_memory_bytes: u64,
    /// The θ search that chose this strategy's `fusion=` (`compare --best-fusion`); empty when
    /// none was run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fusion_search: Vec<FusionTrial>,
}

fn by_category<S: serde::Serializer>(categories: &[f64; 6], s: S) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(CATEGORIES.len()))?;
    for (name, seconds) in CATEGORIES.iter().zip(categories) {
        map.serialize_entry(name, seconds)?;
    }
    map.end()
}

/// One lazy all-reduce threshold θ tried by [`fusion_search`] and the iteration it gave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FusionTrial {
    /// θ as a strategy spec writes it: `none` (one all-reduce per layer), `64K`..`256M`, `inf`.
    pub fusion: String,
    #[serde(skip)]
    pub threshold: Option<u64>,
    pub iteration_time_s: f64,
}

/// Simulates `setup` under each strategy on `gpus` GPUs.
pub fn compare(setup: &Setup, strategies: &[Strategy], gpus: u32) -> Result<Vec<Row>> {
    let mut rows: Vec<Row> = Vec::with_capacity(strategies.len());
    for s in strategies {
        let setup = Setup { strategy: s.clone(), ..setup.clone() };
        let Simulated { dag, run, .. } = setup.simulate(gpus, Options::default())?;
        let steady = steady_state(&dag, &run);
        let per_gpu = exposed_per_gpu(&dag, &run, steady.window);
        let periods = (dag.meta.iterations - 1) as f64;
        let mut categories = [0.0; 6];
        for g in &per_gpu {
            for (c, v) in categories.iter_mut().zip(g) {
                *c += *v as f64 * 1e-9 / periods / per_gpu.len() as f64;
            }
        }
        let w = &setup.workload;
        let iteration_time_s = steady.iteration_ns * 1e-9;
        rows.push(Row {
            strategy: s.name(),
            gpus,
            iteration_time_s,
            throughput_samples_per_s: (w.batch_per_gpu as f64 * gpus as f64) / iteration_time_s,
            categories,
            saving: rows.first().map_or(0.0, |first| 1.0 - iteration_time_s / first.iteration_time_s),
            extra_gpu_memory_bytes: if s.preload { w.batch_per_gpu as u64 * w.device_sample_bytes } else { 0 },
            fusion_search: Vec::new(),
        });
    }
    Ok(rows)
}

/// Per GPU, ns of each category within `window`; a group task counts for every GPU of its group,
/// a task without GPU or group for all GPUs. Idle time is "other".
fn exposed_per_gpu(dag: &Dag, run: &Run, window: (Nanos, Nanos)) -> Vec<[Nanos; 6]> {
    let n = dag.meta.gpus as usize;
    let (a, b) = window;
    let mut events: Vec<Vec<(Nanos, i8, usize)>> = vec![Vec::new(); n];
    for (t, task) in dag.tasks().iter().enumerate() {
        let (s, e) = (run.start[t].max(a), run.end[t].min(b));
        if s >= e {
            continue;
        }
        let Some(c) = category(task.phase) else { continue };
        let gpus: Vec<usize> = match (task.gpu, task.work) {
            (Some(g), _) => vec![g as usize],
            (None, Work::Collective { group, .. }) => dag.group(group).iter().map(|&r| r as usize).collect(),
            (None, _) => (0..n).collect(),
        };
        for g in gpus {
            events[g].push((s, 1, c));
            events[g].push((e, -1, c));
        }
    }
    events
        .iter_mut()
        .map(|ev| {
            ev.sort_unstable();
            let mut active = [0i64; 6];
            let mut out = [0; 6];
            let mut last = a;
            for &(t, delta, c) in ev.iter() {
                let top = active.iter().position(|&k| k > 0).unwrap_or(5);
                out[top] += t - last;
                last = t;
                active[c] += delta as i64;
            }
            out[5] += b - last;
            out
        })
        .collect()
}

/// Candidate lazy all-reduce thresholds θ (bytes) for [`best_fusion_threshold`]: none (one
/// all-reduce per layer), powers of four from 64 KiB to 256 MiB, and infinity (one after backward).
pub fn fusion_candidates() -> Vec<Option<u64>> {
    let mut c = vec![None];
    c.extend((16..=28).step_by(2).map(|p| Some(1u64 << p)));
    c.push(Some(u64::MAX));
    c
}

/// Simulates `setup` with each candidate lazy all-reduce threshold θ (GradientFlow 3.1) on
/// `gpus` GPUs, everything else in its strategy kept, and returns every trial in candidate order.
pub fn fusion_search(setup: &Setup, gpus: u32, candidates: &[Option<u64>]) -> Result<Vec<FusionTrial>> {
    candidates
        .iter()
        .map(|&theta| {
            let mut s = setup.strategy.clone();
            s.fusion = theta;
            let t = Setup { strategy: s, ..setup.clone() }.predict(gpus)?.iteration_time_s;
            let fusion = match theta {
                None => "none".to_string(),
                Some(u64::MAX) => "inf".to_string(),
                Some(b) => crate::strategy::format_bytes(b),
            };
            Ok(FusionTrial { fusion, threshold: theta, iteration_time_s: t })
        })
        .collect()
}

/// The fastest trial of a [`fusion_search`]; ties keep the earlier (smaller) θ.
pub fn fastest(trials: &[FusionTrial]) -> Option<&FusionTrial> {
    trials.iter().fold(None, |best: Option<&FusionTrial>, t| match best {
        Some(b) if b.iteration_time_s <= t.iteration_time_s => Some(b),
        _ => Some(t),
    })
}

/// Searches θ ([`fusion_search`]) and returns the fastest (θ, iteration seconds).
pub fn best_fusion_threshold(setup: &Setup, gpus: u32, candidates: &[Option<u64>]) -> Result<(Option<u64>, f64)> {
    let trials = fusion_search(setup, gpus, candidates)?;
    fastest(&trials)
        .map(|t| (t.threshold, t.iteration_time_s))
        .ok_or_else(|| crate::Error::invalid("fusion thresholds", "no candidate given"))
}
