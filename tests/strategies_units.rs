//! Every strategy on a tiny DAG whose iteration time is worked out by hand in the comments.
//!
//! Machine: one node, two GPUs, every link 1 byte/ns with zero latency, so an all-reduce of K bytes
//! between the two GPUs (ring: two steps of K/2 bytes on disjoint links) takes K ns, and moving B
//! bytes between any two devices takes B ns. Collectives run under the ideal model (no library
//! latencies or protocol overheads), where these hand-worked times hold.
//! Workload: layer 0 (forward 1000 ns, backward 2000 ns, 4000 gradient bytes), layer 1 (3000,
//! 1000, 8000 bytes); no I/O bytes, no update time.

use dagsim::dag::hybrid::{build_hybrid, Channels};
use dagsim::dag::{Dag, Phase, Work};
use dagsim::hw::topology::parse_topology;
use dagsim::predict::Setup;
use dagsim::report::steady_state;
use dagsim::sim::{simulate, Options, Run};
use dagsim::strategy::hybrid::{HybridTable, Precision};
use dagsim::strategy::Strategy;
use dagsim::workload::{Layer, Stat, Workload};
use std::path::Path;

fn topology() -> dagsim::hw::Topology {
    let text = r#"{"name":"tiny","cluster":{"nodes":1,"gpus_per_node":2,"gpu":"test","grow":false,
        "pcie":{"bandwidth_gb_s":1,"latency_us":0},
        "network":{"kind":"ethernet","bandwidth_gb_s":1,"latency_us":0},
        "storage":{"shared":false,"bandwidth_gb_s":1,"latency_us":0}}}"#;
    let mut t = parse_topology(text, Path::new("tiny.json"), false).unwrap();
    t.collectives = dagsim::collective::CollectiveModel::Ideal;
    t
}

fn workload(grads: [u64; 2], device_sample_bytes: u64) -> Workload {
    let layer = |name: &str, f, b, g| Layer {
        name: name.into(),
        forward: Stat::exact(f),
        backward: Stat::exact(b),
        comm: None,
        grad_bytes: g,
        grad_tensors: Vec::new(),
        util: None,
        memory: None,
        tp: None,
    };
    Workload {
        name: "tiny".into(),
        batch_per_gpu: 1,
        sample_bytes: 0,
        device_sample_bytes,
        layers: vec![layer("l0", 1000, 2000, grads[0]), layer("l1", 3000, 1000, grads[1])],
        update: Stat::exact(0),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    }
}

fn tiny() -> Workload {
    workload([4000, 8000], 0)
}

fn sim(w: &Workload, strategy: &str) -> (Dag, Run) {
    let setup = Setup {
        workload: w.clone(),
        topology: topology(),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 4,
    };
    let s = setup.simulate(2, Options::default()).unwrap();
    (s.dag, s.run)
}

fn iteration_ns(w: &Workload, strategy: &str) -> f64 {
    let (dag, run) = sim(w, strategy);
    steady_state(&dag, &run).iteration_ns
}

fn aggregation_bytes(dag: &Dag, iteration: u32) -> Vec<u64> {
    dag.tasks()
        .iter()
        .filter(|t| t.phase == Phase::GradientAggregation && t.iteration == iteration)
        .map(|t| match t.work {
            Work::Collective { bytes, .. } => bytes,
            _ => panic!("model communication is a collective"),
        })
        .collect()
}

#[test]
fn baseline_without_overlap() {
    // forward 4000 + backward 3000 + all-reduce 8000 + 4000.
    assert_eq!(iteration_ns(&tiny(), "none"), 19_000.0);
    // WFBP: layer 1's all-reduce starts when its backward ends (5000), runs to 13000; layer 0's
    // backward ends at 7000 and its all-reduce follows at 13000..17000.
    assert_eq!(iteration_ns(&tiny(), "wfbp"), 17_000.0);
}

#[test]
fn eight_bit_gradients_with_codec_cost() {
    // After the backward pass (7000): encode l1 (2000 elements x 1 ns) 7000..9000 and l0 (1000)
    // 9000..10000 on each GPU; all-reduce l1 (2000 bytes) 9000..11000, l0 (1000) 11000..12000;
    // decode l1 (0.5 ns x 2000) 11000..12000, l0 12000..12500.
    let s = "none+grads=8bit+encode_ns=1+decode_ns=0.5+launch_us=0";
    assert_eq!(iteration_ns(&tiny(), s), 12_500.0);
    let (dag, _) = sim(&tiny(), s);
    assert_eq!(aggregation_bytes(&dag, 1), vec![2000, 1000]);
    // Dettmers' defaults (1 and 0.5 ns) scaled by a GPU twice as fast, plus 5 us per kernel.
    let s = Strategy::parse("grads=8bit+gpu_speed=2").unwrap().grad_codec();
    assert_eq!(s.encode_ns(8000, 1), 1000 + 5000);
}

