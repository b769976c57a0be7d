//! Faults (`--slow-gpu`, `--straggler-node`, `--degrade-link`): the step time moves the way it
//! must, by amounts checked by hand, and bad specs exit 2 naming the flag.

use dagsim::calibrate::simulate_transfers;
use dagsim::hw::faults::Faults;
use dagsim::hw::topology::parse_topology;
use std::path::Path;
use std::process::Command;

fn dagsim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dagsim")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// (iteration time, compute) in seconds of `predict --format json` on the shipped AlexNet trace.
fn alexnet(gpus: &str, extra: &[&str]) -> (f64, f64) {
    let mut args = vec!["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", gpus, "--format", "json"];
    args.extend(extra);
    let (code, out, err) = dagsim(&args);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v[0];
    (r["iteration_time_s"].as_f64().unwrap(), r["breakdown"]["compute"].as_f64().unwrap())
}

#[test]
fn a_slow_gpu_stretches_its_compute_and_the_synchronous_step() {
    // One GPU twice as slow: every compute task takes twice as long (integer ns, exactly).
    let (t1, c1) = alexnet("1", &[]);
    let (t2, c2) = alexnet("1", &["--slow-gpu", "0=2"]);
    assert!((c2 - 2.0 * c1).abs() < 1e-6, "{c1} -> {c2}");
    assert!(t2 >= 2.0 * c1 && t2 > t1);
    // On 16 GPUs, synchronous data parallelism waits for the slowest: the step grows by at least
    // half the compute when one GPU is 1.5x slower, and by no more than that plus what the
    // fault-free step spent outside compute. The compute here is the kernels' own time: under
    // the default compute contention the breakdown's compute also holds the time the backward
    // ran on the SMs the all-reduces beside it left, which the slow GPU's factor does not scale
    // (the all-reduces take as long), so the kernels' time is read with contention off.
    let (t, _) = alexnet("16", &[]);
    let (_, c) = alexnet("16", &["--compute-contention", "off"]);
    let (ts, _) = alexnet("16", &["--slow-gpu", "5=1.5"]);
    assert!(ts >= t + 0.5 * c - 1e-6 && ts <= 1.5 * c + (t - c) + 1e-3, "{t} -> {ts} (compute {c})");
    // A straggler node of the same factor is no slower than one slow GPU of it (they wait alike).
    let (tn, _) = alexnet("16", &["--straggler-node", "1=1.5"]);
    assert!((tn - ts).abs() / ts < 0.01, "{ts} vs {tn}");
}

#[test]
fn a_degraded_link_slows_what_crosses_it_by_its_factor() {
    let text = r#"{"name":"pair","graph":{"gpu":"test","nodes":2,"devices":[{"name":"cpu","kind":"cpu"},
        {"name":"gpu0","kind":"gpu","host":"cpu"},{"name":"nic0","kind":"nic"}],
        "links":[{"from":"cpu","to":"gpu0","kind":"pcie","bandwidth_gb_s":100},{"from":"cpu","to":"nic0","kind":"pcie","bandwidth_gb_s":100}],
        "network":{"kind":"infiniband","bandwidth_gb_s":8,"latency_us":1,"protocol":"rdma","attach":["nic0"]},
        "storage":{"shared":false,"bandwidth_gb_s":1,"attach":"cpu"}}}"#;
    let mut t = parse_topology(text, Path::new("pair.json"), false).unwrap();
    let run = |t: &dagsim::hw::Topology| {
        let m = t.instantiate(2).unwrap();
        simulate_transfers(&m, &[(m.gpus[0].device, m.gpus[1].device, 800_000_000)]).unwrap()[0]
    };
    // 800 MB at 8 GB/s over two 1 us network hops.
    assert_eq!(run(&t), 100_000_000 + 2_000);
    t.faults.degraded_links = vec![Faults::parse_link("n0.nic0:switch=0.25").unwrap()];
    assert_eq!(run(&t), 400_000_000 + 2_000);
    t.faults.degraded_links = vec![Faults::parse_link("n0.nic0:nobody=0.5").unwrap()];
    assert!(t.instantiate(2).unwrap_err().to_string().contains("nobody"));
}

#[test]
fn bad_fault_specs_exit_2_naming_the_flag() {
    for (flag, spec) in [
        ("--slow-gpu", "99=2"),
        ("--slow-gpu", "3=0.5"),
        ("--slow-gpu", "x=2"),
        ("--straggler-node", "7=2"),
        ("--degrade-link", "n0.gpu0:n9.gpu0=0.5"),
        ("--degrade-link", "n0.gpu0=0.5"),
        ("--degrade-link", "n0.cpu0:n0.gpu0=0"),
    ] {
        let (code, _, err) = dagsim(&["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "16", flag, spec]);
        assert_eq!(code, Some(2), "{flag} {spec}: {err}");
        assert!(err.contains(flag), "{flag} {spec}: {err}");
    }
}
