//! `dagsim validate --baseline ideal-ring`: the same rows re-simulated with the idealised
//! collectives, their errors beside dagsim's per row and per set in every format; and the
//! collective flags applied to every row.

mod common;

use common::{dagsim, fails_with};

/// Two 4-GPU rows of AlexNet on V100-PCIe nodes over 10 GbE: communication-bound enough that the
/// collective model changes the prediction.
const SET: &str = "\
id,trace,topology,gpus,strategy,metric,unit,measured,relative_to,group,source,known_miss
one,../traces/alexnet_k80.csv,v100-pcie-10gbe,1,io+wfbp,throughput,images/s,,,,test reference,
eight,../traces/alexnet_k80.csv,v100-pcie-10gbe,8,io+wfbp,speedup,x,7.0,,,test value,
";

fn set_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new().tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let sub = dir.path().join("validation");
    std::fs::create_dir(&sub).unwrap();
    let p = sub.join("baseline_test.csv");
    std::fs::write(&p, SET.replace("../traces", &format!("{}/traces", env!("CARGO_MANIFEST_DIR")))).unwrap();
    (dir, p)
}

#[test]
fn ideal_ring_baseline_sits_beside_dagsim_in_every_format() {
    let (_dir, set) = set_file();
    let run = |args: &[&str]| -> String {
        let out = dagsim().arg("validate").arg(&set).args(args).output().unwrap();
        assert!(out.status.code() == Some(0) || out.status.code() == Some(1), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["--baseline", "ideal-ring", "--collective-model", "nccl"]);
    assert!(text.contains("ideal-ring") && text.contains("ideal-ring baseline mean abs error"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--baseline", "ideal-ring", "--collective-model", "nccl", "--format", "json"]))
            .unwrap();
    assert_eq!(json["baseline"], "ideal-ring");
    let row = &json["rows"][1];
    let ours = row["predicted"].as_f64().unwrap();
    let ideal = row["baseline"].as_f64().unwrap();
    assert!(row["collectives"].as_str().unwrap().starts_with("nccl "), "{row}");
    assert!(ours != ideal, "the NCCL and ideal models predict the same speedup: {ours}");
    let measured = row["measured"].as_f64().unwrap();
    assert!((row["baseline_error"].as_f64().unwrap() - (ideal - measured) / measured).abs() < 1e-12, "{row}");
    assert!(json["sets"][0]["baseline_mean_abs_error"].as_f64().is_some(), "{json}");
    // The baseline under --collective-model ideal is the model itself.
    let json: serde_json::Value =
        serde_json::from_str(&run(&["--baseline", "ideal-ring", "--collective-model", "ideal", "--format", "json"]))
            .unwrap();
    let row = &json["rows"][1];
    assert_eq!(row["predicted"], row["baseline"]);
    assert!(row["collectives"].as_str().unwrap().starts_with("ideal"), "{row}");
    let csv = run(&["--baseline", "ideal-ring", "--format", "csv"]);
    let header = csv.lines().next().unwrap();
    assert!(header.contains("baseline") && header.ends_with("collectives"), "{header}");
    assert_eq!(csv.lines().count(), 3);
}

#[test]
fn unknown_baselines_and_models_are_refused_by_flag() {
    let (_dir, set) = set_file();
    let set = set.to_str().unwrap();
    fails_with(&["validate", set, "--baseline", "oracle"], &["--baseline", "oracle", "alpha-beta", "ideal-ring"]);
    fails_with(&["validate", set, "--nccl-version", "2.99.9"], &["--nccl-version", "2.99.9", "2.8.4"]);
    fails_with(&["validate", set, "--collective-model", "magic"], &["--collective-model", "magic"]);
}

/// A baseline that cannot be had for a row says why, in every format, instead of leaving a blank:
/// alpha-beta needs the setup's one-GPU prediction, and 2 parameter servers do not fit on one GPU's
/// node; the ring row beside it keeps its baseline.
#[test]
fn a_missing_baseline_says_why() {
    let dir = tempfile::Builder::new().tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let set = dir.path().join("ps.csv");
    let trace = format!("{}/traces/alexnet_k80.csv", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(
        &set,
        format!(
            "id,trace,topology,gpus,strategy,metric,unit,measured,source\n\
             ps16,{trace},v100-pcie-10gbe,16,runtime=ps+servers=2,throughput,images/s,1000,test value\n\
             ring16,{trace},v100-pcie-10gbe,16,io+wfbp,throughput,images/s,1000,test value\n"
        ),
    )
    .unwrap();
    let run = |args: &[&str]| -> String {
        let out = dagsim().arg("validate").arg(&set).args(["--baseline", "alpha-beta"]).args(args).output().unwrap();
        assert!(out.status.code() == Some(0) || out.status.code() == Some(1), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let why = "one-GPU prediction, which failed";
    let text = run(&[]);
    assert!(text.contains("No alpha-beta baseline for 1 row(s):"), "{text}");
    assert!(text.contains("ps16 (line 2):") && text.contains(why) && text.contains("servers"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&run(&["--format", "json"])).unwrap();
    let (ps, ring) = (&json["rows"][0], &json["rows"][1]);
    assert!(ps["baseline"].is_null() && ps["baseline_missing"].as_str().unwrap().contains(why), "{ps}");
    assert!(ring["baseline"].as_f64().is_some() && ring["baseline_missing"].is_null(), "{ring}");
    let csv = run(&["--format", "csv"]);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|&c| c == "baseline_missing").expect("a baseline_missing column");
    let ring_line = csv.lines().find(|l| l.contains("ring16")).unwrap();
    assert_eq!(ring_line.split(',').nth(col), Some(""), "{ring_line}");
    assert!(csv.lines().any(|l| l.contains("ps16") && l.contains(why)), "{csv}");
}
