//! The single-node link fit with the NCCL collective model in the loop (issue 14): `calibrate
//! --collective-model nccl` fits the link rate and the NCCL transports' hop latency, and NCCL's
//! tuner, protocols and channels give the time at every size. Synthetic measurements (made by the
//! engine under the NCCL model with known values) check that the fit recovers what made them and
//! that sizes held out of the fit are predicted from the mechanics; bad calibration files exit 2.

mod common;

use common::dagsim;
use dagsim::calibrate::nccl_fit::fit_allreduce_nccl;
use dagsim::calibrate::{simulate_collective, FitOptions, Measurement};
use dagsim::collective::nccl::transport::Transport;
use dagsim::collective::nccl::version::NcclVersion;
use dagsim::collective::nccl::NcclConfig;
use dagsim::collective::{Algorithm, CollectiveModel, CollectiveOp};
use dagsim::hw::calibration::{
    Calibration, CurvePoint, LinkCalibration, NcclHopCalibration, NcclProtocolCalibration, Provenance,
};
use dagsim::hw::{load_topology, Topology};
use std::path::Path;

fn nccl(name: &str) -> Topology {
    let mut t = load_topology(name).unwrap();
    t.collectives = CollectiveModel::Nccl(NcclConfig { version: NcclVersion::V2_8_4, ..Default::default() });
    t
}

/// The ABCI V-node with NVLink at `gb_s` and `hop_us` more per P2P/NVLink hop.
/// One node of 4 ABCI V100s under the NCCL model, calibrated with `cal`: the time of an
/// all-reduce of `bytes`.
fn abci_v_4_rank_all_reduce_ns(cal: &Calibration, bytes: u64) -> u64 {
    let mut machine = nccl("abci-v").instantiate(4).unwrap();
    machine.apply_calibration(cal).unwrap();
    simulate_collective(&machine, CollectiveOp::AllReduce, Algorithm::Auto, 4, bytes).unwrap()
}

fn known(gb_s: f64, hop_us: f64) -> Calibration {
    let mut c = Calibration::new(Provenance::default());
    c.links.push(LinkCalibration {
        kind: Some("nvlink".into()),
        from: None,
        to: None,
        latency_us: 1.0,
        bandwidth: vec![CurvePoint { bytes: 0, gb_s }],
    });
    c.nccl.push(NcclHopCalibration { transport: Transport::P2pNvlink, hop_latency_us: hop_us });
    c
}

/// 4 B .. 32 MiB all-reduces of 4 ranks as the NCCL model times them on `cal`.
fn synthetic(t: &Topology, cal: &Calibration) -> Measurement {
    let mut machine = t.instantiate(4).unwrap();
    machine.apply_calibration(cal).unwrap();
    let points = (2..=25)
        .map(|p| {
            let bytes = 1u64 << p;
            let ns = simulate_collective(&machine, CollectiveOp::AllReduce, Algorithm::Auto, 4, bytes).unwrap();
            (bytes, ns as f64 / 1e3)
        })
        .collect();
    Measurement {
        input: "synthetic".into(),
        op: CollectiveOp::AllReduce,
        ranks: 4,
        hosts: 1,
        hardware: String::new(),
        points,
    }
}

#[test]
fn the_nccl_fit_recovers_the_rate_and_hop_latency_that_made_the_times() {
    let t = nccl("abci-v");
    let m = synthetic(&t, &known(30.0, 0.8));
    let fit = fit_allreduce_nccl(&t, &m, &FitOptions { hold_out: true, ..Default::default() }).unwrap();
    let rate = fit.calibration.links[0].bandwidth[0].gb_s;
    let hop = fit.calibration.nccl[0].hop_latency_us;
    assert_eq!(fit.calibration.nccl[0].transport, Transport::P2pNvlink);
    assert!((rate - 30.0).abs() < 0.6, "rate {rate} GB/s, made with 30");
    assert!((hop - 0.8).abs() < 0.05, "hop latency {hop} us, made with 0.8");
    // Held-out sizes (every other one) come out of the same mechanics: no per-size curve.
    assert_eq!(fit.calibration.links[0].bandwidth.len(), 1);
    let worst = fit.points.iter().filter(|p| p.held_out).map(|p| p.error.abs()).fold(0.0, f64::max);
    assert!(worst < 0.02, "held-out worst |error| {worst}");
}

