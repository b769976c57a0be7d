//! The engine reproduces the DAG paper's closed forms exactly where they hold:
//! Eq. 1/2 (no overlap), Eq. 3 (I/O overlap), Eq. 4/5 (WFBP) and Eq. 6 (speedup).
//!
//! Machines here have zero latency and bandwidths of whole bytes per ns, and communication times
//! come from the trace (`comm=trace`), so every term of the equations is known by construction.

use dagsim::hw::topology::parse_topology;
use dagsim::predict::Setup;
use dagsim::strategy::Strategy;
use dagsim::workload::{Layer, Stat, Workload};
use std::path::Path;

/// Each GPU on its own node with its own disk (or one shared disk), all links 1 byte/ns.
fn topology(shared_storage: bool) -> dagsim::hw::Topology {
    let text = format!(
        r#"{{"name":"exact","cluster":{{"nodes":1,"gpus_per_node":1,"gpu":"test",
            "pcie":{{"bandwidth_gb_s":1,"latency_us":0}},
            "network":{{"kind":"ethernet","bandwidth_gb_s":1,"latency_us":0}},
            "storage":{{"shared":{shared_storage},"bandwidth_gb_s":1,"latency_us":0}}}}}}"#
    );
    parse_topology(&text, Path::new("exact.json"), false).unwrap()
}

/// Layers as (forward ns, backward ns, measured comm ns); every layer is learnable.
fn workload(layers: &[(u64, u64, u64)], sample_bytes: u64, device_sample_bytes: u64, update_ns: u64) -> Workload {
    Workload {
        name: "exact".into(),
        batch_per_gpu: 1,
        sample_bytes,
        device_sample_bytes,
        layers: layers
            .iter()
            .enumerate()
            .map(|(i, &(f, b, c))| Layer {
                name: format!("l{i}"),
                forward: Stat::exact(f),
                backward: Stat::exact(b),
                comm: Some(Stat::exact(c)),
                grad_bytes: 1000,
                grad_tensors: Vec::new(),
                util: None,
                memory: None,
                tp: None,
            })
            .collect(),
        update: Stat::exact(update_ns),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    }
}

fn iteration_ns(w: &Workload, strategy: &str, gpus: u32, shared_storage: bool) -> f64 {
    let setup = Setup {
        workload: w.clone(),
        topology: topology(shared_storage),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 6,
    };
    setup.predict(gpus).unwrap().iteration_time_s * 1e9
}

fn assert_ns(actual: f64, expected: u64) {
    assert!((actual - expected as f64).abs() < 1e-3, "simulated {actual} ns, closed form {expected} ns");
}

const LAYERS: [(u64, u64, u64); 3] = [(1_000, 2_000, 700), (3_000, 5_000, 900), (2_000, 4_000, 1_100)];

#[test]
fn eq2_no_overlap_is_the_sum_of_all_terms() {
    let (tio, th2d, tu) = (5_000, 3_000, 400);
    let w = workload(&LAYERS, tio, th2d, tu);
    let tf: u64 = LAYERS.iter().map(|l| l.0).sum();
    let tb: u64 = LAYERS.iter().map(|l| l.1).sum();
    let tc: u64 = LAYERS.iter().map(|l| l.2).sum();
    // Eq. 1 on one GPU (tc = 0), Eq. 2 on several.
    assert_ns(iteration_ns(&w, "none", 1, false), tio + th2d + tf + tb + tu);
    for gpus in [2, 4] {
        assert_ns(iteration_ns(&w, "none+comm=trace", gpus, false), tio + th2d + tf + tb + tc + tu);
    }
}

#[test]
fn eq3_io_overlap_is_the_max_of_loading_and_compute() {
    let tf: u64 = LAYERS.iter().map(|l| l.0).sum();
    let tb: u64 = LAYERS.iter().map(|l| l.1).sum();
    let tc: u64 = LAYERS.iter().map(|l| l.2).sum();
    // Compute-bound and I/O-bound cases.
    for (tio, th2d) in [(5_000u64, 3_000u64), (20_000, 9_000)] {
        let w = workload(&LAYERS, tio, th2d, 0);
        let expected = (tio + th2d).max(tf + tb + tc);
        assert_ns(iteration_ns(&w, "io+comm=trace", 4, false), expected);
    }
}