#[test]
fn mixed_precision_halves_compute_and_gradients() {
    // Compute 7000 / 2 = 3500, FP16 gradients: all-reduces of 4000 and 2000 bytes, no codec cost.
    assert_eq!(iteration_ns(&tiny(), "none+mixed+fp16_speedup=2"), 9_500.0);
}

#[test]
fn fp32_gradient_dtype_doubles_an_fp16_workloads_wire_bytes() {
    // The tiny workload marked FP16 (its 4000 and 8000 gradient bytes are FP16 bytes). Under
    // `grad-dtype=fp32` the framework all-reduces its FP32 variables' gradients: 8000 and 16000
    // bytes. Without overlap: compute 7000 + all-reduces 16000 + 8000 = 31000 (FP16: 19000).
    let mut half = tiny();
    half.fp16 = true;
    let (dag, run) = sim(&half, "none+grad-dtype=fp32");
    assert_eq!(aggregation_bytes(&dag, 1), vec![16000, 8000]);
    assert_eq!(steady_state(&dag, &run).iteration_ns, 31_000.0);
    assert_eq!(iteration_ns(&half, "none"), 19_000.0);
    // One all-reduce after backward (TF 2.x's single pack): 7000 + 24000.
    let (dag, run) = sim(&half, "io+fusion=inf+grad-dtype=fp32");
    assert_eq!(aggregation_bytes(&dag, 1), vec![24000]);
    assert_eq!(steady_state(&dag, &run).iteration_ns, 31_000.0);
    // An FP32 workload's gradients are FP32 already: nothing changes.
    assert_eq!(iteration_ns(&tiny(), "none+grad-dtype=fp32"), iteration_ns(&tiny(), "none"));
    // The name says it, and it refuses what would contradict it.
    assert_eq!(Strategy::parse("io+fusion=inf+grad-dtype=fp32").unwrap().name(), "io+grad-dtype=fp32+fusion=inf");
    assert_eq!(Strategy::parse("io+grad-dtype=fp16").unwrap().name(), "io");
    for bad in ["io+grad-dtype=bf8", "io+mixed+grad-dtype=fp32", "io+grads=fp16+grad-dtype=fp32"] {
        let e = Strategy::parse(bad).unwrap_err().to_string();
        assert!(e.contains("grad-dtype"), "{bad}: {e}");
    }
}

#[test]
fn lazy_allreduce_fuses_until_theta() {
    // θ = inf: one all-reduce of 12000 bytes after the whole backward pass: 7000 + 12000.
    let (dag, run) = sim(&tiny(), "wfbp+fusion=inf");
    assert_eq!(aggregation_bytes(&dag, 1), vec![12000]);
    assert_eq!(steady_state(&dag, &run).iteration_ns, 19_000.0);
    // θ = 8000 bytes: layer 1 alone fills the pool, layer 0 goes on its own; same as WFBP here.
    let (dag, _) = sim(&tiny(), "wfbp+fusion=8000");
    assert_eq!(aggregation_bytes(&dag, 1), vec![8000, 4000]);
    assert_eq!(iteration_ns(&tiny(), "wfbp+fusion=8000"), 17_000.0);
    // θ = 9000: both layers wait for each other.
    let (dag, _) = sim(&tiny(), "wfbp+fusion=9000");
    assert_eq!(aggregation_bytes(&dag, 1), vec![12000]);
}

#[test]
fn sparse_chunks_send_the_chosen_fraction_plus_chunk_norms() {
    // Layer 1 holds 10 chunks of 32K gradients, layer 0 one chunk; 20% of chunks: 2 of layer 1's,
    // and layer 0's single chunk (at least one); then 11 chunk norms (44 bytes) for the next pick.
    let chunk = 32 * 1024 * 4;
    let w = workload([chunk, 10 * chunk], 0);
    let (dag, _) = sim(&w, "wfbp+sparse=0.2");
    assert_eq!(aggregation_bytes(&dag, 1), vec![2 * chunk, chunk, 44]);
}

