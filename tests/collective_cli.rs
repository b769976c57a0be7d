//! `dagsim collective`: the nccl-tests-style table of one collective, and its check against the
//! shipped nccl-tests outputs (ABCI, topologies/measured/abci/).

mod common;

use common::dagsim;
use serde_json::Value;

fn json(args: &[&str]) -> Vec<Value> {
    let o = dagsim().arg("-q").args(args).args(["--format", "json"]).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice::<Value>(&o.stdout).unwrap().as_array().unwrap().clone()
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("no `{k}` in {v}"))
}

#[test]
fn the_table_runs_nccl_tests_sizes_and_computes_its_bandwidths() {
    let rows = json(&[
        "collective",
        "--topology",
        "abci-v",
        "--gpus",
        "8",
        "--nodes",
        "2",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "4",
        "--collective-model",
        "nccl",
    ]);
    let bytes: Vec<u64> = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
    assert_eq!(bytes, [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]);
    for r in &rows {
        let b = r["bytes"].as_u64().unwrap();
        assert_eq!(r["count"].as_u64().unwrap(), b / 4, "float elements: {r}");
        assert_eq!((r["gpus"].as_u64(), r["nodes"].as_u64()), (Some(8), Some(2)));
        let algbw = b as f64 / (f(r, "predicted_us") * 1e3);
        assert!((f(r, "algbw_gbs") - algbw).abs() <= 1e-9 * algbw.max(1.0), "{r}");
        // nccl-tests' all-reduce bus factor 2(n-1)/n.
        assert!((f(r, "busbw_gbs") - f(r, "algbw_gbs") * 14.0 / 8.0).abs() < 1e-9, "{r}");
        let ran = r["ran"].as_str().unwrap();
        assert!(ran.starts_with("ring/") || ran.starts_with("tree/"), "NCCL says algorithm/protocol: {r}");
        assert!(r["collective_model"].as_str().unwrap().starts_with("nccl "), "{r}");
        assert!(r.get("measured_us").is_none(), "no measurement, no measured column: {r}");
    }
    // A larger message never takes less time.
    assert!(rows.windows(2).all(|w| f(&w[1], "predicted_us") >= f(&w[0], "predicted_us")));
}

#[test]
fn other_collectives_use_their_own_bus_factor() {
    for (op, factor) in [("all-gather", 3.0 / 4.0), ("reduce-scatter", 3.0 / 4.0), ("broadcast", 1.0)] {
        let rows = json(&["collective", "--topology", "abci-v", "--gpus", "4", "--op", op, "-b", "1M", "-e", "1M"]);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r["op"].as_str(), Some(op));
        assert!((f(r, "busbw_gbs") - f(r, "algbw_gbs") * factor).abs() < 1e-9, "{op}: {r}");
    }
}

/// The out-of-place times of an nccl-tests table, read here independently of dagsim's reader.
fn out_of_place(path: &str) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.starts_with('['))
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            Some((c.first()?.parse().ok()?, c.get(4)?.parse().ok()?))
        })
        .collect()
}

#[test]
fn check_predicts_every_size_of_a_shipped_output_as_calibrate_check_does() {
    let file = "topologies/measured/abci/allreduce_inter_vnode_4node.nccl";
    let model = ["--collective-model", "nccl", "--nccl-version", "2.8.4"];
    let mut args = vec!["collective", "--check", file, "--topology", "abci-v"];
    args.extend(model);
    let rows = json(&args);
    let measured = out_of_place(file);
    assert_eq!(rows.len(), measured.len());
    assert_eq!(measured.len(), 24, "4 B to 32 MiB");
    let mut cal = vec!["calibrate", file, "--topology", "abci-v", "--check"];
    cal.extend(model);
    let calibrate = json(&cal);
    for ((r, (bytes, us)), c) in rows.iter().zip(&measured).zip(&calibrate) {
        assert_eq!(r["bytes"].as_u64(), Some(*bytes));
        assert_eq!((r["gpus"].as_u64(), r["nodes"].as_u64()), (Some(16), Some(4)));
        assert_eq!(f(r, "measured_us"), *us);
        let error = (f(r, "predicted_us") - us) / us;
        assert!((f(r, "error") - error).abs() < 1e-12, "{r}");
        // Two paths to the same simulation: calibrate --check on the same file and model.
        assert_eq!(f(r, "predicted_us"), f(c, "predicted_us"), "{bytes} B");
        let measured_busbw = *bytes as f64 / (us * 1e3) * 2.0 * 15.0 / 16.0;
        assert!((f(r, "measured_busbw_gbs") - measured_busbw).abs() < 1e-12, "{r}");
    }
}

#[test]
fn check_refuses_a_topology_that_places_the_ranks_on_other_nodes() {
    // 16 ranks on 4 hosts of 4 GPUs; dgx-h100 would put them on 2 nodes.
    common::fails_with(
        &[
            "collective",
            "--check",
            "topologies/measured/abci/allreduce_inter_vnode_4node.nccl",
            "--topology",
            "dgx-h100",
        ],
        &["allreduce_inter_vnode_4node.nccl", "4 host(s)", "2 node(s)"],
    );
}

#[test]
fn text_and_csv_carry_the_same_table() {
    let args = ["collective", "--topology", "abci-v", "--gpus", "4", "-b", "8", "-e", "64K", "-f", "8"];
    let text = dagsim().args(args).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.starts_with("all-reduce on 4 GPUs, 1 node(s); collective model ideal"), "{text}");
    let csv = dagsim().args(args).args(["--format", "csv"]).output().unwrap();
    let csv = String::from_utf8(csv.stdout).unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let sizes: Vec<String> = reader.records().map(|r| r.unwrap()[3].to_string()).collect();
    assert_eq!(sizes, ["8", "64", "512", "4096", "32768"]);
    for s in &sizes {
        assert!(text.lines().any(|l| l.split_whitespace().next() == Some(s)), "{s} missing from {text}");
    }
}
