//! Scenario files (TOML): one file bundles a workload, a machine, GPU counts, a strategy and the
//! number of iterations, so a setup can be named, versioned and re-run. Paths inside a scenario are
//! relative to the scenario file. Command-line flags override fields (see `scenarios/README.md`).

use crate::error::{Error, Location, Result};
use crate::hw::{load_topology, topology::DEFAULT_TOPOLOGY};
use crate::predict::{Setup, DEFAULT_ITERATIONS};
use crate::strategy::{Strategy, DEFAULT_STRATEGY};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub gpus: Option<Vec<u32>>,
    #[serde(default)]
    pub iterations: Option<u32>,
    #[serde(default)]
    pub strategy: Option<String>,
    #[serde(default)]
    pub workload: WorkloadSection,
    #[serde(default)]
    pub machine: MachineSection,
    /// Directory of the scenario file, for resolving relative paths.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The scenario file itself, when read from one (errors name it).
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    pub trace: Option<PathBuf>,
    pub batch_per_gpu: Option<u32>,
    pub sample_bytes: Option<u64>,
    pub device_sample_bytes: Option<u64>,
    /// Model-update time per iteration, microseconds.
    pub update_us: Option<f64>,
    /// Read `trace` with an importer: pipedream, caffe, bcaffe, kineto (docs/workloads.md).
    pub profile_format: Option<crate::workload::import::ProfileFormat>,
    /// Synthesise from the model zoo instead of reading a trace (needs `gpu` and `batch_per_gpu`).
    pub model: Option<String>,
    pub gpu: Option<String>,
    pub precision: Option<crate::workload::Precision>,
    pub optimizer: Option<crate::workload::memory::Optimizer>,
    pub seq_len: Option<u32>,
    /// Measured single-GPU samples/s at this batch size; synthetic times are scaled to it.
    pub calibrate_throughput: Option<f64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSection {
    /// Preset name or topology file path.
    pub topology: Option<String>,
}

impl Scenario {
    /// Reads a scenario file; errors name the file and line.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    /// [`Scenario::load`] on text already in memory; relative paths resolve next to `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|sp| crate::error::line_of_offset(text, sp.start));
            Error::parse(Location { path: path.into(), line, field: None }, e.message().to_string())
        })?;
        s.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        s.path = Some(path.to_path_buf());
        Ok(s)
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    /// The trace path, resolved against the scenario's directory.
    pub fn trace_path(&self) -> Option<PathBuf> {
        self.workload.trace.as_deref().map(|p| self.resolve(p))
    }

    /// The topology argument: a preset name as is, a file path resolved against the scenario.
    pub fn topology_arg(&self) -> Option<String> {
        let t = self.machine.topology.as_deref()?;
        if crate::hw::topology::PRESETS.iter().any(|(n, _)| *n == t) {
            return Some(t.to_string());
        }
        Some(self.resolve(Path::new(t)).to_string_lossy().into_owned())
    }

    /// Where the workload comes from: a trace, an imported profile or a synthesised zoo model.
    pub fn workload_source(&self) -> crate::workload::source::WorkloadSource {
        let w = &self.workload;
        crate::workload::source::WorkloadSource {
            trace: self.trace_path(),
            profile_format: w.profile_format,
            model: w.model.clone(),
            gpu: w.gpu.clone(),
            batch: w.batch_per_gpu,
            precision: w.precision,
            optimizer: w.optimizer,
            seq_len: w.seq_len,
            calibrate_throughput: w.calibrate_throughput,
        }
    }

    /// Builds the setup this scenario describes (after the caller applied command-line overrides).
    pub fn setup(&self) -> Result<Setup> {
        // A value the scenario file gave that is wrong names the file.
        self.setup_inner().map_err(|e| match (e, &self.path) {
            (Error::Invalid { what, msg }, Some(p)) => {
                Error::Invalid { what: format!("{what} (scenario {})", p.display()), msg }
            }
            (e, _) => e,
        })
    }

    fn setup_inner(&self) -> Result<Setup> {
        let mut workload = self.workload_source().load()?;
        let w = &self.workload;
        if let Some(b) = w.batch_per_gpu {
            workload.batch_per_gpu = b;
        }
        if let Some(b) = w.sample_bytes {
            workload.sample_bytes = b;
            workload.device_sample_bytes = b;
        }
        if let Some(b) = w.device_sample_bytes {
            workload.device_sample_bytes = b;
        }
        if let Some(u) = w.update_us {
            if !(u.is_finite() && u >= 0.0) {
                return Err(Error::invalid("update_us", "must be a non-negative number of microseconds"));
            }
            workload.update = crate::workload::Stat::exact(crate::units::us_to_ns(u));
        }
        let topology = load_topology(self.topology_arg().as_deref().unwrap_or(DEFAULT_TOPOLOGY))?;
        let strategy = Strategy::parse(self.strategy.as_deref().unwrap_or(DEFAULT_STRATEGY))?;
        let iterations = self.iterations.unwrap_or(DEFAULT_ITERATIONS);
        let setup = Setup { workload, topology, strategy, iterations };
        setup.check()?;
        Ok(setup)
    }
}