#[test]
fn priority_scheduling_lets_the_next_forward_start_early() {
    // 2000-byte pieces: 4 of layer 1, 2 of layer 0, each all-reduce 2000 ns. Layer 1's first piece
    // runs 5000..7000; then layer 0's pieces jump the queue (7000..11000), then layer 1's rest
    // (11000..17000). The next forward of layer 0 waits only for layer 0's pieces.
    let (dag, run) = sim(&tiny(), "io+wfbp+priority=2000");
    assert_eq!(aggregation_bytes(&dag, 1).len(), 6);
    let find = |phase: Phase, it: u32, layer: u32, gpu: Option<u32>| -> Vec<usize> {
        (0..dag.len())
            .filter(|&t| {
                let x = &dag.tasks()[t];
                x.phase == phase && x.iteration == it && x.layer == Some(layer) && x.gpu == gpu
            })
            .collect()
    };
    let last_l1_piece = find(Phase::GradientAggregation, 1, 1, None).iter().map(|&t| run.end[t]).max().unwrap();
    let l0_pieces_done = find(Phase::GradientAggregation, 1, 0, None).iter().map(|&t| run.end[t]).max().unwrap();
    let next_fwd = run.start[find(Phase::Forward, 2, 0, Some(0))[0]];
    assert!(next_fwd < last_l1_piece, "forward at {next_fwd}, last layer-1 piece ends {last_l1_piece}");
    assert_eq!(next_fwd, l0_pieces_done);
    // Without priorities the next forward waits for every gradient.
    let (dag, run) = sim(&tiny(), "io+wfbp");
    let ends: Vec<u64> = (0..dag.len())
        .filter(|&t| dag.tasks()[t].phase == Phase::GradientAggregation && dag.tasks()[t].iteration == 1)
        .map(|t| run.end[t])
        .collect();
    let fwd = (0..dag.len())
        .find(|&t| {
            let x = &dag.tasks()[t];
            x.phase == Phase::Forward && x.iteration == 2 && x.layer == Some(0)
        })
        .unwrap();
    assert!(run.start[fwd] >= *ends.iter().max().unwrap());
}

#[test]
fn master_gpu_data_parallelism_step_by_step() {
    // One 1000-byte sample per GPU; no loss bytes.
    let w = workload([4000, 8000], 1000);
    // Baseline: whole batch (2000 B) to the master 2000, PtoP 1000 B to GPU 1 1000, weights
    // broadcast 12000, forward 4000, backward 3000, reduce 12000 to the master.
    assert_eq!(iteration_ns(&w, "master+outputs=0"), 34_000.0);
    // Splitting: both GPUs copy 1000 B at once (1000), no PtoP.
    assert_eq!(iteration_ns(&w, "master+split+outputs=0"), 32_000.0);
    // Pre-loading: the copies run during the previous batch's compute.
    assert_eq!(iteration_ns(&w, "master+split+preload+outputs=0"), 31_000.0);
    // 3:1 weights: encode 3000 elements at 1 ns, broadcast 4000 B, decode on GPU 1 3000 ns.
    let s = "master+split+preload+outputs=0+weights=3to1+encode_ns=1+decode_ns=1+launch_us=0";
    assert_eq!(iteration_ns(&w, s), 29_000.0);
    // Loss exchange: 2 x 500 B of outputs gathered (500 ns to the master) and sent back (500 ns).
    assert_eq!(iteration_ns(&w, "master+split+preload+outputs=500"), 32_000.0);
}

#[test]
fn hybrid_sub_batch_model_parallelism_by_hand() {
    // 10 ms per pass on one GPU: residual 4, conv 1+1+1, fc 1+1+1.
    let text = "# total_ms: 10\nkind,name,sync32_ms,sync8_ms,fprop_ms,bprop_ms,update_ms,par_fprop_ms,par_bprop_ms,par_update_ms\n\
        conv,c1,0.5,,1,1,1,,,\nactivation,a,0.2,0.1,,,,,,\nfc,f1,0.3,,1,1,1,0.5,0.5,0.5\n";
    let t = HybridTable::parse(text, Path::new("tiny.csv")).unwrap();
    let m = topology().instantiate(2).unwrap();
    let run_ns = |gpus, p| {
        let dag = build_hybrid(&t, gpus, p, Channels::PerBoundary, 3).unwrap();
        let run = simulate(&dag, &m, Options::default()).unwrap();
        steady_state(&dag, &run).iteration_ns
    };
    assert_eq!(run_ns(1, Precision::Bits32), 10_000_000.0);
    // Two GPUs (ms): residual + conv forward to 5. Activations of sub-batch 0 5.0-5.2, of
    // sub-batch 1 5.2-5.4 (same channel); fc forward slices 5.2-5.7 and 5.7-6.2 on each GPU;
    // fc backward slices (0.5 + 0.5) 6.2-7.2 and 7.2-8.2; error exchanges 7.2-7.4 and 8.2-8.4;
    // GPU 1's conv backward 8.4-10.4; the conv gradient sync 10.4-10.9.
    assert_eq!(run_ns(2, Precision::Bits32), 10_900_000.0);
    // 8-bit halves the activation exchanges (0.1): 5.0-5.1, 5.1-5.2; slices 5.1-5.6, 5.6-6.1; fc
    // output exchanges 5.6-5.9, 6.1-6.4; backward slices 6.1-7.1 (waits for 5.9), 7.1-8.1; errors
    // 7.1-7.2, 8.1-8.2; conv backward 8.2-10.2; sync 10.2-10.7.
    assert_eq!(run_ns(2, Precision::Bits8), 10_700_000.0);
}

