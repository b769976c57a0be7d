//! Simulation speed: a full DAG build plus engine run for the smaller standard cases of
//! `dagsim bench` (the large ones take seconds per run: time them with `dagsim bench`).
//! Run with `cargo bench --bench engine`.

use criterion::{criterion_group, criterion_main, Criterion};
use dagsim::bench::{case, measure};

fn engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    for name in ["alexnet-k80-16gpu", "resnet50-v100-128gpu-ring"] {
        let case = case(name, 2).expect("bench case builds");
        group.bench_function(name, |b| b.iter(|| measure(&case, true).expect("case runs")));
    }
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
