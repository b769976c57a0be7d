//! Chakra execution traces (issue 17, item 5): dagsim -> Chakra -> dagsim gives the same workload
//! and prediction; a public Chakra trace of a PyTorch run loads and simulates; bad files are
//! refused naming the file and the node.

mod common;

use dagsim::hw::load_topology;
use dagsim::predict::Setup;
use dagsim::strategy::Strategy;
use dagsim::workload::import::chakra::{
    chakra_et_to_workload, decode_chakra_et, encode_chakra_et, workload_to_chakra, NodeType,
};
use dagsim::workload::import::{read_chakra_et, write_chakra_et};
use dagsim::workload::{read_trace, TraceFormat, Workload};
use std::path::{Path, PathBuf};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn predict(w: &Workload, topology: &str, strategy: &str, gpus: u32) -> dagsim::report::Prediction {
    let setup = Setup {
        workload: w.clone(),
        topology: load_topology(topology).unwrap(),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 3,
    };
    setup.predict(gpus).unwrap()
}

#[test]
fn dagsim_to_chakra_to_dagsim_gives_the_same_workload_and_prediction() {
    for trace in ["traces/alexnet_k80.csv", "traces/alexnet_titanx_caffe.csv"] {
        let w = read_trace(&repo(trace), TraceFormat::Auto).unwrap();
        let bytes = write_chakra_et(&w);
        let back = chakra_et_to_workload(&bytes, Path::new("roundtrip.et")).unwrap();
        // Per-layer spreads (std, samples) are not part of the DAG; everything simulated is.
        assert_eq!(back.layers.len(), w.layers.len(), "{trace}");
        for (a, b) in w.layers.iter().zip(&back.layers) {
            assert_eq!(
                (&a.name, a.forward.mean_ns, a.backward.mean_ns),
                (&b.name, b.forward.mean_ns, b.backward.mean_ns)
            );
            assert_eq!((a.grad_bytes, &a.grad_tensors), (b.grad_bytes, &b.grad_tensors), "{trace} {}", a.name);
            assert_eq!(a.comm.map(|c| c.mean_ns), b.comm.map(|c| c.mean_ns), "{trace} {}", a.name);
        }
        assert_eq!(
            (w.batch_per_gpu, w.sample_bytes, w.device_sample_bytes, w.update.mean_ns, w.fp16),
            (back.batch_per_gpu, back.sample_bytes, back.device_sample_bytes, back.update.mean_ns, back.fp16)
        );
        assert_eq!(w.data_load.map(|d| d.mean_ns), back.data_load.map(|d| d.mean_ns), "{trace}");
        for (topology, strategy, gpus) in [("k80-cluster", "io+wfbp", 16), ("v100-cluster", "wfbp+allreduce=tree", 8)] {
            let (p, q) = (predict(&w, topology, strategy, gpus), predict(&back, topology, strategy, gpus));
            assert_eq!(p.iteration_time_s, q.iteration_time_s, "{trace} on {topology}");
            assert_eq!(p.speedup, q.speedup, "{trace} on {topology}");
        }
    }
}

