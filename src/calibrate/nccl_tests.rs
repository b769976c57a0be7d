//! One collective the way nccl-tests runs it (`all_reduce_perf -b 8 -e 128M -f 2`): the model's
//! time, algorithm bandwidth and bus bandwidth at each size, so a user can hold dagsim's table
//! against their own nccl-tests output line by line; and [`check`], the same table against a
//! shipped or user nccl-tests output, with the error at every size.
//!
//! Conventions are nccl-tests' own (doc/PERFORMANCE.md of NVIDIA/nccl-tests): `size` is the whole
//! buffer the test names (per rank for all-reduce, broadcast and reduce; the gathered buffer for
//! all-gather, the reduced input for reduce-scatter; each rank's send buffer for all-to-all), which
//! is also what [`crate::collective::CollectiveOp`] calls `bytes`; algbw = size / time; busbw =
//! algbw x the operation's bus factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter and
//! all-to-all (n-1)/n; broadcast and reduce 1), so that busbw compares with the links' rates.

use super::{check_hosts, collective_run, Measurement};
use crate::collective::{Algorithm, CollectiveOp};
use crate::error::{Error, Result};
use crate::hw::calibration::Calibration;
use crate::hw::{Machine, Topology};
use serde::Serialize;

/// The element type nccl-tests runs by default (`-d float`) and its size.
pub const DTYPE: &str = "float";
const DTYPE_BYTES: u64 = 4;

/// One size of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveRow {
    pub op: String,
    pub gpus: u32,
    pub nodes: u32,
    /// nccl-tests' `size` (bytes) and `count` (elements of `dtype` in it).
    pub bytes: u64,
    pub count: u64,
    pub dtype: &'static str,
    pub predicted_us: f64,
    /// GB/s (1e9 bytes/s), as nccl-tests prints them.
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
    /// How the model ran it: `ring/LL128 x16` under NCCL, the algorithm under the ideal model.
    pub ran: String,
    pub collective_model: String,
    /// With a measurement: its out-of-place time and bus bandwidth, and (predicted - measured) / measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_busbw_gbs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<f64>,
}

/// nccl-tests' bus factor: busbw / algbw for `op` on `n` ranks.
pub fn bus_factor(op: CollectiveOp, n: u32) -> f64 {
    op.bus_factor(n)
}

/// The sizes nccl-tests runs for `-b min -e max -f factor`: min, min x factor, ... up to max.
/// Errors name the flag at fault.
pub fn sizes(min: u64, max: u64, factor: u64) -> Result<Vec<u64>> {
    if min == 0 {
        return Err(Error::invalid("--min-bytes", "must be at least 1 byte"));
    }
    if max < min {
        return Err(Error::invalid("--max-bytes", format!("{max} is below --min-bytes {min}")));
    }
    if factor < 2 {
        return Err(Error::invalid("--step-factor", format!("{factor}: must be at least 2")));
    }
    let mut out = vec![min];
    while let Some(next) = out.last().and_then(|s| s.checked_mul(factor)).filter(|&s| s <= max) {
        out.push(next);
    }
    Ok(out)
}

/// What to run: the collective, how many GPUs on how many nodes, the algorithm asked for.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub op: CollectiveOp,
    pub gpus: u32,
    /// Nodes the GPUs must span (as nccl-tests' hosts); `None`: as the topology places them.
    pub nodes: Option<u32>,
    pub algorithm: Algorithm,
}

/// The machine for `spec` on `topology` (under its collective model), calibrated by `base`;
/// returns it with the node count its GPUs span.
fn machine_for(topology: &Topology, base: Option<&Calibration>, spec: &Spec) -> Result<(Machine, u32)> {
    if spec.gpus < 2 {
        return Err(Error::invalid("--gpus", format!("{}: a collective needs at least 2 GPUs", spec.gpus)));
    }
    let mut machine = topology.instantiate(spec.gpus)?;
    if let Some(base) = base {
        machine.apply_calibration(base)?;
    }
    let spanned = machine.gpus[..spec.gpus as usize].iter().map(|g| g.node).max().map_or(0, |n| n + 1);
    Ok((machine, spanned))
}

