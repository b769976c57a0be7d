//! A host-staged network (`graph.network.host_staged`): NCCL without GPUDirect RDMA moves each
//! channel's data through host memory, so a transfer between nodes goes at most its channels times
//! one channel's rate. Checked on a case small enough to time by hand, and on bad input.

mod common;
use common::fails_with;
use dagsim::collective::{Algorithm, CollectiveOp};
use dagsim::dag::{DagBuilder, DagMeta, Phase, Task, Work};
use dagsim::sim::Options;
use std::path::Path;

/// Two nodes of one GPU each: PCIe 25 GB/s, one 100 Gb/s port (12.5 GB/s at efficiency 1), no
/// latency anywhere, and `host_staged` as given (a JSON object, or nothing).
fn two_nodes(host_staged: Option<&str>) -> String {
    let hs = host_staged.map_or(String::new(), |h| format!(r#", "host_staged": {h}"#));
    format!(
        r#"{{ "name": "two-nodes", "source": "a hand-timed test case",
  "graph": {{ "gpu": "A100-SXM4-80GB", "nodes": 2, "grow": false,
    "devices": [ {{"name": "cpu0", "kind": "cpu"}}, {{"name": "nic0", "kind": "nic"}},
                 {{"name": "gpu0", "kind": "gpu", "host": "cpu0"}} ],
    "links": [ {{"from": "cpu0", "to": "gpu0", "kind": "pcie", "latency_us": 0, "bandwidth_gb_s": 25}},
               {{"from": "cpu0", "to": "nic0", "kind": "pcie", "latency_us": 0, "bandwidth_gb_s": 25}} ],
    "network": {{ "kind": "infiniband", "bandwidth_gbit_s": 100, "latency_us": 0, "protocol": "rdma",
                  "rdma_efficiency": 1.0, "attach": ["nic0"]{hs} }},
    "storage": {{ "shared": false, "bandwidth_gb_s": 2, "latency_us": 0, "attach": "cpu0" }} }} }}"#
    )
}

/// The end of a lone send of `bytes` from node 0's GPU to node 1's, and of a lone ring all-reduce
/// of `bytes` per rank over the two GPUs, in ns.
fn send_and_all_reduce(topology: &str, bytes: u64) -> (u64, u64) {
    let topo = dagsim::hw::topology::parse_topology(topology, Path::new("two-nodes.json"), false).unwrap();
    let m = topo.instantiate(2).unwrap();
    let task =
        |work| Task { work, queue: None, phase: Phase::Backward, gpu: Some(0), iteration: 0, layer: None, priority: 0 };
    let run = |collective: bool| {
        let mut b = DagBuilder::new();
        let work = if collective {
            let group = b.add_group(vec![0, 1]);
            Work::Collective { group, op: CollectiveOp::AllReduce, algorithm: Algorithm::Ring, bytes }
        } else {
            Work::Transfer { src: m.gpus[0].device, dst: m.gpus[1].device, bytes }
        };
        b.add_task(task(work));
        let dag = b.build(DagMeta { gpus: 2, iterations: 0, iteration_end: vec![] }).unwrap();
        dagsim::sim::simulate(&dag, &m, Options::default()).unwrap().makespan
    };
    (run(false), run(true))
}

fn assert_near(got: u64, want: u64, what: &str) {
    assert!(got.abs_diff(want) <= 2, "{what}: {got} ns, by hand {want} ns");
}

#[test]
fn transfers_between_nodes_go_at_their_channels_rate() {
    let gb = 1_000_000_000;
    // Without the key the port decides: 1 GB at 12.5 GB/s is 80 ms; the ring all-reduce of 1 GB
    // on 2 ranks is 2 steps of 0.5 GB each way, 40 ms each.
    let (send, all_reduce) = send_and_all_reduce(&two_nodes(None), gb);
    assert_near(send, 80_000_000, "send, no key");
    assert_near(all_reduce, 80_000_000, "all-reduce, no key");
    // At 2 GB/s a channel under NCCL 2.10.3's rules: the send is one peer's one channel, 1 GB at
    // 2 GB/s = 500 ms; each ring step is two channels, 0.5 GB at 4 GB/s = 125 ms, two steps 250 ms.
    let staged = two_nodes(Some(r#"{"channel_gb_s": 2, "nccl": "2.10.3"}"#));
    let (send, all_reduce) = send_and_all_reduce(&staged, gb);
    assert_near(send, 500_000_000, "send, host-staged");
    assert_near(all_reduce, 250_000_000, "all-reduce, host-staged");
    // A channel faster than the port: the port decides again.
    let fast = two_nodes(Some(r#"{"channel_gb_s": 100, "nccl": "2.10.3"}"#));
    let (send, all_reduce) = send_and_all_reduce(&fast, gb);
    assert_near(send, 80_000_000, "send, fast channels");
    assert_near(all_reduce, 80_000_000, "all-reduce, fast channels");
}

#[test]
fn bad_host_staged_input_names_the_file_and_field() {
    let dir = std::env::temp_dir().join(format!("dagsim-host-staged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, hs, needle) in [
        ("zero", r#"{"channel_gb_s": 0, "nccl": "2.10.3"}"#, "must be a positive rate"),
        ("negative", r#"{"channel_gb_s": -2.5, "nccl": "2.10.3"}"#, "must be a positive rate"),
        ("version", r#"{"channel_gb_s": 2.5, "nccl": "2.18.3"}"#, "channel rules are not modelled"),
    ] {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, two_nodes(Some(hs))).unwrap();
        let p = path.to_str().unwrap();
        let field =
            if name == "version" { "graph.network.host_staged.nccl" } else { "graph.network.host_staged.channel_gb_s" };
        let args = ["collective", "--topology", p, "--gpus", "2", "--nodes", "2", "-b", "1000", "-e", "1000"];
        fails_with(&args, &[&format!("{name}.json"), field, needle]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
