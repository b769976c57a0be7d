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

/// `compare --best-fusion` reports every θ it tried with its time, keeps the rest of each spec,
/// and leaves a strategy whose runtime groups gradients as given (saying so in text).
#[test]
fn best_fusion_reports_its_search_and_keeps_the_other_settings() {
    let args = ["compare", "--trace", "traces/alexnet_k80.csv", "--gpus", "4", "--best-fusion"];
    let strategies = ["--strategies", "wfbp+grads=fp16,wfbp+runtime=ddp"];
    let o = dagsim().args(args).args(strategies).args(["--format", "json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let trials = rows[0]["fusion_search"].as_array().unwrap();
    let names: Vec<&str> = trials.iter().map(|t| t["fusion"].as_str().unwrap()).collect();
    assert_eq!(names, ["none", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "inf"]);
    let fastest = trials.iter().map(|t| t["iteration_time_s"].as_f64().unwrap()).fold(f64::INFINITY, f64::min);
    assert_eq!(rows[0]["iteration_time_s"].as_f64().unwrap(), fastest, "the row runs the fastest θ");
    assert!(rows[0]["strategy"].as_str().unwrap().contains("grads=fp16"), "{}", rows[0]["strategy"]);
    assert!(rows[1].get("fusion_search").is_none());
    assert_eq!(rows[1]["strategy"], "io+wfbp+runtime=ddp");
    let text = dagsim().args(args).args(strategies).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("fusion search for `wfbp+grads=fp16`"), "{text}");
    assert!(text.contains("fusion not searched: io+wfbp+runtime=ddp (its runtime groups the gradients itself)"), "{text}");
}
