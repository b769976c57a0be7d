//! Calibration: fits link latency and bandwidth curves to measured collective times, then runs the
//! model (the real engine on the calibrated machine) at every measured size to report the error.
//! Wires `hw` (topology, calibration format), `collective` (plans), `dag` and `sim` for one
//! collective at a time, like `predict` does for training. Does no printing.
//!
//! The fit (ring all-reduce): a ring of N ranks takes 2(N-1) steps, each as long as its slowest
//! transfer: the route latency plus chunk / rate, chunk = K/N. On the ring's critical route the
//! fitted link kind appears h times next to links whose latency L_o and rate the topology gives.
//! From a measured time T(K), the step time is s = T / (2(N-1)). The kind's latency a is the
//! intercept of a least-squares line through (chunk, s - L_o), kept below 90% of the smallest step
//! so every rate stays positive; each fitted size then gives one curve point
//! rate(chunk) = chunk / (s - L_o - h a). Between points the curve is interpolated in log(size).

pub mod collective_fit;
pub mod formats;
pub mod nccl_fit;
pub mod nccl_tests;
pub mod p2p;

use crate::collective::{Algorithm, CollectiveOp};
use crate::dag::{DagBuilder, DagMeta, Phase, Task, Work};
use crate::error::{Error, Result};
use crate::hw::calibration::{Calibration, CurvePoint, FitPoint, LinkCalibration, Provenance};
use crate::hw::{DeviceId, LinkKind, Machine, Topology};
use crate::sim::{simulate, Options};
use crate::units::Nanos;
pub use formats::{read_measurement, Measurement};

/// A task of its own: no queue, no GPU, iteration 0.
fn lone_task(work: Work) -> Task {
    Task { work, queue: None, phase: Phase::GradientAggregation, gpu: None, iteration: 0, layer: None, priority: 0 }
}

/// Simulated time of one collective of `bytes` on the first `ranks` GPUs of `machine`.
pub fn simulate_collective(
    machine: &Machine,
    op: CollectiveOp,
    algorithm: Algorithm,
    ranks: u32,
    bytes: u64,
) -> Result<Nanos> {
    Ok(collective_run(machine, op, algorithm, ranks, bytes)?.0)
}

/// Like [`simulate_collective`], with how the collective model ran it (`ring/LL128 x16`, `ring`).
pub fn collective_run(
    machine: &Machine,
    op: CollectiveOp,
    algorithm: Algorithm,
    ranks: u32,
    bytes: u64,
) -> Result<(Nanos, String)> {
    if ranks == 0 || ranks as usize > machine.gpus.len() {
        return Err(Error::invalid("ranks", format!("{ranks} asked for, machine has {} GPUs", machine.gpus.len())));
    }
    let mut b = DagBuilder::new();
    let group = b.add_group((0..ranks).collect());
    let t = b.add_task(lone_task(Work::Collective { group, op, algorithm, bytes }));
    let dag = b.build(DagMeta { gpus: ranks, iterations: 1, iteration_end: vec![t] })?;
    let run = simulate(&dag, machine, Options::default())?;
    let ran = run.collectives.first().map_or_else(|| "none".to_string(), |u| u.ran.clone());
    Ok((run.makespan, ran))
}

/// Transfers (source device, destination device, bytes) that all start at time zero and share the
/// machine; returns when each one ends.
pub fn simulate_transfers(machine: &Machine, transfers: &[(DeviceId, DeviceId, u64)]) -> Result<Vec<Nanos>> {
    let mut b = DagBuilder::new();
    let tasks: Vec<_> =
        transfers.iter().map(|&(src, dst, bytes)| b.add_task(lone_task(Work::Transfer { src, dst, bytes }))).collect();
    let first = *tasks.first().ok_or_else(|| Error::invalid("transfers", "none given"))?;
    let dag = b.build(DagMeta { gpus: 1, iterations: 1, iteration_end: vec![first] })?;
    let run = simulate(&dag, machine, Options::default())?;
    Ok(tasks.iter().map(|&t| run.end[t as usize]).collect())
}

/// What to fit and how to check it.
#[derive(Debug, Clone, Default)]
pub struct FitOptions {
    /// Link kind to fit; default: the slowest kind on the ring's routes.
    pub kind: Option<LinkKind>,
    /// Fit on every other point only (odd positions) and predict the rest.
    pub hold_out: bool,
    /// Rank count and host count when the file does not say (OSU tables).
    pub ranks: Option<u32>,
    pub hosts: Option<u32>,
}

/// A fitted calibration and the per-point comparison of model and measurement.
#[derive(Debug, Clone)]
pub struct Fit {
    pub calibration: Calibration,
    pub kind: LinkKind,
    pub points: Vec<FitPoint>,
}

impl Fit {
    /// Median and worst absolute relative error over the points with sizes in `lo..=hi`, split into
    /// (fitted, held out). `None` where there are no such points.
    pub fn summary(&self, lo: u64, hi: u64) -> [Option<(f64, f64)>; 2] {
        summarize(&self.points, lo, hi)
    }
}

