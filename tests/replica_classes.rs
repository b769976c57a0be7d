//! Timeline classes of DP replicas on fat-tree fabrics (`predict_plan::ReplicaClasses`): where a
//! run simulates one replica per class of route shapes, the step and its breakdown must equal,
//! bit for bit, the run that simulates every replica; a class that does not hold must be caught
//! after the run and the full run taken instead; the approximate mode says that it is.

mod common;

use common::fat_tree::{setup, tree};
use dagsim::predict_plan::{PlanSetup, ReplicaClasses};
use dagsim::report::steady_state;
use dagsim::sim::Options;

/// Step time, per-GPU breakdown of the first simulated GPU, and how the replicas were simulated.
fn run(s: &PlanSetup, classes: ReplicaClasses) -> (f64, String, dagsim::predict_plan::ReplicaReduction) {
    let s = PlanSetup { replica_classes: classes, ..s.clone() };
    let p = s.predict_with(true).unwrap();
    let sim = s.simulate(true, Options::default()).unwrap();
    let step = steady_state(&sim.dag, &sim.run).iteration_ns;
    let llm = p.llm.unwrap();
    (
        step,
        format!("{:?} {:?}", llm.breakdown, llm.stages.iter().map(|x| x.breakdown).collect::<Vec<_>>()),
        sim.replicas,
    )
}

/// Checks that the exact classes simulate fewer replicas than the full run and give its result.
fn exact_equals_full(s: &PlanSetup) -> dagsim::predict_plan::ReplicaReduction {
    let (full_step, full_breakdown, full) = run(s, ReplicaClasses::Off);
    assert_eq!(full.simulated, s.plan.dp);
    assert_eq!(full.classes, None);
    let (step, breakdown, reduced) = run(s, ReplicaClasses::Exact);
    assert_eq!(reduced.classes, Some(ReplicaClasses::Exact));
    assert_eq!(step.to_bits(), full_step.to_bits(), "{step} vs {full_step}: {}", reduced.describe());
    assert_eq!(breakdown, full_breakdown);
    reduced
}

#[test]
fn dense_pipeline_classes_give_the_full_step_bit_for_bit() {
    // 405B's shape in small: tp 8 (a node), pp 4, dp 12 over leaf groups of 2 nodes and pods of
    // 4: stages straddle leaves and pods at different places for different replicas (4 classes).
    let s = setup("llama2-7b", 8, "tp=8,pp=4,dp=12,sp=on,zero=1", 24, tree(2, 2, "spread"));
    let r = exact_equals_full(&s);
    assert!(!r.fell_back, "{}", r.describe());
    assert!(r.simulated < 12, "{}", r.describe());
    assert_eq!(r.drift_ns, 0);
}

#[test]
fn expert_parallel_classes_give_the_full_step_bit_for_bit() {
    // Mixtral's shape in small: tp 2, ep 8 (four replicas a node), pp 2, dp 16.
    let s = setup("mixtral-8x7b", 4, "tp=2,pp=2,dp=16,ep=8,sp=on,zero=1", 32, tree(2, 2, "spread"));
    let r = exact_equals_full(&s);
    assert!(!r.fell_back, "{}", r.describe());
    assert!(r.simulated < 16, "{}", r.describe());
}

#[test]
fn classes_that_do_not_hold_are_split_and_checked_again() {
    // Leaf groups of 4 nodes: replicas whose routes have one shape still meet different traffic
    // on the oversubscribed spines, images end off their originals (by 11 us); the blocks whose
    // images ended off get classes of their own and the run is checked again. Classes of unequal
    // size then: the breakdown (averaged over the replicas each class stands for) is the full
    // run's too.
    let s = setup("llama2-7b", 8, "tp=8,pp=2,dp=12,sp=on,zero=1", 24, tree(4, 2, "spread"));
    let r = exact_equals_full(&s);
    assert!(!r.fell_back, "{}", r.describe());
    assert!(r.refinements >= 1 && r.simulated < 12, "{}", r.describe());
    assert_eq!(r.drift_ns, 0);
    assert!(r.describe().contains("split"), "{}", r.describe());
}

#[test]
fn classes_that_do_not_hold_fall_back_to_every_replica() {
    // The same with no split allowed: every replica is simulated again.
    let s = setup("llama2-7b", 8, "tp=8,pp=2,dp=12,sp=on,zero=1", 24, tree(4, 2, "spread"));
    let r = exact_equals_full(&PlanSetup { class_splits: 0, ..s });
    assert!(r.fell_back, "{}", r.describe());
    assert_eq!(r.simulated, 12);
    assert!(r.drift_ns > 0);
    assert!(r.describe().contains("failed their check"));
}

