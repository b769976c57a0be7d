//! `dagsim predict --parallel`: the plan's figures in every format, and bad plans refused with the
//! flag, the figures and what would be valid (exit 2, no panic).

mod common;
use common::{dagsim, fails_with};

const BASE: [&str; 4] = ["predict", "--model", "llama2-7b", "--topology"];

fn run(extra: &[&str]) -> String {
    let mut args: Vec<&str> = BASE.to_vec();
    args.push("dgx-a100");
    args.extend_from_slice(extra);
    let out = dagsim().args(&args).assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

fn fails(extra: &[&str], needles: &[&str]) {
    let mut args: Vec<&str> = BASE.to_vec();
    args.push("dgx-a100");
    args.extend_from_slice(extra);
    fails_with(&args, needles);
}

#[test]
fn prints_the_plan_figures_in_text_json_and_csv() {
    let plan = ["--parallel", "tp=4,pp=2,dp=2,sp=on,recompute=selective", "--global-batch", "16"];
    let text = run(&plan);
    for needle in ["step time", "tokens/s", "MFU", "HFU", "memory per GPU", "bubble", "stage"] {
        assert!(text.contains(needle), "text lacks `{needle}`: {text}");
    }
    let json: serde_json::Value = serde_json::from_str(&run(&[&plan[..], &["--format", "json"]].concat())).unwrap();
    let json = json[0].clone(); // always an array of results
    let llm = &json["llm"];
    let step = llm["step_time_s"].as_f64().unwrap();
    assert_eq!(json["iteration_time_s"].as_f64().unwrap(), step);
    let tokens = llm["tokens_per_s"].as_f64().unwrap();
    assert!((tokens * step / (16.0 * 4096.0) - 1.0).abs() < 1e-12, "tokens/s is the global batch's tokens per step");
    assert_eq!(llm["stages"].as_array().unwrap().len(), 2);
    assert!(llm["memory"]["total"].as_u64().unwrap() < llm["memory"]["capacity"].as_u64().unwrap());
    let csv = run(&[&plan[..], &["--format", "csv"]].concat());
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    for col in ["step_time_s", "tokens_per_s_per_gpu", "mfu", "bubble_fraction", "tp_comm_s", "dp_comm_s"] {
        assert!(header.contains(&col), "csv lacks {col}");
    }
    assert_eq!(lines.count(), 1);
}

#[test]
fn bad_plans_are_refused_with_what_would_be_valid() {
    fails(&["--parallel", "tp=8,pp=2,dp=2", "--gpus", "64"], &["--parallel", "= 32", "64 GPUs"]);
    fails(&["--parallel", "tp=3,pp=1,dp=2,tp-across-nodes=on"], &["tp=3", "32 attention heads"]);
    fails(&["--parallel", "tp=1,pp=5,dp=1"], &["pp x vp", "32 layers", "1, 2, 4, 8, 16, 32"]);
    fails(
        &["--parallel", "tp=8,pp=1,dp=2", "--micro-batch", "3", "--global-batch", "16"],
        &["--micro-batch", "divisor of 8"],
    );
    fails(&["--parallel", "tp=1,pp=1,dp=8", "--global-batch", "8"], &["needs", "GiB per GPU", "40.0 GiB"]);
    fails(&["--parallel", "tp=8,pq=1"], &["unknown key `pq`", "tp, pp, dp"]);
    // Whose modules: Transformer Engine's or PyTorch's; FP8 runs only in TE's.
    fails(&["--parallel", "tp=8,modules=apex"], &["--parallel", "modules=apex", "te or torch"]);
    fails_with(
        &[
            "predict",
            "--model",
            "llama2-7b",
            "--topology",
            "dgx-h100",
            "--precision",
            "fp8",
            "--parallel",
            "tp=8,modules=torch",
        ],
        &["--parallel", "modules=torch", "FP8", "modules=te"],
    );
    // The attention kernels: an unknown implementation, and one without published rates on A100.
    fails(&["--parallel", "tp=8,attn=fa4"], &["--parallel", "attn=fa4", "fa2, fa3 or cudnn"]);
    fails(&["--parallel", "tp=8,attn=fa3"], &["--parallel attn", "attn=fa3", "use attn=fa2"]);
    // The CP exchange: only Transformer Engine's two kinds.
    fails(&["--parallel", "tp=4,cp=2,cp-comm=a2a"], &["--parallel", "cp-comm=a2a", "p2p or all-gather"]);
    fails(&["--parallel", "tp=8,pp=1,dp=2", "--gpus", "16,32"], &["--gpus", "one GPU count"]);
    // The S-SGD gradient dtype is not a plan's: plans say `grad-reduce=`.
    fails(&["--parallel", "tp=8", "--strategy", "io+wfbp+grad-dtype=fp32"], &["grad-dtype", "grad-reduce=bf16"]);
    fails(&["--parallel", "tp=8", "--gpu", "h100"], &["--gpu", "contradicts topology `dgx-a100`", "--force-gpu"]);
    fails_with(&["predict", "--model", "nosuch", "--parallel", "dp=8"], &["unknown model `nosuch`", "llama2-70b"]);
    fails_with(
        &["predict", "--trace", "traces/alexnet_k80.csv", "--parallel", "dp=8"],
        &["--parallel", "--model", "not --trace"],
    );
}

#[test]
fn plan_search_lists_every_plan_and_refuses_a_gpu_count_none_fits() {
    let args = ["plan", "--model", "llama2-7b", "--topology", "dgx-a100", "--gpus", "8", "--global-batch", "8"];
    let out = dagsim().args(args).args(["--format", "csv", "--exhaustive"]).assert().success();
    let csv = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(rows.iter().all(|r| r.ends_with(",false")), "--exhaustive prunes nothing");
    // Pruned by the bound, the best three rows are the exhaustive search's, byte for byte.
    let out = dagsim().args(args).args(["--format", "csv", "--top", "3"]).assert().success();
    let pruned = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(pruned.lines().take(4).collect::<Vec<_>>(), csv.lines().take(4).collect::<Vec<_>>());
    assert_eq!(pruned.lines().count(), csv.lines().count(), "every plan listed");
    let cut = pruned.lines().filter(|r| r.ends_with(",true")).count();
    assert!(cut > 0, "some plans pruned by their bound");
    let text = dagsim().args(args).args(["--top", "3"]).assert().success();
    let text = String::from_utf8(text.get_output().stdout.clone()).unwrap();
    // "N plans: F fit in memory (S simulated, P pruned by bound), X do not fit", then a header
    // and the best three.
    let first = text.lines().next().unwrap();
    assert!(first.starts_with(&format!("{} plans: ", rows.len())), "{first}");
    assert!(first.contains(&format!(", {cut} pruned by bound)")), "{first}");
    assert_eq!(text.lines().count(), 2 + 3, "{text}");
    let best = text.lines().nth(2).unwrap().split_whitespace().next().unwrap();
    assert!(rows[0].starts_with(&format!("\"{best}\"")), "CSV and text agree on the best plan: {best} vs {}", rows[0]);
    assert!(rows.iter().any(|r| r.contains(",false,")), "some plans of a 7B model on 40 GB GPUs do not fit");
    // 7 GPUs: no degree split of the 32 layers and 32 heads with a global batch of 8.
    fails_with(
        &["plan", "--model", "llama2-7b", "--topology", "dgx-a100", "--gpus", "7", "--global-batch", "8"],
        &["no plan", "7 GPUs"],
    );
}

#[test]
fn a_plan_dag_past_the_task_limit_is_refused_while_built() {
    // 2 micro-batches on each of 2 stages of 2 TP ranks: the plan's first TP groups alone pass 50
    // tasks, so the build stops there (exit 2) instead of growing the DAG.
    let plan = ["--parallel", "tp=2,pp=2,dp=2", "--global-batch", "4", "--limit", "tasks=50"];
    fails(&plan, &["tasks in one DAG", "limit of 50 tasks while being built", "--limit tasks=N"]);
    // The same plan within the default limit runs.
    assert!(run(&plan[..4]).contains("step time"));
}

#[test]
fn deepspeed_partitions_run_layers_that_pp_does_not_divide() {
    // Llama 2 7B's 32 layers on 3 stages: Megatron's even split refuses them and names the way out.
    fails(&["--parallel", "tp=2,pp=3", "--global-batch", "6"], &["--parallel", "does not divide", "pp-partition"]);
    let stages = |partition: &str| {
        let spec = format!("tp=2,pp=3,pp-partition={partition}");
        let json: serde_json::Value =
            serde_json::from_str(&run(&["--parallel", &spec, "--global-batch", "6", "--format", "json"])).unwrap();
        let compute: Vec<f64> =
            json[0]["llm"]["stages"].as_array().unwrap().iter().map(|s| s["compute"].as_f64().unwrap()).collect();
        compute
    };
    // type:transformer: 11, 11, 10 layers (the last stage adds the output layer).
    let t = stages("type:transformer");
    assert_eq!(t.len(), 3);
    assert!(t[0] > t[1] && t[1] > t[2], "11 layers and the embedding, 11, then 10 and the output layer: {t:?}");
    // type:transformer|embedding: the embedding and the output layer count as layers: 11, 12, 9.
    let e = stages("type:transformer|embedding");
    assert!(e[1] > t[1] && e[2] < t[2] && e[0] == t[0], "{e:?} vs {t:?}");
}

#[test]
fn deepspeed_pipe_engine_all_gathers_the_partitioned_activations_over_tp() {
    let step = |spec: &str| {
        let json: serde_json::Value =
            serde_json::from_str(&run(&["--parallel", spec, "--global-batch", "8", "--format", "json"])).unwrap();
        json[0]["iteration_time_s"].as_f64().unwrap()
    };
    // 8 micro-batches on 2 stages of tp 2: per micro-batch one all-gather of the whole activation
    // (4096 tokens x 4096 x 2 bytes = 32 MiB) before stage 1's forward and two before stage 0's
    // backward, on NVLink: at most 24 of them (under 0.5 ms each), and some hide behind the
    // other stage's work.
    let (megatron, deepspeed) = (step("tp=2,pp=2"), step("tp=2,pp=2,pipe-engine=deepspeed"));
    assert!(deepspeed > megatron && deepspeed - megatron < 24.0 * 0.5e-3, "{deepspeed} vs {megatron}");
    // Without TP nothing is partitioned: the same step.
    assert_eq!(step("tp=1,pp=8"), step("tp=1,pp=8,pipe-engine=deepspeed"));
    fails(
        &["--parallel", "tp=2,pp=2,vp=2,pipe-engine=deepspeed", "--global-batch", "8"],
        &["--parallel", "pipe-engine=deepspeed", "vp=2"],
    );
    fails(&["--parallel", "tp=2,pp=2,pipe-engine=ds"], &["--parallel", "pipe-engine=ds", "megatron or deepspeed"]);
}
