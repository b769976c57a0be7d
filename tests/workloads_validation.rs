//! Synthetic per-layer times against measured profiles shipped in traces/profiles (PipeDream on a
//! V100, Caffe on a Titan X Maxwell). The thresholds are the issue's: after calibration to the
//! measured whole-iteration time, per-layer median error within 25% and iteration within 5%.

use dagsim::workload::compare::run_validation;
use std::path::Path;

#[test]
fn synthetic_layer_times_match_measured_profiles_after_calibration() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/profiles");
    let rows = run_validation(&dir).unwrap();
    for r in &rows {
        let c = &r.comparison;
        println!(
            "{:32} {:12} {:16} b={:3} matched {:3}/{:3} raw layer {:5.1}% iter {:5.1}% | calibrated (x{:.2} +{:.0} us/layer) layer {:5.1}% iter {:4.1}% | transfer from {} layer {:5.1}% iter {:5.1}%",
            r.file, c.model, c.gpu, c.batch, c.matched, c.measured_layers,
            100.0 * c.median_layer_error, 100.0 * c.iteration_error, c.calibration_factor, c.layer_overhead_us,
            100.0 * c.median_layer_error_calibrated, 100.0 * c.iteration_error_calibrated,
            r.transfer_from, 100.0 * r.median_layer_error_transfer, 100.0 * r.iteration_error_transfer
        );
    }
    for r in &rows {
        let c = &r.comparison;
        assert!(
            c.median_layer_error_calibrated <= 0.25,
            "{}: median layer error {:.3}",
            r.file,
            c.median_layer_error_calibrated
        );
        assert!(
            c.iteration_error_calibrated <= 0.05,
            "{}: iteration error {:.3}",
            r.file,
            c.iteration_error_calibrated
        );
        // The profiler's floor is learned from the other profiles only, and only host-timed ones
        // (PipeDream) carry one.
        assert!(!r.overhead_from.contains(&r.file), "{}: overhead learned from itself", r.file);
        if r.file.starts_with("pipedream/") {
            assert_eq!(r.overhead_from.len(), 3, "{}", r.file);
            assert!((100.0..500.0).contains(&c.layer_overhead_us), "{}: overhead {}", r.file, c.layer_overhead_us);
        } else {
            assert!(r.overhead_from.is_empty() && c.layer_overhead_us == 0.0, "{}", r.file);
        }
    }
}

/// Out of sample, no calibration: ResNet-50 v1.5 on one V100-SXM2 (DGX-1) with NVIDIA's PyTorch
/// implementation, as measured by DLPerf (Oneflow-Inc/DLPerf,
/// NVIDIADeepLearningExamples/PyTorch/resnet50v1.5/README.md): 367.29 samples/s in FP32 at batch
/// 128 and 802.9 samples/s with AMP (dynamic loss scale) at batch 256.
#[test]
fn uncalibrated_resnet50_throughput_on_v100_is_within_25_percent_of_dlperf() {
    use dagsim::workload::gpu::{GpuSpec, Precision};
    use dagsim::workload::memory::Optimizer;
    use dagsim::workload::synth::{synthesize, SynthOptions};
    use dagsim::workload::zoo::Model;
    let m = Model::by_name("resnet50", None).unwrap();
    let gpu = GpuSpec::by_name("v100-sxm2").unwrap();
    for (precision, batch, measured) in [(Precision::Fp32, 128, 367.29), (Precision::Fp16, 256, 802.9)] {
        let s = synthesize(&m, gpu, SynthOptions { batch, precision, optimizer: Optimizer::Momentum }).unwrap();
        let modelled = batch as f64 / (s.iteration_ns() * 1e-9);
        let err = (modelled - measured) / measured;
        println!(
            "resnet50 {precision:?} b{batch}: model {modelled:.1} samples/s, DLPerf {measured}, error {:+.1}%",
            100.0 * err
        );
        assert!(err.abs() < 0.25, "{precision:?}: {modelled:.1} vs {measured}");
    }
}
