//! Turns measurement rows into predictions: each row's setup becomes a scenario (its scenario file
//! with the row's columns laid over it), every distinct (setup, GPU count) is simulated once, in
//! parallel, and each row gets the predicted value of its metric. Rows whose strategy is `hybrid`
//! run Dettmers' data/model-parallel DAG from a hybrid table instead. Reads rows, calls the
//! pipeline in `predict` (or `predict_hybrid`); computes no statistics.

use super::baseline::{alpha_beta_throughput, Baseline};
use super::format::{MeasurementSet, Metric, Row, RowSetup};
use super::MachineOverrides;
use crate::collective::CollectiveModel;
use crate::dag::hybrid::Channels;
use crate::error::{Error, Location, Result};
use crate::hw::{load_topology, topology::DEFAULT_TOPOLOGY};
use crate::predict::{Setup, DEFAULT_ITERATIONS};
use crate::predict_hybrid::HybridSetup;
use crate::predict_plan::{PlanRequest, PlanSetup};
use crate::scenario::Scenario;
use crate::strategy::hybrid::{HybridTable, Precision as HybridPrecision};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One simulated configuration, as much of it as a validation report needs.
#[derive(Debug, Clone)]
pub struct Simulated {
    pub workload: String,
    pub topology: String,
    pub gpus: u32,
    pub strategy: String,
    pub throughput_samples_per_s: f64,
    pub iteration_time_s: f64,
    /// How its collectives ran (`Prediction::collectives_line`).
    pub collectives: String,
    /// Transformer plans only: tokens/s per GPU and model TFLOP/s per GPU.
    pub tokens_per_s_per_gpu: Option<f64>,
    pub model_tflops_per_gpu: Option<f64>,
}

/// What the model says for one row.
#[derive(Debug, Clone)]
pub struct Predicted {
    /// The row's metric, predicted, in the metric's canonical unit.
    pub value: f64,
    /// The same metric under the baseline model, when one was asked for and applies.
    pub baseline: Option<f64>,
    /// Why a baseline that was asked for is missing (`baseline` is then None).
    pub baseline_missing: Option<String>,
    /// The simulated configuration of the row itself (its GPU count).
    pub simulated: Simulated,
}

/// A setup ready to simulate at any GPU count.
enum Model {
    /// The normal pipeline (`dagsim predict`).
    Pipeline(Box<Setup>),
    /// Krizhevsky's hybrid scheme as Dettmers models it: fixed-time tasks from a hybrid table.
    Hybrid(Box<HybridSetup>),
    /// A transformer under a parallel plan (`dagsim predict --parallel`): one GPU count.
    Plan(Box<PlanSetup>),
}

impl Model {
    /// The row's setup, with its machine under `overrides` where they are given (else the setup's own).
    fn build(row: &RowSetup, overrides: MachineOverrides) -> Result<Self> {
        let mut m = Self::build_plain(row)?;
        if let Some(c) = overrides.collectives {
            m.set_collectives(c);
        }
        if let Some(r) = overrides.nic_route {
            m.topology_mut().nic_route = r;
        }
        if let Some(c) = overrides.compute_contention {
            m.topology_mut().compute_contention = c;
        }
        if let Some(v) = row.nccl {
            if let CollectiveModel::Nccl(cfg) = m.collectives_mut() {
                cfg.version = v;
            }
        }
        if row.not_nccl {
            m.set_collectives(CollectiveModel::Ideal);
        }
        Ok(m)
    }

    fn topology_mut(&mut self) -> &mut crate::hw::Topology {
        match self {
            Model::Pipeline(s) => &mut s.topology,
            Model::Hybrid(h) => &mut h.topology,
            Model::Plan(p) => &mut p.topology,
        }
    }

    fn collectives_mut(&mut self) -> &mut CollectiveModel {
        &mut self.topology_mut().collectives
    }

    fn set_collectives(&mut self, c: CollectiveModel) {
        self.topology_mut().collectives = c;
    }

    /// A copy of the setup with its collectives under `c`.
    fn with_collectives(&self, c: CollectiveModel) -> Self {
        let mut m = match self {
            Model::Pipeline(s) => Model::Pipeline(s.clone()),
            Model::Hybrid(h) => Model::Hybrid(h.clone()),
            Model::Plan(p) => Model::Plan(p.clone()),
        };
        m.set_collectives(c);
        m
    }

