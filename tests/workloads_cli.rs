//! `dagsim trace ...` and `dagsim predict --model ...` end to end, and the trace round trip.

mod common;

use common::dagsim;
use dagsim::workload::gpu::{GpuSpec, Precision};
use dagsim::workload::memory::Optimizer;
use dagsim::workload::synth::{synthesize, SynthOptions};
use dagsim::workload::zoo::Model;
use dagsim::workload::{native_trace, read_trace_str, TraceFormat};
use predicates::str::contains;
use std::path::Path;

#[test]
fn a_synthetic_trace_reads_back_to_the_same_workload() {
    for (model, precision) in
        [("resnet50", Precision::Fp32), ("bert-base", Precision::Fp16), ("googlenet", Precision::Fp32)]
    {
        let m = Model::by_name(model, None).unwrap();
        let opts = SynthOptions { batch: 32, precision, optimizer: Optimizer::default_for(&m) };
        let mut s = synthesize(&m, GpuSpec::by_name("v100-pcie").unwrap(), opts).unwrap();
        s.calibrate_throughput(123.4).unwrap();
        let w = s.to_workload();
        let text = native_trace(&w, &["source: test".to_string()]);
        let back = read_trace_str(&text, Path::new("synthetic.csv"), TraceFormat::Auto).unwrap();
        assert_eq!(back, w, "{model}");
    }
}

#[test]
fn trace_gen_writes_a_trace_predict_reads() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r50.csv");
    dagsim()
        .args([
            "trace",
            "gen",
            "--model",
            "resnet50",
            "--gpu",
            "v100-pcie",
            "--batch",
            "64",
            "--calibrate-throughput",
            "253",
            "-o",
        ])
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("# batch_per_gpu: 64") && text.contains("--calibrate-throughput 253"));
    // On one GPU the calibrated trace runs at the measured 253 samples/s.
    let assert = dagsim()
        .args(["predict", "--gpus", "1", "--topology", "v100-cluster", "--format", "csv", "--trace"])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let header: Vec<&str> = stdout.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = stdout.lines().nth(1).unwrap().split(',').collect();
    let col = header.iter().position(|h| h.starts_with("throughput")).unwrap();
    let tput: f64 = row[col].parse().unwrap();
    assert!((tput - 253.0).abs() < 0.5, "{tput}");
}

#[test]
fn predict_takes_a_model_directly_and_warns_when_it_does_not_fit() {
    dagsim()
        .args([
            "predict",
            "--model",
            "resnet50",
            "--gpu",
            "V100",
            "--batch",
            "32",
            "--gpus",
            "1,4",
            "--topology",
            "v100-cluster",
        ])
        .assert()
        .success()
        .stdout(contains("resnet50"));
    dagsim()
        .args(["predict", "--model", "bert-large", "--gpu", "k80", "--batch", "64", "--gpus", "1"])
        .assert()
        .success()
        .stderr(contains("run out of memory"));
}

#[test]
fn bad_model_or_gpu_is_exit_code_2_naming_it() {
    dagsim()
        .args(["trace", "gen", "--model", "resnet51", "--gpu", "v100", "--batch", "8"])
        .assert()
        .code(2)
        .stderr(contains("resnet51"));
    dagsim()
        .args(["predict", "--model", "resnet50", "--gpu", "tpu", "--batch", "8"])
        .assert()
        .code(2)
        .stderr(contains("tpu"));
    dagsim().args(["predict", "--model", "resnet50", "--gpu", "v100"]).assert().code(2).stderr(contains("batch"));
    dagsim()
        .args(["trace", "gen", "--model", "resnet50", "--gpu", "v100", "--batch", "8", "--precision", "fp8"])
        .assert()
        .code(2)
        .stderr(contains("fp8"));
}

#[test]
fn an_imported_profile_drives_predict() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("vgg16.csv");
    dagsim()
        .args([
            "trace",
            "import",
            "--profile-format",
            "pipedream",
            "traces/profiles/pipedream/vgg16/graph.txt",
            "--batch",
            "128",
            "-o",
        ])
        .arg(&out)
        .assert()
        .success();
    dagsim().args(["predict", "--gpus", "1,2", "--topology", "v100-cluster", "--trace"]).arg(&out).assert().success();
    dagsim()
        .args([
            "predict",
            "--gpus",
            "1",
            "--profile-format",
            "caffe",
            "--trace",
            "traces/profiles/caffe/output_vgg_a.log",
        ])
        .assert()
        .success()
        .stdout(contains("batch 64"));
}

#[test]
fn compare_and_memory_and_list_run() {
    dagsim()
        .args(["trace", "compare", "--format", "csv"])
        .assert()
        .success()
        .stdout(contains("pipedream/resnet50/graph.txt"));
    dagsim()
        .args(["trace", "memory", "--model", "resnet50", "--gpu", "v100", "--batch", "64"])
        .assert()
        .success()
        .stdout(contains("activations"));
    dagsim().args(["trace", "list"]).assert().success().stdout(contains("mnasnet1.3"));
}

#[test]
fn a_scenario_can_name_a_model_instead_of_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bert.toml");
    std::fs::write(
        &scenario,
        "gpus = [1, 8]\n[workload]\nmodel = \"bert-base\"\ngpu = \"v100\"\nbatch_per_gpu = 32\nprecision = \"fp16\"\n\
         calibrate_throughput = 400.0\n[machine]\ntopology = \"v100-cluster\"\n",
    )
    .unwrap();
    let assert = dagsim().args(["predict", "--format", "csv", "--scenario"]).arg(&scenario).assert().success();
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("bert-base"), "{stdout}");
    // The command line's trace replaces the scenario's model.
    dagsim()
        .args(["predict", "--gpus", "1", "--trace", "traces/alexnet_k80.csv", "--scenario"])
        .arg(&scenario)
        .assert()
        .success()
        .stdout(contains("alexnet"));
    std::fs::write(&scenario, "[workload]\nmodel = \"bert-base\"\nprecision = \"fp64\"\n").unwrap();
    dagsim().args(["predict", "--scenario"]).arg(&scenario).assert().code(2).stderr(contains("fp64"));
}
