//! The single-node link fit with the NCCL collective model in the loop. Instead of inverting an
//! idealised ring size by size (which gives a rate curve per chunk size: a per-size correction),
//! it fits two physical figures and lets NCCL's mechanics (tuner, protocols, channels, buffer
//! steps) turn them into a time at every size:
//! - the rate of the fitted link kind (one flat GB/s; the routes' capacity the engine shares);
//! - one latency per hop for each NCCL transport the communicator uses, added to NCCL's
//!   per-protocol hardware latency (tuning.cc `hwLat`) on every hop and protocol.
//!
//! So a held-out size is predicted by the same protocol and channel switches that place the
//! fitted ones. The search (grid then golden section, alternating the two figures) and the cost
//! (sum of squared relative errors over the fitted sizes) are `collective_fit`'s.

use super::collective_fit::{cost, flat_link, minimize};
use super::{allreduce_fit_machine, measured_vs_model, CriticalRoute, Fit, FitOptions, Measurement};
use crate::collective::nccl::Comm;
use crate::collective::{Algorithm, CollectiveModel};
use crate::error::{Error, Result};
use crate::hw::calibration::{Calibration, NcclHopCalibration, Provenance};
use crate::hw::{Machine, Topology};

/// Hop latencies tried (us beyond NCCL's per-protocol figure).
const HOP_LATENCY_RANGE_US: (f64, f64) = (0.0, 20.0);
/// Rates tried, as a multiple of the topology's own rate for the kind.
const RATE_FACTOR_RANGE: (f64, f64) = (0.05, 4.0);

/// Fits the links of one kind and the NCCL transports' hop latency to a measured single-node
/// all-reduce, with NCCL's tuner choosing algorithm, protocol and channels at every size.
pub fn fit_allreduce_nccl(topology: &Topology, m: &Measurement, opts: &FitOptions) -> Result<Fit> {
    let CollectiveModel::Nccl(config) = topology.collectives else {
        return Err(Error::invalid("--collective-model", "the NCCL link fit needs --collective-model nccl"));
    };
    let (mut machine, ranks, hosts) = allreduce_fit_machine(topology, m, opts)?;
    let kind = CriticalRoute::find(&machine, ranks, opts.kind)?.kind;
    let group: Vec<u32> = (0..ranks).collect();
    let transports = Comm::new(&machine, &group, config).transports();
    let first = machine.links.iter().find(|l| l.kind == kind).expect("the critical route crosses this kind");
    let (link_latency_us, base_gb_s) = (first.latency_ns as f64 / 1e3, first.capacity());
    let fit: Vec<(u64, f64)> =
        m.points.iter().enumerate().filter(|&(i, _)| !(opts.hold_out && i % 2 == 0)).map(|(_, &p)| p).collect();
    if fit.len() < 2 {
        return Err(Error::invalid("measurement", format!("{}: fewer than two usable sizes to fit", m.input)));
    }
    let calibration_of = |hop_us: f64, gb_s: f64| {
        let mut c = Calibration::new(Provenance::default());
        c.links.push(flat_link(kind, link_latency_us, gb_s));
        c.nccl = transports.iter().map(|&transport| NcclHopCalibration { transport, hop_latency_us: hop_us }).collect();
        c
    };
    let set = |machine: &mut Machine, hop_us: f64, gb_s: f64| machine.apply_calibration(&calibration_of(hop_us, gb_s));
    let mut m_ranked = m.clone();
    m_ranked.ranks = ranks;
    let (mut hop_us, mut gb_s) = (0.0, base_gb_s);
    for _ in 0..3 {
        gb_s = minimize(base_gb_s * RATE_FACTOR_RANGE.0, base_gb_s * RATE_FACTOR_RANGE.1, true, 41, |r| {
            set(&mut machine, hop_us, r)?;
            cost(&machine, &m_ranked, Algorithm::Auto, &fit)
        })?;
        hop_us = minimize(HOP_LATENCY_RANGE_US.0, HOP_LATENCY_RANGE_US.1, false, 41, |a| {
            set(&mut machine, a, gb_s)?;
            cost(&machine, &m_ranked, Algorithm::Auto, &fit)
        })?;
    }
    let (hop_us, gb_s) = ((hop_us * 1e3).round() / 1e3, (gb_s * 1e3).round() / 1e3);
    set(&mut machine, hop_us, gb_s)?;
    let points = measured_vs_model(&machine, m, Algorithm::Auto, ranks, |i, _| opts.hold_out && i % 2 == 0)?;
    let names: Vec<&str> = transports.iter().map(|t| t.key()).collect();
    let mut calibration = calibration_of(hop_us, gb_s);
    calibration.provenance = Provenance {
        tool: format!("dagsim calibrate {}", env!("CARGO_PKG_VERSION")),
        inputs: vec![m.input.clone()],
        hardware: if m.hardware.is_empty() { machine.gpu_model.clone() } else { m.hardware.clone() },
        notes: format!(
            "{} links (flat {gb_s:.3} GB/s) and {} hop latency (+{hop_us:.3} us over NCCL's per-protocol figure) \
             fitted through the NCCL {} model to an all-reduce of {ranks} ranks on {hosts} host(s) over topology \
             `{}`{}",
            kind.name(),
            names.join(", "),
            config.version.name(),
            topology.name,
            if opts.hold_out { "; every other size held out" } else { "" }
        ),
    };
    calibration.fit = points.clone();
    Ok(Fit { calibration, kind, points })
}
