//! The frameworks' runtimes (`runtime=NAME`) on small cases worked out by hand in the comments:
//! how each groups per-tensor gradients (Horovod's cycles and fusion buffer, DDP's buckets,
//! ByteScheduler's partitions, BytePS's and TF/MXNet's pushes to servers), and what it costs.
//!
//! Machine `tiny`: one node, two GPUs, every link 1 byte/ns with zero latency, so an all-reduce of
//! K bytes between the two GPUs takes K ns. Workload: layer 0 (forward 1000 ns, backward 2000 ns,
//! tensors 3000 + 1000 bytes), layer 1 (3000, 1000, tensors 7000 + 1000 bytes); backward starts at
//! 4000 and ends layer 1 at 5000 and layer 0 at 7000. In backward order the tensors are layer 1's
//! bias (1000) and weight (7000), then layer 0's bias (1000) and weight (3000).

use dagsim::collective::CollectiveOp;
use dagsim::dag::{Dag, Phase, Work};
use dagsim::hw::topology::parse_topology;
use dagsim::predict::Setup;
use dagsim::report::steady_state;
use dagsim::sim::{Options, Run};
use dagsim::strategy::Strategy;
use dagsim::workload::zoo::Model;
use dagsim::workload::{Layer, Stat, Workload};
use std::path::Path;

fn topology(nodes: u32, gpus_per_node: u32, latency_us: f64) -> dagsim::hw::Topology {
    let text = format!(
        r#"{{"name":"tiny","cluster":{{"nodes":{nodes},"gpus_per_node":{gpus_per_node},"gpu":"test","grow":false,
        "pcie":{{"bandwidth_gb_s":1,"latency_us":0}},
        "network":{{"kind":"ethernet","bandwidth_gb_s":1,"latency_us":{latency_us}}},
        "storage":{{"shared":false,"bandwidth_gb_s":1,"latency_us":0}}}}}}"#
    );
    parse_topology(&text, Path::new("tiny.json"), false).unwrap()
}

fn layer(f: u64, b: u64, tensors: &[u64]) -> Layer {
    Layer {
        name: "l".into(),
        forward: Stat::exact(f),
        backward: Stat::exact(b),
        comm: None,
        grad_bytes: tensors.iter().sum(),
        grad_tensors: tensors.to_vec(),
        util: None,
        memory: None,
        tp: None,
    }
}

fn workload(layers: Vec<Layer>) -> Workload {
    Workload {
        name: "tiny".into(),
        batch_per_gpu: 1,
        sample_bytes: 0,
        device_sample_bytes: 0,
        layers,
        update: Stat::exact(0),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    }
}

fn tiny() -> Workload {
    workload(vec![layer(1000, 2000, &[3000, 1000]), layer(3000, 1000, &[7000, 1000])])
}

fn sim_on(w: &Workload, strategy: &str, topo: dagsim::hw::Topology, gpus: u32) -> (Dag, Run) {
    let setup =
        Setup { workload: w.clone(), topology: topo, strategy: Strategy::parse(strategy).unwrap(), iterations: 4 };
    let s = setup.simulate(gpus, Options::default()).unwrap();
    (s.dag, s.run)
}

fn iteration_ns(w: &Workload, strategy: &str) -> f64 {
    let (dag, run) = sim_on(w, strategy, topology(1, 2, 0.0), 2);
    steady_state(&dag, &run).iteration_ns
}

/// Bytes of each all-reduce of iteration 1, in task order.
fn allreduce_bytes(dag: &Dag) -> Vec<u64> {
    dag.tasks()
        .iter()
        .filter(|t| t.iteration == 1)
        .filter_map(|t| match t.work {
            Work::Collective { op: CollectiveOp::AllReduce, bytes, .. } => Some(bytes),
            _ => None,
        })
        .collect()
}

#[test]
fn plain_nccl_sends_each_tensor_as_produced() {
    let (dag, _) = sim_on(&tiny(), "runtime=nccl+call_us=0", topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [1000, 7000, 1000, 3000]);
    // 5000..6000, 6000..13000, then layer 0's (ready at 7000) 13000..14000, 14000..17000.
    assert_eq!(iteration_ns(&tiny(), "runtime=nccl+call_us=0"), 17_000.0);
    // With a 1 us call per collective on the framework's thread: calls at 5000..6000 and
    // 6000..7000 (both layer-1 tensors), 7000..8000 and 8000..9000; the all-reduces follow
    // back to back from 6000: 6000..7000, 7000..14000, 14000..15000, 15000..18000.
    assert_eq!(iteration_ns(&tiny(), "runtime=nccl+call_us=1"), 18_000.0);
}