#[test]
fn approximate_classes_say_so_and_stay_close() {
    let s = setup("llama2-7b", 8, "tp=8,pp=4,dp=12,sp=on,zero=1", 24, tree(2, 2, "spread"));
    let (full_step, _, _) = run(&s, ReplicaClasses::Off);
    let (step, _, r) = run(&s, ReplicaClasses::Approximate);
    assert_eq!(r.classes, Some(ReplicaClasses::Approximate));
    assert!(r.describe().contains("APPROXIMATE"), "{}", r.describe());
    assert!(r.simulated <= exact_equals_full(&s).simulated);
    // Not exact, so no equality: within 0.1% of the full step here.
    assert!((step - full_step).abs() <= 1e-3 * full_step, "approximate step {step} vs full {full_step}");
}

#[test]
fn a_slow_gpu_keeps_every_replica_simulated() {
    // A compute fault breaks the symmetry the classes rest on (`Machine::identical_nodes` refuses
    // it): every rank runs, and the result is the full run's.
    let mut t = tree(2, 2, "spread");
    t.faults.slow_gpus = vec![(40, 1.5)];
    let s = setup("llama2-7b", 8, "tp=8,pp=4,dp=12,sp=on,zero=1", 24, t);
    let (step, breakdown, r) = run(&s, ReplicaClasses::Exact);
    assert_eq!(r.classes, None, "{}", r.describe());
    assert_eq!(r.simulated, 12);
    let (full_step, full_breakdown, _) = run(&s, ReplicaClasses::Off);
    assert_eq!(step.to_bits(), full_step.to_bits());
    assert_eq!(breakdown, full_breakdown);
    // And the fault is felt: slower than the same plan without it.
    let healthy = setup("llama2-7b", 8, "tp=8,pp=4,dp=12,sp=on,zero=1", 24, tree(2, 2, "spread"));
    assert!(step > run(&healthy, ReplicaClasses::Off).0);
}

#[test]
fn predict_takes_the_mode_and_reports_how_the_replicas_ran() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("small-tree.json");
    std::fs::write(
        &topo,
        r#"{"name":"small-tree","base":"dgx-h100","fabric":{"leaf":{"nodes":2},
            "spine":{"switches":2,"leaf_groups":2,"oversubscription":2},"core":{"switches":2},"ecmp":"spread"}}"#,
    )
    .unwrap();
    let predict = |mode: &str, format: &str| {
        let out = common::dagsim()
            .args(["predict", "--model", "llama2-7b", "--layers", "8", "--seq-len", "2048", "--topology"])
            .arg(&topo)
            .args(["--parallel", "tp=8,pp=4,dp=12,sp=on,zero=1", "--global-batch", "24", "--micro-batch", "1"])
            .args(["--replica-classes", mode, "--format", format])
            .assert()
            .success();
        String::from_utf8(out.get_output().stdout.clone()).unwrap()
    };
    let json = |mode: &str| -> serde_json::Value { serde_json::from_str(&predict(mode, "json")).unwrap() };
    let (exact, off, approx) = (json("exact"), json("off"), json("approximate"));
    let r = &exact[0]["llm"]["replicas"];
    assert_eq!(r["replica_classes"], "exact");
    assert_eq!(r["class_check"], "passed");
    assert_eq!(r["image_gap_ns"], 0);
    assert!(r["dp_replicas_simulated"].as_u64().unwrap() < 12, "{r}");
    assert_eq!(off[0]["llm"]["replicas"]["replica_classes"], "none");
    assert_eq!(off[0]["llm"]["replicas"]["dp_replicas_simulated"], 12);
    assert_eq!(exact[0]["iteration_time_s"], off[0]["iteration_time_s"], "exact classes give the full step");
    assert_eq!(approx[0]["llm"]["replicas"]["replica_classes"], "approximate");
    let text = predict("exact", "text");
    assert!(text.contains("DP replicas simulated (timeline classes, checked exact)"), "{text}");
    let csv = predict("approximate", "csv");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let head = reader.headers().unwrap().clone();
    let row = reader.records().next().unwrap().unwrap();
    let cells: std::collections::HashMap<&str, &str> = head.iter().zip(row.iter()).collect();
    assert_eq!(cells["replica_classes"], "approximate");
    assert_eq!(cells["class_check"], "none");
    assert!(cells["image_gap_ns"].parse::<u64>().is_ok());
    common::fails_with(&["predict", "--model", "llama2-7b", "--replica-classes", "sometimes"], &["--replica-classes"]);
}
