//! A transformer plan set up as the library's tests need it: A100-80GB, BF16, the plan's default
//! strategy, two simulated iterations, no calibration.

use dagsim::hw::load_topology;
use dagsim::parallel::ParallelPlan;
use dagsim::predict_plan::{default_plan_strategy, PlanSetup};
use dagsim::report::plan::PlanReport;
use dagsim::workload::gpu::GpuSpec;
use dagsim::workload::transformer::TransformerConfig;
use dagsim::workload::Precision;

/// `model` under `spec` (e.g. `tp=2,pp=2,dp=4`) with micro-batch `mb`, global batch `gbs` and
/// sequence `seq_len`, on the shipped `topology`.
pub fn plan_setup(model: TransformerConfig, spec: &str, mb: u32, gbs: u32, seq_len: u32, topology: &str) -> PlanSetup {
    let mut plan = ParallelPlan::parse(spec).unwrap();
    plan.micro_batch = mb;
    plan.global_batch = gbs;
    PlanSetup {
        seq_len,
        model,
        gpu: GpuSpec::by_name("a100-80gb").unwrap(),
        precision: Precision::Bf16,
        strategy: default_plan_strategy(&plan),
        plan,
        topology: load_topology(topology).unwrap(),
        iterations: 2,
        calibrate_throughput: None,
        matmul_tflops: None,
        replica_classes: Default::default(),
        class_splits: dagsim::predict_plan::CLASS_SPLITS,
    }
}

/// The plan figures of `s`, simulated with or without the symmetric reduction.
pub fn plan_report(s: &PlanSetup, symmetric: bool) -> PlanReport {
    s.predict_with(symmetric).unwrap().llm.unwrap()
}

/// The reduced simulation's breakdown agrees with the full one's, each part within 1e-9 of the
/// step (sums over different numbers of GPUs).
pub fn assert_breakdowns_agree(fast: &PlanReport, full: &PlanReport, what: &str) {
    let (a, b) = (&fast.breakdown, &full.breakdown);
    for (x, y, part) in [
        (a.compute, b.compute, "compute"),
        (a.tp_comm, b.tp_comm, "tp"),
        (a.pp_comm, b.pp_comm, "pp"),
        (a.dp_comm, b.dp_comm, "dp"),
        (a.bubble, b.bubble, "bubble"),
        (a.idle, b.idle, "idle"),
    ] {
        assert!((x - y).abs() <= 1e-9 * full.step_time_s, "{what} {part}: reduced {x} full {y}");
    }
}

/// A small GPT (8 layers, hidden 1024) so that many plans run quickly.
pub fn small_gpt() -> TransformerConfig {
    TransformerConfig {
        name: "gpt-small".into(),
        layers: 8,
        hidden: 1024,
        heads: 16,
        kv_heads: 16,
        ffn_hidden: 4096,
        vocab: 8192,
        ..TransformerConfig::named("gpt3-175b").unwrap()
    }
}