#[test]
fn ddp_buckets_fill_in_backward_order_with_a_small_first_one() {
    // first_bucket_mb = 0.001 (1049 bytes), bucket_mb = 0.005 (5243 bytes). Layer 1's bias (1000)
    // stays under the first cap, its weight (7000) closes the first bucket at 8000; layer 0's
    // tensors (4000) stay under 5243 and go as the last bucket.
    let s = "runtime=ddp+first_bucket_mb=0.001+bucket_mb=0.005+call_us=0";
    let (dag, _) = sim_on(&tiny(), s, topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [8000, 4000]);
    // 5000..13000 and 13000..17000.
    assert_eq!(iteration_ns(&tiny(), s), 17_000.0);
    // A 1 us call before each: 5000..6000 then 6000..14000; 7000..8000 then 14000..18000.
    assert_eq!(iteration_ns(&tiny(), &s.replace("call_us=0", "call_us=1")), 18_000.0);
}

#[test]
fn ddp_buckets_of_resnet50() {
    // torchvision ResNet-50 in FP32: 161 tensors, 102,228,128 bytes. In the order backward produces
    // them the first are the classifier's bias (1000 x 4 bytes) and weight (2048 x 1000 x 4): that
    // first bucket passes its 1 MiB cap at 8,196,000 bytes. Every later bucket holds at least
    // 25 MiB (26,214,400 bytes) except the last, and would be under the cap without its last tensor.
    let m = Model::by_name("resnet50", None).unwrap();
    let w = dagsim::workload::synth::synthesize(
        &m,
        dagsim::workload::GpuSpec::by_name("v100").unwrap(),
        dagsim::workload::synth::SynthOptions {
            batch: 32,
            precision: dagsim::workload::Precision::Fp32,
            optimizer: dagsim::workload::memory::Optimizer::Momentum,
        },
    )
    .unwrap()
    .to_workload();
    assert_eq!((w.tensor_count(), w.grad_bytes()), (161, 102_228_128));
    let (dag, _) = sim_on(&w, "runtime=ddp", topology(1, 2, 0.0), 2);
    let buckets = allreduce_bytes(&dag);
    assert_eq!(buckets[0], 8_196_000);
    assert_eq!(buckets.iter().sum::<u64>(), 102_228_128);
    let cap = 25u64 << 20;
    assert!(buckets[1..buckets.len() - 1].iter().all(|&b| b >= cap), "{buckets:?}");
    assert!(*buckets.last().unwrap() < cap + 2048 * 512 * 4, "{buckets:?}");
    // 94,032,128 bytes after the first bucket: three full buckets and a partial one.
    assert_eq!(buckets.len(), 5, "{buckets:?}");
}

#[test]
fn horovod_fuses_what_each_cycle_finds_ready() {
    // Cycle 4 us: the first tick is half a cycle after the first gradient (1000 after backward
    // starts): at 3000, when layer 0 (ready at 3000) is done too. One fused all-reduce of all four
    // tensors (12000 bytes; the test GPU is unknown, so no fusion-buffer copy cost) from
    // 4000 + 3000 = 7000 to 19000. Two GPUs on one host negotiate in no time.
    let s = "runtime=horovod+cycle_ms=0.004+call_us=0";
    let (dag, _) = sim_on(&tiny(), s, topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [12000]);
    assert_eq!(iteration_ns(&tiny(), s), 19_000.0);
    // Cycle 1 us: ticks at 1500 (layer 1 ready: 8000 bytes), 2500 (nothing) and 3500 (layer 0:
    // 4000). All-reduces 5500..13500 and 13500..17500.
    let s = "runtime=horovod+cycle_ms=0.001+call_us=0";
    let (dag, _) = sim_on(&tiny(), s, topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [8000, 4000]);
    assert_eq!(iteration_ns(&tiny(), s), 17_500.0);
    // A 6000-byte buffer splits the one cycle's tensors (1000, 7000, 1000, 3000) into 1000, 7000
    // (larger than the buffer: alone) and 1000 + 3000.
    let (dag, _) = sim_on(&tiny(), "runtime=horovod+cycle_ms=0.004+fusion=6000", topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [1000, 7000, 4000]);
}

#[test]
fn horovod_fuses_161_tensors_into_its_fusion_buffers() {
    // 161 tensors of 1 MiB, all ready within one cycle (backward 1 ns per layer): today's 128 MiB
    // buffer takes 128 of them, then the last 33; Horovod 0.16-0.20's 64 MiB takes 64, 64, 33.
    let mib = 1u64 << 20;
    let w = workload((0..161).map(|_| layer(1, 1, &[mib])).collect());
    let (dag, _) = sim_on(&w, "runtime=horovod", topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [128 * mib, 33 * mib]);
    let (dag, _) = sim_on(&w, "runtime=horovod+fusion=64M+cycle_ms=5", topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [64 * mib, 64 * mib, 33 * mib]);
}

