//! Reports: from a [`Run`] to the numbers people read. The steady-state iteration time, the
//! breakdown of that time per GPU (compute, exposed communication, exposed I/O, idle; it sums to
//! the iteration time), utilisation, and the [`Prediction`] record that text, CSV and JSON outputs
//! print. Reads the DAG and run; never simulates.

pub mod critical;
mod output;
pub mod perfetto;
pub mod plan;
pub mod plot;

pub use output::{csv_fields, rate_cell, ratio_cell, seconds_cell, write_csv, write_json, write_text};

use crate::dag::{Category, Dag, Phase, Work};
use crate::hw::Machine;
use crate::sim::Run;
use crate::units::{ns_to_s, Nanos};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where one iteration's time goes on an average GPU, in seconds. Sums to the iteration time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Breakdown {
    /// The GPU's compute stream is busy.
    pub compute: f64,
    /// No compute, but a gradient aggregation involving this GPU is under way.
    pub communication: f64,
    /// Neither, but this GPU's batch is being read or copied in.
    pub io: f64,
    /// Nothing for this GPU is running (waiting on other GPUs or on dependencies).
    pub idle: f64,
}

impl Breakdown {
    pub fn total(&self) -> f64 {
        self.compute + self.communication + self.io + self.idle
    }
}

/// Steady-state figures of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Steady {
    /// Mean iteration time over the measured iterations (the first is warm-up), in ns.
    pub iteration_ns: f64,
    /// Per-iteration breakdown, ns, averaged over GPUs.
    pub breakdown_ns: [f64; 4],
    /// Window the figures were measured over.
    pub window: (Nanos, Nanos),
}

/// The end of each iteration: the last GPU's final task of that iteration.
pub fn iteration_ends(dag: &Dag, run: &Run) -> Vec<Nanos> {
    let n = dag.meta.gpus as usize;
    dag.meta.iteration_end.chunks(n).map(|ends| ends.iter().map(|&t| run.end[t as usize]).max().unwrap_or(0)).collect()
}

/// Measures the steady state: iterations 1..K against the end of iteration 0.
pub fn steady_state(dag: &Dag, run: &Run) -> Steady {
    let ends = iteration_ends(dag, run);
    let k = ends.len();
    assert!(k >= 2, "the builder guarantees at least two iterations");
    let window = (ends[0], ends[k - 1]);
    let periods = (k - 1) as f64;
    let iteration_ns = (window.1 - window.0) as f64 / periods;
    let per_gpu = breakdown_per_gpu(dag, run, window);
    let n = per_gpu.len() as f64;
    let mut sum = [0.0; 4];
    for b in &per_gpu {
        for (s, v) in sum.iter_mut().zip(b) {
            *s += *v as f64;
        }
    }
    let breakdown_ns = sum.map(|s| s / n / periods);
    Steady { iteration_ns, breakdown_ns, window }
}

/// For each GPU: [compute, exposed communication, exposed I/O, idle] in ns within `window`.
pub fn breakdown_per_gpu(dag: &Dag, run: &Run, window: (Nanos, Nanos)) -> Vec<[Nanos; 4]> {
    let rank = |p: Phase| match p.category() {
        Category::Compute => 0u8,
        Category::Communication => 1,
        Category::Io | Category::Host => 2,
    };
    exposed(dag, run, window, 3, &rank).into_iter().map(|t| [t[0], t[1], t[2], t[3]]).collect()
}

/// For each GPU with tasks (in the DAG's GPU order): the time within `window` in each of
/// `categories` categories, the lowest-numbered category active at a moment taking it (the last
/// slot is idle time). A task counts for its GPU; a collective for every GPU of
/// its group that has tasks; any other group task for every GPU.
pub fn exposed(
    dag: &Dag,
    run: &Run,
    window: (Nanos, Nanos),
    categories: usize,
    category: &dyn Fn(Phase) -> u8,
) -> Vec<Vec<Nanos>> {
    let n = dag.meta.gpus as usize;
    let (a, b) = window;
    // Intervals per GPU, and per group for tasks that belong to a whole group.
    let mut own: Vec<Vec<(Nanos, Nanos, u8)>> = vec![Vec::new(); n];
    let mut shared: Vec<(Nanos, Nanos, u8, Option<u32>)> = Vec::new();
    for (t, task) in dag.tasks().iter().enumerate() {
        let (s, e) = (run.start[t].max(a), run.end[t].min(b));
        // The host's launches are not GPU time: a GPU waiting for them is idle.
        if s >= e || task.phase == Phase::Host {
            continue;
        }
        let r = category(task.phase);
        match (task.gpu, task.work) {
            (Some(g), _) => own[g as usize].push((s, e, r)),
            (None, Work::Collective { group, .. }) => shared.push((s, e, r, Some(group))),
            (None, _) => shared.push((s, e, r, None)),
        }
    }
    // Each group's GPUs with tasks, found once per group (ranks without tasks of their own, left
    // out by a symmetric reduction, are skipped); a group task's interval then goes to those GPUs
    // only, instead of every GPU scanning every group task.
    let mut members: Vec<Option<Vec<u32>>> = Vec::new();
    let mut everyone: Vec<(Nanos, Nanos, u8)> = Vec::new();
    for &(s, e, r, group) in &shared {
        let Some(g) = group else {
            everyone.push((s, e, r));
            continue;
        };
        let g = g as usize;
        if members.len() <= g {
            members.resize(g + 1, None);
        }
        let list = members[g].get_or_insert_with(|| {
            let mut seen = vec![false; n];
            dag.group(g as u32)
                .iter()
                .filter_map(|&r| dag.local_of(r))
                .filter(|&l| (l as usize) < n && !std::mem::replace(&mut seen[l as usize], true))
                .collect()
        });
        for &l in list.iter() {
            own[l as usize].push((s, e, r));
        }
    }
    let mut points: Vec<(Nanos, i8, u8)> = Vec::new();
    (0..n)
        .map(|g| {
            points.clear();
            let mine = everyone.iter().copied();
            for (s, e, r) in own[g].iter().copied().chain(mine) {
                points.push((s, 1, r));
                points.push((e, -1, r));
            }
            points.sort_unstable();
            let mut active = vec![0i64; categories];
            let mut out = vec![0 as Nanos; categories + 1];
            let mut last = a;
            for &(t, delta, r) in &points {
                let span = t - last;
                let top = active.iter().position(|&c| c > 0).unwrap_or(categories);
                out[top] += span;
                last = t;
                active[r as usize] += delta as i64;
            }
            out[categories] += b - last;
            out
        })
        .collect()
}