/// Start times of each layer's aggregation under WFBP, from Eq. 4's definitions, relative to the
/// start of the forward pass; returns (tau_c^(1), end of the last aggregation).
fn wfbp_schedule(layers: &[(u64, u64, u64)]) -> u64 {
    let tf: u64 = layers.iter().map(|l| l.0).sum();
    let mut bwd_end = tf;
    let mut comm_free = 0;
    for &(_, b, c) in layers.iter().rev() {
        bwd_end += b;
        let tau = bwd_end.max(comm_free);
        comm_free = tau + c;
    }
    comm_free
}

#[test]
fn eq5_wfbp_exposes_only_non_overlapped_communication() {
    let tf: u64 = LAYERS.iter().map(|l| l.0).sum();
    let tb: u64 = LAYERS.iter().map(|l| l.1).sum();
    // Here each layer's aggregation fits under the next backward, so t_c^no = t_c^(1).
    let t_no = LAYERS[0].2;
    let w = workload(&LAYERS, 1_000, 500, 0);
    assert_ns(iteration_ns(&w, "io+wfbp+comm=trace", 4, false), (1_000 + 500u64).max(tf + tb + t_no));
    assert_eq!(wfbp_schedule(&LAYERS), tf + tb + t_no);

    // Long aggregations queue behind each other: Eq. 4 with tau from the schedule.
    let slow = [(1_000, 2_000, 9_000), (3_000, 1_000, 8_000), (2_000, 4_000, 7_000)];
    let w = workload(&slow, 1_000, 500, 0);
    assert_ns(iteration_ns(&w, "io+wfbp+comm=trace", 4, false), wfbp_schedule(&slow));
    // And WFBP never loses to no overlap.
    assert!(iteration_ns(&w, "io+wfbp+comm=trace", 4, false) <= iteration_ns(&w, "io+comm=trace", 4, false));
}

#[test]
fn eq6_speedup_with_a_shared_file_system() {
    // One NFS link shared by all GPUs: tio for N GPUs is N times tio for one.
    let (tio1, th2d) = (2_000u64, 1_000u64);
    let w = workload(&LAYERS, tio1, th2d, 0);
    let tf: u64 = LAYERS.iter().map(|l| l.0).sum();
    let tb: u64 = LAYERS.iter().map(|l| l.1).sum();
    let t_no = LAYERS[0].2;
    let setup = Setup {
        workload: w,
        topology: topology(true),
        strategy: Strategy::parse("io+wfbp+comm=trace").unwrap(),
        iterations: 6,
    };
    let preds = setup.predict_scaling(&[1, 2, 4, 8]).unwrap();
    for p in preds {
        let n = p.gpus as u64;
        let expected = n as f64 * (tio1 + th2d).max(tf + tb) as f64
            / (n * tio1 + th2d).max(tf + tb + if n > 1 { t_no } else { 0 }) as f64;
        assert!((p.speedup - expected).abs() < 1e-9, "{} GPUs: speedup {} vs Eq. 6 {}", n, p.speedup, expected);
    }
}

#[test]
fn breakdown_sums_to_iteration_time() {
    let w = workload(&LAYERS, 20_000, 9_000, 300);
    for strategy in ["none", "io", "wfbp", "io+wfbp", "io+wfbp+comm=trace"] {
        let setup = Setup {
            workload: w.clone(),
            topology: topology(true),
            strategy: Strategy::parse(strategy).unwrap(),
            iterations: 5,
        };
        for gpus in [1, 3, 8] {
            let p = setup.predict(gpus).unwrap();
            let total = p.breakdown.total();
            assert!(
                (total - p.iteration_time_s).abs() < 1e-12,
                "{strategy} x{gpus}: {total} vs {}",
                p.iteration_time_s
            );
        }
    }
}
