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
