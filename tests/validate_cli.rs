//! `dagsim validate` as users and CI run it: hand-checkable predictions and errors on a tiny
//! workload, the gate's exit codes (0 pass, 1 drift, 2 bad input), rank agreement, the output
//! formats, and the shipped measurement sets at the tolerances validation/README.md states.

mod common;

use common::dagsim;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

/// Two layers, 1 ms forward and 1 ms backward in all, batch 10, no input data: with I/O overlap one
/// GPU runs an iteration in exactly 2 ms, so 5000 samples/s. `grad_bytes` makes multi-GPU runs
/// communicate.
const TINY_TRACE: &str = "\
# model: tiny
# batch_per_gpu: 10
# update_us: 0
layer,name,forward_us,backward_us,grad_bytes
1,fc1,500,500,4000000
2,fc2,500,500,4000000
";

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tiny.csv"), TINY_TRACE).unwrap();
        let path = dir.path().to_path_buf();
        Fixture { _dir: dir, dir: path }
    }
    fn set(&self, name: &str, body: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }
}

const HEADER: &str = "id,trace,topology,gpus,strategy,metric,unit,measured,relative_to,group,source,known_miss\n";

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn run_json(set: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out = dagsim().arg("validate").arg(set).args(["--format", "json"]).args(extra).output().unwrap();
    (out.status.code(), json(&out))
}

