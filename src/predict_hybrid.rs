//! Krizhevsky's hybrid data/model-parallel scheme (as Dettmers' Appendix 5 models it) end to end:
//! a hybrid table, a word size and a channel model go through [`build_hybrid`] and the engine into
//! the same [`Prediction`] as `dagsim predict` gives for a strategy, so every writer applies. Every
//! task is fixed-time from the table; the topology only supplies the GPUs. Holds no state and
//! never prints.

use crate::dag::hybrid::{build_hybrid, Channels};
use crate::error::{Error, Result};
use crate::hw::Topology;
use crate::predict::scale_from_one_gpu;
use crate::report::{breakdown_seconds, steady_state, utilisation, Prediction};
use crate::sim::{simulate, Options};
use crate::strategy::hybrid::{HybridTable, Precision};
use crate::units::ns_to_s;

/// Topology the CLI uses when none is given: Dettmers' 4 GPUs behind one PCIe switch.
pub const DEFAULT_HYBRID_TOPOLOGY: &str = "dettmers-4gpu";

/// Everything a hybrid prediction depends on apart from the GPU count.
#[derive(Debug, Clone)]
pub struct HybridSetup {
    pub table: HybridTable,
    pub topology: Topology,
    pub precision: Precision,
    pub channels: Channels,
    pub iterations: u32,
}

impl HybridSetup {
    /// Name in reports: `hybrid`, `+8bit` for 8-bit exchanges, `+channels=...` unless per-boundary
    /// (the default, and what `dagsim validate`'s `hybrid` rows use).
    pub fn name(&self) -> String {
        let mut name = String::from("hybrid");
        if self.precision == Precision::Bits8 {
            name.push_str("+8bit");
        }
        if self.channels != Channels::PerBoundary {
            name.push_str("+channels=");
            name.push_str(self.channels.name());
        }
        name
    }

    /// Simulates `gpus` GPUs (= sub-batches); speedup fields are left at 0.
    pub fn predict(&self, gpus: u32) -> Result<Prediction> {
        let t = &self.table;
        if t.batch_per_gpu == 0 {
            return Err(Error::invalid(
                "hybrid table",
                format!("`{}` gives no `# batch_per_gpu:` line, so throughput is unknown", t.name),
            ));
        }
        let machine = self.topology.instantiate(gpus)?;
        let dag = build_hybrid(t, gpus, self.precision, self.channels, self.iterations)?;
        let run = simulate(&dag, &machine, Options::default())?;
        let steady = steady_state(&dag, &run);
        let iteration_time_s = ns_to_s(steady.iteration_ns);
        Ok(Prediction {
            dagsim_version: env!("CARGO_PKG_VERSION"),
            workload: t.name.clone(),
            batch_per_gpu: t.batch_per_gpu,
            gpus,
            nodes: machine.gpus[..gpus as usize].iter().map(|g| g.node).max().map_or(0, |n| n + 1),
            topology: self.topology.name.clone(),
            gpu_model: machine.gpu_model.clone(),
            strategy: self.name(),
            // Gradient syncs and exchanges are the table's measured times, not a collective.
            allreduce: "measured".to_string(),
            comm_source: "trace".to_string(),
            collective_model: machine.collectives.name(),
            collectives: run.collectives.clone(),
            runtime: "none".to_string(),
            // One exchange per layer boundary and per learnable layer, as the table gives them.
            grad_tensors: 0,
            grad_tensors_source: crate::workload::TensorSource::PerLayer,
            iterations_simulated: self.iterations,
            iteration_time_s,
            throughput_samples_per_s: (t.batch_per_gpu * gpus) as f64 / iteration_time_s,
            speedup: 0.0,
            scaling_efficiency: 0.0,
            breakdown: breakdown_seconds(&steady),
            utilisation: utilisation(&machine, &run, &steady, gpus),
            events: run.events,
            llm: None,
        })
    }

    /// Predictions for several GPU counts, with speedup over one GPU (the table's baseline).
    pub fn predict_scaling(&self, gpu_counts: &[u32]) -> Result<Vec<Prediction>> {
        scale_from_one_gpu(gpu_counts, |g| self.predict(g))
    }
}
