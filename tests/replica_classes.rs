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
fn classes_that_do_not_hold_fall_back_to_every_replica() {
    // Leaf groups of 4 nodes: replicas whose routes have one shape still meet different traffic
    // on the oversubscribed spines, images end off their originals (by 11 us), and the check
    // sends the run back to every replica.
    let s = setup("llama2-7b", 8, "tp=8,pp=2,dp=12,sp=on,zero=1", 24, tree(4, 2, "spread"));
    let r = exact_equals_full(&s);
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
