//! Fits on top of an earlier calibration, with the engine in the loop: a collective's efficiency
//! (how much faster or slower the library runs an operation than the model's algorithm on the
//! calibrated links), and the latency and rate of the links between nodes from a multi-node
//! all-reduce. Also checks a calibrated machine against a measurement without fitting anything
//! (out-of-sample predictions). Owns the searches and the per-point report; does not touch the
//! single-node all-reduce fit in `super`, the engine or the calibration format.
//!
//! Each fit minimises the sum of squared relative errors (model - measured) / measured over the
//! sizes in its range, simulating the measured operation at every size for every trial value:
//! a grid in log scale first, then golden-section search around the best grid point. Model time is
//! not smooth in the parameters (integer nanoseconds, curves interpolated in log size), so the
//! grid keeps the search from settling in a local dip.

use super::{simulate_collective, Measurement};
use crate::collective::nccl::transport::Transport;
use crate::collective::Algorithm;
use crate::error::{Error, Result};
use crate::hw::calibration::{
    Calibration, CollectiveEfficiency, CurvePoint, FitPoint, LinkCalibration, NcclHopCalibration,
};
use crate::hw::{DeviceKind, LinkKind, Machine, Topology};

/// Efficiencies tried: bytes/e with e from 1/20 to 20 (e > 1: the library beats the model's
/// algorithm on these links).
const EFFICIENCY_RANGE: (f64, f64) = (0.05, 20.0);
/// Rates (GB/s) and per-link latencies (us) tried for the links between nodes.
const RATE_RANGE: (f64, f64) = (0.05, 1000.0);
const LATENCY_RANGE_US: (f64, f64) = (0.0, 50.0);

/// What to fit on top of a base calibration.
#[derive(Debug, Clone)]
pub struct CollectiveFitOptions {
    /// Algorithm the model runs the measured operation with (default `auto`, the NCCL-like choice).
    pub algorithm: Algorithm,
    /// Sizes (bytes, inclusive) whose errors the fit minimises; the others are only reported.
    pub fit_range: (u64, u64),
    /// Link kind to fit between nodes; default: the kind of the links at the network switch.
    pub kind: Option<LinkKind>,
}

/// The result of a fit (or a plain check): the calibration to write and every measured point.
#[derive(Debug, Clone)]
pub struct ModelFit {
    pub calibration: Calibration,
    /// One line saying what was fitted and to what value.
    pub headline: String,
    /// All measured sizes; `held_out` marks sizes outside the fit range (or every size of a check).
    pub points: Vec<FitPoint>,
}

impl ModelFit {
    /// Median and worst |error| over the points with sizes in `lo..=hi`: (fitted, not fitted).
    pub fn summary(&self, lo: u64, hi: u64) -> [Option<(f64, f64)>; 2] {
        super::summarize(&self.points, lo, hi)
    }
}

/// The machine the measurement ran on: the topology (with any calibration it names), then `base`.
fn calibrated_machine(topology: &Topology, base: Option<&Calibration>, m: &Measurement) -> Result<Machine> {
    let mut machine = topology.instantiate(m.ranks)?;
    super::check_hosts(topology, &machine, m, m.ranks, m.hosts.max(1))?;
    if let Some(base) = base {
        machine.apply_calibration(base)?;
    }
    Ok(machine)
}

/// Measured vs simulated time at every size; sizes outside `fit_range` are marked held out.
fn compare(machine: &Machine, m: &Measurement, algorithm: Algorithm, fit_range: (u64, u64)) -> Result<Vec<FitPoint>> {
    super::measured_vs_model(machine, m, algorithm, m.ranks, |_, bytes| !(fit_range.0..=fit_range.1).contains(&bytes))
}

/// Sum of squared relative errors over the sizes in the fit range.
pub(crate) fn cost(machine: &Machine, m: &Measurement, algorithm: Algorithm, fit: &[(u64, f64)]) -> Result<f64> {
    let mut sum = 0.0;
    for &(bytes, us) in fit {
        let predicted_us = simulate_collective(machine, m.op, algorithm, m.ranks, bytes)? as f64 / 1e3;
        sum += ((predicted_us - us) / us).powi(2);
    }
    Ok(sum)
}

