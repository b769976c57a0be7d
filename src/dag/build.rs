//! Picks the builder a setup needs ([`build_dag`]). The S-SGD DAG of Shi, Wang & Chu (Fig. 1)
//! is the parallel-plan builder ([`super::plan`]) with the plan tp = 1, pp = 1, dp = N.
//!
//! Per GPU `g` and iteration `i`: read a batch from storage (`io`), copy it to the GPU (`h2d`),
//! forward layer 1..L, backward layer L..1, then the model update. Per learnable layer, one
//! gradient-aggregation task shared by all GPUs (the paper's T32-T34). Edges as the paper gives them:
//!
//! * no overlap (CNTK, Eq. 2): the next read waits for the update; aggregation starts after the
//!   whole backward pass.
//! * I/O overlap (Caffe-MPI, Eq. 3): the loader reads batch i+1 right after copying batch i and
//!   copies it once batch i's first layer has consumed the input buffer.
//! * WFBP (Eq. 4-5): layer l's aggregation waits only for layer l's backward on every GPU;
//!   aggregations run one at a time in order on the communicator.

use super::plan::{build_plan, PlanLayout};
use super::Dag;
use crate::error::{Error, Result};
use crate::hw::Machine;
use crate::strategy::Strategy;
use crate::workload::Workload;

/// Everything the builder reads.
pub struct BuildInput<'a> {
    pub workload: &'a Workload,
    pub machine: &'a Machine,
    /// Number of GPUs used: the first `gpus` GPUs of the machine in rank order.
    pub gpus: u32,
    pub strategy: &'a Strategy,
    pub iterations: u32,
    /// GPUs whose own tasks are built: the first `represented` ranks stand for all `gpus` when
    /// the setup is symmetric (see `predict::symmetric_representatives`); collectives still span
    /// every rank. Equal to `gpus` for a full graph; only the all-reduce builder uses fewer.
    pub represented: u32,
    /// A parallel plan (tensor, pipeline, data parallelism; its represented ranks replace
    /// `represented`); `None` is plain data parallelism.
    pub plan: Option<&'a PlanLayout>,
}

/// Builds the DAG the strategy asks for: master-GPU data parallelism ([`super::master`]) or the
/// all-reduce S-SGD graph below.
pub fn build_dag(input: &BuildInput) -> Result<Dag> {
    if let Some(layout) = input.plan {
        if input.strategy.master || input.strategy.mps.is_some() {
            return Err(Error::invalid("strategy", "master and mps strategies do not combine with --parallel"));
        }
        return build_plan(input, layout);
    }
    if input.strategy.master {
        super::master::build_master(input)
    } else if input.strategy.mps.is_some() {
        super::mps::build_mps(input)
    } else {
        build_ssgd(input)
    }
}

/// Checks shared by the builders: GPU count, iterations.
pub(super) fn check_input(input: &BuildInput) -> Result<()> {
    let BuildInput { machine: m, gpus: n, iterations, .. } = *input;
    if n == 0 {
        return Err(Error::invalid("GPU count", "must be at least 1"));
    }
    if n as usize > m.gpus.len() {
        return Err(Error::invalid(
            "GPU count",
            format!("{n} GPUs asked for, machine `{}` has {}", m.name, m.gpus.len()),
        ));
    }
    if iterations < 2 {
        return Err(Error::invalid("iterations", "at least 2 are needed to measure a steady-state iteration"));
    }
    Ok(())
}

/// Builds the S-SGD DAG: the parallel-plan builder ([`super::plan`]) with the plan tp = 1,
/// pp = 1, dp = N, of which the first `represented` ranks get tasks.
pub fn build_ssgd(input: &BuildInput) -> Result<Dag> {
    let (ranks, n) = (input.gpus, input.represented);
    if n == 0 || n > ranks {
        return Err(Error::invalid("represented GPUs", format!("{n} is not between 1 and {ranks}")));
    }
    build_plan(input, &PlanLayout::data_parallel(ranks, n, input.workload.layers.len()))
}
