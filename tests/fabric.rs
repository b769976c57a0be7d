//! Rail-optimised fat-trees (`fabric` in a topology file): routes climb only as high as the two
//! ends need, oversubscription divides the uplinks as written, ECMP by hash spreads NIC pairs over
//! the spines deterministically, and tiers that do not connect the nodes are refused.

use dagsim::calibrate::simulate_transfers;
use dagsim::hw::topology::parse_topology;
use dagsim::hw::{LinkKind, Machine, Topology};
use std::path::Path;

/// Nodes of `gpus` GPUs, each with its own NIC (8 GB/s, 1 us) on a CPU (100 GB/s, no latency),
/// joined by `fabric` (JSON).
fn fat_tree(gpus: u32, fabric: &str) -> dagsim::Result<Topology> {
    let mut devices = vec![r#"{"name":"cpu","kind":"cpu"}"#.to_string()];
    let mut links = Vec::new();
    let mut attach = Vec::new();
    for g in 0..gpus {
        devices.push(format!(r#"{{"name":"gpu{g}","kind":"gpu","host":"cpu"}},{{"name":"nic{g}","kind":"nic"}}"#));
        links.push(format!(r#"{{"from":"cpu","to":"gpu{g}","kind":"pcie","bandwidth_gb_s":100}}"#));
        links.push(format!(r#"{{"from":"cpu","to":"nic{g}","kind":"pcie","bandwidth_gb_s":100}}"#));
        attach.push(format!(r#""nic{g}""#));
    }
    let text = format!(
        r#"{{"name":"tree","graph":{{"gpu":"test","devices":[{}],"links":[{}],
            "network":{{"kind":"infiniband","bandwidth_gb_s":8,"latency_us":1,"protocol":"rdma","attach":[{}]}},
            "storage":{{"shared":false,"bandwidth_gb_s":1,"attach":"cpu"}}}},
            "fabric":{fabric}}}"#,
        devices.join(","),
        links.join(","),
        attach.join(",")
    );
    parse_topology(&text, Path::new("tree.json"), false)
}

/// Two nodes per leaf, one leaf group per pod, spines 4:1 oversubscribed towards one core.
const TWO_PODS: &str = r#"{"leaf":{"nodes":2},"spine":{"switches":1,"leaf_groups":1,"oversubscription":4,"latency_us":1},
    "core":{"switches":1,"latency_us":1}}"#;

fn ends(m: &Machine, transfers: &[(u32, u32)], bytes: u64) -> Vec<u64> {
    let list: Vec<_> =
        transfers.iter().map(|&(a, b)| (m.gpus[a as usize].device, m.gpus[b as usize].device, bytes)).collect();
    simulate_transfers(m, &list).unwrap()
}

#[test]
fn routes_climb_only_as_high_as_the_ends_need() {
    let m = fat_tree(1, TWO_PODS).unwrap().instantiate(4).unwrap();
    let fabric_hops = |a: usize, b: usize| {
        let r = m.shortest_path(m.gpus[a].device, m.gpus[b].device).unwrap();
        r.links.iter().filter(|&&l| m.links[l as usize].kind == LinkKind::Infiniband).count()
    };
    assert_eq!(fabric_hops(0, 1), 2, "same leaf: NIC -> leaf -> NIC");
    assert_eq!(fabric_hops(0, 2), 6, "other pod: leaf, spine, core, spine, leaf");
    assert_eq!(fabric_hops(3, 0), 6);
    assert_eq!(m.node_count(), 4);
}

#[test]
fn oversubscribed_spines_divide_the_uplink_by_hand() {
    let m = fat_tree(1, TWO_PODS).unwrap().instantiate(4).unwrap();
    let bytes = 800_000_000;
    // Same leaf: 8 GB/s NICs, two 1 us hops: 100 ms + 2 us.
    assert_eq!(ends(&m, &[(0, 1)], bytes), vec![100_000_000 + 2_000]);
    // Across pods: a spine's uplink is 2 nodes x 8 GB/s / 4 = 4 GB/s; six 1 us hops.
    assert_eq!(ends(&m, &[(0, 2)], bytes), vec![200_000_000 + 6_000]);
    // Two nodes of pod 0 sending to pod 1 share that uplink: 2 GB/s each.
    assert_eq!(ends(&m, &[(0, 2), (1, 3)], bytes), vec![400_000_000 + 6_000; 2]);
    // Without oversubscription the NICs are the limit again.
    let flat = TWO_PODS.replace(r#""oversubscription":4"#, r#""oversubscription":1"#);
    let m = fat_tree(1, &flat).unwrap().instantiate(4).unwrap();
    assert_eq!(ends(&m, &[(0, 2), (1, 3)], bytes), vec![100_000_000 + 6_000; 2]);
    // Leaf oversubscription 2:1 with two senders under one leaf: 8 GB/s up, 4 each.
    let leafy = flat.replace(r#""nodes":2}"#, r#""nodes":2,"oversubscription":2}"#);
    let m = fat_tree(1, &leafy).unwrap().instantiate(4).unwrap();
    assert_eq!(ends(&m, &[(0, 2), (1, 3)], bytes), vec![200_000_000 + 6_000; 2]);
}

#[test]
fn each_gpu_leaves_on_its_own_rail() {
    let m = fat_tree(2, r#"{"leaf":{"nodes":4},"spine":{"switches":2}}"#).unwrap().instantiate(8).unwrap();
    for (a, b, leaf) in [(0, 2, "leaf0.rail0"), (1, 3, "leaf0.rail1"), (1, 2, "leaf0.rail1")] {
        let r = m.shortest_path(m.gpus[a].device, m.gpus[b].device).unwrap();
        let names: Vec<&str> = r.links.iter().map(|&l| m.device_name(m.links[l as usize].to)).collect();
        assert!(names.contains(&leaf), "gpu{a} -> gpu{b}: {names:?}");
        assert!(names.contains(&format!("n{}.nic{}", b / 2, b % 2).as_str()), "gpu{a} -> gpu{b}: {names:?}");
    }
    // A named rail is kept at both ends.
    let r = m.route_via_rail(m.gpus[1].device, m.gpus[2].device, 1).unwrap();
    assert!(r.links.iter().any(|&l| m.device_name(m.links[l as usize].to) == "n1.nic1"));
}

#[test]
fn pxn_keeps_a_transfer_on_the_receivers_rail() {
    // Two GPUs a node joined by NVLink, each with its own NIC behind it; the CPU reaches both
    // NICs, so the cheapest way from one GPU to the other's NIC is through the CPU, not the
    // NVLink peer. A leaf per rail, one spine.
    let fabric = r#"{"leaf":{"nodes":4},"spine":{"switches":1}}"#;
    let json = format!(
        r#"{{"name":"pxn","graph":{{"gpu":"test","devices":[{{"name":"cpu","kind":"cpu"}},
            {{"name":"gpu0","kind":"gpu","host":"cpu"}},{{"name":"nic0","kind":"nic"}},
            {{"name":"gpu1","kind":"gpu","host":"cpu"}},{{"name":"nic1","kind":"nic"}}],
            "links":[{{"from":"cpu","to":"gpu0","kind":"pcie","bandwidth_gb_s":100}},
            {{"from":"gpu0","to":"nic0","kind":"pcie","bandwidth_gb_s":50}},
            {{"from":"cpu","to":"nic0","kind":"pcie","bandwidth_gb_s":90}},
            {{"from":"cpu","to":"gpu1","kind":"pcie","bandwidth_gb_s":100}},
            {{"from":"gpu1","to":"nic1","kind":"pcie","bandwidth_gb_s":50}},
            {{"from":"cpu","to":"nic1","kind":"pcie","bandwidth_gb_s":90}},
            {{"from":"gpu0","to":"gpu1","kind":"nvlink","bandwidth_gb_s":200}}],
            "network":{{"kind":"infiniband","bandwidth_gb_s":8,"latency_us":1,"protocol":"rdma","attach":["nic0","nic1"]}},
            "storage":{{"shared":false,"bandwidth_gb_s":1,"attach":"cpu"}}}},"fabric":{fabric}}}"#
    );
    let m = parse_topology(&json, Path::new("pxn.json"), false).unwrap().instantiate(4).unwrap();
    // gpu1 of node 0 to gpu0 of node 1: NCCL's PXN hands the data over NVLink to gpu0 of node 0,
    // whose NIC (rail 0) is the receiver's, so it stays under rail 0's leaf and never climbs
    // (before, a fabric route ignored the proxy and took the cheapest way, through the CPU).
    // On one switch (no fabric) the proxy was always honoured.
    let r = m.p2p_route(m.gpus[1].device, m.gpus[2].device).unwrap();
    let names: Vec<&str> = r.links.iter().map(|&l| m.device_name(m.links[l as usize].to)).collect();
    assert_eq!(names, ["n0.gpu0", "n0.nic0", "leaf0.rail0", "n1.nic0", "n1.gpu0"]);
}

#[test]
fn hashed_ecmp_uses_every_spine_and_the_same_one_every_time() {
    let spec = r#"{"leaf":{"nodes":1},"spine":{"switches":4},"ecmp":"hash"}"#;
    let m = fat_tree(1, spec).unwrap().instantiate(16).unwrap();
    let spine = |a: usize, b: usize| {
        let r = m.shortest_path(m.gpus[a].device, m.gpus[b].device).unwrap();
        r.links
            .iter()
            .map(|&l| m.device_name(m.links[l as usize].to).to_string())
            .find(|n| n.contains("spine"))
            .unwrap()
    };
    let mut used: Vec<String> =
        (0..16).flat_map(|a| (0..16).filter(move |&b| b != a).map(move |b| (a, b))).map(|(a, b)| spine(a, b)).collect();
    assert_eq!(spine(3, 7), spine(3, 7));
    used.sort();
    used.dedup();
    assert_eq!(used, ["pod0.spine0", "pod0.spine1", "pod0.spine2", "pod0.spine3"]);
    // Two flows into one node: hashed onto one spine they share its 2 GB/s link (1 node x 8 GB/s
    // over 4 spines), on two spines each has 2 GB/s of its own.
    let bytes = 200_000_000;
    let t = ends(&m, &[(0, 5), (1, 5)], bytes);
    let (alone, shared) = (100_000_000 + 4_000, 200_000_000 + 4_000);
    let expect = if spine(0, 5) == spine(1, 5) { shared } else { alone };
    assert_eq!(t, vec![expect; 2]);
}

#[test]
fn a_few_lines_describe_a_hundred_thousand_gpus() {
    let text = std::fs::read_to_string("topologies/examples/h100-fat-tree.json").unwrap();
    assert!(text.lines().count() < 15);
    let t = parse_topology(&text, Path::new("h100-fat-tree.json"), false).unwrap();
    let m = t.instantiate(100_000).unwrap();
    assert_eq!(m.gpus.len(), 100_000);
    let r = m.shortest_path(m.gpus[0].device, m.gpus[99_999].device).unwrap();
    assert_eq!(r.links.iter().filter(|&&l| m.links[l as usize].kind == LinkKind::Infiniband).count(), 6);
}

#[test]
fn tiers_that_do_not_connect_the_gpus_are_refused_naming_the_field() {
    let no_core = r#"{"leaf":{"nodes":1},"spine":{"switches":1,"leaf_groups":1}}"#;
    let e = fat_tree(1, no_core).unwrap_err().to_string();
    assert!(e.contains("do not connect") && e.contains("core"), "{e}");
    for (spec, field) in [
        (r#"{"leaf":{"nodes":0},"spine":{"switches":1}}"#, "fabric.leaf.nodes"),
        (r#"{"leaf":{"nodes":2},"spine":{"switches":0}}"#, "fabric.spine.switches"),
        (r#"{"leaf":{"nodes":2,"oversubscription":-2},"spine":{"switches":1}}"#, "fabric.leaf.oversubscription"),
        (r#"{"leaf":{"nodes":2},"spine":{"switches":1,"oversubscription":0}}"#, "fabric.spine.oversubscription"),
        (
            r#"{"leaf":{"nodes":2},"spine":{"switches":1,"leaf_groups":1},"core":{"switches":0}}"#,
            "fabric.core.switches",
        ),
        (r#"{"leaf":{"nodes":2},"spine":{"switches":1,"latency_us":-1}}"#, "fabric.spine.latency_us"),
    ] {
        let e = fat_tree(1, spec).unwrap_err().to_string();
        assert!(e.contains(field), "{spec}: {e}");
    }
    let both = r#"{"name":"x","base":"dgx-h100","cluster":{"nodes":1,"gpus_per_node":1,"gpu":"a100",
        "pcie":{"bandwidth_gb_s":1},"network":{"kind":"ethernet","bandwidth_gb_s":1},"storage":{"shared":false,"bandwidth_gb_s":1}}}"#;
    assert!(parse_topology(both, Path::new("x.json"), false).unwrap_err().to_string().contains("base"));
    let unknown = r#"{"name":"x","base":"dgx-h1000"}"#;
    assert!(parse_topology(unknown, Path::new("x.json"), false).unwrap_err().to_string().contains("not a preset"));
    let shared = r#"{"name":"x","base":"k80-cluster","fabric":{"leaf":{"nodes":1},"spine":{"switches":1}}}"#;
    assert!(parse_topology(shared, Path::new("x.json"), false).unwrap_err().to_string().contains("fabric"));
}

#[test]
fn the_cli_exits_2_on_a_bad_fabric() {
    let dir = std::env::temp_dir().join(format!("dagsim-fabric-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.json");
    std::fs::write(&file, r#"{"name":"x","base":"dgx-h100","fabric":{"leaf":{"nodes":32},"spine":{"switches":-4}}}"#)
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dagsim"))
        .args(["predict", "--model", "llama2-7b", "--parallel", "tp=8,dp=2", "--topology"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("switches"));
    std::fs::remove_dir_all(&dir).unwrap();
}
