//! Zoo parameter totals against the published counts.

use dagsim::workload::zoo::{Model, MODEL_NAMES};

/// (model, published parameter total, source). Exact totals where the reference implementation
/// publishes one; the rounded paper figure otherwise.
const PUBLISHED: &[(&str, u64, &str)] = &[
    ("alexnet", 60_965_224, "Caffe bvlc_alexnet (Krizhevsky et al. 2012, ~61 M)"),
    ("alexnet-owt", 61_100_840, "torchvision alexnet"),
    ("alexnet-bn", 60_900_000, "GradientFlow (Sun et al.) Fig. 5: 60.9 M"),
    ("vgg11", 132_863_336, "torchvision vgg11"),
    ("vgg16", 138_357_544, "torchvision vgg16 (paper: 138 M)"),
    ("vgg19", 143_667_240, "torchvision vgg19 (paper: 144 M)"),
    ("resnet18", 11_689_512, "torchvision resnet18"),
    ("resnet34", 21_797_672, "torchvision resnet34"),
    ("resnet50", 25_557_032, "torchvision resnet50 (~25.6 M)"),
    ("googlenet", 6_998_552, "Caffe bvlc_googlenet without the auxiliary heads (paper: 6.8 M)"),
    ("mobilenet-v2", 3_504_872, "torchvision mobilenet_v2 (paper: 3.4 M)"),
    ("shufflenet-v2", 2_278_604, "torchvision shufflenet_v2_x1_0 (paper: 2.3 M)"),
    ("mnasnet1.3", 6_282_256, "torchvision mnasnet1_3"),
    ("bert-base", 109_482_240, "Hugging Face bert-base-uncased (paper: 110 M)"),
    ("bert-large", 335_141_888, "Hugging Face bert-large-uncased (paper: 340 M)"),
];

#[test]
fn every_zoo_model_matches_its_published_parameter_count() {
    for name in MODEL_NAMES {
        let (_, published, source) =
            PUBLISHED.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("no published count for {name}"));
        let ours = Model::by_name(name, None).unwrap().params();
        println!("{name}: {ours} vs {published} ({source})");
        let rel = (ours as f64 - *published as f64).abs() / *published as f64;
        let tolerance = if published % 100_000 == 0 { 0.002 } else { 0.0 }; // rounded figures
        assert!(rel <= tolerance, "{name}: {ours} parameters, published {published} ({source})");
    }
}
