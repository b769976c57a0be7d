//! `dagsim predict` as users run it: the default job, the JSON contract, and bad input giving a
//! clear error with exit code 2 (never a panic).

mod common;

use common::{dagsim, fails_with};
use predicates::prelude::*;
use std::path::PathBuf;

fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn the_main_job_runs_with_no_other_argument() {
    dagsim()
        .args(["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "16"])
        .assert()
        .success()
        .stdout(predicate::str::contains("k80-cluster").and(predicate::str::contains("io+wfbp")));
}

#[test]
fn json_has_the_documented_keys_and_breakdown_sums() {
    let out = dagsim()
        .args(["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "16", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = v[0].clone(); // always an array of results, even of one
    for key in [
        "iteration_time_s",
        "throughput_samples_per_s",
        "speedup",
        "scaling_efficiency",
        "breakdown",
        "gpus",
        "strategy",
        "topology",
        "utilisation",
        "dagsim_version",
    ] {
        assert!(v.get(key).is_some(), "missing key {key}");
    }
    let b = &v["breakdown"];
    let sum: f64 = ["compute", "communication", "io", "idle"].iter().map(|k| b[k].as_f64().unwrap()).sum();
    assert!((sum - v["iteration_time_s"].as_f64().unwrap()).abs() < 1e-9);
    assert_eq!(v["gpus"], 16);
}

#[test]
fn a_list_of_gpu_counts_gives_one_row_each() {
    let out = dagsim()
        .args(["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "1,2,4,8,16", "--format", "csv"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 6, "{text}");
    let json = dagsim()
        .args(["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "1,4", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(2));
    assert_eq!(v[0]["speedup"], 1.0);
}

#[test]
fn output_file_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    dagsim()
        .args(["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "4", "--format", "json", "-o"])
        .arg(&path)
        .assert()
        .success()
        .stdout("");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v[0]["gpus"], 4);
    // Only the output file is left in the directory (no temporary files).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn bad_inputs_exit_2_with_a_clear_message() {
    fails_with(&["predict", "--trace", "no/such/file.csv"], &["no/such/file.csv", "No such file"]);
    fails_with(&["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "0"], &["at least 1"]);
    fails_with(&["predict", "--trace", "traces/alexnet_k80.csv", "--topology", "dgx-99"], &["dgx-99", "preset"]);
    fails_with(&["predict", "--trace", "traces/alexnet_k80.csv", "--strategy", "teleport"], &["teleport"]);
    fails_with(&["predict", "--gpus", "4"], &["no workload given", "--trace"]);
    fails_with(&["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "x"], &["invalid value"]);

    let (_d, p) = temp_file("neg.csv", "# batch_per_gpu: 8\nname,forward_us,backward_us,grad_bytes\nconv,1,-3,0\n");
    fails_with(&["predict", "--trace", p.to_str().unwrap()], &["neg.csv:3", "backward_us", "negative"]);
    let (_d, p) = temp_file("nan.csv", "# batch_per_gpu: 8\nname,forward_us,backward_us,grad_bytes\nconv,fast,3,0\n");
    fails_with(&["predict", "--trace", p.to_str().unwrap()], &["nan.csv:3", "forward_us"]);
    let (_d, p) = temp_file("cols.csv", "name,forward_us,grad_bytes\nconv,1,0\n");
    fails_with(&["predict", "--trace", p.to_str().unwrap()], &["cols.csv", "missing column `backward_us`"]);
    let (_d, p) = temp_file("shi.txt", "1 conv1 10 20 5 400\n2 fc 30 40 7\n");
    fails_with(&["predict", "--trace", p.to_str().unwrap(), "--batch", "4"], &["shi.txt:2", "expected 6 fields"]);
    let (_d, p) = temp_file("nobatch.txt", "1 conv1 10 20 5 400\n");
    fails_with(&["predict", "--trace", p.to_str().unwrap()], &["batch size", "--batch"]);
    let (_d, p) = temp_file("topo.json", r#"{"name": "broken", "cluster": {"nodes": 1}}"#);
    fails_with(&["predict", "--trace", "traces/alexnet_k80.csv", "--topology", p.to_str().unwrap()], &["topo.json:1"]);
    let (_d, p) = temp_file("s.toml", "gpus = [4]\nstrategy = 'io'\n[workload]\ntrace = 'missing.csv'\n");
    fails_with(&["predict", "--scenario", p.to_str().unwrap()], &["missing.csv"]);
    fails_with(
        &[
            "predict",
            "--model",
            "resnet50",
            "--gpu",
            "v100",
            "--batch",
            "32",
            "--precision",
            "fp16",
            "--strategy",
            "io+mixed",
        ],
        &["already mixed precision", "use one or the other"],
    );
    let (_d, p) = temp_file("s.toml", "gpus = [4]\nbogus = 1\n");
    fails_with(&["predict", "--scenario", p.to_str().unwrap()], &["s.toml:2", "bogus"]);
}

#[test]
fn scenario_files_resolve_paths_against_their_directory() {
    dagsim()
        .args(["predict", "--scenario", "scenarios/alexnet_k80_scaling.toml", "--format", "csv"])
        .assert()
        .success()
        .stdout(predicate::str::contains("alexnet"));
}

#[test]
fn bench_runs_a_case_and_rejects_unknown_ones() {
    dagsim()
        .args(["bench", "--case", "alexnet", "--repeat", "1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("alexnet-k80-16gpu").and(predicate::str::contains("peak_MiB")));
    fails_with(&["bench", "--case", "nosuch"], &["no case matches", "sweep-1000-scenarios"]);
}

#[test]
fn bench_scaling_writes_csv_and_a_log_log_plot() {
    let dir = tempfile::tempdir().unwrap();
    let (csv, png) = (dir.path().join("scaling.csv"), dir.path().join("scaling.png"));
    dagsim()
        .args(["bench", "--scaling", "--case", "nfs-1024", "--repeat", "1", "--timeout-s", "120"])
        .arg("--csv")
        .arg(&csv)
        .arg("--plot")
        .arg(&png)
        .assert()
        .success()
        .stdout(predicate::str::contains("cpu_s"));
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "case,gpus,runs,tasks,events,flows,wall_s,cpu_s,peak_mib,status,replicas");
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[1].starts_with("alexnet-k80-nfs-1024gpu,1024,1,") && lines[1].ends_with(",ok,"), "{text}");
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"), "a PNG is drawn");
    // A case over the time bound is stopped, recorded, and the run goes on.
    dagsim()
        .args(["bench", "--scaling", "--case", "nfs-16384", "--repeat", "1", "--timeout-s", "0.01"])
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success()
        .stdout(predicate::str::contains("stopped after"));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.lines().nth(1).unwrap().ends_with(",,,,,,,\"stopped after 0.01 s\","), "{text}");
    fails_with(&["bench", "--timeout-s", "0"], &["--timeout-s", "positive"]);
}

#[test]
fn a_gpu_contradicting_the_topology_is_an_error_or_an_explicit_override() {
    fails_with(
        &["predict", "--model", "resnet50", "--gpu", "a100", "--batch", "64", "--gpus", "1"],
        &["--gpu", "a100-sxm4-40gb", "k80-cluster", "Tesla K80", "--force-gpu"],
    );
    let o = dagsim()
        .args(["predict", "--model", "resnet50", "--gpu", "a100", "--batch", "64", "--gpus", "1", "--force-gpu"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("note: --force-gpu"));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("topology k80-cluster (A100 SXM4"),
        "results carry the GPU simulated"
    );
    // The same GPU under another spelling is no contradiction.
    dagsim()
        .args([
            "predict",
            "--model",
            "resnet50",
            "--gpu",
            "V100",
            "--batch",
            "64",
            "--gpus",
            "1",
            "--topology",
            "v100-cluster",
        ])
        .assert()
        .success();
}

#[test]
fn batch_on_a_trace_scales_compute_linearly_and_says_so() {
    let run = |extra: &[&str]| {
        let mut args = vec!["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "1", "--format", "json"];
        args.extend_from_slice(extra);
        let o = dagsim().args(&args).output().unwrap();
        assert!(o.status.success());
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v[0].clone(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (base, quiet) = run(&[]);
    let (small, note) = run(&["--batch", "128"]);
    assert!(!quiet.contains("note: --batch"));
    assert!(note.contains("128/1024 = 0.125"), "{note}");
    let compute = |v: &serde_json::Value| v["breakdown"]["compute"].as_f64().unwrap();
    let ratio = compute(&small) / compute(&base);
    // Forward and backward scale by 1/8; the update (0 in this trace) does not.
    assert!((ratio - 0.125).abs() < 1e-6, "compute ratio {ratio}");
    assert_eq!(small["batch_per_gpu"], 128);
}
