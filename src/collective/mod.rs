//! Collectives lowered to steps of point-to-point transfers between ranks. A [`Plan`] generates
//! each step's transfers on demand, so a ring over thousands of GPUs costs no memory up front.
//! The engine runs the steps in order; a step starts when every transfer of the previous one has
//! arrived. Knows ranks, not devices or links: the engine maps ranks to devices and routes.

use serde::{Deserialize, Serialize};

/// What a collective computes. `bytes` is the full buffer (per rank for all-reduce and broadcast;
/// the whole gathered/scattered buffer for gather and scatter). Rooted operations use the group's
/// first rank as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveOp {
    AllReduce,
    /// Root's buffer to every rank.
    Broadcast,
    /// Every rank's buffer summed at the root.
    Reduce,
    /// Rank r's 1/N share of the buffer to the root.
    Gather,
    /// The root's buffer split in N shares, share r to rank r.
    Scatter,
}

/// How it is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Ring: reduce-scatter then all-gather, 2(N-1) steps of K/N bytes between neighbours.
    #[default]
    Ring,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ring" => Some(Algorithm::Ring),
            _ => None,
        }
    }
}

/// One point-to-point transfer of a step, between group ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
}

/// A lowered collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to send (one rank, or zero bytes).
    Empty,
    /// Every step, rank r sends `chunk` bytes to rank (r+1) mod n.
    Ring { ranks: u32, chunk: u64, steps: u32 },
    /// One step: the root (rank 0) sends `chunk` bytes to every other rank.
    FromRoot { ranks: u32, chunk: u64 },
    /// One step: every other rank sends `chunk` bytes to the root (rank 0).
    ToRoot { ranks: u32, chunk: u64 },
}

impl Plan {
    /// Lowers `op` on `ranks` ranks with `bytes` per rank.
    pub fn lower(op: CollectiveOp, algorithm: Algorithm, ranks: u32, bytes: u64) -> Plan {
        if ranks < 2 || bytes == 0 {
            return Plan::Empty;
        }
        match (op, algorithm) {
            (CollectiveOp::AllReduce, Algorithm::Ring) => {
                Plan::Ring { ranks, chunk: bytes.div_ceil(ranks as u64), steps: 2 * (ranks - 1) }
            }
            // Rooted operations go directly between the root and each rank.
            (CollectiveOp::Broadcast, _) => Plan::FromRoot { ranks, chunk: bytes },
            (CollectiveOp::Scatter, _) => Plan::FromRoot { ranks, chunk: bytes.div_ceil(ranks as u64) },
            (CollectiveOp::Reduce, _) => Plan::ToRoot { ranks, chunk: bytes },
            (CollectiveOp::Gather, _) => Plan::ToRoot { ranks, chunk: bytes.div_ceil(ranks as u64) },
        }
    }

    pub fn step_count(&self) -> u32 {
        match *self {
            Plan::Empty => 0,
            Plan::Ring { steps, .. } => steps,
            Plan::FromRoot { .. } | Plan::ToRoot { .. } => 1,
        }
    }

    /// Steps with the same class move exactly the same transfers (same pairs, same bytes), so the
    /// engine can time a class once. Ring steps are all alike.
    pub fn step_class(&self, step: u32) -> u32 {
        match *self {
            Plan::Empty | Plan::Ring { .. } | Plan::FromRoot { .. } | Plan::ToRoot { .. } => {
                let _ = step;
                0
            }
        }
    }

    /// Calls `f` for every transfer of step `step`, in rank order.
    pub fn for_each_transfer(&self, step: u32, mut f: impl FnMut(Transfer)) {
        debug_assert!(step < self.step_count());
        match *self {
            Plan::Empty => {}
            Plan::Ring { ranks, chunk, .. } => {
                for r in 0..ranks {
                    f(Transfer { src: r, dst: (r + 1) % ranks, bytes: chunk });
                }
            }
            Plan::FromRoot { ranks, chunk } => (1..ranks).for_each(|r| f(Transfer { src: 0, dst: r, bytes: chunk })),
            Plan::ToRoot { ranks, chunk } => (1..ranks).for_each(|r| f(Transfer { src: r, dst: 0, bytes: chunk })),
        }
    }

    /// Bytes the busiest rank sends over the whole collective (for reports and checks).
    pub fn bytes_sent_per_rank(&self) -> u64 {
        match *self {
            Plan::Empty => 0,
            Plan::Ring { chunk, steps, .. } => chunk * steps as u64,
            Plan::FromRoot { ranks, chunk } => chunk * (ranks as u64 - 1),
            Plan::ToRoot { chunk, .. } => chunk,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sends_two_n_minus_one_chunks() {
        let p = Plan::lower(CollectiveOp::AllReduce, Algorithm::Ring, 4, 1000);
        assert_eq!(p.step_count(), 6);
        let mut t = Vec::new();
        p.for_each_transfer(0, |x| t.push(x));
        assert_eq!(t.len(), 4);
        assert_eq!(t[3], Transfer { src: 3, dst: 0, bytes: 250 });
        assert_eq!(p.bytes_sent_per_rank(), 1500);
        assert_eq!(Plan::lower(CollectiveOp::AllReduce, Algorithm::Ring, 1, 1000), Plan::Empty);
    }
}
