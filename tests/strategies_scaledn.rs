//! ScaleDNN's mechanics on its Server-A (4 GPUs on PCIe, `scenarios/scaledn-server-a.json`) with
//! AlexNet measured on a Titan X (`traces/alexnet_titanx_caffe.csv`):
//! * CPU-side splitting removes PtoP and moves the same HtoD bytes for any GPU count (IV-A);
//! * the baseline moves n + (x-1)n/x bytes for a batch of n bytes on x GPUs (IV-A);
//! * pre-loading hides HtoD when compute is longer (IV-B);
//! * 3:1 weight compression cuts the broadcast by about 2/3, less the codec cost, and loses on a
//!   small model (IV-C, V-B).

use dagsim::dag::{Dag, Phase};
use dagsim::hw::load_topology;
use dagsim::predict::Setup;
use dagsim::sim::{Options, Run};
use dagsim::strategy::Strategy;
use dagsim::workload::{read_trace, Layer, Stat, TraceFormat, Workload};
use std::path::Path;

fn alexnet() -> Workload {
    read_trace(Path::new("traces/alexnet_titanx_caffe.csv"), TraceFormat::Auto).unwrap()
}

fn setup(w: &Workload, strategy: &str) -> Setup {
    Setup {
        workload: w.clone(),
        topology: load_topology("scenarios/scaledn-server-a.json").unwrap(),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 4,
    }
}

fn run(w: &Workload, strategy: &str, gpus: u32) -> (Dag, Run) {
    let sim = setup(w, strategy).simulate(gpus, Options { record_flows: true, ..Options::default() }).unwrap();
    (sim.dag, sim.run)
}

/// Bytes moved by flows of tasks in `phase` during iteration `it`.
fn bytes(dag: &Dag, run: &Run, phase: Phase, it: u32) -> u64 {
    run.flow_records
        .iter()
        .filter(|f| dag.task(f.task).phase == phase && dag.task(f.task).iteration == it)
        .map(|f| f.bytes)
        .sum()
}

/// Mean duration of the tasks in `phase` after the warm-up iteration.
fn mean_span(dag: &Dag, run: &Run, phase: Phase) -> f64 {
    let spans: Vec<u64> = (0..dag.len())
        .filter(|&t| dag.tasks()[t].phase == phase && dag.tasks()[t].iteration > 0)
        .map(|t| run.end[t] - run.start[t])
        .collect();
    spans.iter().sum::<u64>() as f64 / spans.len() as f64
}

fn iteration_s(w: &Workload, strategy: &str, gpus: u32) -> f64 {
    setup(w, strategy).predict(gpus).unwrap().iteration_time_s
}

/// A fixed global batch of 384 samples spread over x GPUs.
fn with_global_batch(w: &Workload, x: u32) -> Workload {
    Workload { batch_per_gpu: 384 / x, ..w.clone() }
}

#[test]
fn splitting_removes_ptop_and_keeps_htod_bytes_fixed() {
    let w = alexnet();
    let n = 384 * w.device_sample_bytes;
    for x in 1..=4 {
        let w = with_global_batch(&w, x);
        let (dag, run) = run(&w, "master+split", x);
        assert_eq!(bytes(&dag, &run, Phase::HostToDevice, 1), n, "{x} GPUs");
        assert!(dag.tasks().iter().all(|t| t.phase != Phase::PeerToPeer));
    }
}

#[test]
fn baseline_moves_n_plus_x_minus_1_n_over_x() {
    let w = alexnet();
    let n = 384 * w.device_sample_bytes;
    for x in 1..=4u64 {
        let w = with_global_batch(&w, x as u32);
        let (dag, run) = run(&w, "master", x as u32);
        let moved = bytes(&dag, &run, Phase::HostToDevice, 1) + bytes(&dag, &run, Phase::PeerToPeer, 1);
        assert_eq!(moved, n + (x - 1) * n / x, "{x} GPUs");
    }
}

#[test]
fn preloading_hides_htod_when_compute_is_longer() {
    let w = alexnet();
    let (dag, r) = run(&w, "master+split", 4);
    let htod = mean_span(&dag, &r, Phase::HostToDevice);
    let compute = (w.forward_ns() + w.backward_ns()) as f64;
    assert!(compute > htod, "the premise: compute {compute} ns, HtoD {htod} ns");
    let plain = iteration_s(&w, "master+split", 4);
    let preloaded = iteration_s(&w, "master+split+preload", 4);
    // The whole copy leaves the critical path (to within the 1% its link sharing with the weight
    // broadcast can shift).
    let saved = (plain - preloaded) * 1e9;
    assert!((saved - htod).abs() < 0.01 * htod, "saved {saved} ns, HtoD took {htod} ns");
    // And the copies of batch i+1 indeed ran during batch i's compute.
    let p = setup(&w, "master+split+preload").predict(4).unwrap();
    assert!(p.breakdown.io < 0.2 * htod * 1e-9, "exposed I/O {} s", p.breakdown.io);
}

