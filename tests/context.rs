//! Context parallelism end to end. By default (`cp-comm=all-gather`) each attention block's
//! key-value exchange over its CP group moves the keys and values of the whole sequence, once
//! forward and twice backward, not overlapped; with `cp-comm=p2p`, Transformer Engine's ring, each
//! rank's keys and values sent to the next CP rank beside each step of attention (cp - 1 sends
//! forward, cp backward with the key-value gradients), each step as long as the slower of its
//! chunk and its send. The reduced simulation gives the full one's step time bit for bit in both;
//! bad degrees and exchanges are refused.

mod common;

use common::plan::{assert_breakdowns_agree, plan_report, plan_setup};
use dagsim::collective::CollectiveOp;
use dagsim::dag::{Phase, Work};
use dagsim::parallel::{CpComm, ParallelPlan};
use dagsim::predict_plan::PlanSetup;
use dagsim::report::plan::PlanReport;
use dagsim::sim::Options;
use dagsim::workload::transformer::TransformerConfig;
use std::collections::HashMap;

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
fn the_default_exchange_gathers_the_whole_sequence_over_each_cp_group() {
    // 8 GPUs: tp 2, cp 2, dp 2; seq 8192; 2 micro-batches per pipeline.
    for spec in ["tp=2,cp=2,dp=2", "tp=2,cp=2,dp=2,cp-comm=all-gather"] {
        let s = setup(spec, 4, 8192);
        let sim = s.simulate(false, Options::default()).unwrap();
        let cp: Vec<_> = sim.dag.tasks().iter().filter(|t| t.phase == Phase::ContextParallel).collect();
        // Groups: tp x dp = 4 per stage; 4 layers; 2 micro-batches; forward all-gather, backward
        // all-gather and reduce-scatter; 2 iterations.
        assert_eq!(cp.len(), 4 * 4 * 2 * 3 * 2, "{spec}");
        // Each moves K and V of 8192 tokens for one TP rank's 2 KV heads of 128: 8192 x 512 x 2
        // bytes; no ring sends.
        for t in &cp {
            match t.work {
                Work::Collective { op, bytes, .. } => {
                    assert_ne!(op, CollectiveOp::SendRecv, "{spec}");
                    assert_eq!(bytes, 8192 * 2 * 2 * 128 * 2, "{spec}");
                }
                _ => panic!("a collective"),
            }
        }
        // Each GPU computes on its half of every sequence.
        assert_eq!(sim.workload.layers.iter().filter(|l| l.name.ends_with(".attn-cp")).count(), 4);
        let r = report(&s, true);
        assert!(r.breakdown.tp_comm > 0.0);
        assert_eq!((r.dp, r.global_batch, r.seq_len), (2, 4, 8192));
        // The default is not named in the plan.
        assert!(r.plan.contains("cp=2") && !r.plan.contains("cp-comm"), "{}", r.plan);
    }
    // The ring on the same plan hides part of the exchange behind attention (less of it
    // exposed) and pays Transformer Engine 1.3's memory passes around its steps (more compute:
    // layouts, buffers, per-step copies, corrections and gradient sums).
    let gather = report(&setup("tp=2,cp=2,dp=2", 4, 8192), true);
    let ring = report(&setup("tp=2,cp=2,dp=2,cp-comm=p2p", 4, 8192), true);
    assert!(ring.plan.contains("cp-comm=p2p"), "{}", ring.plan);
    let (r, g) = (&ring.breakdown, &gather.breakdown);
    assert!(r.tp_comm < g.tp_comm, "exposed exchange {} vs {}", r.tp_comm, g.tp_comm);
    assert!(r.compute > g.compute, "compute {} vs {}", r.compute, g.compute);
}

