//! Baselines: the same rows predicted under a simpler model, so that a reader can see what
//! dagsim's mechanisms buy. `alpha-beta` is the estimate people write on a whiteboard: the
//! single-GPU iteration (dagsim's own one-GPU prediction of the row's setup, which is the measured
//! one when the row is calibrated) plus one flat-ring all-reduce of all gradients, nothing
//! overlapped, at the links' rates as the topology states them:
//! `T(N) = T(1) + 2 (N - 1) (alpha + M / (N beta))`, where `M` is the gradient bytes on the wire,
//! and `alpha` and `beta` are the largest latency and the lowest rate of the routes between
//! neighbouring ranks of the ring (rank i to i + 1, and the last back to the first).

use crate::error::{Error, Result};
use crate::predict::Setup;
use serde::Serialize;

/// A baseline model `dagsim validate --baseline NAME` compares against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Baseline {
    AlphaBeta,
}

impl Baseline {
    pub const NAMES: &'static [&'static str] = &["alpha-beta"];

    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "alpha-beta" | "alphabeta" => Ok(Baseline::AlphaBeta),
            _ => Err(Error::invalid(
                "--baseline",
                format!("unknown baseline `{name}` (known: {})", Self::NAMES.join(", ")),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Baseline::AlphaBeta => "alpha-beta",
        }
    }
}

/// The baseline's throughput (samples/s) for `setup` on `gpus` GPUs, given its one-GPU iteration
/// time in seconds.
pub fn alpha_beta_throughput(setup: &Setup, gpus: u32, one_gpu_iteration_s: f64) -> Result<f64> {
    let samples = setup.workload.batch_per_gpu as f64 * gpus as f64 * setup.strategy.clients_per_gpu() as f64;
    Ok(samples / (one_gpu_iteration_s + ring_seconds(setup, gpus)?))
}

/// One flat-ring all-reduce of the whole gradient over `gpus` ranks, alpha-beta.
fn ring_seconds(setup: &Setup, gpus: u32) -> Result<f64> {
    let ranks = gpus * setup.strategy.clients_per_gpu();
    if ranks < 2 {
        return Ok(0.0);
    }
    let machine = setup.topology.instantiate(gpus)?;
    let bytes = setup.strategy.grad_codec().codec.wire_bytes(setup.workload.grad_bytes()) as f64;
    let chunk = (bytes / ranks as f64).ceil() as u64;
    let (mut alpha_ns, mut beta) = (0u64, f64::INFINITY);
    for g in 0..gpus {
        let (a, b) = (machine.gpus[g as usize].device, machine.gpus[((g + 1) % gpus) as usize].device);
        if a == b {
            continue;
        }
        let route = machine.shortest_path(a, b).ok_or_else(|| {
            Error::invalid(
                "alpha-beta baseline",
                format!("no route between GPU {g} and the next in `{}`", machine.name),
            )
        })?;
        alpha_ns = alpha_ns.max(route.latency_ns);
        beta = beta.min(route.rate_cap(&machine, chunk.max(1)));
    }
    // Clients of one GPU (MPS) exchange through its memory: the ring's slowest hop is still a
    // link between GPUs.
    if !beta.is_finite() {
        return Ok(0.0);
    }
    let steps = 2.0 * (ranks - 1) as f64;
    Ok(steps * (alpha_ns as f64 * 1e-9 + chunk as f64 / beta * 1e-9))
}
