//! The flags that describe one setup (trace, scenario, topology, strategy, batch, ...), shared by
//! subcommands that simulate a single configuration (`timeline`). Flags override scenario fields;
//! paths given on the command line are relative to the working directory.

use dagsim::error::Result;
use dagsim::predict::Setup;
use dagsim::scenario::Scenario;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Layer-wise trace (native CSV or the DAG paper's table format).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Scenario file (TOML); flags given here override its fields.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Topology preset (k80-cluster, v100-cluster) or file.
    #[arg(long, value_name = "NAME|FILE")]
    pub topology: Option<String>,
    /// Strategy: features joined by `+` (none, io, wfbp; settings allreduce=ring, comm=model|trace).
    #[arg(long, value_name = "SPEC")]
    pub strategy: Option<String>,
    /// Samples per GPU per iteration (overrides the trace).
    #[arg(long, value_name = "N")]
    pub batch: Option<u32>,
    /// Bytes of one input sample as stored (overrides the trace).
    #[arg(long, value_name = "BYTES")]
    pub sample_bytes: Option<u64>,
    /// Iterations to simulate (the first is warm-up).
    #[arg(long, value_name = "N")]
    pub iterations: Option<u32>,
}

impl SetupArgs {
    /// The scenario after applying the flags, and the setup it describes.
    pub fn setup(&self) -> Result<(Scenario, Setup)> {
        let mut scenario = match &self.scenario {
            Some(p) => Scenario::load(p)?,
            None => Scenario::default(),
        };
        if let Some(t) = &self.trace {
            scenario.workload.trace = Some(std::path::absolute(t).unwrap_or(t.clone()));
        }
        if let Some(t) = &self.topology {
            scenario.machine.topology = Some(match Path::new(t).exists() {
                true => std::path::absolute(t).map(|p| p.to_string_lossy().into_owned()).unwrap_or(t.clone()),
                false => t.clone(),
            });
        }
        if self.strategy.is_some() {
            scenario.strategy = self.strategy.clone();
        }
        if self.batch.is_some() {
            scenario.workload.batch_per_gpu = self.batch;
        }
        if self.sample_bytes.is_some() {
            scenario.workload.sample_bytes = self.sample_bytes;
        }
        if self.iterations.is_some() {
            scenario.iterations = self.iterations;
        }
        let setup = scenario.setup()?;
        Ok((scenario, setup))
    }
}
