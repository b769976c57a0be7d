//! Importers on the real profiles shipped in traces/profiles (and the hand-written Kineto example).

use dagsim::workload::import::{read_profile, ProfileFormat};
use dagsim::workload::zoo::{LayerKind, Model};
use std::path::{Path, PathBuf};

fn profile(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/profiles").join(rel)
}

#[test]
fn pipedream_resnet50_has_the_torchvision_parameters_in_forward_order() {
    let p = read_profile(&profile("pipedream/resnet50/graph.txt"), ProfileFormat::Pipedream).unwrap();
    let params: u64 = p.layers.iter().map(|l| l.param_bytes).sum();
    assert_eq!(params, 4 * Model::by_name("resnet50", None).unwrap().params());
    assert_eq!(p.layers[0].kind, LayerKind::Conv);
    assert_eq!(p.layers.last().unwrap().kind, LayerKind::Linear);
    assert_eq!(p.layers.iter().filter(|l| l.kind == LayerKind::BatchNorm).count(), 53);
    assert!(p.input_us.is_some());
    let w = p.to_workload();
    assert_eq!(w.grad_bytes(), params);
    assert!(w.forward_ns() > 0 && w.backward_ns() > 0);
}

#[test]
fn caffe_alexnet_log_gives_batch_parameters_and_times() {
    let p = read_profile(&profile("caffe/output_alexnet.log"), ProfileFormat::Caffe).unwrap();
    assert_eq!(p.batch, Some(128));
    // The convnet-benchmarks AlexNet is the one-weird-trick variant: parameter shapes follow from
    // the logged top shapes and must add up to the zoo's count.
    let params: u64 = p.layers.iter().map(|l| l.param_bytes).sum();
    assert_eq!(params, 4 * Model::by_name("alexnet-owt", None).unwrap().params());
    assert_eq!(p.layers.len(), 16); // 5 conv, 5 ReLU, 3 pool, 3 fc
    assert_eq!(p.layers[0].name, "conv1");
    assert!((p.layers[0].backward_us - 14447.1).abs() < 1e-6);
    // The log's own total agrees with the sum of its layers.
    assert!((p.compute_us() - p.iteration_us.unwrap()).abs() / p.iteration_us.unwrap() < 0.01);
}

#[test]
fn bcaffe_log_pairs_blobs_into_googlenet_layers_with_auxiliary_heads() {
    let p = read_profile(&profile("bcaffe/googlenet_4workers_comm.log"), ProfileFormat::Bcaffe).unwrap();
    assert_eq!(p.layers.len(), 64); // 57 convolutions + classifier + 2 x (conv + 2 fc) auxiliary heads
    assert!(p.iterations >= 1);
    assert!(p.layers.iter().all(|l| l.backward_us > 0.0 && l.comm_us.unwrap() > 0.0));
    // Weight blobs (bias blobs are padded to multiples of 64 by B-Caffe) match the zoo's layers
    // plus the two auxiliary heads.
    let zoo = Model::by_name("googlenet", None).unwrap();
    // Every GoogLeNet layer has a bias per output: params = outputs * (reduction + 1).
    let mut zoo_weights: Vec<u64> =
        zoo.layers.iter().filter(|l| l.params > 0).map(|l| l.params - l.params / (l.reduction + 1)).collect();
    zoo_weights.extend([512 * 128, 2048 * 1024, 1024 * 1000, 528 * 128, 2048 * 1024, 1024 * 1000]);
    zoo_weights.sort_unstable();
    let text = std::fs::read_to_string(profile("bcaffe/googlenet_4workers_comm.log")).unwrap();
    let mut log_weights: Vec<u64> = text
        .lines()
        .take(128)
        .filter_map(|l| l.split_once("] [").map(|(_, b)| b.split(',').map(str::trim).collect::<Vec<_>>()))
        .filter(|f| f[0].parse::<u32>().unwrap() % 2 == 0)
        .map(|f| f[1].parse().unwrap())
        .collect();
    log_weights.sort_unstable();
    assert_eq!(log_weights, zoo_weights);
}

#[test]
fn kineto_handwritten_example_averages_steps() {
    let p = read_profile(&profile("kineto/tiny_cnn_handwritten.json"), ProfileFormat::Kineto).unwrap();
    assert_eq!(p.iterations, 2);
    let names: Vec<_> = p.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["conv1", "relu1", "fc"]);
    assert_eq!(p.layers[0].forward_us, 310.0);
    assert_eq!(p.layers[0].backward_us, 510.0);
    assert_eq!(p.layers[2].param_bytes, 8_196_000);
    assert_eq!(p.layers[1].kind, LayerKind::Activation);
}

/// A real trace (HolisticTraceAnalysis' DDP test trace, 2 GPUs, rank 0, trimmed by
/// traces/profiles/kineto/trim.py): its ranges are phases, not layers, with ranges nested in others,
/// NCCL's collective ranges on host and device, and device spans for some ranges only. The reader
/// must count each moment once (innermost host ranges, no collectives), so the phases it returns
/// add up to no more than a step; the expected values are computed here from the JSON itself.
#[test]
fn kineto_real_ddp_trace_counts_each_moment_once() {
    let path = profile("kineto/hta_ddp_2gpu_rank0.json");
    let p = read_profile(&path, ProfileFormat::Kineto).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let host = |name: &str| -> Vec<f64> {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "user_annotation" && e["name"].as_str().unwrap().starts_with(name))
            .map(|e| e["dur"].as_f64().unwrap())
            .collect()
    };
    let steps = host("ProfilerStep#");
    assert_eq!(p.iterations, 3);
    assert_eq!(steps.len(), 3);
    let names: Vec<_> = p.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Optimizer.zero_grad#SGD.zero_grad",
            "DistributedDataParallel.forward",
            "## backward ##",
            "Optimizer.step#SGD.step"
        ]
    );
    for l in &p.layers {
        let mean = host(&l.name).iter().sum::<f64>() / 3.0;
        assert!((l.forward_us - mean).abs() < 1e-6 * mean, "{}: {} vs {mean}", l.name, l.forward_us);
    }
    // Host-side backward, not its 0.6 ms device span.
    assert!(p.layers[2].forward_us > 90_000.0, "{}", p.layers[2].forward_us);
    let step = steps.iter().sum::<f64>() / 3.0;
    let phases: f64 = p.layers.iter().map(|l| l.forward_us + l.backward_us).sum();
    assert!(phases <= step && phases > 0.9 * step, "phases {phases} us in a step of {step} us");
}

#[test]
fn importer_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"a\", \"ts\": 1}]}",
    )
    .unwrap();
    let e = read_profile(&bad, ProfileFormat::Kineto).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("dur"), "{e}");
    let e = read_profile(&bad, ProfileFormat::Caffe).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("Caffe"), "{e}");
}