#[test]
fn horovod_negotiation_without_the_cache_goes_through_rank_0() {
    // Two nodes of one GPU, 10 us per network link. With the response cache a cycle's negotiation
    // is one bit-vector all-reduce: ceil(log2 2) = 1 latency between the hosts. Without it, rank 0
    // gathers request sizes and requests and broadcasts responses (3 latencies) and receives one
    // 64-byte request per tensor from the other rank at the path's rate (1 byte/ns).
    let topo = topology(2, 1, 10.0);
    let machine = topo.instantiate(2).unwrap();
    let path = machine.shortest_path(machine.gpus[0].host, machine.gpus[1].host).unwrap();
    let alpha = path.latency_ns;
    assert!(alpha > 0);
    let negotiations = |spec: &str| -> Vec<u64> {
        let (dag, _) = sim_on(&tiny(), spec, topo.clone(), 2);
        dag.tasks()
            .iter()
            .filter(|t| t.iteration == 1 && t.phase == Phase::Coordination && t.queue.is_some())
            .filter_map(|t| match t.work {
                Work::Fixed { ns } if t.layer.is_none() => Some(ns),
                _ => None,
            })
            .collect()
    };
    // One cycle (4 us) holds all four tensors.
    assert_eq!(negotiations("runtime=horovod+cycle_ms=0.004"), [alpha]);
    assert_eq!(negotiations("runtime=horovod+cycle_ms=0.004+cache=0"), [3 * alpha + 4 * 64]);
}

#[test]
fn bytescheduler_partitions_count_parameters() {
    // BYTESCHEDULER_PARTITION is 1,000,000 parameters: a 10,000,000-byte FP32 tensor goes in
    // pieces of 4,000,000, 4,000,000 and 2,000,000 bytes; as FP16 gradients (5,000,000 bytes, the
    // same 2.5 M parameters) in pieces of 2,000,000, 2,000,000 and 1,000,000.
    let mut w = workload(vec![layer(1, 1, &[10_000_000])]);
    let (dag, _) = sim_on(&w, "runtime=bytescheduler", topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [4_000_000, 4_000_000, 2_000_000]);
    w.layers[0] = layer(1, 1, &[5_000_000]);
    w.fp16 = true;
    let (dag, _) = sim_on(&w, "runtime=bytescheduler", topology(1, 2, 0.0), 2);
    assert_eq!(allreduce_bytes(&dag), [2_000_000, 2_000_000, 1_000_000]);
}

#[test]
fn bytescheduler_sends_lower_layers_first() {
    // 1000-parameter (4000-byte FP32) partitions: layer 1's tensors become 1000, 4000 + 3000 (ready at 5000), layer 0's
    // 1000, 3000 (ready at 7000). The first piece runs 5000..6000; at 6000 only layer 1's are ready
    // (4000: 6000..10000); at 10000 layer 0's pieces jump ahead of layer 1's last one.
    let s = "runtime=bytescheduler+partition=1000+sched_us=0+call_us=0";
    let (dag, run) = sim_on(&tiny(), s, topology(1, 2, 0.0), 2);
    let mut pieces: Vec<(u64, u32, u64)> = dag
        .tasks()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.iteration == 1)
        .filter_map(|(i, t)| match t.work {
            Work::Collective { bytes, .. } => Some((run.start[i], t.layer.unwrap(), bytes)),
            _ => None,
        })
        .collect();
    pieces.sort();
    let order: Vec<(u32, u64)> = pieces.iter().map(|&(_, l, b)| (l, b)).collect();
    assert_eq!(order, [(1, 1000), (1, 4000), (0, 1000), (0, 3000), (1, 3000)]);
}