/// The measured points inside the fit range; an error naming the file if there are none.
fn fit_points(m: &Measurement, range: (u64, u64)) -> Result<Vec<(u64, f64)>> {
    let pts: Vec<_> = m.points.iter().copied().filter(|p| (range.0..=range.1).contains(&p.0)).collect();
    if pts.is_empty() {
        return Err(Error::invalid(
            "measurement",
            format!("{}: no measured size between {} and {} bytes to fit", m.input, range.0, range.1),
        ));
    }
    Ok(pts)
}

/// Minimises `f` over `lo..=hi`: `grid` points (geometric if `log`), then golden-section search
/// between the neighbours of the best one.
pub(crate) fn minimize(lo: f64, hi: f64, log: bool, grid: usize, mut f: impl FnMut(f64) -> Result<f64>) -> Result<f64> {
    let to = |x: f64| if log { x.ln() } else { x };
    let from = |x: f64| if log { x.exp() } else { x };
    let (a, b) = (to(lo), to(hi));
    let at = |i: usize| a + (b - a) * i as f64 / (grid - 1) as f64;
    let mut best = (f64::INFINITY, 0);
    for i in 0..grid {
        let c = f(from(at(i)))?;
        if c < best.0 {
            best = (c, i);
        }
    }
    let (mut x0, mut x3) = (at(best.1.saturating_sub(1)), at((best.1 + 1).min(grid - 1)));
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut x1, mut x2) = (x3 - g * (x3 - x0), x0 + g * (x3 - x0));
    let (mut f1, mut f2) = (f(from(x1))?, f(from(x2))?);
    for _ in 0..30 {
        if f1 <= f2 {
            (x3, x2, f2) = (x2, x1, f1);
            x1 = x3 - g * (x3 - x0);
            f1 = f(from(x1))?;
        } else {
            (x0, x1, f1) = (x1, x2, f2);
            x2 = x0 + g * (x3 - x0);
            f2 = f(from(x2))?;
        }
    }
    let x = if f1 <= f2 { x1 } else { x2 };
    // The grid point itself may still beat the bracket's interior (costs are steps, not smooth).
    Ok(if best.0 < f1.min(f2) { from(at(best.1)) } else { from(x) })
}

/// The name a calibration records for a collective model (efficiencies apply under it only).
pub fn model_name(model: crate::collective::CollectiveModel) -> &'static str {
    match model {
        crate::collective::CollectiveModel::Ideal => "ideal",
        crate::collective::CollectiveModel::Nccl(_) => "nccl",
    }
}

/// Fits the efficiency of `m.op` run with `opts.algorithm` on the machine as `base` calibrates it.
/// The result keeps `base` (links, other efficiencies) and adds or replaces this entry.
pub fn fit_efficiency(
    topology: &Topology,
    base: Option<&Calibration>,
    m: &Measurement,
    opts: &CollectiveFitOptions,
) -> Result<ModelFit> {
    let mut machine = calibrated_machine(topology, base, m)?;
    let (op, algorithm) = (m.op, opts.algorithm);
    let fit = fit_points(m, opts.fit_range)?;
    let model = Some(model_name(machine.collectives).to_string());
    let set = |machine: &mut Machine, efficiency: f64| {
        machine.collective_efficiency.retain(|e| (e.op, e.algorithm, &e.model) != (op, algorithm, &model));
        machine.collective_efficiency.push(CollectiveEfficiency { op, algorithm, efficiency, model: model.clone() });
    };
    let e = minimize(EFFICIENCY_RANGE.0, EFFICIENCY_RANGE.1, true, 61, |e| {
        set(&mut machine, e);
        cost(&machine, m, algorithm, &fit)
    })?;
    let e = (e * 1e4).round() / 1e4;
    set(&mut machine, e);
    let points = compare(&machine, m, algorithm, opts.fit_range)?;
    let note = format!(
        "{} {} efficiency {e} fitted to {} ranks on {} host(s), sizes {}",
        op.name(),
        algorithm.name(),
        m.ranks,
        m.hosts.max(1),
        range_text(opts.fit_range)
    );
    let mut calibration = extend(base, topology, m, note, &points);
    calibration.collectives.retain(|c| (c.op, c.algorithm, &c.model) != (op, algorithm, &model));
    calibration.collectives.push(CollectiveEfficiency { op, algorithm, efficiency: e, model: model.clone() });
    let headline = format!(
        "fitted {} efficiency {e:.4} for algorithm {} (moves bytes/{e:.4}) on sizes {}",
        op.name(),
        algorithm.name(),
        range_text(opts.fit_range)
    );
    Ok(ModelFit { calibration, headline, points })
}