    fn build_plain(row: &RowSetup) -> Result<Self> {
        if let Some(plan) = &row.parallel {
            let scenario = scenario_for(row)?;
            let topology = load_topology(scenario.topology_arg().as_deref().unwrap_or(DEFAULT_TOPOLOGY))?;
            return PlanSetup::from_request(PlanRequest {
                scenario: &scenario,
                topology,
                spec: plan,
                micro_batch: row.micro_batch,
                global_batch: row.global_batch,
                seq_len: row.seq_len,
                layers: row.layers,
                matmul_tflops: None,
                gpus: row.gpus,
            })
            .map(|p| Model::Plan(Box::new(p)));
        }
        let spec = row.strategy.as_deref().unwrap_or("");
        if spec != "hybrid" && !spec.starts_with("hybrid+") {
            return scenario_for(row).and_then(|s| s.setup()).map(|s| Model::Pipeline(Box::new(s)));
        }
        let precision = match spec {
            "hybrid" => HybridPrecision::Bits32,
            "hybrid+8bit" => HybridPrecision::Bits8,
            _ => return Err(Error::invalid("strategy", format!("`{spec}`: use `hybrid` or `hybrid+8bit`"))),
        };
        let trace = row.trace.as_deref().ok_or_else(|| {
            Error::invalid("trace", "a `hybrid` row needs a hybrid table in the `trace` column (traces/README.md)")
        })?;
        let mut table = HybridTable::read(trace)?;
        if let Some(thr) = row.calibrate_throughput {
            // One measured single-GPU throughput sets the full-pass time (Dettmers' footnote 7).
            table = table.with_total_ns((table.batch_per_gpu as f64 / thr * 1e9).round() as u64)?;
        }
        let topology = load_topology(row.topology.as_deref().unwrap_or(DEFAULT_TOPOLOGY))?;
        // Per-boundary channels: Dettmers' own accounting of the exchanges.
        let channels = Channels::PerBoundary;
        Ok(Model::Hybrid(Box::new(HybridSetup {
            table,
            topology,
            precision,
            channels,
            iterations: DEFAULT_ITERATIONS,
        })))
    }

    /// The alpha-beta baseline's throughput on `gpus` GPUs, given the one-GPU prediction of the
    /// same setup (or why there is none); an error where the baseline cannot express the setup.
    fn alpha_beta(&self, gpus: u32, one_gpu: Option<&Result<Simulated>>) -> std::result::Result<f64, String> {
        let setup = match self {
            Model::Pipeline(setup) => setup,
            Model::Hybrid(_) => return Err("alpha-beta has no form for the hybrid model-parallel scheme".into()),
            Model::Plan(_) => return Err("alpha-beta has no form for a parallel plan".into()),
        };
        let one = match one_gpu {
            Some(Ok(one)) => one,
            Some(Err(e)) => return Err(format!("it needs the setup's one-GPU prediction, which failed: {e}")),
            None => return Err("it needs the setup's one-GPU prediction, which was not run".into()),
        };
        alpha_beta_throughput(setup, gpus, one.iteration_time_s).map_err(|e| e.to_string())
    }

    fn simulate(&self, gpus: u32) -> Result<Simulated> {
        let p = match self {
            Model::Pipeline(setup) => setup.predict(gpus)?,
            Model::Hybrid(h) => h.predict(gpus)?,
            Model::Plan(p) if p.plan.gpus() != gpus => {
                return Err(Error::invalid(
                    "gpus",
                    format!("{gpus} GPUs, but plan {} needs {}", p.plan.name(), p.plan.gpus()),
                ))
            }
            Model::Plan(p) => p.predict()?,
        };
        let collectives = p.collectives_line();
        let plan = p.llm.as_ref();
        Ok(Simulated {
            workload: p.workload,
            topology: p.topology,
            gpus,
            strategy: p.strategy,
            throughput_samples_per_s: p.throughput_samples_per_s,
            iteration_time_s: p.iteration_time_s,
            collectives,
            tokens_per_s_per_gpu: plan.map(|r| r.tokens_per_s_per_gpu),
            model_tflops_per_gpu: plan.map(|r| r.model_tflops_per_gpu),
        })
    }
}

/// Predicts every row of every set (and, with `baseline`, the same rows under the baseline model).
/// Results are in set order, then row order. An error names the file, line and row id.
pub fn predict_rows(sets: &[MeasurementSet], baseline: Option<Baseline>) -> Result<Vec<Vec<Predicted>>> {
    predict_rows_with(sets, baseline, MachineOverrides::default())
}

