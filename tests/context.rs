//! Context parallelism end to end: each attention block's key-value exchange over its CP group
//! moves the keys and values of the whole sequence, once forward and twice backward; the reduced
//! simulation gives the full one's step time bit for bit; bad degrees are refused.

mod common;

use common::plan::{plan_report, plan_setup};
use dagsim::dag::{Phase, Work};
use dagsim::parallel::ParallelPlan;
use dagsim::predict_plan::PlanSetup;
use dagsim::report::plan::PlanReport;
use dagsim::sim::Options;
use dagsim::workload::transformer::TransformerConfig;

/// A small Llama (4 layers, hidden 1024, 8 heads, 4 KV heads).
fn small_llama() -> TransformerConfig {
    TransformerConfig {
        name: "llama-small".into(),
        layers: 4,
        hidden: 1024,
        heads: 8,
        kv_heads: 4,
        ffn_hidden: 2816,
        vocab: 8192,
        ..TransformerConfig::named("llama3-8b").unwrap()
    }
}

fn setup(spec: &str, gbs: u32, seq_len: u32) -> PlanSetup {
    plan_setup(small_llama(), spec, 1, gbs, seq_len, "dgx-a100")
}

fn report(s: &PlanSetup, symmetric: bool) -> PlanReport {
    plan_report(s, symmetric)
}

#[test]
fn the_key_value_exchange_moves_the_whole_sequence_over_each_cp_group() {
    // 8 GPUs: tp 2, cp 2, dp 2; seq 8192; 2 micro-batches per pipeline.
    let s = setup("tp=2,cp=2,dp=2", 4, 8192);
    let sim = s.simulate(false, Options::default()).unwrap();
    let cp: Vec<_> = sim.dag.tasks().iter().filter(|t| t.phase == Phase::ContextParallel).collect();
    // Groups: tp x dp = 4 per stage; 4 layers; 2 micro-batches; forward all-gather, backward
    // all-gather and reduce-scatter; 2 iterations.
    assert_eq!(cp.len(), 4 * 4 * 2 * 3 * 2);
    // Each moves K and V of 8192 tokens for one TP rank's 2 KV heads of 128: 8192 x 512 x 2 bytes.
    for t in &cp {
        match t.work {
            Work::Collective { bytes, .. } => assert_eq!(bytes, 8192 * 2 * 2 * 128 * 2),
            _ => panic!("a collective"),
        }
    }
    // Each GPU computes on its half of every sequence.
    assert_eq!(sim.workload.layers.iter().filter(|l| l.name.ends_with(".attn-cp")).count(), 4);
    let r = report(&s, true);
    assert!(r.breakdown.tp_comm > 0.0);
    assert_eq!((r.dp, r.global_batch, r.seq_len), (2, 4, 8192));
    assert!(r.plan.contains("cp=2"), "{}", r.plan);
    // The same tokens and model FLOPs as without CP on the same GPUs (dp 4 instead).
    let no_cp = report(&setup("tp=2,dp=4", 4, 8192), true);
    let flops = |r: &PlanReport| r.model_tflops_per_gpu * r.step_time_s;
    assert!((flops(&r) - flops(&no_cp)).abs() < 1e-9 * flops(&r));
}

#[test]
fn reduced_context_parallel_simulation_gives_the_full_step_time() {
    for (spec, gbs) in [("tp=2,cp=2,dp=4", 8), ("tp=1,cp=4,dp=4", 8), ("tp=2,cp=2,pp=2,dp=2", 4)] {
        let s = setup(spec, gbs, 8192);
        let (fast, full) = (report(&s, true), report(&s, false));
        assert!(fast.gpus_simulated < full.gpus_simulated, "{spec}: nothing reduced");
        assert_eq!(fast.step_time_s, full.step_time_s, "{spec}");
    }
}

#[test]
fn bad_context_parallel_plans_name_the_flag() {
    let err = |spec: &str, seq| setup(spec, 8, seq).predict_with(true).unwrap_err().to_string();
    let e = err("tp=2,cp=3,dp=2", 8000);
    assert!(e.contains("cp=3") && e.contains("multiple of 6"), "{e}");
    let e = err("tp=2,cp=2,dp=2,flash=off", 8192);
    assert!(e.contains("flash"), "{e}");
    let mut p = ParallelPlan::parse("tp=2,cp=2,dp=2").unwrap();
    p.global_batch = 8;
    let e = p.check(16, 4).unwrap_err().to_string();
    assert!(e.contains("tp x cp x pp x dp = 2 x 2 x 1 x 2 = 8"), "{e}");
}
