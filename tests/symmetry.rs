//! One node's GPUs standing for all (symmetric setups) gives the same predictions as simulating
//! every GPU: iteration time and breakdown bit for bit, utilisation to rounding.

use dagsim::hw::load_topology;
use dagsim::predict::Setup;
use dagsim::strategy::Strategy;

/// AlexNet with compute shortened 50x; the sample size sets when batch reads end and so whether
/// the next batch's copies land during the all-reduces.
fn setup_sized(topology: &str, strategy: &str, sample_bytes: u64) -> Setup {
    let mut workload = dagsim::bench::alexnet_k80();
    workload.sample_bytes = sample_bytes;
    workload.device_sample_bytes = 4 * sample_bytes;
    workload.batch_per_gpu = 64;
    for l in &mut workload.layers {
        l.forward.mean_ns /= 50;
        l.backward.mean_ns /= 50;
    }
    Setup {
        workload,
        topology: load_topology(topology).unwrap(),
        strategy: Strategy::parse(strategy).unwrap(),
        iterations: 4,
    }
}

fn setup(topology: &str, strategy: &str) -> Setup {
    setup_sized(topology, strategy, 150_000)
}

/// Sample sizes whose reads end before, during and after the gradient all-reduces.
const SAMPLE_BYTES: [u64; 3] = [150_000, 450_000, 700_000];

#[test]
fn one_node_stands_for_all_exactly() {
    let strategies = [
        "none",
        "io",
        "wfbp",
        "io+wfbp",
        "io+wfbp+fusion=4M",
        "io+wfbp+grads=fp16",
        "io+wfbp+sparse=0.15",
        "io+wfbp+priority=1M",
        "io+wfbp+mixed+fp16_speedup=2",
    ];
    let mut reduced = 0;
    for (topology, per_node) in [("v100-cluster", 4), ("v100-pcie-10gbe", 4), ("dgx1-v100", 8)] {
        for alg in ["ring", "hierarchical"] {
            for (strategy, sample_bytes) in strategies.iter().flat_map(|s| SAMPLE_BYTES.map(|b| (s, b))) {
                let s = setup_sized(topology, &format!("{strategy}+allreduce={alg}"), sample_bytes);
                for nodes in [2, 3] {
                    let gpus = per_node * nodes;
                    let machine = s.topology.instantiate(gpus).unwrap();
                    assert_eq!(s.representatives(&machine, gpus), Some(per_node), "{topology} {strategy}");
                    let full = s.predict_with(gpus, false).unwrap();
                    let fast = s.predict_with(gpus, true).unwrap();
                    let what = format!("{topology} {strategy}+allreduce={alg} x{gpus}");
                    assert_eq!(fast.iteration_time_s, full.iteration_time_s, "{what}");
                    assert_eq!(fast.breakdown, full.breakdown, "{what}");
                    for (k, v) in &full.utilisation {
                        let u = fast.utilisation[k];
                        assert!((u - v).abs() <= 1e-9 * v.abs().max(1e-12), "{what}: {k} {u} vs {v}");
                    }
                    assert!(fast.events < full.events, "{what}: the reduced run did less work");
                    reduced += 1;
                }
            }
        }
    }
    assert_eq!(reduced, 3 * 2 * 9 * 3 * 2);
}

#[test]
fn asymmetric_setups_are_not_reduced() {
    // Shared NFS storage couples every node; tree and butterfly all-reduces treat nodes unequally;
    // a partly filled last node breaks the symmetry; master-GPU data parallelism has one master.
    let cases = [
        ("k80-cluster", "io+wfbp", 8),
        ("v100-cluster", "io+wfbp+allreduce=tree", 8),
        ("v100-cluster", "io+wfbp+allreduce=halving-doubling", 8),
        ("v100-cluster", "io+wfbp", 6),
        ("v100-cluster", "master", 8),
        ("v100-cluster", "io+wfbp", 4),
    ];
    for (topology, strategy, gpus) in cases {
        let s = setup(topology, strategy);
        let machine = s.topology.instantiate(gpus).unwrap();
        assert_eq!(s.representatives(&machine, gpus), None, "{topology} {strategy} x{gpus}");
    }
}

/// The cases above include collectives interrupted by batch copies (so the symmetry argument for
/// contended steps is exercised, not only the undisturbed path).
#[test]
fn the_compared_runs_include_contention() {
    use dagsim::sim::Options;
    let mut materialized = 0;
    for topology in ["v100-cluster", "v100-pcie-10gbe", "dgx1-v100"] {
        for strategy in ["io", "io+wfbp"] {
            for sample_bytes in SAMPLE_BYTES {
                let s = setup_sized(topology, strategy, sample_bytes);
                let run = s.simulate_represented(8, Options::default(), true).unwrap().run;
                materialized += run.materialized_collectives;
            }
        }
    }
    assert!(materialized > 0, "no collective met contention");
}

/// NCCL's tuner picks the ring or a tree per size: a reduced run is kept only when every call
/// picks the ring, so the reduced and full runs agree either way, and both ways occur here.
#[test]
fn nccl_auto_reduces_only_when_the_tuner_picks_rings() {
    use dagsim::collective::CollectiveModel;
    let (mut reduced, mut kept) = (0, 0);
    for strategy in ["io+wfbp", "io+wfbp+fusion=64M"] {
        for gpus in [8, 32] {
            let mut s = setup("v100-cluster", strategy);
            s.topology.collectives = CollectiveModel::from_flags(Some("nccl"), None, None, None).unwrap();
            let full = s.predict_with(gpus, false).unwrap();
            let fast = s.predict_with(gpus, true).unwrap();
            let what = format!("{strategy} x{gpus}");
            assert_eq!(fast.iteration_time_s, full.iteration_time_s, "{what}");
            assert_eq!(fast.breakdown, full.breakdown, "{what}");
            if fast.events < full.events {
                reduced += 1;
            } else {
                kept += 1;
            }
        }
    }
    assert!(reduced > 0 && kept > 0, "reduced {reduced}, kept whole {kept}");
}
