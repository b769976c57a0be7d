//! Simulation speed: a full DAG build plus engine run for the standard cases of `dagsim bench`.
//! Run with `cargo bench --bench engine`; README reports the figures.

use criterion::{criterion_group, criterion_main, Criterion};
use dagsim::bench::{cases, measure};

fn engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    for case in cases(2).expect("bench cases build") {
        if case.gpus > 64 {
            continue; // the 1,024-GPU case takes seconds per run: `dagsim bench` times it
        }
        group.bench_function(case.name, |b| b.iter(|| measure(&case).expect("case runs")));
    }
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