/// Tasks of iteration 1 by kind: (reduce-scatters, all-gathers, device-to-host copies, pushes
/// from a host to another host, server CPU tasks).
fn server_traffic(dag: &Dag, machine: &dagsim::hw::Machine) -> (usize, usize, usize, usize, usize) {
    let hosts: Vec<u32> = machine.gpus.iter().map(|g| g.host).collect();
    let devices: Vec<u32> = machine.gpus.iter().map(|g| g.device).collect();
    let mut counts = (0, 0, 0, 0, 0);
    for t in dag.tasks().iter().filter(|t| t.iteration == 1) {
        match t.work {
            Work::Collective { op: CollectiveOp::ReduceScatter, .. } => counts.0 += 1,
            Work::Collective { op: CollectiveOp::AllGather, .. } => counts.1 += 1,
            Work::Transfer { src, dst, .. } if devices.contains(&src) && hosts.contains(&dst) => counts.2 += 1,
            Work::Transfer { src, dst, .. } if hosts.contains(&src) && hosts.contains(&dst) => counts.3 += 1,
            _ if t.phase == Phase::ServerReduce => counts.4 += 1,
            _ => {}
        }
    }
    counts
}

#[test]
fn byteps_pushes_once_per_node_and_partition() {
    // Two nodes of two GPUs, one 10,000,000-byte tensor in BytePS's 4,096,000-byte partitions:
    // 4,096,000 + 4,096,000 + 1,808,000. Per node and partition: a reduce-scatter, each GPU's
    // share copied to the host, one push to the partition's server (servers on both nodes, the
    // partitions round robin: 0, 1, 0), one sum on that server's CPU, and the way back. Pushes
    // and pulls between hosts: 3 partitions x 2 nodes each way; a push to the node's own server
    // still counts as a host-to-host task (it costs nothing on an empty route).
    let w = workload(vec![layer(1000, 1000, &[10_000_000])]);
    let topo = topology(2, 2, 0.0);
    let machine = topo.instantiate(4).unwrap();
    let (dag, _) = sim_on(&w, "runtime=byteps", topo, 4);
    assert_eq!(server_traffic(&dag, &machine), (6, 6, 12, 12, 6));
    let between = |from: u32, to: u32| -> u64 {
        let (a, b) = (machine.gpus[from as usize].host, machine.gpus[to as usize].host);
        dag.tasks()
            .iter()
            .filter(|t| t.iteration == 1)
            .filter_map(|t| match t.work {
                Work::Transfer { src, dst, bytes } if src == a && dst == b => Some(bytes),
                _ => None,
            })
            .sum()
    };
    // Node 0 to node 1: its push of the partition on server 1 (4,096,000) and the pulls of server
    // 0's partitions (4,096,000 + 1,808,000): every byte once. The same the other way.
    assert_eq!(between(0, 2), 10_000_000);
    assert_eq!(between(2, 0), 10_000_000);
    // One node: BytePS skips the servers (reduce-scatter then all-gather).
    let (dag, _) = sim_on(&w, "runtime=byteps", topology(1, 2, 0.0), 2);
    assert_eq!(server_traffic(&dag, &topology(1, 2, 0.0).instantiate(2).unwrap()), (3, 3, 0, 0, 0));
}

#[test]
fn tensorflow_ps_pushes_from_every_gpu_and_mxnet_splits_big_arrays() {
    // Tensors 5,000,000 (above MXNet's 4,000,000-byte bound: split over both servers), 1000 and
    // 2000 bytes (round robin: servers 0 and 1). Without local reduction every GPU pushes each
    // of the 4 pieces: 16 pushes; each server sums 4 pushes per piece, updates once, and
    // serialises 4 pulls.
    let w = workload(vec![layer(1000, 1000, &[1000, 2000]), layer(1000, 1000, &[5_000_000])]);
    let topo = topology(2, 2, 0.0);
    let (dag, _) = sim_on(&w, "runtime=ps+local=off", topo.clone(), 4);
    let pushes = dag
        .tasks()
        .iter()
        .filter(|t| t.iteration == 1 && t.phase == Phase::GradientAggregation)
        .filter(|t| matches!(t.work, Work::Transfer { .. }))
        .count();
    assert_eq!(pushes, 16 * 2, "16 pushes and 16 pulls");
    let server_tasks = dag.tasks().iter().filter(|t| t.iteration == 1 && t.phase == Phase::ServerReduce).count();
    assert_eq!(server_tasks, 4 * (4 + 1 + 4));
    // TensorFlow places whole variables: 3 tensors, no split.
    let (dag, _) = sim_on(&w, "runtime=ps+local=off+split=off", topo, 4);
    let server_tasks = dag.tasks().iter().filter(|t| t.iteration == 1 && t.phase == Phase::ServerReduce).count();
    assert_eq!(server_tasks, 3 * (4 + 1 + 4));
}