#[test]
fn strategies_reject_inconsistent_combinations() {
    for bad in
        ["split", "preload", "weights=3to1", "master+fusion=1M", "master+io", "grads=zip", "sparse=2", "fusion=abc"]
    {
        assert!(Strategy::parse(bad).is_err(), "`{bad}` should be rejected");
    }
    let e = Strategy::parse("io+launch_us=-1").unwrap_err().to_string();
    assert!(e.contains("launch_us"), "{e}");
    let s = Strategy::parse("wfbp+fusion=4M+sparse=0.15+mixed+fp16_speedup=1.5").unwrap();
    assert_eq!(Strategy::parse(&s.name()).unwrap(), s, "names parse back: {}", s.name());
}

#[test]
fn mps_clients_share_a_gpu_up_to_their_caps() {
    let predict = |strategy: &str, gpus: u32| {
        let setup = Setup {
            workload: tiny(),
            topology: topology(),
            strategy: Strategy::parse(strategy).unwrap(),
            iterations: 4,
        };
        setup.predict(gpus).unwrap()
    };
    let ns = |p: &dagsim::report::Prediction| (p.iteration_time_s * 1e9).round() as u64;
    // One GPU, kernels 50% utilised alone: two clients run side by side in the time of one
    // (7000 ns) and train twice the samples.
    let one = predict("none", 1);
    let two = predict("none+mps=2+util=0.5", 1);
    assert_eq!(ns(&one), 7000);
    assert_eq!(ns(&two), 7000);
    assert!((two.throughput_samples_per_s / one.throughput_samples_per_s - 2.0).abs() < 1e-9);
    // Kernels that fill the GPU alone gain nothing: the two clients take twice as long.
    assert_eq!(ns(&predict("none+mps=2", 1)), 14_000);
    // Active threads capped at 25%: each client runs at a quarter, 14000 ns.
    assert_eq!(ns(&predict("none+mps=2+util=0.5+threads=0.25", 1)), 14_000);
    // Two GPUs x two clients = 4 all-reduce ranks, two per GPU: a ring of 6 steps of K/4 bytes,
    // where the steps between clients of one GPU are free: 1.5 K ns per all-reduce.
    // 7000 + 1.5 x 8000 + 1.5 x 4000.
    assert_eq!(ns(&predict("none+mps=2+util=0.5", 2)), 25_000);
}

#[test]
fn data_loading_workers_can_starve_the_gpu() {
    let predict = |strategy: &str| {
        let setup = Setup {
            workload: tiny(),
            topology: topology(),
            strategy: Strategy::parse(strategy).unwrap(),
            iterations: 5,
        };
        (setup.predict(1).unwrap().iteration_time_s * 1e9).round() as u64
    };
    // One sample per process at 14 us of one core: one worker takes 14000 ns, longer than the
    // 7000 ns of compute it overlaps with (`io`), so the loader sets the pace.
    assert_eq!(predict("io+mps=1+load_us=14+cores=4"), 14_000);
    // Two workers: 7000 ns, hidden behind compute.
    assert_eq!(predict("io+mps=1+load_us=14+workers=2+cores=4"), 7_000);
    // Two processes (kernels 50% utilised) with two workers each: four cores keep up...
    assert_eq!(predict("io+mps=2+util=0.5+load_us=14+workers=2+cores=4"), 7_000);
    // ...two cores shared by both loaders do not.
    assert_eq!(predict("io+mps=2+util=0.5+load_us=14+workers=2+cores=2"), 14_000);
    // The same input pipeline for one process per GPU (no MPS), as any framework's loader.
    assert_eq!(predict("io+load_us=14+cores=4"), 14_000);
    assert_eq!(predict("io+load_us=14+workers=2+cores=4"), 7_000);
    // Two GPUs of one node, each with two workers, share its two cores: 14 us per sample again;
    // with four cores each loader keeps up. (No gradients: the all-reduce is not what is timed.)
    let two = |strategy: &str| {
        let setup = Setup {
            workload: workload([0, 0], 0),
            topology: topology(),
            strategy: Strategy::parse(strategy).unwrap(),
            iterations: 5,
        };
        (setup.predict(2).unwrap().iteration_time_s * 1e9).round() as u64
    };
    assert_eq!(two("io+load_us=14+workers=2+cores=2"), 14_000);
    assert_eq!(two("io+load_us=14+workers=2+cores=4"), 7_000);
}

