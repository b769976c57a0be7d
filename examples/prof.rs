use dagsim::dag::build::{build_ssgd, BuildInput};
use std::time::Instant;
fn main() {
    let gpus: u32 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1024);
    let cases = dagsim::bench::cases(2).unwrap();
    let case = &cases[1];
    let t0 = Instant::now();
    let m = case.setup.topology.instantiate(gpus).unwrap();
    let t1 = Instant::now();
    let dag = build_ssgd(&BuildInput {
        workload: &case.setup.workload,
        machine: &m,
        gpus,
        strategy: &case.setup.strategy,
        iterations: 2,
    })
    .unwrap();
    let t2 = Instant::now();
    let run = dagsim::sim::simulate(&dag, &m, Default::default()).unwrap();
    let t3 = Instant::now();
    let steady = dagsim::report::steady_state(&dag, &run);
    let t4 = Instant::now();
    println!(
        "machine {:?} build {:?} sim {:?} report {:?}  tasks {} edges {} events {} iter {}",
        t1 - t0,
        t2 - t1,
        t3 - t2,
        t4 - t3,
        dag.len(),
        dag.edge_count(),
        run.events,
        steady.iteration_ns
    );
}
