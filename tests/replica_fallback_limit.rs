//! A run whose timeline classes fail their check simulates every replica; when that full run is
//! refused (here by the task limit, in a process of its own because limits are global), the
//! error says that the refusal came from the fallback, not from the plan as the user sized it.

mod common;

use common::fat_tree::{setup, tree};
use dagsim::limits::{self, Limits};
use dagsim::predict_plan::{PlanSetup, ReplicaClasses};
use dagsim::sim::Options;

#[test]
fn a_fallback_refused_by_a_limit_says_it_was_the_fallback() {
    // The fat-tree of `classes_that_do_not_hold_fall_back_to_every_replica`
    // (tests/replica_classes.rs): its classes drift by 11 us.
    let s = setup("llama2-7b", 8, "tp=8,pp=2,dp=12,sp=on,zero=1", 24, tree(4, 2, "spread"));
    // No split of the classes allowed: straight to every replica.
    let exact = PlanSetup { replica_classes: ReplicaClasses::Exact, class_splits: 0, ..s.clone() };
    let full = PlanSetup { replica_classes: ReplicaClasses::Off, ..s };
    // Task counts before any limit is set. The limit is checked per TP group while the DAG is
    // built, so it sits well between the class run's count and the full run's.
    let approx = PlanSetup { replica_classes: ReplicaClasses::Approximate, ..exact.clone() };
    let class_tasks = approx.simulate(true, Options::default()).unwrap().dag.tasks().len() as u64;
    let full_tasks = full.simulate(true, Options::default()).unwrap().dag.tasks().len() as u64;
    assert!(2 * class_tasks < full_tasks, "{class_tasks} vs {full_tasks}");
    assert!(limits::set(Limits { tasks: (class_tasks + full_tasks) / 2, ..Limits::default() }));
    let err = exact.simulate(true, Options::default()).err().expect("the full run is over the limit").to_string();
    assert!(err.contains("passed the limit"), "{err}");
    assert!(err.contains("timeline classes failed their check"), "{err}");
}