/// Fits one latency and one flat rate to the links of the kind that joins nodes, from an
/// all-reduce over several nodes, with the links inside nodes as `base` calibrates them.
pub fn fit_network(
    topology: &Topology,
    base: Option<&Calibration>,
    m: &Measurement,
    opts: &CollectiveFitOptions,
) -> Result<ModelFit> {
    let mut machine = calibrated_machine(topology, base, m)?;
    if m.hosts < 2 {
        return Err(Error::invalid("measurement", format!("{}: ran on one host; nothing joins nodes", m.input)));
    }
    let kind = match opts.kind {
        Some(k) => k,
        None => network_kind(&machine)?,
    };
    if !machine.links.iter().any(|l| l.kind == kind) {
        return Err(Error::invalid("--kind", format!("topology `{}` has no {} links", topology.name, kind.name())));
    }
    let fit = fit_points(m, opts.fit_range)?;
    let algorithm = opts.algorithm;
    // Under the NCCL model a hop's latency is NCCL's per-protocol figure, not the links': the
    // fitted latency is then the network transports' hop latency beyond it (`Calibration::nccl`),
    // and the links keep their own.
    let first = machine.links.iter().find(|l| l.kind == kind).expect("checked above");
    let (link_latency_us, base_gb_s) = (first.latency_ns as f64 / 1e3, first.capacity());
    let net_transports: Vec<_> = match machine.collectives {
        crate::collective::CollectiveModel::Nccl(config) => {
            let group: Vec<u32> = (0..m.ranks).collect();
            crate::collective::nccl::Comm::new(&machine, &group, config)
                .transports()
                .into_iter()
                .filter(|t| matches!(t, Transport::NetIb | Transport::NetIbGdr | Transport::NetSocket))
                .collect()
        }
        crate::collective::CollectiveModel::Ideal => Vec::new(),
    };
    let calibration_of = |latency_us: f64, gb_s: f64| {
        let mut one = Calibration::new(Default::default());
        if net_transports.is_empty() {
            one.links.push(flat_link(kind, latency_us, gb_s));
        } else {
            one.links.push(flat_link(kind, link_latency_us, gb_s));
            one.nccl = net_transports
                .iter()
                .map(|&transport| NcclHopCalibration { transport, hop_latency_us: latency_us })
                .collect();
        }
        one
    };
    let set = |machine: &mut Machine, latency_us: f64, gb_s: f64| {
        machine.apply_calibration(&calibration_of(latency_us, gb_s))
    };
    // Start from the topology's own figures, then alternate the two one-dimensional searches.
    let (mut latency_us, mut gb_s) = (if net_transports.is_empty() { link_latency_us } else { 0.0 }, base_gb_s);
    for _ in 0..3 {
        gb_s = minimize(RATE_RANGE.0, RATE_RANGE.1, true, 41, |r| {
            set(&mut machine, latency_us, r)?;
            cost(&machine, m, algorithm, &fit)
        })?;
        latency_us = minimize(LATENCY_RANGE_US.0, LATENCY_RANGE_US.1, false, 51, |a| {
            set(&mut machine, a, gb_s)?;
            cost(&machine, m, algorithm, &fit)
        })?;
    }
    let (latency_us, gb_s) = ((latency_us * 1e3).round() / 1e3, (gb_s * 1e3).round() / 1e3);
    set(&mut machine, latency_us, gb_s)?;
    let points = compare(&machine, m, algorithm, opts.fit_range)?;
    let note = format!(
        "{} links fitted (one latency, one flat rate) to a {} all-reduce of {} ranks on {} hosts",
        kind.name(),
        algorithm.name(),
        m.ranks,
        m.hosts
    );
    let mut calibration = extend(base, topology, m, note, &points);
    let fitted = calibration_of(latency_us, gb_s);
    calibration.links.retain(|l| l.kind.as_deref() != Some(kind.name()));
    calibration.links.extend(fitted.links);
    calibration.nccl.retain(|n| !fitted.nccl.iter().any(|f| f.transport == n.transport));
    calibration.nccl.extend(fitted.nccl);
    let latency_what = if net_transports.is_empty() {
        "latency".to_string()
    } else {
        let names: Vec<&str> = net_transports.iter().map(|t| t.key()).collect();
        format!("{} hop latency +", names.join(", "))
    };
    let headline = format!(
        "fitted {} links: {latency_what}{latency_us:.3} us, rate {gb_s:.3} GB/s (flat), all-reduce as {}, sizes {}",
        kind.name(),
        algorithm.name(),
        range_text(opts.fit_range)
    );
    Ok(ModelFit { calibration, headline, points })
}