#[test]
fn the_cp_ring_sends_each_ranks_keys_and_values_beside_each_attention_step() {
    // Transformer Engine's ring on 8 GPUs, seq 8192, 2 micro-batches per pipeline, 2 iterations.
    for (spec, tp, cp, dp) in
        [("tp=2,cp=2,dp=2,cp-comm=p2p", 2u64, 2u64, 2u64), ("tp=1,cp=4,dp=2,cp-comm=p2p", 1, 4, 2)]
    {
        let s = setup(spec, 4, 8192);
        let sim = s.simulate(false, Options::default()).unwrap();
        let tasks = sim.dag.tasks();
        // K and V of this GPU's 8192 / cp tokens for one TP rank's KV heads (4 of 128), BF16.
        let kv = 8192 / cp * (2 * 4 * 128 / tp) * 2;
        let mut sends: Vec<u64> = tasks
            .iter()
            .filter_map(|t| match t.work {
                Work::Collective { op: CollectiveOp::SendRecv, bytes, .. } => Some(bytes),
                _ => None,
            })
            .collect();
        sends.sort_unstable();
        // Per CP group (tp x dp of them), layer, micro-batch and iteration: forward cp - 1 sends
        // of kv; backward kv at the first and last step, 2 kv (keys, values and their gradients)
        // at the cp - 2 between.
        let per = 4 * 2 * 2 * tp * dp;
        let mut expected: Vec<u64> = std::iter::repeat_n(kv, (per * (cp - 1 + 2)) as usize)
            .chain(std::iter::repeat_n(2 * kv, (per * (cp - 2)) as usize))
            .collect();
        expected.sort_unstable();
        assert_eq!(sends, expected, "{spec}");
        assert_eq!(sends.iter().filter(|&&b| b == 2 * kv).count() as u64, per * (cp - 2));
        // Each step: the chunk of attention and the send start together; the next step waits for
        // both, so the exposed exchange is max(0, transfer - chunk).
        let mut preds: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, _) in tasks.iter().enumerate() {
            for &n in sim.dag.successors(i as u32) {
                preds.entry(n as usize).or_default().push(i);
            }
        }
        let (start, end) = (&sim.run.start, &sim.run.end);
        let (mut exposed, mut hidden) = (0, 0);
        for (j, t) in tasks.iter().enumerate() {
            if !(t.phase == Phase::ContextParallel && matches!(t.work, Work::Fixed { ns: 0 })) {
                continue;
            }
            let p = &preds[&j];
            assert_eq!(p.len(), 2, "{spec}: a step ends with its chunk and its send");
            let (c, x) = if matches!(tasks[p[0]].work, Work::Collective { .. }) { (p[1], p[0]) } else { (p[0], p[1]) };
            assert!(matches!(tasks[c].phase, Phase::Forward | Phase::Backward));
            assert_eq!(start[c], start[x], "{spec}: chunk and send start together");
            let (chunk, transfer) = (end[c] - start[c], end[x] - start[x]);
            assert_eq!(end[j] - start[c], chunk.max(transfer), "{spec}");
            if transfer > chunk {
                exposed += 1;
            } else {
                hidden += 1;
            }
        }
        assert!(exposed + hidden > 0, "{spec}: no ring steps");
        // The attention core runs in cp chunks of the ring layer, summing to its time (the chunks'
        // own durations: beside the sends, whose NCCL channel holds an SM, their spans stretch).
        let (l, layer) = sim.workload.layers.iter().enumerate().find(|(_, l)| l.name == "L0.attn-cp").unwrap();
        assert!(layer.forward.mean_ns > 0);
        let chunks: Vec<u64> = tasks
            .iter()
            .filter(|t| t.phase == Phase::Forward && t.layer == Some(l as u32) && t.gpu == Some(0))
            .map(|t| match t.work {
                Work::Fixed { ns } => ns,
                other => panic!("{spec}: a chunk is {other:?}"),
            })
            .take(cp as usize)
            .collect();
        let (sum, per_chunk) = (chunks.iter().sum::<u64>(), layer.forward.mean_ns / cp);
        assert_eq!(sum, layer.forward.mean_ns, "{spec}");
        assert!(chunks.iter().all(|&c| c.abs_diff(per_chunk) <= 1), "{spec}: {chunks:?}");
    }
    // The same tokens and model FLOPs as without CP on the same GPUs (dp 4 instead), with either
    // exchange.
    let no_cp = report(&setup("tp=2,dp=4", 4, 8192), true);
    let flops = |r: &PlanReport| r.model_tflops_per_gpu * r.step_time_s;
    for spec in ["tp=2,cp=2,dp=2,cp-comm=p2p", "tp=2,cp=2,dp=2"] {
        let r = report(&setup(spec, 4, 8192), true);
        assert!(r.breakdown.tp_comm >= 0.0);
        assert_eq!((r.dp, r.global_batch, r.seq_len), (2, 4, 8192));
        assert!((flops(&r) - flops(&no_cp)).abs() < 1e-9 * flops(&r), "{spec}");
    }
}

