//! A lowered NCCL collective: what the engine runs. Three shapes cover every algorithm:
//! rings (every step, each rank sends one chunk per channel pattern to its successor), pipelines
//! (trees and chains: edge e carries piece i at step i + offset(e), so pieces overlap; only a
//! piece's first crossing of an edge waits the hop latency, later pieces stream behind it as in
//! NCCL's slot FIFO), and direct exchanges (send/recv patterns in one step). Transfers carry the
//! protocol's effects as the engine understands them: wire bytes, an extra latency, a rate cap.

use super::tuner::Choice;
use super::version::Func;
use crate::collective::{Latency, Transfer, NO_RAIL};
use crate::units::Nanos;

/// How one hop behaves: its latency (the larger of the route's and the protocol's per-hop
/// latency), its rate cap (wire bytes/ns; infinite when only the links limit) and its NIC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hop {
    pub latency_ns: Nanos,
    pub cap: f64,
    pub rail: u32,
}

/// Channels that follow the same ring order and NIC, merged into one flow per hop.
#[derive(Debug, Clone, PartialEq)]
pub struct RingPattern {
    /// Local positions in ring order.
    pub order: Vec<u32>,
    /// `pos[local]`: where a local rank sits in `order`.
    pub pos: Vec<u32>,
    /// Wire bytes each rank sends per step on this pattern.
    pub bytes: u64,
    /// Every step waits this long before bytes move: the hop latencies a chunk meets along the
    /// ring's dependency chain, spread evenly over the steps (the rest goes to the first step), so
    /// an inter-node hop costs its latency once per pass, not once per step.
    pub step_latency_ns: Nanos,
    pub first_extra_ns: Nanos,
    /// Per position k: the hop from `order[k]` to the next rank (k = last: to the next node, or
    /// around the ring inside a single node).
    pub hops: Vec<Hop>,
}

/// One edge of a pipeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Edge {
    pub src: u32,
    pub dst: u32,
    pub offset: u32,
    /// Wire bytes per piece.
    pub bytes: u64,
    pub hop: Hop,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Ring { per_node: u32, nodes: u32, steps: u32, patterns: Vec<RingPattern> },
    Pipeline { edges: Vec<Edge>, pieces: u32, span: u32 },
    Direct { transfers: Vec<Transfer> },
}

/// A lowered NCCL call.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclPlan {
    pub func: Option<Func>,
    pub choice: Choice,
    pub shape: Shape,
    /// The call's fixed latency, added to the first step (NCCL's `baseLat`).
    pub base_ns: Nanos,
}

impl NcclPlan {
    pub fn step_count(&self) -> u32 {
        match &self.shape {
            Shape::Ring { steps, .. } => *steps,
            Shape::Pipeline { pieces, span, .. } => pieces + span - 1,
            Shape::Direct { .. } => 1,
        }
    }

    /// Ring steps after the first are alike; pipeline steps where every edge carries a piece
    /// other than its first are alike; every other step is its own class.
    pub fn step_class(&self, step: u32) -> u32 {
        match &self.shape {
            Shape::Ring { .. } => (step == 0) as u32,
            Shape::Pipeline { pieces, span, .. } => {
                if step >= *span && step < *pieces && step > 0 {
                    0
                } else {
                    step + 1
                }
            }
            Shape::Direct { .. } => 0,
        }
    }

    pub fn for_each_transfer(&self, step: u32, mut f: impl FnMut(Transfer)) {
        let base = if step == 0 { self.base_ns } else { 0 };
        match &self.shape {
            Shape::Ring { per_node, nodes, patterns, .. } => {
                let (g, m) = (*per_node, *nodes);
                for p in patterns {
                    for node in 0..m {
                        for k in 0..g {
                            let src = node * g + p.order[k as usize];
                            let dst = if k + 1 < g {
                                node * g + p.order[k as usize + 1]
                            } else {
                                ((node + 1) % m) * g + p.order[0]
                            };
                            if src == dst {
                                continue;
                            }
                            let h = p.hops[k as usize];
                            let mut lat = p.step_latency_ns + base;
                            if step == 0 {
                                lat += p.first_extra_ns;
                            }
                            f(Transfer {
                                src,
                                dst,
                                bytes: p.bytes,
                                rail: h.rail,
                                latency: Latency::Exact(lat),
                                cap: h.cap,
                            });
                        }
                    }
                }
            }
            Shape::Pipeline { edges, pieces, .. } => {
                for e in edges {
                    if step < e.offset || step - e.offset >= *pieces {
                        continue;
                    }
                    let first = step == e.offset;
                    let lat = if first { e.hop.latency_ns } else { 0 } + base;
                    let latency = Latency::Exact(lat);
                    f(Transfer { src: e.src, dst: e.dst, bytes: e.bytes, rail: e.hop.rail, latency, cap: e.hop.cap });
                }
            }
            Shape::Direct { transfers } => {
                for t in transfers {
                    let lat = match t.latency {
                        Latency::Exact(ns) => ns,
                        Latency::Route => 0,
                    };
                    f(Transfer { latency: Latency::Exact(lat + base), ..*t });
                }
            }
        }
    }

    /// A short label: `ring/LL128 x12`.
    pub fn label(&self) -> String {
        let c = &self.choice;
        format!("{}/{} x{}", c.algo.name(), c.proto.name(), c.channels)
    }
}

/// A plain transfer (no protocol effects).
pub fn plain(src: u32, dst: u32, bytes: u64) -> Transfer {
    Transfer { src, dst, bytes, rail: NO_RAIL, latency: Latency::Route, cap: f64::INFINITY }
}
