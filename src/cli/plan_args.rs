//! The flags of a parallel plan for a transformer (`--parallel`, `--micro-batch`,
//! `--global-batch`, `--matmul-tflops`, `--layers`, `--replica-classes`; `--seq-len` is a setup flag, as in `trace gen`), shared by the subcommands that simulate one
//! (`predict`, `timeline`). With the setup flags (model, GPU, precision, machine) they build a
//! validated [`PlanSetup`].

use super::setup_args::SetupArgs;
use dagsim::error::{Error, Result};
use dagsim::predict_plan::{PlanRequest, PlanSetup, ReplicaClasses};

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Parallel plan for a transformer --model: tp=8,pp=4,dp=8[,vp=2,sp=on,zero=1|2|3,
    /// fsdp=full|hybrid,recompute=none|selective|full,schedule=gpipe|1f1b|interleaved,flash=off,
    /// tp-across-nodes=on] (docs/parallel.md).
    #[arg(long, value_name = "SPEC")]
    pub parallel: Option<String>,
    /// Sequences per micro-batch (with --parallel; default 1).
    #[arg(long, value_name = "N", requires = "parallel")]
    pub micro_batch: Option<u32>,
    /// Sequences per iteration over all data-parallel ranks (with --parallel; default: one
    /// micro-batch per DP rank).
    #[arg(long, value_name = "N", requires = "parallel")]
    pub global_batch: Option<u32>,
    /// Measured best matmul TFLOP/s of the GPU at the training precision, replacing the shipped
    /// table's (with --parallel).
    #[arg(long, value_name = "TFLOPS", requires = "parallel")]
    pub matmul_tflops: Option<f64>,
    /// Build the transformer with this many layers instead of its config's: a benchmark's proxy of
    /// the model (with --parallel; pp x vp must divide it).
    #[arg(long, value_name = "N", requires = "parallel")]
    pub layers: Option<u32>,
    /// How DP replicas stand for each other on a fat-tree fabric: `exact` simulates one replica
    /// per timeline class and checks after the run that every image ended with its original
    /// (else simulates every replica), `approximate` skips the check and reports the largest
    /// gap, `off` simulates every replica (docs/parallel.md).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = ClassesArg::Exact)]
    pub replica_classes: ClassesArg,
}

/// `--replica-classes` (see [`ReplicaClasses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClassesArg {
    Exact,
    Approximate,
    Off,
}

impl From<ClassesArg> for ReplicaClasses {
    fn from(a: ClassesArg) -> Self {
        match a {
            ClassesArg::Exact => ReplicaClasses::Exact,
            ClassesArg::Approximate => ReplicaClasses::Approximate,
            ClassesArg::Off => ReplicaClasses::Off,
        }
    }
}

impl PlanArgs {
    /// The plan setup the flags describe, or None without `--parallel`. `gpus` is `--gpus` (one
    /// count, or none: the plan's product).
    pub fn setup(&self, setup: &SetupArgs, strategy: Option<&str>, gpus: Option<&[u32]>) -> Result<Option<PlanSetup>> {
        let Some(spec) = &self.parallel else { return Ok(None) };
        if setup.trace.is_some() || setup.batch.is_some() {
            return Err(Error::invalid(
                "--parallel",
                "a plan takes a transformer --model and --micro-batch / --global-batch, not --trace or --batch",
            ));
        }
        let scenario = setup.scenario(strategy)?;
        let gpus = match gpus {
            Some([one]) => Some(*one),
            None => None,
            Some(_) => return Err(Error::invalid("--gpus", "a plan runs on one GPU count (tp x pp x dp)")),
        };
        PlanSetup::from_request(PlanRequest {
            scenario: &scenario,
            topology: setup.topology_of(&scenario)?,
            spec,
            micro_batch: self.micro_batch,
            global_batch: self.global_batch,
            seq_len: None, // the scenario's, where --seq-len put it
            layers: self.layers,
            matmul_tflops: self.matmul_tflops,
            gpus,
        })
        .map(|setup| Some(PlanSetup { replica_classes: self.replica_classes.into(), ..setup }))
    }
}
