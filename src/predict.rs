//! The pipeline end to end: a [`Setup`] (workload, topology, strategy) and a GPU count go through
//! the DAG builder and the engine into a [`Prediction`]. This is what every simulating command
//! calls; it holds no state of its own.

use crate::collective::Layout;
use crate::dag::build::{build_dag, BuildInput};
use crate::dag::Dag;
use crate::error::{Error, Result};
use crate::hw::{Machine, Topology};
use crate::report::{breakdown_seconds, steady_state, utilisation, Prediction, Steady};
use crate::sim::{simulate, Options, Run};
use crate::strategy::Strategy;
use crate::units::ns_to_s;
use crate::workload::Workload;
use rayon::prelude::*;

/// Iterations simulated by default: one warm-up and four measured.
pub const DEFAULT_ITERATIONS: u32 = 5;

/// Everything a prediction depends on apart from the GPU count.
#[derive(Debug, Clone)]
pub struct Setup {
    pub workload: Workload,
    pub topology: Topology,
    pub strategy: Strategy,
    pub iterations: u32,
}

/// One simulated configuration with everything needed to inspect it further.
pub struct Simulated {
    pub machine: Machine,
    pub dag: Dag,
    pub run: Run,
}

impl Setup {
    /// Checks what the builder cannot: a batch size is known.
    pub fn check(&self) -> Result<()> {
        if self.workload.fp16 && self.strategy.mixed {
            return Err(Error::invalid(
                "strategy",
                format!(
                    "`{}` is already mixed precision (FP16 layer times and gradients); the `mixed` strategy \
                     converts an FP32 trace, so use one or the other",
                    self.workload.name
                ),
            ));
        }
        crate::limits::check("iterations", self.iterations as u64)?;
        crate::limits::check("layers", self.workload.layers.len() as u64)?;
        if self.workload.batch_per_gpu == 0 {
            return Err(Error::invalid(
                "workload",
                format!(
                    "batch size of `{}` is unknown: give --batch, or a `# batch_per_gpu:` line in the trace",
                    self.workload.name
                ),
            ));
        }
        Ok(())
    }

    /// Builds and runs the full DAG for `gpus` GPUs.
    pub fn simulate(&self, gpus: u32, options: Options) -> Result<Simulated> {
        self.simulate_represented(gpus, options, false)
    }

    /// Builds and runs the DAG for `gpus` GPUs; with `symmetric`, only one node's GPUs get tasks
    /// when [`Setup::representatives`] says that is exact (collectives still span every rank).
    pub fn simulate_represented(&self, gpus: u32, options: Options, symmetric: bool) -> Result<Simulated> {
        let (machine, dag) = self.build(gpus, symmetric)?;
        let run = simulate(&dag, &machine, options)?;
        Ok(Simulated { machine, dag, run })
    }

    /// The machine and the DAG for `gpus` GPUs, not yet simulated (see
    /// [`Setup::simulate_represented`] for `symmetric`).
    pub fn build(&self, gpus: u32, symmetric: bool) -> Result<(Machine, Dag)> {
        self.check()?;
        if gpus == 0 {
            return Err(Error::invalid("GPU count", "must be at least 1"));
        }
        crate::limits::check("gpus", gpus as u64)?;
        let machine = self.topology.instantiate(gpus)?;
        let represented = if symmetric { self.representatives(&machine, gpus).unwrap_or(gpus) } else { gpus };
        let exchanged = self.exchanged_workload();
        let build = |represented: u32| {
            // Refuse a DAG too big to hold before building it: a few tasks per layer, GPU and iteration.
            let layers = self.workload.layers.len() as u64;
            let tasks = (represented as u64).saturating_mul(self.iterations as u64).saturating_mul(3 * layers + 8);
            crate::limits::check("tasks", tasks)?;
            build_dag(&BuildInput {
                workload: &exchanged,
                machine: &machine,
                gpus,
                strategy: &self.strategy,
                iterations: self.iterations,
                represented,
                plan: None,
            })
        };
        let mut dag = build(represented)?;
        if represented < gpus && !calls_node_symmetric(&machine, &dag) {
            dag = build(gpus)?;
        }
        Ok((machine, dag))
    }

