//! The GPU commands (feature `cuda`) from the outside: without a CUDA driver they fail with a
//! clear message and exit code 2, never a panic; the parts that need no GPU (`replay --dry-run`,
//! `calibrate --gpu --from`) work anywhere and feed `predict`.
#![cfg(feature = "cuda")]

mod common;

use common::dagsim;
use dagsim::gpu::calibration::{
    CalibrationFile, DeviceInfo, Direction, GpuMeasurements, HostCopySeries, HostMemory, Settings, SizePoint,
};
use dagsim::gpu::stats::Summary;
use predicates::prelude::*;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/alexnet_k80.csv");

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

#[test]
fn calibrate_without_a_driver_exits_2_with_a_message_and_writes_nothing() {
    if driver_present() {
        eprintln!("a CUDA driver is present: the no-driver path cannot be checked here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cal.json");
    dagsim()
        .args(["calibrate", "--gpu", "-o"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no CUDA driver found").and(predicate::str::contains("panicked").not()));
    assert!(!out.exists());
}

#[test]
fn replay_without_a_driver_exits_2_with_a_message() {
    if driver_present() {
        eprintln!("a CUDA driver is present: the no-driver path cannot be checked here");
        return;
    }
    dagsim()
        .args(["replay", "--gpu", "--trace", TRACE, "--gpus", "2", "--iterations", "2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no CUDA driver found").and(predicate::str::contains("panicked").not()));
}

#[test]
fn replay_dry_run_prints_the_same_prediction_as_predict() {
    let args = ["--trace", TRACE, "--gpus", "2", "--strategy", "io+wfbp", "--iterations", "3", "--format", "json"];
    let replay = dagsim().args(["replay", "--gpu", "--dry-run"]).args(args).assert().success();
    let replay: serde_json::Value = serde_json::from_slice(&replay.get_output().stdout).unwrap();
    let replay = &replay[0]; // JSON is always an array of results (docs/outputs.md)
    let predict = dagsim().arg("predict").args(args).assert().success();
    let predict: serde_json::Value = serde_json::from_slice(&predict.get_output().stdout).unwrap();
    let predict = &predict[0];
    assert_eq!(replay["predicted_iteration_time_s"], predict["iteration_time_s"]);
    assert_eq!(replay["steps"]["collectives"].as_u64().unwrap() % 3, 0, "{replay}");
    assert!(replay["steps"]["kernels"].as_u64().unwrap() > 0);
}

#[test]
fn replay_needs_the_gpu_flag() {
    dagsim().args(["replay", "--trace", TRACE]).assert().code(2).stderr(predicate::str::contains("--gpu"));
}

/// One GPU whose pinned host-to-device copies take 8 us + bytes / 20 GB/s.
fn synthetic_calibration() -> CalibrationFile {
    let points = (0..8)
        .map(|i| {
            let bytes = 4096u64 << (2 * i);
            let t = 8e-6 + bytes as f64 / 20e9;
            SizePoint { bytes, time_s: Summary::of(&[t, t * 1.01, t * 0.995]).unwrap() }
        })
        .collect();
    CalibrationFile::new(GpuMeasurements {
        settings: Settings { warmup: 1, repetitions: 3 },
        devices: vec![DeviceInfo {
            ordinal: 0,
            name: "Synthetic GPU".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            memory_bytes: 80 << 30,
        }],
        gemm: vec![],
        host_copies: vec![HostCopySeries { device: 0, direction: Direction::H2d, memory: HostMemory::Pinned, points }],
        peer_copies: vec![],
        allreduce: None,
        notes: vec!["synthetic".into()],
    })
}

#[test]
fn a_calibration_file_becomes_a_topology_that_predict_reads() {
    let dir = tempfile::tempdir().unwrap();
    let cal = dir.path().join("cal.json");
    let mut text = Vec::new();
    synthetic_calibration().write_json(&mut text).unwrap();
    std::fs::write(&cal, text).unwrap();
    let topo = dir.path().join("node.json");
    dagsim()
        .args(["calibrate", "--gpu", "--from"])
        .arg(&cal)
        .arg("--topology-out")
        .arg(&topo)
        .args(["--base-topology", "k80-cluster"])
        .assert()
        .success()
        .stderr(predicate::str::contains("Synthetic GPU"));
    let links = dir.path().join("links.cal.json");
    dagsim().args(["calibrate", "--gpu", "--from"]).arg(&cal).arg("--calibration-out").arg(&links).assert().success();
    let l: serde_json::Value = serde_json::from_slice(&std::fs::read(&links).unwrap()).unwrap();
    assert_eq!(l["format"], "dagsim-calibration/1");
    assert_eq!(l["links"][0]["kind"], "pcie");
    assert!((l["links"][0]["latency_us"].as_f64().unwrap() - 8.0).abs() < 0.1, "{l}");
    // One GPU: no all-reduce to write as an nccl-tests table, and the command says so.
    dagsim()
        .args(["calibrate", "--gpu", "--from"])
        .arg(&cal)
        .arg("--nccl-table")
        .arg(dir.path().join("ar.nccl"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no all-reduce was measured"));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&topo).unwrap()).unwrap();
    assert!((t["cluster"]["pcie"]["bandwidth_gb_s"].as_f64().unwrap() - 20.0).abs() < 0.1, "{t}");
    assert!((t["cluster"]["pcie"]["latency_us"].as_f64().unwrap() - 8.0).abs() < 0.1, "{t}");
    assert_eq!(t["cluster"]["gpus_per_node"], 1);
    dagsim()
        .args(["predict", "--trace", TRACE, "--gpus", "1,2", "--topology"])
        .arg(&topo)
        .assert()
        .success()
        .stdout(predicate::str::contains("Synthetic GPU").or(predicate::str::contains("k80-cluster-calibrated")));
}

#[test]
fn a_broken_calibration_file_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let cal = dir.path().join("broken.json");
    std::fs::write(&cal, "{\n  \"format\": \"dagsim-gpu-calibration/1\",\n  \"measurements\": 7\n}\n").unwrap();
    dagsim()
        .args(["calibrate", "--gpu", "--from"])
        .arg(&cal)
        .args(["--topology-out", "-"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("broken.json:").and(predicate::str::contains("panicked").not()));
}
