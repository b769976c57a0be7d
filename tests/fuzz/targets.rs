//! The fuzz targets: one per reader, each with its seed corpus from the shipped files. A target
//! reads the input as its reader would from a file named [`INPUT_NAME`], then uses what it read
//! the way the next stage does (a workload's sums, a machine built from a topology, a calibration
//! applied, a hybrid table simulated), so a value that passes the reader but breaks later shows.

use dagsim::hw::{load_topology, LinkKind};
use std::path::PathBuf;

/// The name every input is read under; errors must mention it.
pub const INPUT_NAME: &str = "fuzz-input";

pub struct Target {
    pub name: &'static str,
    pub seeds: fn() -> Vec<Vec<u8>>,
    pub run: fn(&[u8]) -> Result<(), String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(paths: &[&str]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| std::fs::read(repo().join(p)).unwrap_or_else(|e| panic!("seed {p}: {e}"))).collect()
}

fn glob(dir: &str, ext: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn text(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

fn path(ext: &str) -> PathBuf {
    PathBuf::from(format!("{INPUT_NAME}.{ext}"))
}

/// A path in a shipped folder, so relative references in the input resolve as they would there.
fn path_in(dir: &str, ext: &str) -> PathBuf {
    repo().join(dir).join(format!("{INPUT_NAME}.{ext}"))
}

fn err(e: dagsim::Error) -> String {
    e.to_string()
}

const TABLE_VI: &str = "Id Name Forward Backward Comm. Size\n0 data 100 0 0 0\n1 conv1 10 20 5 400\n2 fc 30 40 7 800\n\
                        0 data 300 0 0 0\n1 conv1 20 30 5 400\n2 fc 30 40 9 800\n";

fn use_workload(w: &dagsim::workload::Workload) {
    let _ = (w.forward_ns(), w.backward_ns(), w.grad_bytes(), w.measured_comm_ns());
}

fn trace_seeds() -> Vec<Vec<u8>> {
    let mut s = read(&["traces/alexnet_k80.csv", "traces/alexnet_titanx_caffe.csv"]);
    s.push(TABLE_VI.as_bytes().to_vec());
    s
}

fn trace(input: &[u8], format: dagsim::workload::TraceFormat) -> Result<(), String> {
    let w = dagsim::workload::read_trace_str(&text(input), &path("csv"), format).map_err(err)?;
    use_workload(&w);
    Ok(())
}

fn profile(input: &[u8], format: dagsim::workload::import::ProfileFormat) -> Result<(), String> {
    use dagsim::workload::import as im;
    use dagsim::workload::import::ProfileFormat as F;
    let (t, p) = (text(input), path("log"));
    let profiles = match format {
        F::Pipedream => vec![im::read_pipedream_graph(&t, &p).map_err(err)?],
        F::Caffe => im::read_caffe_time_log(&t, &p).map_err(err)?,
        F::Bcaffe => vec![im::read_bcaffe_comm_log(&t, &p).map_err(err)?],
        F::Kineto => vec![im::read_kineto_trace(&t, &p).map_err(err)?],
        F::Chakra => vec![im::Profile::from_workload(&im::chakra::chakra_et_to_workload(input, &p).map_err(err)?)],
    };
    for prof in &profiles {
        let _ = prof.compute_us();
        use_workload(&prof.to_workload());
    }
    Ok(())
}

/// Chakra traces: the shipped AlexNet trace as dagsim exports it, and a small trace shaped like a
/// PyTorch conversion (CPU ops, their GPU kernels, an autograd op, an all-reduce).
fn chakra_seeds() -> Vec<Vec<u8>> {
    use dagsim::workload::import::chakra::{
        encode_chakra_et, AttributeProto, ChakraTrace, GlobalMetadata, Node, NodeType, Value,
    };
    let attr =
        |name: &str, value: Value| AttributeProto { name: name.into(), doc_string: String::new(), value: Some(value) };
    let node = |id: u64,
                name: &str,
                ty: NodeType,
                parent: Option<u64>,
                data: Vec<u64>,
                us: u64,
                attrs: Vec<AttributeProto>| Node {
        id,
        name: name.into(),
        r#type: ty as i32,
        ctrl_deps: parent.into_iter().collect(),
        data_deps: data,
        duration_micros: us,
        attr: attrs,
        ..Default::default()
    };
    let gpu = || vec![attr("is_cpu_op", Value::BoolVal(false))];
    let foreign = ChakraTrace {
        metadata: GlobalMetadata {
            version: String::new(),
            attr: vec![attr("schema", Value::StringVal("1.0.1".into()))],
        },
        nodes: vec![
            node(
                1,
                "aten::linear",
                NodeType::CompNode,
                None,
                vec![],
                30,
                vec![attr("is_cpu_op", Value::BoolVal(true))],
            ),
            node(2, "ampere_sgemm_128x64_tn", NodeType::CompNode, Some(1), vec![], 120, gpu()),
            node(
                3,
                "autograd::engine::evaluate_function: AddmmBackward0",
                NodeType::CompNode,
                None,
                vec![1],
                40,
                vec![],
            ),
            node(4, "ampere_sgemm_64x64_nn", NodeType::CompNode, Some(3), vec![2], 250, gpu()),
            node(
                5,
                "ncclKernel_AllReduce_RING_LL_Sum_float",
                NodeType::CommCollNode,
                Some(3),
                vec![4],
                80,
                vec![
                    attr("comm_type", Value::Int64Val(0)),
                    attr("comm_size", Value::Int64Val(4_194_304)),
                    attr("is_cpu_op", Value::BoolVal(false)),
                ],
            ),
        ],
    };
    vec![dagsim::workload::import::write_chakra_et(&dagsim::bench::alexnet_k80()), encode_chakra_et(&foreign)]
}

fn topology(input: &[u8], toml: bool) -> Result<(), String> {
    let t = dagsim::hw::topology::parse_topology(&text(input), &path(if toml { "toml" } else { "json" }), toml)
        .map_err(err)?;
    for gpus in [1, 4, 16] {
        match t.instantiate(gpus) {
            Ok(m) => {
                for g in 1..m.gpus.len().min(4) {
                    let _ = m.shortest_path(m.gpus[0].device, m.gpus[g].device);
                }
            }
            // Asking for more GPUs than a fixed machine has is the caller's error, not the file's.
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

fn topology_toml_seeds() -> Vec<Vec<u8>> {
    glob("topologies", "json")
        .iter()
        .filter_map(|j| {
            let v: serde_json::Value = serde_json::from_slice(j).ok()?;
            toml::to_string(&v).ok().map(String::into_bytes)
        })
        .collect()
}

fn scenario(input: &[u8]) -> Result<(), String> {
    let s = dagsim::scenario::Scenario::parse(&text(input), &path_in("scenarios", "toml")).map_err(err)?;
    let setup = s.setup().map_err(err)?;
    setup.check().map_err(err)
}

fn measurement(input: &[u8], osu: bool) -> Result<(), String> {
    let t = text(input);
    let m = if osu {
        dagsim::calibrate::formats::parse_osu(&t, &path("osu"), None)
    } else {
        dagsim::calibrate::formats::parse_nccl_tests(&t, &path("nccl"))
    }
    .map_err(err)?;
    let _ = format!("{m:?}");
    Ok(())
}

const P2P_SEED: &str = "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1      2      3\n     0 700.0  18.5  18.5  18.5\n     1  18.5 700.0  18.5  18.5\n     2  18.5  18.5 700.0  18.5\n     3  18.5  18.5  18.5 700.0\n\
P2P=Enabled Latency Matrix (us)\n   GPU     0      1      2      3\n     0   1.50   9.80   9.80   9.80\n     1   9.80   1.50   9.80   9.80\n     2   9.80   9.80   1.50   9.80\n     3   9.80   9.80   9.80   1.50\n";

fn p2p_seeds() -> Vec<Vec<u8>> {
    let mut per_size = String::new();
    for shift in [0, 16, 24] {
        let bytes = 1u64 << shift;
        per_size += &format!("===== {bytes} =====\nNVLink-Latency\n   D\\D     0 1 2 3\n");
        for a in 0..4 {
            let t = 10.0 + bytes as f64 / 20e3;
            let cells: Vec<String> = (0..4).map(|b| format!("{:.3}", if a == b { 1.0 } else { t })).collect();
            per_size += &format!("     {a} {}\n", cells.join(" "));
        }
    }
    vec![P2P_SEED.as_bytes().to_vec(), per_size.into_bytes()]
}

fn p2p(input: &[u8]) -> Result<(), String> {
    let t = text(input);
    let kind = if t.contains("NVLink-Latency") { LinkKind::Nvlink } else { LinkKind::Pcie };
    let table = dagsim::calibrate::p2p::parse_p2p(&t, &path("txt"), kind).map_err(err)?;
    let topo = load_topology(if kind == LinkKind::Nvlink { "dgx1-p100" } else { "scaledl-server-a" }).map_err(err)?;
    dagsim::calibrate::p2p::fit_p2p(&topo, &table, kind).map_err(err)?;
    Ok(())
}

fn calibration_seeds() -> Vec<Vec<u8>> {
    // What `dagsim calibrate` writes, from the shipped ABCI measurement, plus a hand-written one.
    let m = dagsim::calibrate::formats::read_measurement(
        &repo().join("topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl"),
        None,
    )
    .unwrap();
    let topo = load_topology("abci-v").unwrap();
    let fit = dagsim::calibrate::fit_allreduce(&topo, &m, &Default::default()).unwrap();
    vec![fit.calibration.to_json().into_bytes(), read(&["topologies/k80-cluster.json"]).remove(0)]
}

fn calibration(input: &[u8]) -> Result<(), String> {
    let cal = dagsim::hw::Calibration::parse(&text(input), &path("json")).map_err(err)?;
    for preset in ["abci-v", "k80-cluster"] {
        let mut m = load_topology(preset).map_err(err)?.instantiate(4).map_err(err)?;
        if m.apply_calibration(&cal).is_ok() {
            let _ = m.shortest_path(m.gpus[0].device, m.gpus[1].device);
        }
    }
    Ok(())
}

fn validation(input: &[u8]) -> Result<(), String> {
    let p = path_in("validation", "csv");
    dagsim::validate::format::parse_measurements(&text(input), &p, &repo().join("validation")).map_err(err)?;
    Ok(())
}

/// A validation report as `dagsim validate --format csv` and `--format json` write it (abridged).
fn report_seeds() -> Vec<Vec<u8>> {
    let csv = "set,id,line,workload,topology,gpus,strategy,metric,unit,measured,spread,predicted,error,within_spread,status,group,known_miss,source\n\
               tf2017,r2,10,resnet50,dgx1-p100,2,io+wfbp,throughput,samples/s,422.0,,437.96,0.0378,,ok,,,\"TF, 2017\"\n\
               k80,s8,12,alexnet,k80,8,io,speedup,x,7.073,,7.99,0.131,,known_miss,,too slow,src\n\
               k80,ref,13,alexnet,k80,1,io,iteration_time,s,,,0.5,,,reference,,,src\n";
    let json = r#"{"dagsim_version":"0.1.0","gate":{"tolerance":0.1,"max_error":0.25},"rows":[
        {"set":"a","id":"r1","metric":"throughput","unit":"samples/s","measured":100.0,"predicted":120.0,"status":"ok"},
        {"set":"b","id":"r2","metric":"iteration_time","unit":"s","measured":null,"predicted":0.3,"status":"reference"}]}"#;
    vec![csv.as_bytes().to_vec(), json.as_bytes().to_vec()]
}

fn report(input: &[u8]) -> Result<(), String> {
    let p = path("csv");
    let r = dagsim::validate::scatter::parse_report(&text(input), &p).map_err(err)?;
    dagsim::validate::scatter::scatter_panels(&p, &r.rows, 0.25).map_err(err)?;
    Ok(())
}

fn sweep(input: &[u8]) -> Result<(), String> {
    let s = dagsim::sweep::Sweep::parse(&text(input), &path_in("sweeps", "toml")).map_err(err)?;
    let _ = (s.point_count(), s.config_label(0));
    Ok(())
}

fn hybrid(input: &[u8]) -> Result<(), String> {
    use dagsim::dag::hybrid::Channels;
    use dagsim::strategy::hybrid::{HybridTable, Precision};
    let table = HybridTable::parse(&text(input), &path("csv")).map_err(err)?;
    let setup = dagsim::predict_hybrid::HybridSetup {
        table,
        topology: load_topology("dettmers-4gpu").map_err(err)?,
        precision: Precision::Bits8,
        channels: Channels::PerBoundary,
        iterations: 3,
    };
    setup.predict(4).map_err(err)?;
    Ok(())
}

fn strategy(input: &[u8]) -> Result<(), String> {
    let s = dagsim::strategy::Strategy::parse(&text(input)).map_err(err)?;
    let _ = s.name();
    Ok(())
}

pub fn all() -> Vec<Target> {
    use dagsim::workload::import::ProfileFormat as F;
    use dagsim::workload::TraceFormat as T;
    vec![
        Target { name: "trace", seeds: trace_seeds, run: |i| trace(i, T::Auto) },
        Target { name: "trace-table6", seeds: trace_seeds, run: |i| trace(i, T::ShiTable) },
        Target {
            name: "pipedream",
            seeds: || {
                read(&[
                    "traces/profiles/pipedream/alexnet/graph.txt",
                    "traces/profiles/pipedream/vgg16/graph.txt",
                    "traces/profiles/pipedream/resnet18/graph.txt",
                ])
            },
            run: |i| profile(i, F::Pipedream),
        },
        Target {
            name: "caffe",
            seeds: || read(&["traces/profiles/caffe/output_alexnet.log", "traces/profiles/caffe/output_vgg_a.log"]),
            run: |i| profile(i, F::Caffe),
        },
        Target {
            name: "bcaffe",
            seeds: || read(&["traces/profiles/bcaffe/googlenet_4workers_comm.log"]),
            run: |i| profile(i, F::Bcaffe),
        },
        Target {
            name: "kineto",
            seeds: || {
                read(&[
                    "traces/profiles/kineto/tiny_cnn_handwritten.json",
                    "traces/profiles/kineto/hta_ddp_2gpu_rank0.json",
                ])
            },
            run: |i| profile(i, F::Kineto),
        },
        Target { name: "chakra", seeds: chakra_seeds, run: |i| profile(i, F::Chakra) },
        Target { name: "topology-json", seeds: || glob("topologies", "json"), run: |i| topology(i, false) },
        Target { name: "topology-toml", seeds: topology_toml_seeds, run: |i| topology(i, true) },
        Target {
            name: "scenario",
            seeds: || {
                read(&[
                    "scenarios/alexnet_k80_scaling.toml",
                    "scenarios/scaledn_alexnet.toml",
                    "tests/fixtures/sweep_small.toml",
                ])
            },
            run: scenario,
        },
        Target {
            name: "nccl-tests",
            seeds: || {
                read(&[
                    "topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl",
                    "topologies/measured/abci/bcast_intra_vnode_4gpu.nccl",
                    "topologies/measured/abci/allreduce_inter_vnode_2node.nccl",
                ])
            },
            run: |i| measurement(i, false),
        },
        Target {
            name: "osu",
            seeds: || read(&["topologies/measured/abci/allreduce_intra_vnode_4gpu.osu"]),
            run: |i| measurement(i, true),
        },
        Target { name: "p2p", seeds: p2p_seeds, run: p2p },
        Target { name: "calibration", seeds: calibration_seeds, run: calibration },
        Target { name: "validation", seeds: || glob("validation", "csv"), run: validation },
        Target { name: "sweep", seeds: || glob("sweeps", "toml"), run: sweep },
        Target { name: "validate-report", seeds: report_seeds, run: report },
        Target { name: "hybrid-table", seeds: || read(&["traces/dettmers_alexnet_titanx.csv"]), run: hybrid },
    ]
}

/// Strategy specs are command-line values, not files: their errors name the flag instead.
pub fn strategy_target() -> Target {
    Target {
        name: "strategy",
        seeds: || {
            [
                "io+wfbp",
                "none",
                "master+split+preload+weights=3to1",
                "mps=4+util=0.5+threads=50",
                "fusion=4M+grads=8bit",
            ]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect()
        },
        run: strategy,
    }
}