fn row(machine: &Machine, spec: &Spec, nodes: u32, bytes: u64) -> Result<CollectiveRow> {
    let (ns, ran) = collective_run(machine, spec.op, spec.algorithm, spec.gpus, bytes)?;
    let predicted_us = ns as f64 / 1e3;
    let algbw_gbs = if ns == 0 { 0.0 } else { bytes as f64 / ns as f64 };
    Ok(CollectiveRow {
        op: spec.op.name().to_string(),
        gpus: spec.gpus,
        nodes,
        bytes,
        count: bytes / DTYPE_BYTES,
        dtype: DTYPE,
        predicted_us,
        algbw_gbs,
        busbw_gbs: algbw_gbs * bus_factor(spec.op, spec.gpus),
        ran,
        collective_model: machine.collectives.name(),
        measured_us: None,
        measured_busbw_gbs: None,
        error: None,
    })
}

/// The model's table for `spec` at every size, on `topology` (its collective model) calibrated by `base`.
pub fn predict(
    topology: &Topology,
    base: Option<&Calibration>,
    spec: &Spec,
    sizes: &[u64],
) -> Result<Vec<CollectiveRow>> {
    let (machine, nodes) = machine_for(topology, base, spec)?;
    if let Some(asked) = spec.nodes.filter(|&n| n != nodes) {
        return Err(Error::invalid(
            "--nodes",
            format!(
                "{asked} asked for, but topology `{}` puts {} GPUs on {nodes} node(s); give --gpus as nodes x GPUs \
                 per node of the topology, or another topology",
                topology.name, spec.gpus
            ),
        ));
    }
    sizes.iter().map(|&b| row(&machine, spec, nodes, b)).collect()
}

/// The model's table at the sizes of a measurement (its collective, ranks and hosts), each row
/// with the measured time and the error.
pub fn check(
    topology: &Topology,
    base: Option<&Calibration>,
    m: &Measurement,
    algorithm: Algorithm,
) -> Result<Vec<CollectiveRow>> {
    if m.ranks < 2 {
        return Err(Error::invalid(
            "measurement",
            format!("{}: {} rank(s) ran; a collective needs at least 2", m.input, m.ranks),
        ));
    }
    let spec = Spec { op: m.op, gpus: m.ranks, nodes: Some(m.hosts.max(1)), algorithm };
    let (machine, nodes) = machine_for(topology, base, &spec)?;
    check_hosts(topology, &machine, m, m.ranks, m.hosts.max(1))?;
    m.points
        .iter()
        .map(|&(bytes, us)| {
            let mut r = row(&machine, &spec, nodes, bytes)?;
            r.measured_us = Some(us);
            r.measured_busbw_gbs = Some(bytes as f64 / (us * 1e3) * bus_factor(m.op, m.ranks));
            r.error = Some((r.predicted_us - us) / us);
            Ok(r)
        })
        .collect()
}

/// Median and worst |error| over the rows with a measurement and a size in `lo..=hi`.
pub fn error_summary(rows: &[CollectiveRow], lo: u64, hi: u64) -> Option<(f64, f64)> {
    let mut e: Vec<f64> =
        rows.iter().filter(|r| (lo..=hi).contains(&r.bytes)).filter_map(|r| r.error.map(f64::abs)).collect();
    if e.is_empty() {
        return None;
    }
    e.sort_by(f64::total_cmp);
    let n = e.len();
    let median = if n % 2 == 1 { e[n / 2] } else { (e[n / 2 - 1] + e[n / 2]) / 2.0 };
    Some((median, e[n - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_nccl_tests_doubling_and_name_the_flag_at_fault() {
        assert_eq!(sizes(8, 64, 2).unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(sizes(8, 100, 4).unwrap(), vec![8, 32]);
        assert_eq!(sizes(1 << 20, 1 << 20, 2).unwrap(), vec![1 << 20]);
        for (args, flag) in [((0, 8, 2), "--min-bytes"), ((16, 8, 2), "--max-bytes"), ((8, 64, 1), "--step-factor")] {
            let e = sizes(args.0, args.1, args.2).unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
    }

    #[test]
    fn bus_factors_are_nccl_tests_ones() {
        // doc/PERFORMANCE.md of NVIDIA/nccl-tests: all-reduce 2(n-1)/n, all-gather and
        // reduce-scatter (n-1)/n, broadcast and reduce 1.
        assert_eq!(bus_factor(CollectiveOp::AllReduce, 8), 1.75);
        assert_eq!(bus_factor(CollectiveOp::AllGather, 4), 0.75);
        assert_eq!(bus_factor(CollectiveOp::ReduceScatter, 4), 0.75);
        assert_eq!(bus_factor(CollectiveOp::Broadcast, 16), 1.0);
        assert_eq!(bus_factor(CollectiveOp::Reduce, 16), 1.0);
    }
}