/// Median and worst absolute relative error over the points with sizes in `lo..=hi`, split into
/// (fitted, held out). `None` where there are no such points.
pub fn summarize(points: &[FitPoint], lo: u64, hi: u64) -> [Option<(f64, f64)>; 2] {
    [false, true].map(|held| {
        let mut e: Vec<f64> = points
            .iter()
            .filter(|p| p.held_out == held && (lo..=hi).contains(&p.bytes))
            .map(|p| p.error.abs())
            .collect();
        if e.is_empty() {
            return None;
        }
        e.sort_by(f64::total_cmp);
        let median = if e.len() % 2 == 1 { e[e.len() / 2] } else { (e[e.len() / 2 - 1] + e[e.len() / 2]) / 2.0 };
        Some((median, e[e.len() - 1]))
    })
}

/// The uncalibrated machine a single-node all-reduce fit starts from, with the rank and host
/// counts (from the file, else `opts`); errors name the file when it cannot be fitted.
pub(crate) fn allreduce_fit_machine(
    topology: &Topology,
    m: &Measurement,
    opts: &FitOptions,
) -> Result<(Machine, u32, u32)> {
    if m.op != CollectiveOp::AllReduce {
        return Err(Error::invalid("measurement", format!("{}: only all-reduce tables can be fitted", m.input)));
    }
    let ranks = opts.ranks.unwrap_or(m.ranks);
    if ranks < 2 {
        return Err(Error::invalid(
            "ranks",
            format!("{}: the file does not say how many ranks ran; give --ranks (at least 2)", m.input),
        ));
    }
    let hosts = opts.hosts.unwrap_or(m.hosts.max(1));
    let mut bare = topology.clone();
    bare.calibrated = None;
    let machine = bare.instantiate(ranks)?;
    check_hosts(topology, &machine, m, ranks, hosts)?;
    Ok((machine, ranks, hosts))
}

/// Fits the links of one kind to a measured ring all-reduce and checks the fit with the engine.
pub fn fit_allreduce(topology: &Topology, m: &Measurement, opts: &FitOptions) -> Result<Fit> {
    let (machine, ranks, hosts) = allreduce_fit_machine(topology, m, opts)?;
    let route = CriticalRoute::find(&machine, ranks, opts.kind)?;
    let n = ranks as u64;
    let steps = 2.0 * (ranks - 1) as f64;
    // (chunk bytes, step ns minus the other links' latency), from the fitted points.
    let mut fit_pts: Vec<(u64, f64)> = Vec::new();
    for (i, &(bytes, us)) in m.points.iter().enumerate() {
        if bytes < n || (opts.hold_out && i % 2 == 0) {
            continue;
        }
        let chunk = bytes.div_ceil(n);
        if fit_pts.last().is_some_and(|p| p.0 == chunk) {
            continue;
        }
        fit_pts.push((chunk, us * 1e3 / steps - route.other_latency_ns as f64));
    }
    if fit_pts.len() < 2 {
        return Err(Error::invalid("measurement", format!("{}: fewer than two usable sizes to fit", m.input)));
    }
    let min_step = fit_pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    if min_step <= 0.0 {
        return Err(Error::invalid(
            "topology",
            format!(
                "{}: a measured step ({:.0} ns) is shorter than the latency of the other links on the route ({} ns); \
                 lower those latencies in the topology",
                m.input,
                min_step + route.other_latency_ns as f64,
                route.other_latency_ns
            ),
        ));
    }
    let latency_ns = (intercept(&fit_pts).clamp(0.0, 0.9 * min_step)) / route.hops as f64;
    let curve: Vec<CurvePoint> = fit_pts
        .iter()
        .map(|&(chunk, step)| CurvePoint { bytes: chunk, gb_s: chunk as f64 / (step - route.hops as f64 * latency_ns) })
        .collect();
    let provenance = Provenance {
        tool: format!("dagsim calibrate {}", env!("CARGO_PKG_VERSION")),
        inputs: vec![m.input.clone()],
        hardware: if m.hardware.is_empty() { machine.gpu_model.clone() } else { m.hardware.clone() },
        notes: format!(
            "{} links fitted to a ring all-reduce of {ranks} ranks on {hosts} host(s) over topology `{}`{}",
            route.kind.name(),
            topology.name,
            if opts.hold_out { "; every other size held out" } else { "" }
        ),
    };
    let mut calibration = Calibration::new(provenance);
    calibration.links.push(LinkCalibration {
        kind: Some(route.kind.name().to_string()),
        from: None,
        to: None,
        latency_us: latency_ns / 1e3,
        bandwidth: curve,
    });
    let before = ring_routes(&machine, ranks);
    let mut fitted = machine;
    fitted.apply_calibration(&calibration)?;
    if ring_routes(&fitted, ranks) != before {
        let peak = calibration.links[0].bandwidth.iter().map(|p| p.gb_s).fold(0.0, f64::max);
        return Err(Error::invalid(
            "measurement",
            format!(
                "{}: fitting {} links to these times (at most {peak:.2} GB/s) makes the ring's routes avoid them; \
                 the measurement is slower than the topology's other paths allow, so it probably did not use {} \
                 links (e.g. MPI staging through host memory). Fit another --kind or describe that path",
                m.input,
                route.kind.name(),
                route.kind.name()
            ),
        ));
    }
    let points = measured_vs_model(&fitted, m, Algorithm::Ring, ranks, |i, _| opts.hold_out && i % 2 == 0)?;
    calibration.fit = points.clone();
    Ok(Fit { calibration, kind: route.kind, points })
}

