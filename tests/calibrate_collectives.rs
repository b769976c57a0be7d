//! Fits on top of a link calibration (issue 3): a collective's efficiency, and the links between
//! nodes from a multi-node all-reduce, then out-of-sample predictions for more nodes. Synthetic
//! measurements (made by the engine with known values) check that the fits recover what made them;
//! the ABCI nccl-tests tables check the numbers docs/machines.md reports. These are the ideal
//! collective model's fits (`--collective-model ideal`), so every machine here runs that model;
//! the NCCL model is tested by the unit tests of `src/collective/nccl/` and by
//! `tests/validate_baseline.rs` (the same rows under both models).

mod common;

use common::dagsim;
use dagsim::calibrate::collective_fit::{check, fit_efficiency, fit_network, CollectiveFitOptions, ModelFit};
use dagsim::calibrate::{fit_allreduce, read_measurement, simulate_collective, FitOptions, Measurement};
use dagsim::collective::{Algorithm, CollectiveModel, CollectiveOp};
use dagsim::hw::calibration::{Calibration, CollectiveEfficiency, CurvePoint, LinkCalibration, Provenance};
use dagsim::hw::{load_topology, LinkKind, Machine, Topology};
use std::path::{Path, PathBuf};

fn abci(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/measured/abci").join(file)
}

/// A preset under the ideal collective model.
fn ideal(name: &str) -> Topology {
    let mut t = load_topology(name).unwrap();
    t.collectives = CollectiveModel::Ideal;
    t
}

/// 1 KiB .. 32 MiB, the range every summary covers.
const SUMMARY: (u64, u64) = (1 << 10, 32 << 20);

/// The single-node link calibration of the ABCI V-node (NVLink fitted to the 4-GPU all-reduce).
fn vnode_links() -> (Topology, Calibration) {
    let t = ideal("abci-v");
    let m = read_measurement(&abci("allreduce_intra_vnode_4gpu.nccl"), None).unwrap();
    let cal = fit_allreduce(&t, &m, &FitOptions::default()).unwrap().calibration;
    (t, cal)
}

/// What the engine says `op` takes on `machine` at 1 KiB .. 32 MiB, as if measured.
fn synthetic(machine: &Machine, op: CollectiveOp, algorithm: Algorithm, ranks: u32, hosts: u32) -> Measurement {
    let points = (10..=25)
        .map(|p| {
            let bytes = 1u64 << p;
            (bytes, simulate_collective(machine, op, algorithm, ranks, bytes).unwrap() as f64 / 1e3)
        })
        .collect();
    Measurement { input: "synthetic".into(), op, ranks, hosts, hardware: String::new(), points }
}

fn options(algorithm: Algorithm, from: u64) -> CollectiveFitOptions {
    CollectiveFitOptions { algorithm, fit_range: (from, u64::MAX), kind: None }
}

fn summary(fit: &ModelFit) -> [Option<(f64, f64)>; 2] {
    fit.summary(SUMMARY.0, SUMMARY.1)
}

#[test]
fn efficiency_fit_recovers_a_known_efficiency() {
    let (t, links) = vnode_links();
    for (op, truth) in [(CollectiveOp::Broadcast, 0.62), (CollectiveOp::Broadcast, 1.7), (CollectiveOp::AllReduce, 0.8)]
    {
        let mut machine = t.instantiate(4).unwrap();
        machine.apply_calibration(&links).unwrap();
        machine.collective_efficiency =
            vec![CollectiveEfficiency { op, algorithm: Algorithm::Auto, efficiency: truth, model: None }];
        let m = synthetic(&machine, op, Algorithm::Auto, 4, 1);
        let fit = fit_efficiency(&t, Some(&links), &m, &options(Algorithm::Auto, 1 << 20)).unwrap();
        let e = fit.calibration.collectives.iter().find(|c| c.op == op).unwrap().efficiency;
        assert!((e / truth - 1.0).abs() < 0.01, "{op:?}: fitted {e}, made with {truth}");
        let [fitted, _] = summary(&fit);
        assert!(fitted.unwrap().1 < 0.01, "{op:?}: {fitted:?}");
        // The links of the base calibration are kept.
        assert_eq!(fit.calibration.links, links.links);
    }
}

