//! Faults injected into a machine for what-if studies: a slow GPU (its compute takes a factor
//! longer), a straggler node (every GPU of it slow), a degraded link (its bandwidth scaled down).
//! Given on the command line (`--slow-gpu`, `--straggler-node`, `--degrade-link`) and applied when
//! a topology is instantiated; the engine reads the per-GPU compute factor. A machine with faults
//! is never reduced by symmetry: the slow GPU must be simulated itself.

use super::{BandwidthCurve, Machine};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// (GPU rank, compute factor >= 1).
    pub slow_gpus: Vec<(u32, f64)>,
    /// (node index, compute factor >= 1 for each of its GPUs).
    pub slow_nodes: Vec<(u32, f64)>,
    /// (device, device, bandwidth factor in (0, 1]): both directions of the link between them.
    pub degraded_links: Vec<(String, String, f64)>,
}

fn factor(flag: &str, spec: &str, text: &str, slow: bool) -> Result<f64> {
    let f: f64 =
        text.trim().parse().map_err(|_| Error::invalid(flag, format!("`{spec}`: `{text}` is not a number")))?;
    let ok = if slow { (1.0..=1e6).contains(&f) } else { (1e-3..=1.0).contains(&f) };
    if !ok {
        let want = if slow {
            "a compute factor from 1 to 1e6 (2 = twice as slow)"
        } else {
            "a bandwidth factor from 0.001 to 1"
        };
        return Err(Error::invalid(flag, format!("`{spec}`: {f} is not {want}")));
    }
    Ok(f)
}

impl Faults {
    /// Parses `RANK=FACTOR` (`--slow-gpu`) or `NODE=FACTOR` (`--straggler-node`).
    pub fn parse_slow(flag: &str, spec: &str) -> Result<(u32, f64)> {
        let (who, f) = spec
            .split_once('=')
            .ok_or_else(|| Error::invalid(flag, format!("`{spec}`: write INDEX=FACTOR, e.g. 3=1.5")))?;
        let who: u32 =
            who.trim().parse().map_err(|_| Error::invalid(flag, format!("`{spec}`: `{who}` is not an index")))?;
        Ok((who, factor(flag, spec, f, true)?))
    }

    /// Parses `DEVICE:DEVICE=FACTOR` (`--degrade-link`), device names as in timelines (`n0.nic0`).
    pub fn parse_link(spec: &str) -> Result<(String, String, f64)> {
        let flag = "--degrade-link";
        let bad = || Error::invalid(flag, format!("`{spec}`: write DEVICE:DEVICE=FACTOR, e.g. n0.nic0:switch=0.5"));
        let (ends, f) = spec.rsplit_once('=').ok_or_else(bad)?;
        let (a, b) = ends.split_once(':').ok_or_else(bad)?;
        Ok((a.trim().to_string(), b.trim().to_string(), factor(flag, spec, f, false)?))
    }

    pub fn is_empty(&self) -> bool {
        self.slow_gpus.is_empty() && self.slow_nodes.is_empty() && self.degraded_links.is_empty()
    }

    /// Applies the faults to `m`; errors name the flag and the rank, node or device that does not
    /// exist.
    pub fn apply(&self, m: &mut Machine) -> Result<()> {
        if !self.slow_gpus.is_empty() || !self.slow_nodes.is_empty() {
            let mut f = vec![1.0; m.gpus.len()];
            for &(rank, x) in &self.slow_gpus {
                let slot = f.get_mut(rank as usize).ok_or_else(|| {
                    Error::invalid(
                        "--slow-gpu",
                        format!("GPU {rank} does not exist: the machine has {} GPUs", m.gpus.len()),
                    )
                })?;
                *slot *= x;
            }
            for &(node, x) in &self.slow_nodes {
                if node >= m.node_count() {
                    return Err(Error::invalid(
                        "--straggler-node",
                        format!("node {node} does not exist: the machine has {} nodes", m.node_count()),
                    ));
                }
                for (g, slot) in m.gpus.iter().zip(f.iter_mut()) {
                    if g.node == node {
                        *slot *= x;
                    }
                }
            }
            m.compute_factor = f;
        }
        for (a, b, x) in &self.degraded_links {
            let mut found = false;
            for l in m.links.iter_mut() {
                let (from, to) = (&m.devices[l.from as usize].name, &m.devices[l.to as usize].name);
                if (from == a && to == b) || (from == b && to == a) {
                    let pts = l.bandwidth.points().iter().map(|&(s, r)| (s, r * x)).collect();
                    l.bandwidth = BandwidthCurve::from_points(pts).expect("positive rates scaled by a positive factor");
                    found = true;
                }
            }
            if !found {
                return Err(Error::invalid("--degrade-link", format!("no link joins `{a}` and `{b}`")));
            }
        }
        Ok(())
    }
}