/// `known` with a start cost and a rate factor for LL and LL128.
fn known_protocols(gb_s: f64, hop_us: f64, ll: (f64, f64), ll128: (f64, f64)) -> Calibration {
    let mut c = known(gb_s, hop_us);
    for (protocol, (start_us, rate_factor)) in [("LL", ll), ("LL128", ll128)] {
        c.nccl_protocols.push(NcclProtocolCalibration { protocol: protocol.into(), start_us, rate_factor });
    }
    c
}

#[test]
fn the_nccl_fit_recovers_each_protocols_start_cost_and_rate_factor() {
    // Made with LL128 slow and late to start (as the ABCI nodes measure it) and LL a little slow:
    // the fit finds them again, with one figure pair per protocol and no per-size figure.
    let t = nccl("abci-v");
    let m = synthetic(&t, &known_protocols(30.0, 0.8, (2.0, 0.8), (40.0, 0.6)));
    let fit = fit_allreduce_nccl(&t, &m, &FitOptions { hold_out: false, ..Default::default() }).unwrap();
    let protos: Vec<(&str, f64, f64)> =
        fit.calibration.nccl_protocols.iter().map(|p| (p.protocol.as_str(), p.start_us, p.rate_factor)).collect();
    assert_eq!(protos.iter().map(|p| p.0).collect::<Vec<_>>(), ["LL", "LL128"], "{protos:?}");
    let (_, ll128_start, ll128_rate) = protos[1];
    assert!((ll128_start - 40.0).abs() < 4.0, "LL128 start {ll128_start} us, made with 40: {protos:?}");
    // The rate is the weaker figure: LL128 runs at 64 KiB..512 KiB only, mostly latency-bound.
    assert!((ll128_rate - 0.6).abs() < 0.1, "LL128 rate factor {ll128_rate}, made with 0.6: {protos:?}");
    let rate = fit.calibration.links[0].bandwidth[0].gb_s;
    assert!((rate - 30.0).abs() < 1.5, "rate {rate} GB/s, made with 30");
    let worst = fit.points.iter().map(|p| p.error.abs()).fold(0.0, f64::max);
    assert!(worst < 0.05, "worst |error| {worst} (fitted and held out)");
    // Written and read back, the entries survive; a file without them (older) still loads.
    let back = Calibration::parse(&fit.calibration.to_json(), Path::new("x.json")).unwrap();
    assert_eq!(back.nccl_protocols, fit.calibration.nccl_protocols);
    let old = r#"{"format": "dagsim-calibration/1", "provenance": {"tool": "old"},
        "nccl": [{"transport": "p2p-nvlink", "hop_latency_us": 0.4}]}"#;
    assert!(Calibration::parse(old, Path::new("old.json")).unwrap().nccl_protocols.is_empty());
}

#[test]
fn a_protocol_start_cost_adds_once_per_single_node_all_reduce() {
    let time = abci_v_4_rank_all_reduce_ns;
    // 4 B runs LL: +5 us of LL start is 5 us more; LL128's figures do not touch it.
    let base = time(&known(40.0, 0.0), 4);
    assert_eq!(time(&known_protocols(40.0, 0.0, (5.0, 1.0), (50.0, 0.5)), 4) - base, 5_000);
}

#[test]
fn a_hop_latency_adds_to_every_protocols_hop() {
    // 4 ranks, one node: a ring all-reduce crosses 2(4-1) = 6 hops in a row, so +1 us per
    // P2P/NVLink hop adds 6 us to a latency-bound size, whatever the protocol.
    let time = abci_v_4_rank_all_reduce_ns;
    assert_eq!(time(&known(40.0, 1.0), 4) - time(&known(40.0, 0.0), 4), 6_000);
}

/// The channels NCCL's tuner gives a 4-rank V-node all-reduce of `bytes` under `cal`.
fn abci_v_4_rank_channels(cal: &Calibration, bytes: u64) -> u32 {
    let mut machine = nccl("abci-v").instantiate(4).unwrap();
    machine.apply_calibration(cal).unwrap();
    let config = NcclConfig { version: NcclVersion::V2_8_4, ..Default::default() };
    let comm = dagsim::collective::nccl::Comm::new(&machine, &[0, 1, 2, 3], config);
    comm.choose(CollectiveOp::AllReduce, bytes).unwrap().channels
}

/// `known` with `us` per call for each channel beyond the first.
fn known_channel(gb_s: f64, hop_us: f64, us: f64) -> Calibration {
    let mut c = known(gb_s, hop_us);
    c.nccl_channel_us = Some(us);
    c
}

