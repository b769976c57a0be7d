//! The host launch model of `dag::plan` (an eager framework's CPU thread launching each GPU's
//! kernels one by one) against hand-computed step times: one GPU, L layers of g ns per pass
//! whose K kernels the host launches at c ns each, an update of u ns.
//! - GPU-bound (K c < g): the host runs ahead; only the sync before each iteration (the gradient
//!   norm read before the optimizer step) shows: the step is the GPU's plus one launch, c.
//! - Host-bound (K c > g): the step is the host's chain, c + 2 L K c, plus the update it waits for.
//! - A layer whose forward the host syncs on (an MoE router's token counts): the host waits for
//!   the GPU there and launches twice (what follows it, then the next layer's first kernel)
//!   while the GPU idles: the GPU-bound step grows by 2c more.

use dagsim::dag::build::{build_dag, BuildInput};
use dagsim::dag::plan::{HostModel, PlanLayout};
use dagsim::hw::load_topology;
use dagsim::report::steady_state;
use dagsim::sim::{simulate, Options};
use dagsim::strategy::Strategy;
use dagsim::workload::llm::Launches;
use dagsim::workload::{Layer, Stat, Workload};

const G: u64 = 100_000;
const U: u64 = 50_000;
const C: u64 = 7_000;
const L: usize = 3;

fn workload() -> Workload {
    let layer = |i: usize| Layer {
        name: format!("L{i}"),
        forward: Stat::exact(G),
        backward: Stat::exact(G),
        comm: None,
        grad_bytes: 0,
        grad_tensors: Vec::new(),
        util: None,
        memory: None,
        tp: None,
    };
    Workload {
        name: "hand".into(),
        batch_per_gpu: 1,
        sample_bytes: 0,
        device_sample_bytes: 0,
        layers: (0..L).map(layer).collect(),
        update: Stat::exact(U),
        data_load: None,
        trace_iterations: 1,
        fp16: false,
    }
}

/// Steady step time (ns) with the host model given (None: the host always ahead).
fn step(host: Option<HostModel>) -> u64 {
    let w = workload();
    let machine = load_topology("dgx-a100").unwrap().instantiate(1).unwrap();
    let strategy = Strategy::parse("io").unwrap();
    let layout = PlanLayout { host, ..PlanLayout::data_parallel(1, 1, L) };
    let input = BuildInput {
        workload: &w,
        machine: &machine,
        gpus: 1,
        strategy: &strategy,
        iterations: 4,
        represented: 1,
        plan: Some(&layout),
    };
    let dag = build_dag(&input).unwrap();
    let run = simulate(&dag, &machine, Options::default()).unwrap();
    let ns = steady_state(&dag, &run).iteration_ns;
    assert_eq!(ns.fract(), 0.0, "one step repeats exactly");
    ns as u64
}

fn host(kernels: u32, sync_at: Option<usize>) -> Option<HostModel> {
    let layers = (0..L)
        .map(|i| Launches { forward: kernels, backward: kernels, sync: sync_at == Some(i), modules: 0 })
        .collect();
    Some(HostModel { launch_ns: C, module_ns: 0, layers, blocking: false, blocking_wait_ns: 0 })
}

#[test]
fn a_gpu_bound_step_pays_one_launch_after_the_optimizer_sync() {
    let ahead = step(None);
    assert_eq!(ahead, 2 * L as u64 * G + U, "the textbook step");
    assert_eq!(step(host(10, None)), ahead + C);
}

#[test]
fn a_host_bound_step_is_the_host_chain_plus_the_update() {
    let k = 30; // 210 us of launches per 100 us pass
    assert_eq!(step(host(k, None)), C + 2 * L as u64 * k as u64 * C + U);
}

#[test]
fn a_forward_sync_makes_the_gpu_wait_for_two_launches() {
    assert_eq!(step(host(10, Some(1))), 2 * L as u64 * G + U + 3 * C);
}

/// `host(k, sync)` whose layers each call `m` Transformer Engine modules forward at `mns` ns each.
fn with_modules(k: u32, m: u32, mns: u64) -> Option<HostModel> {
    host(k, None).map(|mut h| {
        h.module_ns = mns;
        h.layers.iter_mut().for_each(|x| x.modules = m);
        h
    })
}

#[test]
fn transformer_engine_modules_add_their_python_to_the_host_chain() {
    const M: u64 = 11_800; // 1.69 launches of C
                           // GPU-bound: after the optimizer's sync the first block waits for its first module's
                           // Python and its first launch.
    assert_eq!(step(with_modules(10, 2, M)), 2 * L as u64 * G + U + C + M);
    // Host-bound: every forward pays its modules' time on top of the launches.
    let k = 30;
    assert_eq!(step(with_modules(k, 2, M)), C + 2 * L as u64 * k as u64 * C + L as u64 * 2 * M + U);
}

#[test]
fn graphs_of_one_launch_per_pass_keep_the_gpu_bound_step() {
    // A CUDA graph per block and pass: one launch each (the plan's `host=graphs`).
    assert_eq!(step(host(1, None)), 2 * L as u64 * G + U + C);
}

#[test]
fn blocking_launches_add_the_host_chain_to_the_gpu_time() {
    // CUDA_LAUNCH_BLOCKING=1 (`host=blocking`): every block's K launches, then its GPU time,
    // then the next block's launches; the optimizer's launch, then its update.
    let k = 10;
    let blocking = host(k, None).map(|h| HostModel { blocking: true, ..h });
    assert_eq!(step(blocking), 2 * L as u64 * (k as u64 * C + G) + C + U);
    // A host-bound step pays the same sum: nothing overlaps.
    let blocking = host(30, None).map(|h| HostModel { blocking: true, ..h });
    assert_eq!(step(blocking), 2 * L as u64 * (30 * C + G) + C + U);
}

#[test]
fn blocking_launches_wait_for_each_kernel_round_trip() {
    // Each synchronous launch also waits W for the GPU to take and finish the kernel: every
    // block pays K (C + W), the optimizer's launch C + W. With W = 0 the step above.
    const W: u64 = 6_950;
    let k = 10;
    let blocking = host(k, None).map(|h| HostModel { blocking: true, blocking_wait_ns: W, ..h });
    assert_eq!(step(blocking), 2 * L as u64 * (k as u64 * (C + W) + G) + C + W + U);
    // Eager launches never wait: the wait changes nothing there.
    let eager = host(k, None).map(|h| HostModel { blocking_wait_ns: W, ..h });
    assert_eq!(step(eager), step(host(k, None)));
}