/// [`predict_rows`] with every row's machine under `overrides` (else each setup's own).
pub fn predict_rows_with(
    sets: &[MeasurementSet],
    baseline: Option<Baseline>,
    overrides: MachineOverrides,
) -> Result<Vec<Vec<Predicted>>> {
    // Build each distinct setup once and list the (setup, GPU count) pairs to simulate.
    let mut setups: BTreeMap<String, Model> = BTreeMap::new();
    let mut jobs: BTreeSet<(String, u32)> = BTreeSet::new();
    let mut row_jobs: Vec<Vec<(String, u32)>> = Vec::new();
    for set in sets {
        let mut own_jobs = Vec::new();
        for row in &set.rows {
            let key = setup_key(&row.setup);
            let at = |e: Error| in_row(&set.path, row, e);
            if !setups.contains_key(&key) {
                let setup = Model::build(&row.setup, overrides).map_err(at)?;
                setups.insert(key.clone(), setup);
            }
            let gpus = gpu_count(row).map_err(at)?;
            jobs.insert((key.clone(), gpus));
            let plan = matches!(setups[&key], Model::Plan(_));
            if !plan && ((row.metric == Metric::Speedup && row.relative_to.is_none()) || baseline.is_some()) {
                jobs.insert((key.clone(), 1));
            }
            own_jobs.push((key, gpus));
        }
        row_jobs.push(own_jobs);
    }
    let jobs: Vec<(String, u32)> = jobs.into_iter().collect();
    let results: Vec<Result<Simulated>> = jobs.par_iter().map(|(key, gpus)| setups[key].simulate(*gpus)).collect();
    let done: BTreeMap<(String, u32), Result<Simulated>> = jobs.iter().cloned().zip(results).collect();
    // The baseline's throughput for every job, or why it has none.
    type Base = std::result::Result<f64, String>;
    let base: BTreeMap<(String, u32), Base> = match baseline {
        None => BTreeMap::new(),
        Some(Baseline::IdealRing) => {
            // Every job again, with the idealised collectives.
            let ideal: BTreeMap<&String, Model> =
                setups.iter().map(|(k, m)| (k, m.with_collectives(CollectiveModel::Ideal))).collect();
            let values: Vec<Base> =
                jobs.par_iter()
                    .map(|(key, gpus)| {
                        ideal[key].simulate(*gpus).map(|s| s.throughput_samples_per_s).map_err(|e| {
                            format!("its simulation on {gpus} GPU(s) under the ideal collectives failed: {e}")
                        })
                    })
                    .collect();
            jobs.iter().cloned().zip(values).collect()
        }
        // From the same setup's one-GPU prediction.
        Some(Baseline::AlphaBeta) => jobs
            .iter()
            .map(|(key, gpus)| {
                let one = done.get(&(key.clone(), 1));
                ((key.clone(), *gpus), setups[key].alpha_beta(*gpus, one))
            })
            .collect(),
    };

    let mut out = Vec::new();
    for (set, own_jobs) in sets.iter().zip(row_jobs) {
        let job_of: BTreeMap<&str, &(String, u32)> =
            set.rows.iter().map(|r| r.id.as_str()).zip(own_jobs.iter()).collect();
        let mut predicted = Vec::new();
        for (row, job) in set.rows.iter().zip(&own_jobs) {
            // A failed simulation is reported against the first row that needs it.
            let get = |job: &(String, u32)| -> Result<&Simulated> {
                done[job].as_ref().map_err(|e| {
                    in_row(&set.path, row, Error::invalid(format!("simulation on {} GPU(s)", job.1), e.to_string()))
                })
            };
            let own = get(job)?;
            let planned = |v: Option<f64>| {
                v.ok_or_else(|| in_row(&set.path, row, Error::invalid("metric", "needs a `parallel` plan")))
            };
            let value = match (row.metric, &row.relative_to) {
                (Metric::TokensPerSPerGpu, _) => planned(own.tokens_per_s_per_gpu)?,
                (Metric::ModelTflopsPerGpu, _) => planned(own.model_tflops_per_gpu)?,
                (Metric::Throughput, _) => own.throughput_samples_per_s,
                (Metric::IterationTime, _) => own.iteration_time_s,
                (Metric::Speedup, None) => {
                    own.throughput_samples_per_s / get(&(job.0.clone(), 1))?.throughput_samples_per_s
                }
                (Metric::Speedup, Some(base)) => {
                    own.throughput_samples_per_s / get(job_of[base.as_str()])?.throughput_samples_per_s
                }
            };
            let base_of = |job: &(String, u32)| -> Base {
                base.get(job).cloned().unwrap_or_else(|| Err(format!("no run on {} GPU(s)", job.1)))
            };
            let ratio = |n: Base, one: Base| -> Base { Ok(n? / one?) };
            let baseline: Option<Base> = baseline.map(|b| match (row.metric, &row.relative_to) {
                (Metric::TokensPerSPerGpu | Metric::ModelTflopsPerGpu, _) => {
                    Err(format!("{} predicts samples/s, not {}", b.name(), row.metric.unit()))
                }
                (Metric::Throughput, _) => base_of(job),
                (Metric::IterationTime, _) => base_of(job).map(|thr| {
                    let samples = own.throughput_samples_per_s * own.iteration_time_s;
                    samples / thr
                }),
                (Metric::Speedup, None) => ratio(base_of(job), base_of(&(job.0.clone(), 1))),
                (Metric::Speedup, Some(b)) => ratio(base_of(job), base_of(job_of[b.as_str()])),
            });
            let (baseline, baseline_missing) = match baseline {
                None => (None, None),
                Some(Ok(v)) => (Some(v), None),
                Some(Err(why)) => (None, Some(why)),
            };
            predicted.push(Predicted { value, baseline, baseline_missing, simulated: own.clone() });
        }
        out.push(predicted);
    }
    Ok(out)
}