#[test]
fn errors_are_relative_to_the_measurement_and_checkable_by_hand() {
    let f = Fixture::new();
    let set = f.set(
        "hand.csv",
        &format!(
            "{HEADER}\
             thr,tiny.csv,k80-cluster,1,io,throughput,samples/s,4000,,,hand,\n\
             it,tiny.csv,k80-cluster,1,io,iteration_time,ms,2.5,,,hand,\n"
        ),
    );
    let (code, v) = run_json(&set, &["--tolerance", "30%", "--max-error", "30%"]);
    assert_eq!(code, Some(0), "{v}");
    let rows = v["rows"].as_array().unwrap();
    // 2 ms per iteration of 10 samples: 5000 samples/s, +25% against 4000; 0.002 s is -20% against 2.5 ms.
    assert!((rows[0]["predicted"].as_f64().unwrap() - 5000.0).abs() < 1e-6, "{}", rows[0]);
    assert!((rows[0]["error"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    assert!((rows[1]["measured"].as_f64().unwrap() - 0.0025).abs() < 1e-12);
    assert!((rows[1]["predicted"].as_f64().unwrap() - 0.002).abs() < 1e-12);
    assert!((rows[1]["error"].as_f64().unwrap() + 0.20).abs() < 1e-9);
    let overall = &v["overall"];
    assert!((overall["mean_abs_error"].as_f64().unwrap() - 0.225).abs() < 1e-9, "{overall}");
    assert!((overall["worst_abs_error"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    assert_eq!(overall["worst_row"], "hand/thr");
    // Both rows predict faster training than measured (a rate 25% high, a time 20% short): the
    // bias is optimism whatever the metric, +22.5%, not the +2.5% of the raw signs.
    assert!((overall["mean_signed_error"].as_f64().unwrap() - 0.225).abs() < 1e-9);
    assert_eq!(v["passed"], true);
}

#[test]
fn the_gate_exits_1_on_drift_and_0_within_tolerance() {
    let f = Fixture::new();
    let set = f.set("gate.csv", &format!("{HEADER}thr,tiny.csv,k80-cluster,1,io,throughput,,4000,,,hand,\n"));
    // Error +25%: the mean exceeds a 10% tolerance.
    dagsim().arg("validate").arg(&set).args(["--tolerance", "10%", "--max-error", "50%"]).assert().code(1).stdout(
        predicate::str::contains("gate FAILED")
            .and(predicate::str::contains("mean absolute error 25.0% of the rows not marked")),
    );
    // Within the tolerance, but beyond --max-error on an unmarked row.
    dagsim()
        .arg("validate")
        .arg(&set)
        .args(["--tolerance", "30", "--max-error", "20%"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("gate/thr (line 2): error +25.0% exceeds --max-error 20.0%"));
    dagsim().arg("validate").arg(&set).args(["--tolerance", "30%", "--max-error", "30%"]).assert().code(0);
    // JSON output still reports the failure on stderr.
    dagsim()
        .arg("validate")
        .arg(&set)
        .args(["--format", "json"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("gate failed: mean absolute error"));
}

#[test]
fn a_known_miss_is_reported_but_not_gated() {
    let f = Fixture::new();
    let set = f.set(
        "known.csv",
        &format!(
            "{HEADER}thr,tiny.csv,k80-cluster,1,io,throughput,,4000,,,hand,the tiny trace has no input pipeline\n"
        ),
    );
    let (code, v) = run_json(&set, &["--tolerance", "30%", "--max-error", "20%"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["rows"][0]["status"], "known_miss");
    assert_eq!(v["sets"][0]["known_misses"], 1);
    // Reported in the all-rows mean, but left out of the mean the tolerance gates.
    let (code, v) = run_json(&set, &["--tolerance", "20%", "--max-error", "20%"]);
    assert_eq!(code, Some(0), "{v}");
    assert!((v["overall"]["mean_abs_error"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    assert_eq!(v["overall"]["mean_abs_error_unmarked"], serde_json::Value::Null);
    // With an unmarked row beside it, only that row's error counts against the tolerance.
    let set = f.set(
        "known2.csv",
        &format!(
            "{HEADER}thr,tiny.csv,k80-cluster,1,io,throughput,,4000,,,hand,the tiny trace has no input pipeline\n\
             ok,tiny.csv,k80-cluster,1,io,throughput,,4500,,,hand,\n"
        ),
    );
    let (code, v) = run_json(&set, &["--tolerance", "12%", "--max-error", "20%"]);
    assert_eq!(code, Some(0), "{v}");
    assert!((v["overall"]["mean_abs_error_unmarked"].as_f64().unwrap() - 1.0 / 9.0).abs() < 1e-9, "{v}");
    let (code, v) = run_json(&set, &["--tolerance", "11%", "--max-error", "20%"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["failures"].as_array().unwrap().len(), 1, "{v}");
    // A known miss that now fits is flagged so the mark can be removed.
    let (_, v) = run_json(&set, &["--tolerance", "30%", "--max-error", "30%"]);
    assert_eq!(v["rows"][0]["status"], "known_miss_now_ok");
    assert_eq!(v["rows"][1]["status"], "ok");
}

#[test]
fn speedups_reference_rows_and_rank_agreement() {
    let f = Fixture::new();
    // Four GPUs in one k80-cluster node: the two 4 MB gradients take time on PCIe, so wait-free
    // backprop (overlap) is faster than without, and neither reaches 4x.
    let set = f.set(
        "rank.csv",
        &format!(
            "{HEADER}\
             base4,tiny.csv,k80-cluster,4,io,speedup,,3.0,,g,hand,\n\
             wfbp4,tiny.csv,k80-cluster,4,io+wfbp,speedup,,3.5,,g,hand,\n\
             ref,tiny.csv,k80-cluster,4,io,throughput,,,,,hand,\n\
             gain,tiny.csv,k80-cluster,4,io+wfbp,speedup,,1.1,ref,,hand,\n"
        ),
    );
    let (code, v) = run_json(&set, &["--tolerance", "100%", "--max-error", "100%"]);
    assert_eq!(code, Some(0), "{v}");
    let rows = v["rows"].as_array().unwrap();
    let p = |i: usize| rows[i]["predicted"].as_f64().unwrap();
    assert!(p(0) < p(1) && p(1) < 4.0 && p(0) > 1.0, "{} {}", p(0), p(1));
    // The relative speedup is the ratio of the two 4-GPU throughputs.
    assert!((p(3) - p(1) / p(0)).abs() < 1e-9, "{} vs {}", p(3), p(1) / p(0));
    assert_eq!(rows[2]["status"], "reference");
    assert_eq!(v["overall"]["scored_rows"], 3, "reference rows are not scored");
    let g = &v["groups"][0];
    assert_eq!((g["concordant"].as_u64(), g["discordant"].as_u64()), (Some(1), Some(0)));
    assert_eq!(g["kendall_tau_b"], 1.0);
    // Measured the other way round, the ranking disagrees.
    let set = f.set(
        "rank2.csv",
        &format!(
            "{HEADER}\
             base4,tiny.csv,k80-cluster,4,io,speedup,,3.5,,g,hand,\n\
             wfbp4,tiny.csv,k80-cluster,4,io+wfbp,speedup,,3.0,,g,hand,\n"
        ),
    );
    let (_, v) = run_json(&set, &["--tolerance", "100%", "--max-error", "100%"]);
    assert_eq!(v["groups"][0]["kendall_tau_b"], -1.0);
    assert_eq!(v["rank_discordant"], 1);
}

#[test]
fn bad_input_exits_2_naming_file_line_and_column() {
    let f = Fixture::new();
    // Each bad row (file name, row after the header, what stderr must say) exits 2.
    let cases: &[(&str, &str, &[&str])] = &[
        ("bad.csv", "thr,tiny.csv,k80-cluster,four,none,throughput,,4000,,,hand,", &["bad.csv:2 (field `gpus`)"]),
        // A setup that cannot be built names the row.
        (
            "bad2.csv",
            "thr,missing.csv,k80-cluster,4,io,throughput,,4000,,,hand,",
            &["bad2.csv:2: row `thr`", "missing.csv"],
        ),
        ("bad3.csv", "thr,tiny.csv,k80-cluster,4,warp-drive,throughput,,4000,,,hand,", &["row `thr`", "warp-drive"]),
        ("bad4.csv", "thr,tiny.csv,k80-cluster,4,hybrid+magic,speedup,,3,,,hand,", &["use `hybrid` or `hybrid+8bit`"]),
        // A hybrid row reads a hybrid table, not a layer trace.
        ("bad5.csv", "thr,tiny.csv,k80-cluster,4,hybrid,speedup,,3,,,hand,", &["bad5.csv:2: row `thr`"]),
    ];
    for (name, row, needles) in cases {
        let set = f.set(name, &format!("{HEADER}{row}\n"));
        let out = dagsim().arg("validate").arg(&set).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        for needle in *needles {
            assert!(stderr.contains(needle), "{name}: `{needle}` not in {stderr}");
        }
    }
    dagsim()
        .args(["validate", "no/such/file.csv"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no/such/file.csv"));
    let set = f.set("good.csv", &format!("{HEADER}thr,tiny.csv,k80-cluster,1,io,throughput,,5000,,,hand,\n"));
    dagsim().arg("validate").arg(&set).args(["--tolerance", "lots"]).assert().code(2);
    dagsim()
        .arg("validate")
        .arg(&set)
        .args(["--nic-route", "fastest"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--nic-route").and(predicate::str::contains("cheapest, local or channels")));
    dagsim().arg("validate").assert().code(2);
}

#[test]
fn csv_output_and_atomic_file_output() {
    let f = Fixture::new();
    let set = f.set("out.csv", &format!("{HEADER}thr,tiny.csv,k80-cluster,1,io,throughput,,5000,,,hand,\n"));
    let out = dagsim().arg("validate").arg(&set).args(["--format", "csv"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("set,id,line,workload,topology,gpus,strategy,metric,unit,measured"), "{header}");
    assert!(lines.next().unwrap().starts_with("out,thr,2,tiny,k80-cluster,1,io,throughput,samples/s,5000"));
    let target = f.dir.join("report.json");
    dagsim().arg("validate").arg(&set).args(["--format", "json", "-o"]).arg(&target).assert().success().stdout("");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert_eq!(v["passed"], true);
    assert_eq!(v["rows"][0]["error"], 0.0);
}

#[test]
fn rows_can_name_a_scenario_file() {
    let f = Fixture::new();
    std::fs::create_dir(f.dir.join("sc")).unwrap();
    // Paths in the scenario are relative to the scenario; the row's own columns override it.
    std::fs::write(
        f.dir.join("sc/tiny.toml"),
        "gpus = [1]\nstrategy = \"io\"\n[workload]\ntrace = \"../tiny.csv\"\n[machine]\ntopology = \"k80-cluster\"\n",
    )
    .unwrap();
    let set = f.set(
        "sc.csv",
        "id,scenario,gpus,metric,measured,source\n\
         one,sc/tiny.toml,,throughput,5000,hand\n\
         four,sc/tiny.toml,4,speedup,3,hand\n",
    );
    let (code, v) = run_json(&set, &["--tolerance", "50%", "--max-error", "50%"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["rows"][0]["error"], 0.0);
    assert_eq!(v["rows"][1]["gpus"], 4);
    std::fs::write(f.dir.join("sc/many.toml"), "gpus = [1, 2]\n[workload]\ntrace = \"../tiny.csv\"\n").unwrap();
    let set = f.set("sc2.csv", "id,scenario,metric,measured,source\none,sc/many.toml,throughput,5000,hand\n");
    dagsim()
        .arg("validate")
        .arg(&set)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("sc2.csv:2: row `one`").and(predicate::str::contains("several GPU counts")));
}

#[test]
fn sample_bytes_column_sets_the_input_size() {
    let f = Fixture::new();
    // 1 MB per sample, 10 per GPU, read from 1.1 GB/s NFS without overlap: about 9 ms more per
    // iteration than with no input data.
    let set = f.set(
        "io.csv",
        "id,trace,sample_bytes,gpus,strategy,metric,measured,source\n\
         none,tiny.csv,0,1,none,iteration_time,0.002,hand\n\
         big,tiny.csv,1000000,1,none,iteration_time,0.002,hand\n",
    );
    let (_, v) = run_json(&set, &["--tolerance", "1000%", "--max-error", "1000%"]);
    let t = |i: usize| v["rows"][i]["predicted"].as_f64().unwrap();
    assert!(t(0) < 0.0025, "{}", t(0));
    assert!(t(1) - t(0) > 0.008, "{} vs {}", t(1), t(0));
    let set =
        f.set("io2.csv", "id,trace,sample_bytes,gpus,metric,measured,source\nx,tiny.csv,1e6,1,throughput,1,hand\n");
    dagsim().arg("validate").arg(&set).assert().code(2).stderr(predicate::str::contains("(field `sample_bytes`)"));
}

/// Sets whose 128-512-GPU rows take tens of seconds in a debug build; release builds (CI) run them.
const SLOW_IN_DEBUG: &[&str] = &["validation/gradientflow.csv", "validation/tf2017.csv"];

#[test]
fn shipped_sets_pass_ci_and_the_readme_table_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let readme = std::fs::read_to_string(root.join("validation/README.md")).unwrap();
    // Every shipped set has its own gate line in CI.
    let commands: Vec<Vec<&str>> = ci
        .lines()
        .filter_map(|l| l.split_once("-- validate ").map(|(_, args)| args.split_whitespace().collect()))
        .collect();
    let mut shipped: Vec<String> = std::fs::read_dir(root.join("validation"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".csv"))
        .map(|n| format!("validation/{n}"))
        .collect();
    shipped.sort();
    let mut gated: Vec<String> = commands.iter().map(|c| c[0].to_string()).collect();
    gated.sort();
    assert_eq!(gated, shipped, ".ci/run must gate every set in validation/");
    for args in commands {
        if cfg!(debug_assertions) && SLOW_IN_DEBUG.contains(&args[0]) {
            continue;
        }
        let out = dagsim().arg("validate").args(&args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}:\n{text}");
        // The set's summary line (not the `all` line, which depends on the other sets) is in the
        // README's table, and the README states the tolerance CI uses.
        let name = args[0].trim_start_matches("validation/").trim_end_matches(".csv");
        let line = text.lines().find(|l| l.starts_with(&format!("| {name} |"))).expect("summary line");
        assert!(readme.contains(line), "validation/README.md is out of date; it lacks:\n{line}");
        let tolerance = format!("| `{name}.csv` | {} |", args[2]);
        assert!(readme.contains(&tolerance), "validation/README.md does not state {tolerance}");
    }
}

#[test]
fn the_alpha_beta_baseline_is_checkable_by_hand_and_gated() {
    // Two GPUs on one host, every link 1 byte/ns without latency. The baseline is the one-GPU
    // iteration (2 ms) plus one flat-ring all-reduce of all 8,000,000 gradient bytes, nothing
    // overlapped: 2 (N - 1) x (8,000,000 / 2) bytes at 1 byte/ns = 8 ms. 20 samples in 10 ms is
    // 2000 samples/s.
    let f = Fixture::new();
    f.set(
        "two.json",
        r#"{"name":"two","cluster":{"nodes":1,"gpus_per_node":2,"gpu":"test","grow":false,
            "pcie":{"bandwidth_gb_s":1,"latency_us":0},
            "network":{"kind":"ethernet","bandwidth_gb_s":1,"latency_us":0},
            "storage":{"shared":false,"bandwidth_gb_s":1,"latency_us":0}}}"#,
    );
    let set =
        f.set("base.csv", &format!("{HEADER}two,tiny.csv,two.json,2,io+wfbp,throughput,samples/s,2000,,,hand,\n"));
    let (code, v) = run_json(&set, &["--baseline", "alpha-beta", "--tolerance", "50%", "--max-error", "50%"]);
    let row = &v["rows"][0];
    assert!((row["baseline"].as_f64().unwrap() - 2000.0).abs() < 1e-6, "{row}");
    assert_eq!(row["baseline_error"].as_f64().unwrap(), 0.0);
    assert!(row["error"].as_f64().unwrap() > 0.0, "dagsim overlaps, so it predicts more: {row}");
    assert_eq!(v["sets"][0]["baseline_mean_abs_error"].as_f64().unwrap(), 0.0);
    // The baseline is exactly right here, so it beats dagsim and the gate fails, saying so.
    assert_eq!(code, Some(1));
    let failures = v["failures"].to_string();
    assert!(failures.contains("alpha-beta baseline is closer"), "{failures}");
    // Text output shows the baseline beside dagsim; without --baseline nothing changes.
    let out = dagsim().arg("validate").arg(&set).args(["--baseline", "alpha-beta"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("alpha-beta baseline mean abs error"), "{text}");
    let (_, plain) = run_json(&set, &["--tolerance", "50%", "--max-error", "50%"]);
    assert!(plain["rows"][0]["baseline"].is_null() && plain["baseline"].is_null());
    dagsim()
        .arg("validate")
        .arg(&set)
        .args(["--baseline", "guess"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown baseline `guess`"));
}

#[test]
fn plan_rows_predict_a_transformer_and_refuse_what_does_not_fit() {
    let f = Fixture::new();
    let head = "id,model,topology,gpus,parallel,micro_batch,global_batch,seq_len,metric,unit,measured,source\n";
    // The row's prediction is `predict --parallel`'s, figure for figure.
    let plan = "tp=4,pp=2,dp=2,sp=on";
    let set = f.set(
        "plan.csv",
        &format!("{head}a,llama2-7b,dgx-a100,16,\"{plan}\",1,16,2048,tokens_per_s_per_gpu,tokens/s/GPU,1000,hand\n"),
    );
    let (code, v) = run_json(&set, &["--tolerance", "1000%", "--max-error", "1000%"]);
    assert_eq!(code, Some(0), "{v}");
    let out = dagsim()
        .args(["predict", "--model", "llama2-7b", "--topology", "dgx-a100", "--parallel", plan])
        .args(["--micro-batch", "1", "--global-batch", "16", "--seq-len", "2048", "--format", "json"])
        .output()
        .unwrap();
    let p = json(&out)[0].clone();
    assert_eq!(v["rows"][0]["predicted"].as_f64(), p["llm"]["tokens_per_s_per_gpu"].as_f64(), "{v}");
    // A proxy with fewer layers (the `layers` column): half the layers, less than the whole step
    // but more than half of it (embedding and head stay); pp x vp must divide the proxy's layers.
    let lhead = "id,model,topology,gpus,parallel,micro_batch,global_batch,seq_len,layers,metric,unit,measured,source\n";
    let proxy = f.set(
        "proxy.csv",
        &format!(
            "{lhead}full,llama2-7b,dgx-a100,16,\"{plan}\",1,16,2048,,iteration_time,s,1,hand\n\
             half,llama2-7b,dgx-a100,16,\"{plan}\",1,16,2048,16,iteration_time,s,1,hand\n"
        ),
    );
    let (_, v) = run_json(&proxy, &["--tolerance", "1000%", "--max-error", "1000%"]);
    let (full, half) = (v["rows"][0]["predicted"].as_f64().unwrap(), v["rows"][1]["predicted"].as_f64().unwrap());
    assert!(half < full && half > 0.5 * full, "{half} vs {full}");
    let odd =
        f.set("odd.csv", &format!("{lhead}a,llama2-7b,dgx-a100,16,\"{plan}\",1,16,2048,7,iteration_time,s,1,hand\n"));
    let out = dagsim().arg("validate").arg(&odd).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("row `a`") && stderr.contains("7"), "{stderr}");
    let cases: &[(&str, &[&str])] = &[
        // A plan metric without a plan, and plan columns without one.
        (
            "a,llama2-7b,dgx-a100,16,,,,,tokens_per_s_per_gpu,tokens/s/GPU,1000,hand",
            &[":2 (field `metric`)", "needs a `parallel` plan"],
        ),
        ("a,llama2-7b,dgx-a100,16,,1,,,iteration_time,s,1,hand", &[":2 (field `micro_batch`)"]),
        // The plan's degrees and the row's GPU count disagree.
        ("a,llama2-7b,dgx-a100,32,\"tp=8,pp=1,dp=2\",1,16,,iteration_time,s,1,hand", &["row `a`", "32 GPUs"]),
        ("a,llama2-7b,dgx-a100,16,\"tp=8,pp=1,dp=2\",1,16,,speedup,x,1,hand", &["no speedup"]),
    ];
    for (row, needles) in cases {
        let set = f.set("bad_plan.csv", &format!("{head}{row}\n"));
        let out = dagsim().arg("validate").arg(&set).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{row}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        for n in *needles {
            assert!(stderr.contains(n), "{row}: `{n}` not in {stderr}");
        }
    }
}
