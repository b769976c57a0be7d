//! Transformer plans on a small rail-optimised fat-tree of DGX H100 nodes, for the tests of
//! timeline classes (`predict_plan::ReplicaClasses`).

use dagsim::hw::topology::parse_topology;
use dagsim::predict_plan::{PlanRequest, PlanSetup};
use dagsim::scenario::Scenario;
use std::path::Path;

/// DGX H100 nodes on a small rail-optimised fat-tree: `leaf` nodes per leaf group, `groups` leaf
/// groups per pod, pods joined by a core tier, the spines 2:1 oversubscribed.
pub fn tree(leaf: u32, groups: u32, ecmp: &str) -> dagsim::hw::Topology {
    let text = format!(
        r#"{{"name":"small-tree","base":"dgx-h100","fabric":{{"leaf":{{"nodes":{leaf}}},
            "spine":{{"switches":2,"leaf_groups":{groups},"oversubscription":2}},
            "core":{{"switches":2}},"ecmp":"{ecmp}"}}}}"#
    );
    parse_topology(&text, Path::new("small-tree.json"), false).unwrap()
}

/// `model` cut to `layers` under `spec`, micro-batch 1, sequence 2048, on `topology`.
pub fn setup(model: &str, layers: u32, spec: &str, global_batch: u32, topology: dagsim::hw::Topology) -> PlanSetup {
    let mut scenario = Scenario::default();
    scenario.workload.model = Some(model.into());
    PlanSetup::from_request(PlanRequest {
        scenario: &scenario,
        topology,
        spec,
        micro_batch: Some(1),
        global_batch: Some(global_batch),
        seq_len: Some(2048),
        layers: Some(layers),
        matmul_tflops: None,
        gpus: None,
    })
    .unwrap()
}