/// Utilisation per resource kind over the run: GPU compute over the steady window; links as bytes
/// moved over (capacity x run length), by link kind.
///
/// Links count if they touch a node of the first `gpus` GPUs (the GPUs simulated) or join shared
/// devices only, so idle nodes a topology adds do not dilute the figure, and a run where one node
/// stands for all (symmetric setups) reports what the full run would.
pub fn utilisation(machine: &Machine, run: &Run, steady: &Steady, gpus: u32) -> BTreeMap<String, f64> {
    utilisation_of(machine, run, steady, 0..gpus)
}

/// [`utilisation`] counting the links of the nodes of the given GPU ranks (those simulated).
pub fn utilisation_of(
    machine: &Machine,
    run: &Run,
    steady: &Steady,
    ranks: impl Iterator<Item = u32>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if steady.iteration_ns > 0.0 {
        out.insert("gpu_compute".to_string(), steady.breakdown_ns[0] / steady.iteration_ns);
    }
    let used: std::collections::BTreeSet<u32> =
        ranks.filter_map(|r| machine.gpus.get(r as usize)).map(|g| g.node).collect();
    let node = |d: u32| machine.devices[d as usize].node;
    let counts = |from: u32, to: u32| match (node(from), node(to)) {
        (None, None) => true,
        (a, b) => a.is_some_and(|n| used.contains(&n)) || b.is_some_and(|n| used.contains(&n)),
    };
    let span = run.makespan.max(1) as f64;
    for kind in machine.link_kinds() {
        let (mut bytes, mut cap) = (0.0, 0.0);
        for (l, link) in machine.links.iter().enumerate() {
            if link.kind == kind && counts(link.from, link.to) {
                bytes += run.link_bytes[l];
                cap += link.capacity() * span;
            }
        }
        out.insert(kind.name().to_string(), bytes / cap);
    }
    out
}

/// One simulated configuration: what `predict --format json` prints (one object per GPU count).
/// Field names and units are a stable contract, documented in `docs/result.schema.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub dagsim_version: &'static str,
    pub workload: String,
    pub batch_per_gpu: u32,
    pub gpus: u32,
    pub nodes: u32,
    pub topology: String,
    pub gpu_model: String,
    pub strategy: String,
    pub allreduce: String,
    pub comm_source: String,
    /// The collective model that ran (`nccl 2.21.5`, `ideal`) and what it ran, per operation.
    pub collective_model: String,
    pub collectives: Vec<crate::collective::CollectiveUse>,
    /// The framework runtime that exchanges gradients (`none`: one all-reduce per layer, or the
    /// strategy's `fusion=`/`priority=`).
    pub runtime: String,
    /// Gradient tensors per iteration, and whether the workload listed them or they were derived
    /// one per layer.
    pub grad_tensors: usize,
    pub grad_tensors_source: crate::workload::TensorSource,
    pub iterations_simulated: u32,
    pub iteration_time_s: f64,
    pub throughput_samples_per_s: f64,
    /// Throughput over the same setup on one GPU (weak scaling, Eq. 6 of the DAG paper).
    pub speedup: f64,
    pub scaling_efficiency: f64,
    /// Seconds per iteration; sums to `iteration_time_s`.
    pub breakdown: Breakdown,
    pub utilisation: BTreeMap<String, f64>,
    pub events: u64,
    /// The parallel-plan figures (transformer workloads under `--parallel`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<plan::PlanReport>,
}

impl Prediction {
    /// One line saying how the collectives ran: `nccl 2.21.5: all-reduce ring/Simple x4 (93% of
    /// bytes), tree/LL x2 (7%)`.
    pub fn collectives_line(&self) -> String {
        crate::collective::model::describe(&self.collective_model, &self.collectives)
    }

    /// Fills the speedup fields from the single-GPU throughput of the same setup.
    pub fn set_baseline(&mut self, single_gpu_throughput: f64) {
        self.speedup = self.throughput_samples_per_s / single_gpu_throughput;
        self.scaling_efficiency = self.speedup / self.gpus as f64;
    }
}

/// Converts a steady state to the breakdown in seconds.
pub fn breakdown_seconds(steady: &Steady) -> Breakdown {
    let [c, m, i, d] = steady.breakdown_ns.map(ns_to_s);
    Breakdown { compute: c, communication: m, io: i, idle: d }
}
