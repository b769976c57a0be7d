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
    // (The shipped 152 KB trace of a real run is not a seed: each mutant would take 15 ms; its
    // truncations are bad_inputs.rs cases.)
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

/// Fat-tree topologies: the shipped example and small ones with every tier and ECMP mode, each
/// asked for enough GPUs that routes cross pods.
fn fabric_seeds() -> Vec<Vec<u8>> {
    let mut seeds = read(&["topologies/examples/h100-fat-tree.json"]);
    for (leaf, spine, core, extra) in [
        (r#"{"nodes":2}"#, r#"{"switches":2,"leaf_groups":1,"oversubscription":4}"#, r#","core":{"switches":3}"#, ""),
        (r#"{"nodes":1,"oversubscription":2}"#, r#"{"switches":3,"latency_us":0.5}"#, "", r#","ecmp":"hash""#),
        (
            r#"{"nodes":1}"#,
            r#"{"switches":2,"leaf_groups":2}"#,
            r#","core":{"switches":2,"latency_us":2}"#,
            r#","rails":false,"ecmp":"hash""#,
        ),
    ] {
        seeds.push(
            format!(r#"{{"name":"t","base":"dgx-h100","fabric":{{"leaf":{leaf},"spine":{spine}{core}{extra}}}}}"#)
                .into_bytes(),
        );
    }
    seeds
}

fn fabric(input: &[u8]) -> Result<(), String> {
    let t = dagsim::hw::topology::parse_topology(&text(input), &path("json"), false).map_err(err)?;
    for gpus in [16, 64] {
        let Ok(m) = t.instantiate(gpus) else { return Ok(()) };
        let last = m.gpus.len() - 1;
        for (a, b) in [(0, last), (last, 1), (3, last / 2)] {
            let _ = m.shortest_path(m.gpus[a].device, m.gpus[b].device);
            let _ = m.route_via_rail(m.gpus[a].device, m.gpus[b].device, 2);
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

/// A model-zoo scenario with the NCCL settings given, and one under the Gloo runtime.
const SCENARIO_NCCL: &str = "gpus = [8, 16]\niterations = 3\nstrategy = \"io+wfbp+runtime=ddp\"\n\n[workload]\nmodel = \"resnet50\"\ngpu = \"V100\"\nbatch_per_gpu = 32\nprecision = \"fp16\"\n\n[machine]\ntopology = \"dgx1-v100\"\ncollective_model = \"nccl\"\nnccl_version = \"2.18.3\"\nnccl_algo = \"ring\"\nnccl_proto = \"simple\"\n";
const SCENARIO_GLOO: &str = "gpus = [4]\nstrategy = \"io+wfbp+runtime=gloo\"\n\n[workload]\ntrace = \"../traces/alexnet_k80.csv\"\nupdate_us = 1500\n\n[machine]\ntopology = \"k80-cluster\"\ncollective_model = \"ideal\"\n";

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

/// Hugging Face `config.json` files (`--model FILE`): the shipped Megatron configs and small ones of
/// every model type, each costed on an H100 the way a plan does (MoE layers included).
fn hf_config_seeds() -> Vec<Vec<u8>> {
    let mut seeds = glob("validation/models", "json");
    for extra in [
        r#"{"model_type":"mixtral","hidden_size":512,"num_attention_heads":8,"num_key_value_heads":2,"max_position_embeddings":4096,"num_hidden_layers":4,"intermediate_size":1024,"vocab_size":32000,"num_local_experts":8,"num_experts_per_tok":2}"#,
        r#"{"model_type":"deepseek","hidden_size":512,"num_attention_heads":8,"max_position_embeddings":4096,"num_hidden_layers":4,"intermediate_size":2048,"moe_intermediate_size":256,"vocab_size":32000,"n_routed_experts":16,"n_shared_experts":2,"num_experts_per_tok":4,"first_k_dense_replace":1}"#,
        r#"{"model_type":"qwen2_moe","hidden_size":256,"num_attention_heads":4,"max_position_embeddings":2048,"num_hidden_layers":2,"intermediate_size":512,"moe_intermediate_size":128,"shared_expert_intermediate_size":512,"vocab_size":1000,"num_experts":8,"num_experts_per_tok":2,"head_dim":64}"#,
        r#"{"model_type":"gpt2","n_embd":768,"n_head":12,"n_layer":12,"n_positions":1024,"vocab_size":50257}"#,
        r#"{"model_type":"mpt","d_model":2048,"n_heads":16,"n_layers":24,"max_seq_len":2048,"vocab_size":50368,"expansion_ratio":4,"attn_config":{"alibi":true,"kv_n_heads":16}}"#,
        r#"{"model_type":"bloom","hidden_size":1024,"n_head":16,"n_layer":24,"vocab_size":250880,"seq_length":2048}"#,
        r#"{"model_type":"bert","hidden_size":1024,"num_attention_heads":16,"num_hidden_layers":24,"intermediate_size":4096,"max_position_embeddings":512,"vocab_size":30522,"type_vocab_size":2}"#,
    ] {
        seeds.push(extra.as_bytes().to_vec());
    }
    seeds
}

fn llm_cost(cfg: &dagsim::workload::transformer::TransformerConfig, tp: u32, ep: u32) -> Result<(), String> {
    use dagsim::workload::llm::{cost_moe, CostOptions, LossKernel, Recompute, SoftmaxKernel};
    use dagsim::workload::moe::MoeOptions;
    let gpu = dagsim::workload::GpuSpec::by_name("H100").map_err(err)?;
    let opts = CostOptions {
        micro_batch: 1,
        seq_len: cfg.seq_len,
        precision: dagsim::workload::Precision::Bf16,
        tp,
        sequence_parallel: tp > 1,
        recompute: Recompute::None,
        flash_attention: true,
        matmul_tflops: None,
        attention: None,
        loss: LossKernel::Fused,
        softmax: SoftmaxKernel::Fused,
        fp8_recipe: Default::default(),
    };
    let c = cost_moe(cfg, gpu, &opts, &MoeOptions { ep, ..Default::default() }).map_err(err)?;
    let _ = (c.single_gpu_step_ns(), c.model_flops_per_token());
    use_workload(&c.to_workload());
    Ok(())
}

fn hf_config(input: &[u8]) -> Result<(), String> {
    let cfg = dagsim::workload::transformer::parse_hf_config(&text(input), &path("json")).map_err(err)?;
    let _ = (cfg.params().total(), cfg.params().active());
    llm_cost(&cfg, 1, 1)
}

/// `--parallel` plans (a flag: errors name it): line 1 the spec, line 2 `MICRO GLOBAL` batches,
/// line 3 a shipped model; checked, costed and sized for memory as `predict --parallel` does.
fn parallel_seeds() -> Vec<Vec<u8>> {
    [
        "tp=4,pp=2,dp=2,sp=on\n1 16\nllama2-7b",
        "tp=8,pp=8,dp=16,vp=3,sp=on,recompute=selective\n1 1536\ngpt3-175b",
        "tp=2,dp=4,ep=4,sp=on,moe-capacity=1.25,moe-pad=on,moe-imbalance=1.5\n1 8\nmixtral-8x7b",
        "tp=2,dp=4,ep=8,sp=on,moe-dispatcher=flex\n2 16\nmixtral-8x7b",
        "dp=8,fsdp=hybrid,shard-group=4,fsdp-wrap=layer\n2 32\nllama2-7b",
        "tp=2,cp=2,dp=2,sp=on,tp-overlap=on,zero=1\n1 8\nllama2-7b",
        "tp=2,pp=4,schedule=gpipe,zero=1,flash=off,tp-across-nodes=on\n4 64\ngpt3-175b",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn parallel(input: &[u8]) -> Result<(), String> {
    use dagsim::parallel::ParallelPlan;
    let t = text(input);
    let mut lines = t.lines();
    let mut plan = ParallelPlan::parse(lines.next().unwrap_or("")).map_err(err)?;
    let mut batches = lines.next().unwrap_or("").split_whitespace().map(|v| v.parse::<u32>().ok());
    plan.micro_batch = batches.next().flatten().unwrap_or(1);
    plan.global_batch = batches.next().flatten().unwrap_or(plan.micro_batch.saturating_mul(plan.dp));
    let model = lines
        .next()
        .and_then(dagsim::workload::transformer::TransformerConfig::named)
        .unwrap_or_else(|| dagsim::workload::transformer::TransformerConfig::named("llama2-7b").unwrap());
    plan.check(plan.gpus(), model.layers).map_err(err)?;
    let setup = dagsim::predict_plan::PlanSetup {
        seq_len: model.seq_len,
        model,
        gpu: dagsim::workload::GpuSpec::by_name("H100").map_err(err)?,
        precision: dagsim::workload::Precision::Bf16,
        strategy: dagsim::predict_plan::default_plan_strategy(&plan),
        plan,
        topology: load_topology("dgx-h100").map_err(err)?,
        iterations: 2,
        calibrate_throughput: None,
        matmul_tflops: None,
        replica_classes: Default::default(),
        class_splits: dagsim::predict_plan::CLASS_SPLITS,
    };
    let _ = setup.plan.name();
    let _ = setup.memory(8);
    setup.cost().map_err(err)?;
    Ok(())
}

/// Faults (flags: errors name them): one `FLAG VALUE` a line, applied to a two-node H100 machine.
fn faults_seeds() -> Vec<Vec<u8>> {
    [
        "--slow-gpu 3=1.5",
        "--straggler-node 1=2\n--slow-gpu 0=1.1",
        "--degrade-link n0.nic0:switch=0.5",
        "--degrade-link n1.gpu2:n1.nvswitch=0.25\n--slow-gpu 15=4",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn faults(input: &[u8]) -> Result<(), String> {
    use dagsim::hw::faults::Faults;
    let mut t = load_topology("dgx-h100").map_err(err)?;
    for line in text(input).lines() {
        let (flag, value) = line.split_once(' ').unwrap_or((line, ""));
        match flag {
            "--slow-gpu" | "--straggler-node" => {
                let (who, f) = Faults::parse_slow(flag, value).map_err(err)?;
                if flag == "--slow-gpu" {
                    t.faults.slow_gpus.push((who, f))
                } else {
                    t.faults.slow_nodes.push((who, f))
                }
            }
            _ => t.faults.degraded_links.push(Faults::parse_link(value).map_err(err)?),
        }
    }
    let m = t.instantiate(16).map_err(err)?;
    let _ = m.shortest_path(m.gpus[0].device, m.gpus[15].device);
    Ok(())
}

/// Sweep results as `sweep merge` and `sweep plot` read them back.
fn sweep_table_seeds() -> Vec<Vec<u8>> {
    vec![
        b"point,grid.strategy,gpus,speedup,compute_s,communication_s,io_s,idle_s\n0,none,1,1,1,0,0,0\n1,io,2,1.9,1,0.1,0,0\n"
            .to_vec(),
        b"point,grid.topology,grid.strategy,gpus,iteration_time_s,speedup,util_gpu0\n0,k80,io,1,0.5,1,0.9\n1,k80,io,2,0.26,1.92,0.88\n2,v100,io,2,0.1,1.9,\n"
            .to_vec(),
    ]
}

fn sweep_table(input: &[u8]) -> Result<(), String> {
    // One file per process, rewritten each run, in memory where there is a tmpfs (a disk write
    // per run costs more than the run).
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    }
    let p = DIR.with(|d| d.path().join(format!("{INPUT_NAME}.csv")));
    std::fs::write(&p, input).map_err(|e| e.to_string())?;
    let t = dagsim::sweep::table::Table::read_csv(&p).map_err(err)?;
    t.records(&p).map_err(err)?;
    // The file merged with itself: every row meets its twin, which must not conflict.
    dagsim::sweep::table::merge(&[p.clone(), p], dagsim::sweep::table::OnConflict::Refuse).map_err(err)?;
    Ok(())
}

/// The sweep `tests/fixtures/sweep_small.journal` was written by (its first three points).
const JOURNAL_SWEEP: &str =
    "[base]\niterations = 3\nworkload.trace = \"t.csv\"\n[grid]\ngpus = [1, 2]\nstrategy = [\"none\", \"io+wfbp\"]\n";

/// A resumed sweep's journal (one JSON record a line, checked against the sweep file).
fn sweep_journal(input: &[u8]) -> Result<(), String> {
    let sweep = dagsim::sweep::Sweep::parse(JOURNAL_SWEEP, &path_in("tests/fixtures", "toml")).map_err(err)?;
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    }
    let p = DIR.with(|d| d.path().join(format!("{INPUT_NAME}.partial")));
    std::fs::write(&p, input).map_err(|e| e.to_string())?;
    for shard in ["0/1", "1/2"] {
        let shard = dagsim::sweep::Shard::parse(shard).map_err(err)?;
        let j = dagsim::sweep::run::read_journal(&p, &sweep, shard).map_err(err)?;
        let _ = (j.records.len(), j.fresh);
    }
    Ok(())
}

/// A two-GPU `calibrate --gpu` file as the tool writes it (measurements and their fits).
#[cfg(feature = "cuda")]
fn gpu_calibration_seeds() -> Vec<Vec<u8>> {
    use dagsim::gpu::calibration::*;
    use dagsim::gpu::stats::Summary;
    let points = |latency_s: f64, gb_s: f64| -> Vec<SizePoint> {
        (0..6u32)
            .map(|i| {
                let bytes = 4096u64 << (3 * i);
                let t = latency_s + bytes as f64 / (gb_s * 1e9);
                SizePoint { bytes, time_s: Summary::of(&[t, t * 1.01]).unwrap() }
            })
            .collect()
    };
    let device = |ordinal| DeviceInfo {
        ordinal,
        name: "Fuzz GPU".into(),
        compute_capability: "7.0".into(),
        multiprocessors: 80,
        memory_bytes: 16 << 30,
    };
    let m = GpuMeasurements {
        settings: Settings { warmup: 2, repetitions: 5 },
        devices: vec![device(0), device(1)],
        gemm: vec![GemmPoint { device: 0, dtype: Dtype::F32, n: 2048, time_s: Summary::of(&[1e-3]).unwrap() }],
        host_copies: vec![HostCopySeries {
            device: 0,
            direction: Direction::H2d,
            memory: HostMemory::Pinned,
            points: points(8e-6, 12.0),
        }],
        peer_copies: vec![PeerCopySeries { src: 0, dst: 1, peer_access: true, points: points(4e-6, 40.0) }],
        allreduce: Some(AllReduceSeries { devices: vec![0, 1], points: points(15e-6, 20.0) }),
        notes: vec!["fuzz seed".into()],
    };
    let mut out = Vec::new();
    CalibrationFile::new(m).write_json(&mut out).unwrap();
    vec![out]
}

#[cfg(feature = "cuda")]
fn gpu_calibration(input: &[u8]) -> Result<(), String> {
    use dagsim::gpu::calibration::{derive_topology, fit_all, CalibrationFile};
    let p = path("json");
    let file = CalibrationFile::parse(&text(input), &p).map_err(err)?;
    let _ = fit_all(&file.measurements);
    let base = load_topology("k80-cluster").map_err(err)?;
    let topo = derive_topology(&file, &base, &p).map_err(err)?;
    topo.instantiate(4).map_err(err)?;
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
        Target { name: "topology-fabric", seeds: fabric_seeds, run: fabric },
        Target {
            name: "scenario",
            seeds: || {
                read(&[
                    "scenarios/alexnet_k80_scaling.toml",
                    "scenarios/scaledn_alexnet.toml",
                    "tests/fixtures/sweep_small.toml",
                ])
                .into_iter()
                .chain([SCENARIO_NCCL.as_bytes().to_vec(), SCENARIO_GLOO.as_bytes().to_vec()])
                .collect()
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
        Target { name: "hf-config", seeds: hf_config_seeds, run: hf_config },
        Target { name: "sweep-table", seeds: sweep_table_seeds, run: sweep_table },
        // The GPU calibration file (`calibrate --gpu`), whose reader is built with `--features cuda`.
        #[cfg(feature = "cuda")]
        Target { name: "gpu-calibration", seeds: gpu_calibration_seeds, run: gpu_calibration },
        Target {
            name: "sweep-journal",
            seeds: || {
                let j = read(&["tests/fixtures/sweep_small.journal"]).remove(0);
                vec![[b"{\"store\":\"fresh\"}\n".to_vec(), j.clone()].concat(), j]
            },
            run: sweep_journal,
        },
    ]
}

/// Command-line values, not files: their errors name the flag instead.
pub fn flag_targets() -> Vec<Target> {
    vec![
        strategy_target(),
        Target { name: "parallel", seeds: parallel_seeds, run: parallel },
        Target { name: "faults", seeds: faults_seeds, run: faults },
    ]
}

fn strategy_target() -> Target {
    Target {
        name: "strategy",
        seeds: || {
            [
                "io+wfbp",
                "none",
                "master+split+preload+weights=3to1",
                "mps=4+util=0.5+threads=50",
                "fusion=4M+grads=8bit",
                "io+wfbp+runtime=ddp",
                "io+wfbp+runtime=horovod+cycle_ms=0.1",
                "io+wfbp+runtime=gloo",
                "runtime=ps+servers=2",
                "io+wfbp+fusion=64M+runtime=openmpi",
            ]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect()
        },
        run: strategy,
    }
}