#[test]
fn reduced_context_parallel_simulation_gives_the_full_step_time() {
    for (spec, gbs) in [
        ("tp=2,cp=2,dp=4", 8),
        ("tp=1,cp=4,dp=4", 8),
        ("tp=2,cp=2,pp=2,dp=2", 4),
        ("tp=2,cp=2,dp=4,cp-comm=p2p", 8),
        ("tp=1,cp=4,dp=4,cp-comm=p2p", 8),
        ("tp=2,cp=2,pp=2,dp=2,cp-comm=p2p", 4),
        // CP groups wider than a node's replicas (8 / gcd(8, tp)): blocks of cp replicas, over
        // two nodes and more.
        ("tp=1,cp=16,dp=2", 4),
        ("tp=2,cp=8,dp=2,cp-comm=p2p", 4),
        ("tp=4,cp=4,pp=2,dp=2", 4),
        ("tp=4,cp=4,pp=2,dp=2,cp-comm=p2p", 4),
    ] {
        let s = setup(spec, gbs, 8192);
        let (fast, full) = (report(&s, true), report(&s, false));
        assert!(fast.gpus_simulated < full.gpus_simulated, "{spec}: nothing reduced");
        assert_eq!(fast.step_time_s, full.step_time_s, "{spec}");
        assert_breakdowns_agree(&fast, &full, spec);
    }
}

#[test]
fn bad_context_parallel_plans_name_the_flag() {
    let err = |spec: &str, seq| setup(spec, 8, seq).predict_with(true).unwrap_err().to_string();
    let e = err("tp=2,cp=3,dp=2", 8000);
    assert!(e.contains("cp=3") && e.contains("multiple of 6"), "{e}");
    let e = err("tp=2,cp=2,dp=2,flash=off", 8192);
    assert!(e.contains("flash"), "{e}");
    // The exchange: TE's two names (either spelling), nothing else.
    for (v, want) in [("p2p", CpComm::P2p), ("all-gather", CpComm::AllGather), ("all_gather", CpComm::AllGather)] {
        assert_eq!(ParallelPlan::parse(&format!("cp=2,cp-comm={v}")).unwrap().cp_comm, want);
    }
    assert_eq!(ParallelPlan::parse("cp=2").unwrap().cp_comm, CpComm::AllGather);
    let e = ParallelPlan::parse("tp=2,cp=2,cp-comm=a2a").unwrap_err().to_string();
    assert!(e.contains("--parallel") && e.contains("cp-comm=a2a") && e.contains("p2p or all-gather"), "{e}");
    let mut p = ParallelPlan::parse("tp=2,cp=2,dp=2").unwrap();
    p.global_batch = 8;
    let e = p.check(16, 4).unwrap_err().to_string();
    assert!(e.contains("tp x cp x pp x dp = 2 x 2 x 1 x 2 = 8"), "{e}");
}