/// Start of every iteration-1 push (a transfer from a GPU) and the end of that GPU's backward.
fn pushes_and_backward_end(dag: &Dag, run: &Run) -> Vec<(u64, u64)> {
    let tasks = dag.tasks();
    let backward_end = |g: u32| {
        (0..tasks.len())
            .filter(|&i| tasks[i].iteration == 1 && tasks[i].phase == Phase::Backward && tasks[i].gpu == Some(g))
            .map(|i| run.end[i])
            .max()
            .unwrap()
    };
    (0..tasks.len())
        .filter(|&i| tasks[i].iteration == 1 && tasks[i].phase == Phase::GradientAggregation)
        .filter(|&i| matches!(tasks[i].work, Work::Transfer { .. }))
        .filter_map(|i| tasks[i].gpu.map(|g| (run.start[i], backward_end(g))))
        .collect()
}

#[test]
fn tensorflow_ps_without_overlap_pushes_after_the_whole_backward() {
    // Tiny's layer-1 gradients are ready at 5000 ns of the iteration, layer 0's at 7000 (end of
    // backward; a free call and a fast server): with overlap (the default) some pushes start before backward ends; with
    // overlap=off none does, and the iteration is longer.
    let topo = || topology(1, 2, 0.0);
    let (dag, run) = sim_on(&tiny(), "runtime=ps+local=off+servers=1+call_us=0+sum_gbps=1000", topo(), 2);
    let on = pushes_and_backward_end(&dag, &run);
    assert!(on.len() >= 8, "2 GPUs x 4 tensors pushed from GPU memory: {on:?}");
    assert!(on.iter().any(|&(start, end)| start < end), "{on:?}");
    let (dag, run) = sim_on(&tiny(), "runtime=ps+local=off+servers=1+call_us=0+sum_gbps=1000+overlap=off", topo(), 2);
    let off = pushes_and_backward_end(&dag, &run);
    assert_eq!(off.len(), on.len());
    assert!(off.iter().all(|&(start, end)| start >= end), "{off:?}");
    let name = Strategy::parse("runtime=ps+local=off+servers=1+overlap=off").unwrap().name();
    assert_eq!(name, "io+wfbp+runtime=ps+servers=1+local=off+overlap=off");
    let with = iteration_ns(&tiny(), "runtime=ps+local=off+servers=1+call_us=0+sum_gbps=1000");
    let without = iteration_ns(&tiny(), "runtime=ps+local=off+servers=1+call_us=0+sum_gbps=1000+overlap=off");
    assert!(without > with, "{without} vs {with}");
}

#[test]
fn runtimes_print_in_the_strategy_and_bad_settings_are_errors() {
    let s = Strategy::parse("runtime=horovod").unwrap();
    assert_eq!(s.name(), "io+wfbp+runtime=horovod");
    assert_eq!(Strategy::parse(&s.name()).unwrap(), s);
    let s = Strategy::parse("runtime=horovod+fusion=64M+cycle_ms=5").unwrap();
    assert_eq!(s.name(), "io+wfbp+runtime=horovod+fusion=64M+cycle_ms=5");
    let e = Strategy::parse("runtime=ddp+fusion=4M").unwrap_err().to_string();
    assert!(e.contains("runtime=ddp") && e.contains("fusion"), "{e}");
    let e = Strategy::parse("wfbp+cycle_ms=1").unwrap_err().to_string();
    assert!(e.contains("`cycle_ms`") && e.contains("runtime setting"), "{e}");
    let e = Strategy::parse("runtime=byteps+allreduce=tree").unwrap_err().to_string();
    assert!(e.contains("parameter servers"), "{e}");
    // A partition larger than the model, or more servers than nodes, fail when the setup is known.
    let setup = |spec: &str| Setup {
        workload: tiny(),
        topology: topology(2, 2, 0.0),
        strategy: Strategy::parse(spec).unwrap(),
        iterations: 2,
    };
    let e = setup("runtime=byteps+partition=1M").predict(4).unwrap_err().to_string();
    assert!(e.contains("`partition`") && e.contains("larger than"), "{e}");
    let e = setup("runtime=ps+servers=3").predict(4).unwrap_err().to_string();
    assert!(e.contains("`servers`") && e.contains("2 node"), "{e}");
    // The frameworks' defaults run a model smaller than one bucket or partition as one.
    for spec in ["runtime=ddp", "runtime=byteps", "runtime=bytescheduler"] {
        assert!(setup(spec).predict(4).is_ok(), "{spec}");
    }
    let e = setup("runtime=ddp+first_bucket_mb=2").predict(4).unwrap_err().to_string();
    assert!(e.contains("`first_bucket_mb`") && e.contains("larger than"), "{e}");
    let e = setup("runtime=gloo+bucket_mb=2").predict(4).unwrap_err().to_string();
    assert!(e.contains("`bucket_mb`") && e.contains("larger than"), "{e}");
}