#[test]
fn abci_broadcast_efficiency_fit_is_reported_honestly() {
    // One efficiency cannot bend the model's broadcast (2N pieces pipelined along one ring, on a
    // curve fitted to all-reduce steps) into NCCL's: the fit lands far above 1 and still misses
    // 32 MiB by half. Measured: e = 4.97, fitted sizes (>= 1 MiB) median 14.3%, worst 51.2%;
    // all sizes 1 KiB..32 MiB median 24.2%, worst 142%.
    let (t, links) = vnode_links();
    let m = read_measurement(&abci("bcast_intra_vnode_4gpu.nccl"), None).unwrap();
    assert_eq!((m.op, m.ranks), (CollectiveOp::Broadcast, 4));
    let fit = fit_efficiency(&t, Some(&links), &m, &options(Algorithm::Auto, 1 << 20)).unwrap();
    let e = fit.calibration.collectives[0].efficiency;
    let [fitted, other] = summary(&fit);
    let ((median, worst), (other_median, _)) = (fitted.unwrap(), other.unwrap());
    eprintln!(
        "ABCI V-node broadcast: e = {e}, fitted median {median:.3} worst {worst:.3}, others median {other_median:.3}"
    );
    assert!((3.0..7.0).contains(&e), "e = {e}");
    assert!(median <= 0.20 && worst <= 0.60, "median {median}, worst {worst}");
    // Without the efficiency the same model is 28% to 129% slow at every fitted size.
    let plain = check(&t, Some(&links), &m, Algorithm::Auto).unwrap();
    assert!(plain.points.iter().filter(|p| p.bytes >= 1 << 20).all(|p| p.error > 0.25));
}

/// The V-node links with the network as given, for the multi-node fits.
fn with_network(latency_us: f64, gb_s: f64) -> Calibration {
    let (_, mut cal) = vnode_links();
    cal.links.push(LinkCalibration {
        kind: Some("infiniband".into()),
        from: None,
        to: None,
        latency_us,
        bandwidth: vec![CurvePoint { bytes: 0, gb_s }],
    });
    cal
}

#[test]
fn network_fit_recovers_known_links() {
    let t = ideal("abci-v");
    let (_, links) = vnode_links();
    let truth = with_network(2.5, 7.0);
    let mut machine = t.instantiate(8).unwrap();
    machine.apply_calibration(&truth).unwrap();
    let m = synthetic(&machine, CollectiveOp::AllReduce, Algorithm::Hierarchical, 8, 2);
    let fit = fit_network(&t, Some(&links), &m, &options(Algorithm::Hierarchical, 1 << 10)).unwrap();
    let ib = fit.calibration.links.iter().find(|l| l.kind.as_deref() == Some("infiniband")).unwrap();
    assert!((ib.latency_us / 2.5 - 1.0).abs() < 0.05, "latency {}", ib.latency_us);
    assert!((ib.bandwidth[0].gb_s / 7.0 - 1.0).abs() < 0.02, "rate {}", ib.bandwidth[0].gb_s);
    // The NVLink entry of the base calibration is still there.
    assert!(fit.calibration.links.iter().any(|l| l.kind.as_deref() == Some(LinkKind::Nvlink.name())));
}

#[test]
fn abci_two_node_fit_predicts_more_nodes_out_of_sample() {
    // Fit the InfiniBand links to 2 nodes x 4 V100 (hierarchical: the model's only algorithm that
    // spreads a node's traffic over both of its NICs, as NCCL's several rings do), then predict 4 to
    // 32 nodes without refitting. Measured (docs/machines.md): 2 nodes median 7.9% / worst 21.0%
    // (in sample); 4: 19.8% / 66%; 8: 37.6% / 168%; 16: 36.4% / 343%; 32: 45.8% / 641%. The model's
    // inter-node ring has 2(M-1) latency-bound steps where NCCL uses a tree of depth log2 M, and
    // moves 2(M-1)/M of the buffer per node where NCCL's flat rings move 2(N-1)/N at every M.
    let t = ideal("abci-v");
    let (_, links) = vnode_links();
    let two = read_measurement(&abci("allreduce_inter_vnode_2node.nccl"), None).unwrap();
    assert_eq!((two.ranks, two.hosts), (8, 2));
    let fit = fit_network(&t, Some(&links), &two, &options(Algorithm::Hierarchical, 1 << 10)).unwrap();
    let (median, worst) = summary(&fit)[0].unwrap();
    eprintln!("{}; 2 nodes: median {median:.3}, worst {worst:.3}", fit.headline);
    assert!(median <= 0.10 && worst <= 0.25, "2 nodes: {median} / {worst}");
    for (nodes, max_median) in [(4, 0.25), (8, 0.45), (16, 0.45), (32, 0.55)] {
        let m = read_measurement(&abci(&format!("allreduce_inter_vnode_{nodes}node.nccl")), None).unwrap();
        assert_eq!((m.ranks, m.hosts), (4 * nodes, nodes));
        let p = check(&t, Some(&fit.calibration), &m, Algorithm::Hierarchical).unwrap();
        let (median, worst) = summary(&p)[1].unwrap();
        eprintln!("{nodes} nodes: median {median:.3}, worst {worst:.3}");
        assert!(median <= max_median, "{nodes} nodes: median {median}");
        // Large messages are bandwidth-bound and stay within a factor of two.
        assert!(p.points.iter().filter(|p| p.bytes >= 16 << 20).all(|p| p.error.abs() < 1.0), "{nodes} nodes");
    }
}