#[test]
fn the_exported_dag_is_a_valid_chakra_graph() {
    let w = read_trace(&repo("traces/alexnet_k80.csv"), TraceFormat::Auto).unwrap();
    let t = workload_to_chakra(&w);
    let learnable = w.layers.iter().filter(|l| l.grad_bytes > 0).count();
    let count = |ty: NodeType| t.nodes.iter().filter(|n| n.r#type == ty as i32).count();
    // Forward and backward per layer plus the update; one all-reduce per learnable layer.
    assert_eq!(count(NodeType::CompNode), 2 * w.layers.len() + 1);
    assert_eq!(count(NodeType::CommCollNode), learnable);
    assert_eq!(t.metadata.version, "1.0.0");
    // Every dependency points to an earlier node (the file is in a valid execution order).
    for n in &t.nodes {
        assert!(n.data_deps.iter().all(|&d| d < n.id), "node {}", n.id);
    }
    // Decoding the bytes gives the same messages.
    assert_eq!(decode_chakra_et(&encode_chakra_et(&t), Path::new("x.et")).unwrap(), t);
}

#[test]
fn a_public_chakra_trace_of_a_pytorch_run_loads_and_simulates() {
    let path = repo("traces/chakra/feeder_tests_chakra.0.et.gz");
    let mut w = read_chakra_et(&path).unwrap();
    // The trace's GPU kernels become layers; it records no batch size, so one is given here.
    assert!(w.layers.len() > 100, "{} layers", w.layers.len());
    let (fwd, bwd) = (w.forward_ns(), w.backward_ns());
    assert!(fwd > 0 && bwd > 0, "forward {fwd} ns, backward {bwd} ns");
    assert!(w.grad_bytes() > 0, "the trace's all-reduces give gradients");
    w.batch_per_gpu = 32;
    let one = predict(&w, "dgx1-v100", "io+wfbp", 1);
    let eight = predict(&w, "dgx1-v100", "io+wfbp", 8);
    assert!(one.iteration_time_s > 0.0 && one.iteration_time_s.is_finite());
    // Eight GPUs add the modelled all-reduce of the trace's gradients: never faster than one.
    assert!(eight.iteration_time_s >= one.iteration_time_s, "{} vs {}", eight.iteration_time_s, one.iteration_time_s);
}

#[test]
fn bad_chakra_files_name_the_file_and_the_node() {
    let w = read_trace(&repo("traces/alexnet_k80.csv"), TraceFormat::Auto).unwrap();
    let good = workload_to_chakra(&w);
    let err = |t: &dagsim::workload::import::chakra::ChakraTrace| {
        chakra_et_to_workload(&encode_chakra_et(t), Path::new("bad.et")).unwrap_err().to_string()
    };
    // Truncated: the last node's bytes are cut short.
    let bytes = encode_chakra_et(&good);
    let e = chakra_et_to_workload(&bytes[..bytes.len() - 3], Path::new("bad.et")).unwrap_err().to_string();
    let last = good.nodes.len() - 1;
    assert!(e.contains("bad.et") && e.contains(&format!("node #{last}")) && e.contains("truncated"), "{e}");
    // Unknown schema version.
    let mut t = good.clone();
    t.metadata.version = "9.9.9".into();
    let e = err(&t);
    assert!(e.contains("bad.et") && e.contains("version") && e.contains("9.9.9"), "{e}");
    // A dependency on a node that is not there.
    let mut t = good.clone();
    t.nodes[3].data_deps.push(999_999);
    let e = err(&t);
    assert!(e.contains("bad.et") && e.contains("node id 3") && e.contains("999999"), "{e}");
    // A cycle.
    let mut t = good.clone();
    t.nodes[0].data_deps.push(5);
    let e = err(&t);
    assert!(e.contains("bad.et") && e.contains("cycle") && e.contains("node id"), "{e}");
    // Not a Chakra file at all.
    let e = chakra_et_to_workload(b"layer,name,forward_us\n", Path::new("bad.et")).unwrap_err().to_string();
    assert!(e.contains("bad.et"), "{e}");
    // An empty file.
    let e = chakra_et_to_workload(b"", Path::new("bad.et")).unwrap_err().to_string();
    assert!(e.contains("bad.et") && e.contains("empty"), "{e}");
}

/// A Chakra trace given to a text reader (the native trace, Kineto) says what it is and which flag
/// reads it, instead of "not valid UTF-8"; so does an execution trace in JSON given to Kineto's.
#[test]
fn a_chakra_file_given_to_the_wrong_reader_names_the_right_one() {
    let et = "traces/chakra/feeder_tests_chakra.0.et.gz";
    for extra in [&[][..], &["--profile-format", "kineto"][..]] {
        let args = [&["predict", "--trace", et, "--gpus", "1"][..], extra].concat();
        common::fails_with(&args, &[et, "Chakra execution trace", "--profile-format chakra"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("et.json");
    std::fs::write(&json, r#"{"schema": "1.0.2-chakra.0.0.4", "pid": 1, "nodes": []}"#).unwrap();
    let json = json.to_str().unwrap();
    common::fails_with(
        &["predict", "--trace", json, "--profile-format", "kineto", "--gpus", "1", "--batch", "8"],
        &["et.json", "not a Kineto trace", "--profile-format chakra"],
    );
}