    /// The workload as the gradient exchange sees it: under `grad-dtype=fp32` an FP16 workload's
    /// gradients are all-reduced in FP32 (twice its FP16 gradient bytes, per tensor), its layer
    /// times unchanged; otherwise the workload itself.
    pub fn exchanged_workload(&self) -> std::borrow::Cow<'_, Workload> {
        if !(self.strategy.fp32_grads && self.workload.fp16) {
            return std::borrow::Cow::Borrowed(&self.workload);
        }
        let mut w = self.workload.clone();
        w.fp16 = false;
        for l in &mut w.layers {
            l.grad_bytes = l.grad_bytes.saturating_mul(2);
            for t in &mut l.grad_tensors {
                *t = t.saturating_mul(2);
            }
        }
        std::borrow::Cow::Owned(w)
    }

    /// How many GPUs (one node's) stand for all `gpus` when every node behaves alike: plain
    /// all-reduce data parallelism (no master GPU, no MPS, no parameter servers) with an all-reduce whose transfers are
    /// the same from every node's point of view (ring, hierarchical) on whole identical nodes with
    /// local storage ([`Machine::uniform_nodes`]). Then each node sees the same traffic at the
    /// same instants, and a collective step, which ends with its slowest transfer, ends at the
    /// same time whether one node's or every node's batch copies contend with it (tested against
    /// the full simulation in `tests/symmetry.rs`).
    pub fn representatives(&self, machine: &Machine, gpus: u32) -> Option<u32> {
        let s = &self.strategy;
        let used = &machine.gpus[..(gpus as usize).min(machine.gpus.len())];
        let layout = Layout::from_nodes(used.iter().map(|g| g.node));
        let servers = s.runtime.as_ref().is_some_and(|r| r.uses_servers());
        if s.master || s.mps.is_some() || !machine.collectives.may_reduce(s.allreduce, layout) || servers {
            return None;
        }
        machine.uniform_nodes(gpus)
    }

    /// Simulates `gpus` GPUs and summarises; speedup fields are left at 0 (see [`Setup::predict_scaling`]).
    /// Symmetric setups are simulated with one node's GPUs standing for all (same results).
    pub fn predict(&self, gpus: u32) -> Result<Prediction> {
        self.predict_with(gpus, true)
    }

    /// [`Setup::predict`], choosing whether symmetric setups may be reduced to one node.
    pub fn predict_with(&self, gpus: u32, symmetric: bool) -> Result<Prediction> {
        if self.iterations < 2 {
            return Err(Error::invalid(
                "iterations",
                format!(
                    "{} iterations cannot give a steady state: at least 2 are needed (one warm-up)",
                    self.iterations
                ),
            ));
        }
        let sim = self.simulate_represented(gpus, Options::default(), symmetric)?;
        let steady = steady_state(&sim.dag, &sim.run);
        let iteration_time_s = ns_to_s(steady.iteration_ns);
        // Under MPS every client on a GPU trains its own mini-batch.
        let samples = self.workload.batch_per_gpu as f64 * gpus as f64 * self.strategy.clients_per_gpu() as f64;
        let own = Own {
            workload: self.workload.name.clone(),
            batch_per_gpu: self.workload.batch_per_gpu,
            gpu_model: sim.machine.gpu_model.clone(),
            iteration_time_s,
            throughput_samples_per_s: samples / iteration_time_s,
            utilisation: utilisation(&sim.machine, &sim.run, &steady, sim.dag.meta.gpus),
            llm: None,
        };
        let run = RunOf { machine: &sim.machine, run: &sim.run, steady: &steady, gpus, iterations: self.iterations };
        Ok(prediction(&self.topology, &self.strategy, &self.workload, run, own))
    }

    /// Predictions for several GPU counts (run in parallel), with speedup over one GPU of the same
    /// setup. Results come back in the order asked for.
    pub fn predict_scaling(&self, gpu_counts: &[u32]) -> Result<Vec<Prediction>> {
        self.check()?;
        scale_from_one_gpu(gpu_counts, |g| self.predict(g))
    }
}

/// What a simulation gives every prediction: the machine, the run and its steady state, the GPU
/// count and the iterations simulated.
pub(crate) struct RunOf<'a> {
    pub machine: &'a Machine,
    pub run: &'a Run,
    pub steady: &'a Steady,
    pub gpus: u32,
    pub iterations: u32,
}