#[test]
fn a_channel_cost_adds_once_per_channel_beyond_the_first() {
    // 4 B runs on one channel: nothing added. 64 KiB runs LL on several channels (the tuner
    // gives a channel each 4 KiB LL piece per rank): (channels - 1) x 2 us more.
    let time = abci_v_4_rank_all_reduce_ns;
    let (plain, costly) = (known(40.0, 0.0), known_channel(40.0, 0.0, 2.0));
    assert_eq!(abci_v_4_rank_channels(&plain, 4), 1);
    assert_eq!(time(&costly, 4), time(&plain, 4));
    let nc = abci_v_4_rank_channels(&plain, 64 << 10) as u64;
    assert!(nc >= 2, "64 KiB on {nc} channel(s)");
    assert_eq!(time(&costly, 64 << 10) - time(&plain, 64 << 10), (nc - 1) * 2_000);
}

#[test]
fn the_nccl_fit_recovers_a_cost_per_channel() {
    // Made with 1.5 us per added channel (the size the ABCI single-node all-reduces show): the
    // fit finds it again next to the rate and the hop latency, and it survives a write.
    let t = nccl("abci-v");
    let m = synthetic(&t, &known_channel(30.0, 0.8, 1.5));
    let fit = fit_allreduce_nccl(&t, &m, &FitOptions { hold_out: true, ..Default::default() }).unwrap();
    let c = fit.calibration.nccl_channel_us.unwrap();
    assert!((c - 1.5).abs() < 0.2, "{c} us per channel, made with 1.5");
    let worst = fit.points.iter().filter(|p| p.held_out).map(|p| p.error.abs()).fold(0.0, f64::max);
    assert!(worst < 0.05, "held-out worst |error| {worst}");
    let back = Calibration::parse(&fit.calibration.to_json(), Path::new("x.json")).unwrap();
    assert_eq!(back.nccl_channel_us, Some(c));
}

#[test]
fn calibrate_under_nccl_reports_the_fit_and_writes_the_hop_latency() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("v.cal.json");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl");
    let out = dagsim()
        .arg("calibrate")
        .arg(&file)
        .args(["--topology", "abci-v", "--collective-model", "nccl", "--nccl-version", "2.8.4", "-o"])
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("fitted through the NCCL model: nvlink links"), "{text}");
    assert!(text.contains("p2p-nvlink +"), "{text}");
    let cal = Calibration::load(&out_file).unwrap();
    assert_eq!(cal.nccl.len(), 1);
    assert_eq!(cal.links[0].bandwidth.len(), 1);
    // The ideal model keeps its own fit: a curve point per fitted size, no NCCL section.
    let ideal = dagsim()
        .arg("calibrate")
        .arg(&file)
        .args(["--topology", "abci-v", "--collective-model", "ideal"])
        .output()
        .unwrap();
    let text = String::from_utf8(ideal.stdout).unwrap();
    assert!(text.starts_with("fitted nvlink links: latency"), "{text}");
}

#[test]
fn a_bad_nccl_section_names_its_field_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/measured/abci/allreduce_inter_vnode_2node.nccl");
    for (entry, says) in [
        (r#"{"transport": "p2p-nvlink", "hop_latency_us": -1}"#, "nccl[0].hop_latency_us"),
        (r#"{"transport": "carrier-pigeon", "hop_latency_us": 1}"#, "carrier-pigeon"),
        (r#"{"transport": "p2p-nvlink", "hop_latency_us": 1}], "nccl_protocols": [{"protocol": "LL9"}"#, "LL9"),
        (
            r#"{"transport": "p2p-nvlink", "hop_latency_us": 1}], "nccl_protocols": [{"protocol": "LL128", "rate_factor": 0}"#,
            "nccl_protocols[0].rate_factor",
        ),
        (
            r#"{"transport": "p2p-nvlink", "hop_latency_us": 1}], "nccl_protocols": [{"protocol": "ll", "start_us": -2}"#,
            "nccl_protocols[0].start_us",
        ),
        (r#"{"transport": "p2p-nvlink", "hop_latency_us": 1}], "nccl_channel_us": -1, "fit": ["#, "nccl_channel_us"),
    ] {
        let cal = dir.path().join("bad.json");
        let text = format!(
            r#"{{"format": "dagsim-calibration/1", "provenance": {{"tool": "hand"}}, "links": [], "nccl": [{entry}]}}"#
        );
        std::fs::write(&cal, text).unwrap();
        dagsim()
            .arg("calibrate")
            .arg(&file)
            .args(["--topology", "abci-v", "--collective-model", "nccl", "--check", "--calibration"])
            .arg(&cal)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
    }
}
