//! `dagsim calibrate` and the machine flags of `dagsim predict`, run as a user would.

mod common;

use common::dagsim;
use predicates::prelude::*;
use std::path::PathBuf;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn calibrate_writes_a_file_that_predict_accepts() {
    // The ideal model's link fit (the NCCL model is tested in src/collective/nccl/ and
    // tests/validate_baseline.rs).
    let dir = tempfile::tempdir().unwrap();
    let cal = dir.path().join("abci-v.cal.json");
    dagsim()
        .arg("calibrate")
        .arg(repo("topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl"))
        .args(["--topology", "abci-v", "--collective-model", "ideal", "--hold-out", "-o"])
        .arg(&cal)
        .assert()
        .success()
        .stdout(predicate::str::contains("fitted nvlink links"))
        .stdout(predicate::str::contains("held out sizes 1 KiB..32 MiB: median |error| 5.5%, worst 16.5%"));
    let text = std::fs::read_to_string(&cal).unwrap();
    assert!(text.contains("\"format\": \"dagsim-calibration/1\"") && text.contains("allreduce_intra_vnode_4gpu.nccl"));

    let run = |extra: &[&str]| -> String {
        let out = dagsim()
            .arg("predict")
            .arg("--trace")
            .arg(repo("traces/alexnet_k80.csv"))
            .args(["--gpus", "4", "--topology", "abci-v", "--collective-model", "ideal", "--strategy", "none"])
            .args(["--format", "csv"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let nominal = run(&[]);
    let calibrated = run(&["--calibration", cal.to_str().unwrap()]);
    assert_ne!(nominal, calibrated, "the calibration changes the communication time");
}

#[test]
fn predict_builds_parametric_machines() {
    dagsim()
        .arg("predict")
        .arg("--trace")
        .arg(repo("traces/alexnet_k80.csv"))
        .args(["--gpus", "8", "--gpus-per-node", "4", "--intra", "nvlink", "--inter", "ib100"])
        .assert()
        .success()
        .stdout(predicate::str::contains("nodes-of-4-nvlink-ib100"));
    dagsim()
        .arg("predict")
        .arg("--trace")
        .arg(repo("traces/alexnet_k80.csv"))
        .args(["--gpus", "8", "--inter", "carrier-pigeon"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown network `carrier-pigeon`"));
}

#[test]
fn bad_inputs_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "not a benchmark\n").unwrap();
    dagsim()
        .arg("calibrate")
        .arg(&junk)
        .args(["--topology", "abci-v"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("junk.txt"));
    let topo = dir.path().join("bad.json");
    std::fs::write(
        &topo,
        r#"{"name":"bad","graph":{"gpu":"g","devices":[{"name":"cpu","kind":"cpu"},{"name":"gpu0","kind":"gpu","host":"cpu"}],
            "links":[{"from":"cpu","to":"gpu9","kind":"pcie","bandwidth_gb_s":10}],
            "storage":{"shared":false,"bandwidth_gb_s":1,"attach":"cpu"}}}"#,
    )
    .unwrap();
    dagsim()
        .arg("predict")
        .arg("--trace")
        .arg(repo("traces/alexnet_k80.csv"))
        .arg("--topology")
        .arg(&topo)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bad.json").and(predicate::str::contains("unknown device `gpu9`")));
}

/// One prediction's JSON result (the first of the array) for `predict` with `args`.
fn predict_json(args: &[&str]) -> serde_json::Value {
    let o = dagsim().args(["-q", "predict"]).args(args).args(["--format", "json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()[0].clone()
}

#[test]
fn parametric_storage_rate_is_a_parameter() {
    // 1024 samples of 10 MB per GPU and iteration: 10 GB to read, 5 s at the default 2 GB/s.
    let base =
        ["--trace", "traces/alexnet_k80.csv", "--gpus", "8", "--gpus-per-node", "4", "--sample-bytes", "10000000"];
    let io = |rate: &str| {
        let v = predict_json(&[&base[..], &["--storage-gb-s", rate]].concat());
        (v["breakdown"]["io"].as_f64().unwrap(), v["topology"].as_str().unwrap().to_string())
    };
    let (slow, fast, default) = (io("0.5"), io("20"), io("2"));
    assert!(slow.0 > 4.0 * default.0 && default.0 > 0.0 && fast.0 < default.0, "{slow:?} {default:?} {fast:?}");
    assert_eq!(default.1, "nodes-of-4-pcie3-10gbe", "the default keeps its name");
    assert_eq!(slow.1, "nodes-of-4-pcie3-10gbe-storage0.5");
}

#[test]
fn parametric_nics_per_node_carry_a_hierarchical_all_reduce() {
    // BERT-Large's gradients over 4 nodes of 8 A100s: the hierarchical all-reduce runs one
    // inter-node ring per local rank, so NICs on each PCIe switch share the crossing traffic.
    let base = ["--model", "bert-large", "--gpu", "a100", "--batch", "8", "--gpus", "32", "--gpus-per-node", "8"];
    let base =
        [&base[..], &["--intra", "nvswitch", "--inter", "ib100", "--strategy", "none+allreduce=hierarchical"]].concat();
    let comm = |nics: &str| {
        let v = predict_json(&[&base[..], &["--nics-per-node", nics]].concat());
        v["breakdown"]["communication"].as_f64().unwrap()
    };
    let (one, two, four) = (comm("1"), comm("2"), comm("4"));
    assert!(four < two && two < one, "1 NIC {one} s, 2 NICs {two} s, 4 NICs {four} s");
    // Two NICs on one PCIe switch would tie on every route: refused with the reason.
    let o = dagsim()
        .args(["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "8", "--nics-per-node", "3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--nics-per-node") && err.contains("2 for 4 `pcie3` GPUs") && !err.contains("panicked"),
        "{err}"
    );
    let o = dagsim().args(["predict", "--trace", "traces/alexnet_k80.csv", "--storage-gb-s", "0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--storage-gb-s"));
}