/// The fields of a prediction that each pipeline (data parallel, parallel plan) fills its own way.
pub(crate) struct Own {
    pub workload: String,
    pub batch_per_gpu: u32,
    pub gpu_model: String,
    pub iteration_time_s: f64,
    pub throughput_samples_per_s: f64,
    pub utilisation: std::collections::BTreeMap<String, f64>,
    pub llm: Option<crate::report::plan::PlanReport>,
}

/// A prediction from the setup's topology, strategy and (simulated) workload, the run, and the
/// pipeline's own figures; speedup fields are left at 0.
pub(crate) fn prediction(
    topology: &Topology,
    strategy: &Strategy,
    workload: &Workload,
    r: RunOf,
    own: Own,
) -> Prediction {
    Prediction {
        dagsim_version: env!("CARGO_PKG_VERSION"),
        workload: own.workload,
        batch_per_gpu: own.batch_per_gpu,
        gpus: r.gpus,
        nodes: r.machine.gpus[..r.gpus as usize].iter().map(|g| g.node).max().map_or(0, |n| n + 1),
        topology: topology.name.clone(),
        gpu_model: own.gpu_model,
        strategy: strategy.name(),
        allreduce: strategy.allreduce.name().to_string(),
        comm_source: strategy.comm_source.name().to_string(),
        collective_model: r.machine.collectives.name(),
        collectives: r.run.collectives.clone(),
        runtime: strategy.runtime.as_ref().map_or("none", |rt| rt.kind_name()).to_string(),
        grad_tensors: workload.tensor_count(),
        grad_tensors_source: workload.tensor_source(),
        iterations_simulated: r.iterations,
        iteration_time_s: own.iteration_time_s,
        throughput_samples_per_s: own.throughput_samples_per_s,
        speedup: 0.0,
        scaling_efficiency: 0.0,
        breakdown: breakdown_seconds(r.steady),
        utilisation: own.utilisation,
        events: r.run.events,
        llm: own.llm,
    }
}

/// Runs `predict` for every GPU count (in parallel) and for one GPU, and fills each prediction's
/// speedup against the one-GPU throughput. Results come back in the order asked for.
pub fn scale_from_one_gpu(
    gpu_counts: &[u32],
    predict: impl Fn(u32) -> Result<Prediction> + Sync,
) -> Result<Vec<Prediction>> {
    let mut counts: Vec<u32> = gpu_counts.to_vec();
    let baseline_added = !counts.contains(&1);
    if baseline_added {
        counts.push(1);
    }
    let mut results: Vec<Result<Prediction>> = counts.par_iter().map(|&g| predict(g)).collect();
    // A failure of the one-GPU run the user did not ask for must say that it is the speedup's
    // baseline, or the message (e.g. "2 servers do not fit ... 1 GPUs") reads as nonsense.
    if baseline_added {
        if let Some(Err(e)) = results.last_mut() {
            let msg = format!("the one-GPU run that speedup is measured against failed: {e}");
            *e = Error::invalid("speedup baseline", msg);
        }
    }
    let mut preds = results.into_iter().collect::<Result<Vec<_>>>()?;
    let base = preds[counts.iter().position(|&g| g == 1).expect("1 was added")].throughput_samples_per_s;
    for p in &mut preds {
        p.set_baseline(base);
    }
    preds.truncate(gpu_counts.len()); // drops the appended baseline, if any
    Ok(preds)
}

/// True if every collective call of `dag` runs a schedule that is the same from every node under
/// the machine's collective model (see [`crate::collective::CollectiveModel::calls_node_symmetric`]):
/// the condition under which a reduced DAG, built when the model's choice decides, stands for all.
pub fn calls_node_symmetric(machine: &Machine, dag: &Dag) -> bool {
    let mut seen = rustc_hash::FxHashSet::default();
    let calls = dag.tasks().iter().filter_map(|t| match t.work {
        crate::dag::Work::Collective { group, op, algorithm, bytes } if seen.insert((group, op, algorithm, bytes)) => {
            Some((dag.group(group), op, algorithm, bytes))
        }
        _ => None,
    });
    machine.collectives.calls_node_symmetric(machine, calls)
}
