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
    // The ideal model's link fit (the NCCL model's calibration: tests/calibrate_nccl.rs).
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