#[test]
fn weight_compression_cuts_broadcast_by_two_thirds_less_codec_cost() {
    let w = alexnet();
    let (d0, r0) = run(&w, "master+split+preload", 4);
    let (d1, r1) = run(&w, "master+split+preload+weights=3to1", 4);
    let b0 = mean_span(&d0, &r0, Phase::WeightBroadcast);
    let b1 = mean_span(&d1, &r1, Phase::WeightBroadcast);
    let ratio = b1 / b0;
    assert!((ratio - 1.0 / 3.0).abs() < 0.02, "broadcast {b1} ns vs {b0} ns: ratio {ratio}");
    // The iteration saves the broadcast time less the codec on the critical path (encode on the
    // master, decode on a worker).
    let s = Strategy::parse("master+weights=3to1").unwrap().weight_codec();
    let tensors = w.layers.iter().filter(|l| l.is_learnable()).count() as u64;
    let codec = (s.encode_ns(w.grad_bytes(), tensors) + s.decode_ns(w.grad_bytes(), tensors)) as f64;
    let saved =
        (iteration_s(&w, "master+split+preload", 4) - iteration_s(&w, "master+split+preload+weights=3to1", 4)) * 1e9;
    let expected = b0 - b1 - codec;
    assert!((saved - expected).abs() < 0.05 * expected, "saved {saved} ns, expected {expected} ns");
}

/// A MobileNet-v2-sized model (14 MB in 158 tensors, ScaleDNN Table II) with short kernels.
fn small_model() -> Workload {
    let layers = (0..158)
        .map(|i| Layer {
            name: format!("l{i}"),
            forward: Stat::exact(60_000),
            backward: Stat::exact(120_000),
            comm: None,
            grad_bytes: 14_000_000 / 158,
            grad_tensors: Vec::new(),
            util: None,
            memory: None,
            tp: None,
        })
        .collect();
    Workload {
        name: "small".into(),
        batch_per_gpu: 128,
        sample_bytes: 0,
        device_sample_bytes: 64 * 64 * 3 * 4,
        layers,
        update: Stat::exact(0),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    }
}

/// Fractional saving of 3:1 weight compression with a given per-kernel launch cost.
fn compression_gain(w: &Workload, launch_us: &str) -> f64 {
    let plain = iteration_s(w, "master+split+preload", 4);
    let compressed = iteration_s(w, &format!("master+split+preload+weights=3to1+launch_us={launch_us}"), 4);
    1.0 - compressed / plain
}

#[test]
fn weight_compression_gains_less_on_small_models_and_loses_once_codec_overheads_win() {
    // ScaleDNN V-B: compression helps large models and costs small ones (< 100 MB) about 1.6%.
    // The paper gives no codec cost; the saving per element is fixed by the link, while the fixed
    // per-tensor kernel cost weighs on models of many small tensors. With the default 5 us per
    // kernel the 14 MB model still gains a little; from about 7 us per kernel it loses, while
    // AlexNet (8 tensors, 233 MB) gains either way. Since broadcasts are pipelined along the ring
    // (as NCCL does), the broadcast is short and AlexNet's gain is about 7%, not the ~15% a
    // root-to-each-GPU broadcast gave.
    let (small, alexnet) = (small_model(), alexnet());
    let (small_5, alex_5) = (compression_gain(&small, "5"), compression_gain(&alexnet, "5"));
    println!("gain at 5 us/kernel: small {small_5:.4}, AlexNet {alex_5:.4}");
    assert!(alex_5 > 3.0 * small_5 && small_5 < 0.05, "small {small_5}, AlexNet {alex_5}");
    let (small_9, alex_9) = (compression_gain(&small, "9"), compression_gain(&alexnet, "9"));
    println!("gain at 9 us/kernel: small {small_9:.4}, AlexNet {alex_9:.4}");
    assert!(small_9 < 0.0 && alex_9 > 0.03, "small {small_9}, AlexNet {alex_9}");
}

#[test]
fn each_scaledn_step_saves_time_on_alexnet() {
    let w = alexnet();
    let ladder = ["master", "master+split", "master+split+preload", "master+split+preload+weights=3to1"];
    let times: Vec<f64> = ladder.iter().map(|s| iteration_s(&w, s, 4)).collect();
    for (pair, names) in times.windows(2).zip(ladder.windows(2)) {
        assert!(pair[1] < pair[0], "{} ({} s) is not faster than {} ({} s)", names[1], pair[1], names[0], pair[0]);
    }
}