/// Measured against simulated time at every measured size, on `ranks` ranks; `held_out(index,
/// bytes)` marks the points the fit did not use.
pub(crate) fn measured_vs_model(
    machine: &Machine,
    m: &Measurement,
    algorithm: Algorithm,
    ranks: u32,
    held_out: impl Fn(usize, u64) -> bool,
) -> Result<Vec<FitPoint>> {
    m.points
        .iter()
        .enumerate()
        .map(|(i, &(bytes, us))| {
            let predicted_us = simulate_collective(machine, m.op, algorithm, ranks, bytes)? as f64 / 1e3;
            Ok(FitPoint {
                input: m.input.clone(),
                op: m.op,
                ranks,
                bytes,
                measured_us: us,
                predicted_us,
                error: (predicted_us - us) / us,
                held_out: held_out(i, bytes),
            })
        })
        .collect()
}

/// The measurement's ranks must sit on as many nodes of the machine as it ran on hosts.
pub(crate) fn check_hosts(
    topology: &Topology,
    machine: &Machine,
    m: &Measurement,
    ranks: u32,
    hosts: u32,
) -> Result<()> {
    let nodes = machine.gpus[..ranks as usize].iter().map(|g| g.node).max().map_or(0, |n| n + 1);
    if nodes != hosts {
        return Err(Error::invalid(
            "topology",
            format!(
                "{} ran {ranks} ranks on {hosts} host(s), but topology `{}` puts them on {nodes} node(s); \
                 pick a topology with {} GPUs per node",
                m.input,
                topology.name,
                ranks / hosts.max(1)
            ),
        ));
    }
    Ok(())
}

/// The links of every transfer of a ring's step, in rank order.
fn ring_routes(machine: &Machine, ranks: u32) -> Vec<Option<Vec<u32>>> {
    (0..ranks)
        .map(|r| {
            let (a, b) = (machine.gpus[r as usize].device, machine.gpus[((r + 1) % ranks) as usize].device);
            machine.shortest_path(a, b).map(|route| route.links)
        })
        .collect()
}

/// Least-squares intercept of y over x.
fn intercept(pts: &[(u64, f64)]) -> f64 {
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 as f64 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        return 0.0;
    }
    my - sxy / sxx * mx
}

/// The ring transfer whose route crosses the fitted kind most often.
pub(crate) struct CriticalRoute {
    pub(crate) kind: LinkKind,
    hops: u32,
    other_latency_ns: u64,
}

impl CriticalRoute {
    pub(crate) fn find(machine: &Machine, ranks: u32, kind: Option<LinkKind>) -> Result<Self> {
        let mut routes = Vec::new();
        for (r, route) in ring_routes(machine, ranks).into_iter().enumerate() {
            let Some(links) = route else {
                let (a, b) = (machine.gpus[r].device, machine.gpus[(r + 1) % ranks as usize].device);
                let (a, b) = (machine.device_name(a), machine.device_name(b));
                return Err(Error::topology(machine.name.clone(), format!("no route from {a} to {b}")));
            };
            routes.push(links);
        }
        let link = |l: &u32| &machine.links[*l as usize];
        let kind = match kind {
            Some(k) => k,
            None => routes
                .iter()
                .flat_map(|r| r.iter().map(link))
                .min_by(|x, y| x.capacity().total_cmp(&y.capacity()))
                .map(|l| l.kind)
                .ok_or_else(|| Error::topology(machine.name.clone(), "the ring's routes have no links"))?,
        };
        let best = routes
            .iter()
            .max_by_key(|r| r.iter().filter(|l| link(l).kind == kind).count())
            .expect("a ring of two or more ranks has transfers");
        let hops = best.iter().filter(|l| link(l).kind == kind).count() as u32;
        if hops == 0 {
            return Err(Error::invalid(
                "--kind",
                format!("no transfer of the ring crosses a {} link on topology `{}`", kind.name(), machine.name),
            ));
        }
        let other_latency_ns = best.iter().map(link).filter(|l| l.kind != kind).map(|l| l.latency_ns).sum();
        Ok(CriticalRoute { kind, hops, other_latency_ns })
    }
}