/// Simulates the measured operation on the calibrated machine without fitting: every point is a
/// prediction (marked held out).
pub fn check(
    topology: &Topology,
    base: Option<&Calibration>,
    m: &Measurement,
    algorithm: Algorithm,
) -> Result<ModelFit> {
    let machine = calibrated_machine(topology, base, m)?;
    let points = compare(&machine, m, algorithm, (1, 0))?;
    let calibration = base.cloned().unwrap_or_else(|| extend(None, topology, m, String::new(), &[]));
    let headline = format!(
        "predicted {} ({}) on {} ranks, {} host(s), nothing fitted",
        m.op.name(),
        algorithm.name(),
        m.ranks,
        m.hosts.max(1)
    );
    Ok(ModelFit { calibration, headline, points })
}

/// The kind of the links that touch the network switch.
fn network_kind(machine: &Machine) -> Result<LinkKind> {
    let at_switch = |d: u32| machine.devices[d as usize].kind == DeviceKind::NetworkSwitch;
    machine.links.iter().find(|l| at_switch(l.from) || at_switch(l.to)).map(|l| l.kind).ok_or_else(|| {
        Error::topology(machine.name.clone(), "no network switch: give --kind for the links between nodes")
    })
}

/// One latency and one flat rate for every link of `kind`.
pub(crate) fn flat_link(kind: LinkKind, latency_us: f64, gb_s: f64) -> LinkCalibration {
    LinkCalibration {
        kind: Some(kind.name().to_string()),
        from: None,
        to: None,
        latency_us,
        bandwidth: vec![CurvePoint { bytes: 0, gb_s }],
    }
}

/// `base` (or a fresh calibration) with this measurement and `note` added to its provenance and
/// `points` to its fit report.
fn extend(
    base: Option<&Calibration>,
    topology: &Topology,
    m: &Measurement,
    note: String,
    points: &[FitPoint],
) -> Calibration {
    let mut c = base.cloned().unwrap_or_else(|| {
        Calibration::new(crate::hw::calibration::Provenance {
            tool: format!("dagsim calibrate {}", env!("CARGO_PKG_VERSION")),
            notes: format!("over topology `{}`", topology.name),
            ..Default::default()
        })
    });
    c.provenance.tool = format!("dagsim calibrate {}", env!("CARGO_PKG_VERSION"));
    if !c.provenance.inputs.contains(&m.input) {
        c.provenance.inputs.push(m.input.clone());
    }
    if c.provenance.hardware.is_empty() {
        c.provenance.hardware = m.hardware.clone();
    }
    if !note.is_empty() {
        c.provenance.notes =
            if c.provenance.notes.is_empty() { note } else { format!("{}; {note}", c.provenance.notes) };
    }
    c.fit.extend(points.iter().cloned());
    c
}

/// `>= 1048576 bytes` or `1024..33554432 bytes`.
fn range_text((lo, hi): (u64, u64)) -> String {
    if hi == u64::MAX {
        format!(">= {lo} bytes")
    } else {
        format!("{lo}..{hi} bytes")
    }
}
