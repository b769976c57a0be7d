//! Integer time never wraps (issue 18): making one input larger (a layer time, a gradient) or a
//! link slower gives a longer iteration or an error naming what overflowed, never a shorter one.
//! The readers refuse such values first (tests/bad_inputs.rs); these tests go around them and
//! hand the engine the extreme values directly.

use dagsim::hw::topology::parse_topology;
use dagsim::predict::Setup;
use dagsim::strategy::Strategy;
use dagsim::workload::Stat;
use dagsim::Error;
use std::path::Path;

fn setup(topology: dagsim::hw::Topology) -> Setup {
    Setup { workload: dagsim::bench::alexnet_k80(), topology, strategy: Strategy::default(), iterations: 3 }
}

fn k80() -> dagsim::hw::Topology {
    dagsim::hw::load_topology("k80-cluster").unwrap()
}

/// Iteration time in ns, or the error.
fn iteration(s: &Setup, gpus: u32) -> Result<f64, Error> {
    s.predict(gpus).map(|p| p.iteration_time_s * 1e9)
}

#[test]
fn a_huge_layer_time_gives_a_longer_iteration_or_an_overflow_error() {
    let mut last = 0.0;
    let mut overflowed = false;
    let sizes = [3u32, 9, 12, 15, 17, 18, 19].map(|e| 10u64.pow(e));
    for ns in sizes.into_iter().chain([u64::MAX / 3, u64::MAX / 2, u64::MAX]) {
        {
            let mut s = setup(k80());
            s.workload.layers[2].backward = Stat::exact(ns);
            match iteration(&s, 4) {
                Ok(t) => {
                    assert!(!overflowed, "{ns} ns ran after a smaller value overflowed");
                    assert!(t >= last, "layer of {ns} ns made the iteration faster: {t} < {last}");
                    last = t;
                }
                Err(e) => {
                    let msg = e.to_string();
                    assert!(matches!(e, Error::Overflow { .. }), "{msg}");
                    assert!(msg.contains("backward"), "names the task: {msg}");
                    overflowed = true;
                }
            }
        }
    }
    assert!(overflowed, "u64::MAX ns must overflow");
}

fn with_pcie(gb_s: &str) -> Result<dagsim::hw::Topology, Error> {
    let text = format!(
        r#"{{"name":"slow","cluster":{{"nodes":1,"gpus_per_node":4,"gpu":"Tesla K80",
            "pcie":{{"bandwidth_gb_s":{gb_s},"latency_us":5}},
            "network":{{"kind":"ethernet","bandwidth_gbit_s":10,"latency_us":25}},
            "storage":{{"shared":false,"bandwidth_gb_s":1.1,"latency_us":50}}}}}}"#
    );
    parse_topology(&text, Path::new("slow.json"), false)
}

#[test]
fn a_tiny_link_rate_gives_a_longer_iteration_or_an_error_never_a_faster_one() {
    let mut last = 0.0;
    for rate in ["15", "1", "1e-2", "1e-4", "1e-6"] {
        let t = iteration(&setup(with_pcie(rate).unwrap()), 4);
        match t {
            Ok(t) => {
                assert!(t >= last, "PCIe at {rate} GB/s made the iteration faster: {t} < {last}");
                last = t;
            }
            Err(e) => assert!(matches!(e, Error::Overflow { .. }), "{e}"),
        }
    }
    for rate in ["1e-7", "1e-300", "0", "-1"] {
        let e = with_pcie(rate).unwrap_err().to_string();
        assert!(e.contains("slow.json") && e.contains("pcie") && e.contains("GB/s"), "{rate}: {e}");
    }
}

#[test]
fn a_calibration_cannot_smuggle_in_a_tiny_rate() {
    use dagsim::hw::calibration::{CurvePoint, LinkCalibration, Provenance};
    let mut cal = dagsim::hw::Calibration::new(Provenance::default());
    cal.links.push(LinkCalibration {
        kind: Some("pcie".into()),
        from: None,
        to: None,
        latency_us: 5.0,
        bandwidth: vec![CurvePoint { bytes: 0, gb_s: 1e-300 }],
    });
    let mut m = k80().instantiate(4).unwrap();
    let e = m.apply_calibration(&cal).unwrap_err().to_string();
    assert!(e.contains("gb_s") && e.contains("1e-300"), "{e}");
}

#[test]
fn huge_gradients_and_samples_give_an_error_or_more_time() {
    let mut last = 0.0;
    for bytes in [1u64 << 20, 1 << 40, 1 << 50, 1 << 60, u64::MAX / 2, u64::MAX] {
        let mut s = setup(k80());
        s.workload.layers[5].grad_bytes = bytes;
        s.workload.sample_bytes = bytes;
        match iteration(&s, 8) {
            Ok(t) => {
                assert!(t >= last, "{bytes} bytes made the iteration faster");
                last = t;
            }
            Err(e) => assert!(matches!(e, Error::Overflow { .. }), "{bytes}: {e}"),
        }
    }
}