#[test]
fn a_batch_is_read_while_it_is_decoded() {
    // The loader's workers read and decode sample by sample, several at once, so reading a batch
    // from storage (1 byte/ns) overlaps decoding it: the slower of the two sets the pace, not
    // their sum. One GPU, batch 1, 7000 ns of compute hidden under the loader (`io`).
    let predict = |sample_bytes: u64, strategy: &str| {
        let mut workload = tiny();
        workload.sample_bytes = sample_bytes;
        let setup =
            Setup { workload, topology: topology(), strategy: Strategy::parse(strategy).unwrap(), iterations: 5 };
        (setup.predict(1).unwrap().iteration_time_s * 1e9).round() as u64
    };
    for strategy in ["io+load_us=14+cores=4", "io+mps=1+load_us=14+cores=4"] {
        // Read 10000 ns, decode 14000 ns with one worker: 14000 (in sequence it was 24000).
        assert_eq!(predict(10_000, strategy), 14_000, "{strategy}");
        // Read 20000 ns, decode 14000 ns: 20000 (was 34000).
        assert_eq!(predict(20_000, strategy), 20_000, "{strategy}");
    }
    // Without a loader the read alone paces the input: 20000 ns.
    assert_eq!(predict(20_000, "io"), 20_000);
}

#[test]
fn mps_clients_compress_their_own_gradients() {
    // Two GPUs x two clients at 50% utilisation: compute 7000 ns, both clients side by side.
    // Each client then encodes on its own stream, as shared GPU work at 50%: l1 (2000 elements x
    // 1 ns) 7000..9000, l0 9000..10000. All-reduces among 4 ranks cost 1.5 ns per byte (see
    // above): l1's 2000 bytes 9000..12000, l0's 1000 bytes 12000..13500. Decodes (0.5 ns per
    // element): l1 12000..13000, l0 13500..14000.
    let s = "none+mps=2+util=0.5+grads=8bit+encode_ns=1+decode_ns=0.5+launch_us=0";
    let (dag, _) = sim(&tiny(), s);
    assert_eq!(aggregation_bytes(&dag, 1), vec![2000, 1000]);
    let codecs = dag.tasks().iter().filter(|t| t.phase == Phase::Codec && t.iteration == 1).count();
    assert_eq!(codecs, 2 * 2 * 4, "an encode and a decode of each bucket on each of the 4 clients");
    assert_eq!(iteration_ns(&tiny(), s), 14_000.0);
}

#[test]
fn mps_clients_fuse_and_sparsify_like_single_processes() {
    // WFBP: l1's all-reduce (1.5 x 8000) runs 5000..17000, l0's (1.5 x 4000) 17000..23000.
    assert_eq!(iteration_ns(&tiny(), "wfbp+mps=2+util=0.5"), 23_000.0);
    // θ = inf: one all-reduce of 12000 bytes after backward: 7000 + 1.5 x 12000.
    let (dag, run) = sim(&tiny(), "wfbp+mps=2+util=0.5+fusion=inf");
    assert_eq!(aggregation_bytes(&dag, 1), vec![12000]);
    assert_eq!(steady_state(&dag, &run).iteration_ns, 25_000.0);
    // Sparse chunks as in the single-process case, then the 44-byte chunk-norm all-reduce.
    let chunk = 32 * 1024 * 4;
    let (dag, _) = sim(&workload([chunk, 10 * chunk], 0), "wfbp+mps=2+util=0.5+sparse=0.2");
    assert_eq!(aggregation_bytes(&dag, 1), vec![2 * chunk, chunk, 44]);
}
