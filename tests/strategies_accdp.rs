//! AccDP (seeds/001) on synthesised workloads: MPS clients whose kernels' utilisation comes from
//! the layer sizes (`util` left to the workload), and MPS composing with the gradient strategies.
//! Paper numbers appear only as comparison in the printed table (`-- --nocapture`).

use dagsim::hw::topology::load_topology;
use dagsim::predict::Setup;
use dagsim::report::Prediction;
use dagsim::strategy::Strategy;
use dagsim::workload::source::WorkloadSource;
use dagsim::workload::Workload;

fn zoo(model: &str, batch: u32) -> Workload {
    let source = WorkloadSource {
        model: Some(model.into()),
        gpu: Some("a100".into()),
        batch: Some(batch),
        ..Default::default()
    };
    source.load().unwrap()
}

fn predict(w: &Workload, strategy: &str, gpus: u32) -> Prediction {
    let setup = Setup {
        workload: w.clone(),
        topology: load_topology("accdp-a100").unwrap(),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 4,
    };
    setup.predict(gpus).unwrap()
}

/// Time-weighted utilisation of the forward and backward kernels alone (AccDP Fig. 1's measure).
fn mean_util(w: &Workload) -> f64 {
    let (busy, total) = w.layers.iter().fold((0.0, 0.0), |(busy, total), l| {
        let u = l.util.expect("synthesised layers carry their utilisation");
        let (f, b) = (l.forward.mean_ns as f64, l.backward.mean_ns as f64);
        (busy + u.forward * f + u.backward * b, total + f + b)
    });
    busy / total
}

/// Throughput with 4 clients per GPU over one process per GPU, utilisation from the workload.
fn mps4_gain(w: &Workload, gpus: u32) -> f64 {
    predict(w, "io+wfbp+mps=4", gpus).throughput_samples_per_s
        / predict(w, "io+wfbp+mps=1", gpus).throughput_samples_per_s
}

#[test]
fn small_batches_gain_more_from_mps_than_large_ones() {
    println!("ResNet-18 on one A100 (accdp-a100), utilisation derived from the layer sizes");
    println!("batch  util alone  samples/s mps=1  mps=4  gain");
    let mut gains = Vec::new();
    for batch in [8, 32, 128, 512] {
        let w = zoo("resnet18", batch);
        let one = predict(&w, "io+wfbp+mps=1", 1).throughput_samples_per_s;
        let four = predict(&w, "io+wfbp+mps=4", 1).throughput_samples_per_s;
        println!("{batch:5}  {:10.3}  {one:15.0}  {four:5.0}  {:+.1}%", mean_util(&w), (four / one - 1.0) * 100.0);
        gains.push(four / one);
    }
    // AccDP: small models and inputs leave the GPU idle and gain from more clients; large ones
    // saturate it (Sec. III, VI-B). Here, at a fixed model, the batch sets the layer sizes.
    assert!(gains.windows(2).all(|g| g[0] > g[1]), "gains should fall with the batch: {gains:?}");
    assert!(gains[0] > 1.2, "batch 8 leaves most of an A100 idle: {gains:?}");
    assert!(gains[3] < 1.05, "batch 512 fills it: {gains:?}");
    // Never worse than one process: the clients only fill idle capacity.
    assert!(gains.iter().all(|&g| g >= 1.0), "{gains:?}");
}

#[test]
fn a_small_model_gains_more_than_a_large_one_at_the_same_batch() {
    let small = mps4_gain(&zoo("resnet18", 16), 1);
    let large = mps4_gain(&zoo("resnet50", 16), 1);
    println!("batch 16 on one A100, mps=4 over mps=1: ResNet-18 {small:.3}, ResNet-50 {large:.3}");
    assert!(small > large, "ResNet-18 {small} vs ResNet-50 {large}");
}

#[test]
fn explicit_util_overrides_the_derived_one() {
    let w = zoo("resnet18", 512);
    // At batch 512 the derived utilisation is near 1, so four clients gain little; AccDP's
    // measured 52% given explicitly lets them fill the GPU (validation/accdp.csv).
    let derived = mps4_gain(&w, 1);
    let measured = predict(&w, "io+wfbp+mps=4+util=0.52+threads=0.3", 1).throughput_samples_per_s
        / predict(&w, "io+wfbp+mps=1+util=0.52", 1).throughput_samples_per_s;
    println!("batch 512: gain with derived utilisation {derived:.3}, with util=0.52 {measured:.3}");
    assert!(measured > derived + 0.5, "{measured} vs {derived}");
}

#[test]
fn util_auto_needs_a_workload_that_carries_it() {
    let mut w = zoo("resnet18", 8);
    assert!(predict(&w, "io+wfbp+mps=2+util=auto", 1).throughput_samples_per_s > 0.0);
    for l in &mut w.layers {
        l.util = None;
    }
    let setup = Setup {
        workload: w,
        topology: load_topology("accdp-a100").unwrap(),
        strategy: Strategy::parse("io+wfbp+mps=2+util=auto").unwrap(),
        iterations: 4,
    };
    let e = setup.predict(1).unwrap_err().to_string();
    assert!(e.contains("util=auto") && e.contains("resnet18"), "{e}");
}

#[test]
fn one_mps_client_is_one_process() {
    // One client per GPU with util=1 is the plain S-SGD graph, gradient strategies included, bit
    // for bit. With the derived utilisation each kernel's work u x t is rounded to whole
    // nanoseconds and run back at rate u, so a kernel may end a nanosecond off: the iteration
    // stays within one nanosecond per kernel of the plain one.
    let w = zoo("resnet18", 32);
    let kernels = 2.0 * w.layers.len() as f64 + 1.0;
    for s in ["wfbp+grads=fp16", "io+wfbp+fusion=4M+sparse=0.15", "wfbp+grads=8bit+fusion=1M", "wfbp+mixed"] {
        let plain = predict(&w, s, 4);
        let exact = predict(&w, &format!("{s}+mps=1+util=1"), 4);
        assert_eq!(exact.iteration_time_s, plain.iteration_time_s, "{s}");
        assert_eq!(exact.breakdown, plain.breakdown, "{s}");
        let derived = predict(&w, &format!("{s}+mps=1"), 4);
        let off_ns = (derived.iteration_time_s - plain.iteration_time_s).abs() * 1e9;
        assert!(off_ns <= kernels, "{s}: {off_ns} ns off");
    }
}
