//! `dagsim compare` end to end: columns, saving, exit codes, atomic output.

mod common;

use common::dagsim;
use predicates::prelude::*;

#[test]
fn compare_prints_scaledn_categories_and_savings() {
    // The saving depends on how the master GPU's broadcasts and reductions run: 17.3% with the
    // idealised collectives (every transfer at link rate), 21.0% with NCCL's (the default).
    for (model, saving) in [("ideal", "17.3%"), ("nccl", "21.0%")] {
        dagsim()
            .args([
                "compare",
                "--scenario",
                "scenarios/scaledn_alexnet.toml",
                "--strategies",
                "master,master+split+preload",
                "--collective-model",
                model,
            ])
            .assert()
            .success()
            .stdout(predicate::str::contains("weight_broadcast").and(predicate::str::contains("ptop")))
            .stdout(predicate::str::contains("master+split+preload").and(predicate::str::contains(saving)));
    }
}

#[test]
fn compare_writes_csv_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cmp.csv");
    dagsim()
        .args(["compare", "--trace", "traces/alexnet_titanx_caffe.csv", "--gpus", "2", "--format", "csv", "-o"])
        .arg(&out)
        .args(["--strategies", "none,wfbp+fusion=4M"])
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("strategy,gpus,iteration_time_s"), "{text}");
    assert_eq!(text.lines().count(), 3);
}

#[test]
fn compare_rejects_bad_strategies_with_exit_code_2() {
    dagsim()
        .args(["compare", "--trace", "traces/alexnet_titanx_caffe.csv", "--strategies", "none,split"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("add `master`"));
}