/// Two rows with the same key share one simulated setup.
fn setup_key(s: &RowSetup) -> String {
    format!("{:?}", RowSetup { gpus: None, ..s.clone() })
}

fn gpu_count(row: &Row) -> Result<u32> {
    if let Some(g) = row.setup.gpus {
        return Ok(g);
    }
    let from_scenario = match &row.setup.scenario {
        Some(p) => Scenario::load(p)?.gpus,
        None => None,
    };
    match from_scenario.as_deref() {
        Some([one]) => Ok(*one),
        Some(_) => Err(Error::invalid("gpus", "the scenario lists several GPU counts: give the `gpus` column")),
        None => Err(Error::invalid("gpus", "no GPU count: give the `gpus` column")),
    }
}

/// The row's scenario file (or an empty one) with the row's columns laid over it.
pub fn scenario_for(row: &RowSetup) -> Result<Scenario> {
    let mut s = match &row.scenario {
        Some(p) => Scenario::load(p)?,
        None => Scenario::default(),
    };
    // Row paths are relative to the CSV file (already resolved); make them absolute so the
    // scenario does not resolve them again against its own directory.
    if let Some(t) = &row.trace {
        s.workload.trace = Some(std::path::absolute(t).unwrap_or_else(|_| t.clone()));
    }
    if let Some(t) = &row.topology {
        s.machine.topology = Some(match Path::new(t).is_file() {
            true => std::path::absolute(t).map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| t.clone()),
            false => t.clone(),
        });
    }
    if let Some(b) = row.batch {
        s.workload.batch_per_gpu = Some(b);
    }
    if let Some(b) = row.sample_bytes {
        (s.workload.sample_bytes, s.workload.device_sample_bytes) = (Some(b), Some(b));
    }
    if row.strategy.is_some() {
        s.strategy = row.strategy.clone();
    }
    let w = &mut s.workload;
    if row.trace.is_some() {
        // A row's trace replaces a scenario's zoo model, as `predict --trace` does.
        (w.model, w.gpu, w.precision, w.calibrate_throughput) = (None, None, None, None);
    }
    if let Some(m) = &row.model {
        (w.model, w.trace) = (Some(m.clone()), None);
    }
    if row.gpu.is_some() {
        w.gpu = row.gpu.clone();
    }
    if let Some(p) = &row.precision {
        w.precision = Some(p.parse().map_err(|e: String| Error::invalid("column `precision`", e))?);
    }
    if row.calibrate_throughput.is_some() {
        w.calibrate_throughput = row.calibrate_throughput;
    }
    if row.seq_len.is_some() {
        w.seq_len = row.seq_len;
    }
    Ok(s)
}

fn in_row(path: &Path, row: &Row, e: Error) -> Error {
    Error::parse(Location::line(path, row.line), format!("row `{}`: {e}", row.id))
}