#[test]
fn predict_applies_a_fitted_broadcast_efficiency() {
    // The master-GPU strategy broadcasts the weights with the ring algorithm: fit that efficiency
    // on top of the link calibration, then predict with each file.
    let dir = tempfile::tempdir().unwrap();
    let (links, bcast) = (dir.path().join("links.json"), dir.path().join("bcast.json"));
    dagsim()
        .arg("calibrate")
        .arg(abci("allreduce_intra_vnode_4gpu.nccl"))
        .args(["--topology", "abci-v", "--collective-model", "ideal", "-o"])
        .arg(&links)
        .assert()
        .success();
    let out = dagsim()
        .arg("calibrate")
        .arg(abci("bcast_intra_vnode_4gpu.nccl"))
        .args(["--topology", "abci-v", "--collective-model", "ideal", "--algorithm", "ring", "--calibration"])
        .arg(&links)
        .arg("-o")
        .arg(&bcast)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("fitted broadcast efficiency") && text.contains("sizes >= 1048576 bytes"), "{text}");
    assert!(text.contains("all sizes 1 KiB..32 MiB: median |error|"), "{text}");
    let written = Calibration::load(&bcast).unwrap();
    let e = written.collectives.iter().find(|c| c.op == CollectiveOp::Broadcast).unwrap();
    assert_eq!(e.algorithm, Algorithm::Ring);
    assert_eq!(written.links, Calibration::load(&links).unwrap().links);

    let iteration = |cal: &Path| -> f64 {
        let out = dagsim()
            .arg("predict")
            .arg("--trace")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/alexnet_k80.csv"))
            .args(["--gpus", "4", "--topology", "abci-v", "--collective-model", "ideal", "--strategy", "master"])
            .args(["--format", "json", "--calibration"])
            .arg(cal)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["iteration_time_s"].as_f64().unwrap()
    };
    // The fitted e > 1 makes the weight broadcast, and so the iteration, faster.
    let (plain, fitted) = (iteration(&links), iteration(&bcast));
    assert!(e.efficiency > 1.0 && fitted < plain, "e {}: {fitted} s vs {plain} s", e.efficiency);
}

#[test]
fn multi_node_allreduce_needs_a_single_node_calibration_and_check_fits_nothing() {
    let two = abci("allreduce_inter_vnode_2node.nccl");
    dagsim()
        .arg("calibrate")
        .arg(&two)
        .args(["--topology", "abci-v", "--collective-model", "ideal"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("give --calibration with a single-node fit"));
    dagsim()
        .arg("calibrate")
        .arg(&two)
        .args(["--topology", "abci-v", "--collective-model", "ideal", "--algorithm", "carrier-pigeon", "--check"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("unknown algorithm `carrier-pigeon`"));
    dagsim()
        .arg("calibrate")
        .arg(abci("bcast_intra_vnode_4gpu.nccl"))
        .args(["--topology", "abci-v", "--collective-model", "ideal", "--hold-out"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--hold-out"));
    // --check on the uncalibrated preset: every point a prediction, the file's calibration unchanged.
    dagsim()
        .arg("calibrate")
        .arg(&two)
        .args(["--topology", "abci-v", "--collective-model", "ideal", "--check"])
        .assert()
        .success()
        .stdout(predicates::str::contains("nothing fitted"))
        .stdout(predicates::str::contains("predicted sizes 1 KiB..32 MiB"));
}

#[test]
fn efficiencies_above_one_are_valid_and_non_positive_ones_are_not() {
    let mut cal = Calibration::new(Provenance { tool: "test".into(), ..Default::default() });
    cal.collectives.push(CollectiveEfficiency {
        op: CollectiveOp::Broadcast,
        algorithm: Algorithm::Ring,
        efficiency: 2.5,
        model: None,
    });
    assert!(Calibration::parse(&cal.to_json(), Path::new("c.json")).is_ok());
    cal.collectives[0].efficiency = 0.0;
    let e = Calibration::parse(&cal.to_json(), Path::new("c.json")).unwrap_err().to_string();
    assert!(e.contains("c.json") && e.contains("collectives[0].efficiency"), "{e}");
}
