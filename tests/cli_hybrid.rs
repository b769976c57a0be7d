//! `dagsim predict --hybrid`: Krizhevsky's hybrid data/model-parallel scheme from a hybrid table,
//! in the three output formats, agreeing with the library, and bad input exiting 2 with the file
//! or flag named.

mod common;

use common::{dagsim, fails_with};
use dagsim::dag::hybrid::Channels;
use dagsim::hw::load_topology;
use dagsim::predict_hybrid::{HybridSetup, DEFAULT_HYBRID_TOPOLOGY};
use dagsim::strategy::hybrid::{HybridTable, Precision};
use std::path::Path;

const TABLE: &str = "traces/dettmers_alexnet_titanx.csv";

fn stdout(args: &[&str]) -> String {
    let out = dagsim().args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn library_speedup(precision: Precision, channels: Channels) -> f64 {
    let setup = HybridSetup {
        table: HybridTable::read(Path::new(TABLE)).unwrap(),
        topology: load_topology(DEFAULT_HYBRID_TOPOLOGY).unwrap(),
        precision,
        channels,
        iterations: 5,
    };
    setup.predict_scaling(&[4]).unwrap()[0].speedup
}

#[test]
fn text_shows_each_gpu_count_with_its_speedup() {
    let text = stdout(&["predict", "--hybrid", TABLE, "--gpus", "1,4"]);
    assert!(text.contains("strategy hybrid") && text.contains("dettmers-4gpu"), "{text}");
    let speedups: Vec<&str> =
        text.lines().skip(2).map(|l| l.split_whitespace().nth(4).expect("a speedup column")).collect();
    let expected = format!("{:.3}", library_speedup(Precision::Bits32, Channels::PerBoundary));
    assert_eq!(speedups, ["1.000", expected.as_str()], "{text}");
    // Without --gpus: 1, 2 and 4, the GPUs the default machine has.
    let text = stdout(&["predict", "--hybrid", TABLE]);
    let gpus: Vec<&str> = text.lines().skip(2).map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(gpus, ["1", "2", "4"], "{text}");
}

#[test]
fn json_agrees_with_the_library_and_the_breakdown_sums() {
    let args = ["predict", "--hybrid", TABLE, "--gpus", "4", "--bits", "8", "--channels", "per-direction"];
    let v: serde_json::Value = serde_json::from_str(&stdout(&[&args[..], &["--format", "json"]].concat())).unwrap();
    let v = v[0].clone(); // always an array of results
    assert_eq!(v["strategy"], "hybrid+8bit+channels=per-direction");
    assert_eq!(v["gpus"], 4);
    assert_eq!(v["batch_per_gpu"], 128);
    assert_eq!(v["speedup"].as_f64().unwrap(), library_speedup(Precision::Bits8, Channels::PerDirection));
    let b = &v["breakdown"];
    let sum: f64 = ["compute", "communication", "io", "idle"].iter().map(|k| b[k].as_f64().unwrap()).sum();
    assert!((sum - v["iteration_time_s"].as_f64().unwrap()).abs() < 1e-9);
}

#[test]
fn csv_to_a_file_has_one_row_per_gpu_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hybrid.csv");
    let args = ["predict", "--hybrid", TABLE, "--gpus", "1,2,4", "--channels", "shared", "--total-ms", "177"];
    dagsim().args(args).args(["--format", "csv", "-o"]).arg(&path).assert().success().stdout("");
    let mut rows = csv::Reader::from_path(&path).unwrap();
    let header = rows.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = rows.records().map(Result::unwrap).collect();
    let gpus: Vec<&str> = rows.iter().map(|r| &r[col("gpus")]).collect();
    assert_eq!(gpus, ["1", "2", "4"]);
    assert!(rows.iter().all(|r| &r[col("strategy")] == "hybrid+channels=shared"));
    // The convnet2 kernels' 177 ms full pass is the one-GPU iteration.
    let one_gpu_s: f64 = rows[0][col("iteration_time_s")].parse().unwrap();
    assert_eq!((one_gpu_s * 1e9).round(), 177e6);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
}

#[test]
fn bad_input_names_the_file_or_flag() {
    fails_with(&["predict", "--hybrid", "no/such/table.csv"], &["no/such/table.csv", "No such file"]);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    let text = std::fs::read_to_string(TABLE).unwrap().replace("conv,conv1,0.045,0.05,", "conv,conv1,0.045,fast,");
    assert!(text.contains("fast"), "the table's first row changed; update this test");
    std::fs::write(&bad, text).unwrap();
    fails_with(&["predict", "--hybrid", bad.to_str().unwrap()], &["bad.csv:9", "sync32_ms"]);
    fails_with(&["predict", "--hybrid", TABLE, "--bits", "16"], &["--bits", "16"]);
    fails_with(&["predict", "--hybrid", TABLE, "--channels", "wireless"], &["--channels", "wireless"]);
    fails_with(&["predict", "--hybrid", TABLE, "--strategy", "io"], &["--hybrid", "--strategy"]);
    fails_with(&["predict", "--bits", "8", "--trace", "traces/alexnet_k80.csv"], &["--bits", "--trace"]);
    fails_with(&["predict", "--channels", "shared"], &["--hybrid"]);
    fails_with(&["predict", "--hybrid", TABLE, "--gpus", "8"], &["8 GPUs", "dettmers-4gpu"]);
    fails_with(&["predict", "--hybrid", TABLE, "--total-ms", "1"], &["--total-ms", "dettmers_alexnet_titanx.csv"]);
    fails_with(&["predict", "--hybrid", TABLE, "--total-ms=-5"], &["--total-ms", "-5"]);
}
