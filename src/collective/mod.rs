//! Collectives lowered to steps of point-to-point transfers between ranks. A [`Plan`] generates
//! each step's transfers on demand, so a ring over thousands of GPUs costs no memory up front.
//! The engine runs the steps in order; a step starts when every transfer of the previous one has
//! arrived. Knows ranks and how they group into nodes ([`Layout`]), not devices or links: the
//! engine maps ranks to devices and routes.
//!
//! Two models lower collectives ([`model::CollectiveModel`]): `nccl` ([`nccl`], the default) follows
//! NCCL's algorithms, protocols, channels and transports; `ideal` runs the textbook schedules below
//! at link rates. [`model::Lowerer`] picks per the machine's model.

pub mod model;
pub mod nccl;

pub use model::{CollectiveModel, CollectiveUse, Lowerer};

use crate::units::Nanos;
use crate::workload::moe::expected_ranks_per_token;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a collective computes. `bytes` is the full buffer (per rank for all-reduce and broadcast;
/// the whole gathered/scattered buffer for gather and scatter). Rooted operations use the group's
/// first rank as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// Every rank ends with every rank's 1/N share: `bytes` is the gathered buffer.
    AllGather,
    /// Every rank's buffer summed, rank r keeping the r-th 1/N share: `bytes` is the full buffer.
    ReduceScatter,
    /// Every rank sends a distinct 1/N of its `bytes` to every other rank.
    AllToAll,
    /// Every rank sends its `bytes` to the next rank of the group and receives the previous
    /// rank's: one ring step of point-to-point sends (a context-parallel ring's exchange).
    SendRecv,
    /// An MoE token dispatch (or combine) as HybridEP runs it: `bytes` is one rank's tokens, each
    /// routed to `top_k` of `experts` experts spread evenly over the group's ranks. A token
    /// crosses once to every other node that holds any of its experts (one RDMA copy, to the rank
    /// of the same local index there) and fans out over the node's NVLink to the GPUs that need
    /// it (see [`Plan::HybridAllToAll`]).
    HybridAllToAll {
        experts: u32,
        top_k: u32,
    },
}

/// HybridEP's exchange across nodes inside a training step runs at this fraction of the ideal
/// two-level schedule at link rates ([`Plan::HybridAllToAll`]). Measured on 16 H100s (two DGX
/// H100 nodes, 400 Gb/s InfiniBand a GPU, ep 16): a rank-0 Nsight capture of one Megatron-Bridge
/// training step of Qwen3.5-35B-A3B (40 MoE layers, 256 experts, top 8, hidden 2048, BF16
/// tokens, micro-batch 1 x 4096 tokens, 64 micro-batches, no EP overlap) has HybridEP's dispatch
/// kernels active 2.845 s and its combine kernels 3.909 s (NVIDIA-NeMo/Megatron-Bridge
/// `skills/nemo-mbridge-perf-moe-optimization-workflow/references/qwen35-h100-campaign.md`):
/// 0.660 ms for each of the 4 x 2560 exchanges of 16.8 MB a rank, where this schedule takes
/// 0.355 ms on `dgx-h100` (about the line rate of the rank's NIC). The microbenchmark's rate at hidden
/// 7168 is the line rate (DeepEP `docs/README_Hybrid-EP.md`, 47-58 GB/s a GPU at 16 ranks); in
/// training the exchange also waits for the slowest rank and shares the GPU's SMs. On one node
/// HybridEP is the flat exchange and keeps the ideal rate (not measured).
pub const HYBRID_EP_TRAINING_EFFICIENCY: f64 = 0.355 / 0.660;

/// [`HYBRID_EP_TRAINING_EFFICIENCY`] for HybridEP across nodes; 1 for everything else.
pub fn in_training_efficiency(op: CollectiveOp, layout: Layout) -> f64 {
    match op {
        CollectiveOp::HybridAllToAll { experts, .. }
            if layout.per_node >= 1 && layout.nodes() >= 2 && experts % layout.nodes() == 0 =>
        {
            HYBRID_EP_TRAINING_EFFICIENCY
        }
        _ => 1.0,
    }
}

impl CollectiveOp {
    /// nccl-tests' bus factor: the bytes each rank sends (and receives) per byte of `bytes`, on
    /// `n` ranks (busbw / algbw, nccl-tests `doc/PERFORMANCE.md`).
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = n.max(1) as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::AllGather
            | CollectiveOp::ReduceScatter
            | CollectiveOp::AllToAll
            | CollectiveOp::HybridAllToAll { .. } => (n - 1.0) / n,
            CollectiveOp::Broadcast
            | CollectiveOp::Reduce
            | CollectiveOp::Gather
            | CollectiveOp::Scatter
            | CollectiveOp::SendRecv => 1.0,
        }
    }

    pub const ALL: [CollectiveOp; 9] = [
        CollectiveOp::AllReduce,
        CollectiveOp::Broadcast,
        CollectiveOp::Reduce,
        CollectiveOp::Gather,
        CollectiveOp::Scatter,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllToAll,
        CollectiveOp::SendRecv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all-reduce",
            CollectiveOp::Broadcast => "broadcast",
            CollectiveOp::Reduce => "reduce",
            CollectiveOp::Gather => "gather",
            CollectiveOp::Scatter => "scatter",
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter => "reduce-scatter",
            CollectiveOp::AllToAll => "all-to-all",
            CollectiveOp::SendRecv => "send-recv",
            CollectiveOp::HybridAllToAll { .. } => "hybrid-all-to-all",
        }
    }
}

/// How it is carried out. Algorithms that only define an all-reduce carry the rooted operations
/// directly between the root and every rank, except `tree` (binomial tree) and `ring` broadcast
/// (pipelined along the ring, as NCCL does). Under the NCCL collective model, `auto` (the
/// default) is NCCL's own choice and `ring`/`tree` force NCCL's ring or tree, as `NCCL_ALGO`
/// does; the others are not NCCL algorithms and run as written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Ring: reduce-scatter then all-gather, 2(N-1) steps of K/N bytes between neighbours.
    Ring,
    /// Two-level ring (Horovod/NCCL style): reduce-scatter inside each node, one ring per local
    /// rank across nodes on the node's 1/G share, all-gather inside each node. Needs ranks grouped
    /// node by node with the same count per node; otherwise it runs as a flat ring.
    Hierarchical,
    /// Binomial tree: reduce to rank 0 in ceil(log2 N) steps of K bytes, then broadcast back.
    Tree,
    /// Rabenseifner / MPI butterfly: recursive-halving reduce-scatter and recursive-doubling
    /// all-gather, 2 log2 N steps; ranks beyond the largest power of two fold in first and are
    /// served last.
    HalvingDoubling,
    /// Recursive doubling (OpenMPI's `recursive_doubling`, the butterfly of its tuned component up
    /// to 4.0): log2 N steps, each rank exchanging the whole buffer with the partner whose rank
    /// differs in one bit and summing it, so log2 N x K bytes sent per rank where halving-doubling
    /// sends 2K; ranks beyond the largest power of two fold in first and are served last.
    RecursiveDoubling,
    /// Parameter server colocated with the workers, sharded: every rank serves 1/N of the
    /// parameters; push (every rank sends each server its shard) then pull (the reverse).
    Ps,
    /// One parameter server on the group's first rank: every rank pushes its K bytes to it, then
    /// pulls K bytes back.
    PsCentral,
    /// The library's choice (the default): NCCL's tuner under the NCCL model; under the ideal
    /// model the ring. [`Plan::lower_on`] alone keeps a crude NCCL imitation: ring inside one node;
    /// across nodes, tree below [`AUTO_TREE_BELOW`] bytes and ring above.
    #[default]
    Auto,
}

/// Below this size, `auto` uses the tree across nodes (NCCL 2.4+ prefers its tree for small and
/// medium messages on several nodes, where the ring's 2(N-1) latencies dominate).
pub const AUTO_TREE_BELOW: u64 = 1 << 20;

impl Algorithm {
    pub const ALL: [Algorithm; 8] = [
        Algorithm::Ring,
        Algorithm::Hierarchical,
        Algorithm::Tree,
        Algorithm::HalvingDoubling,
        Algorithm::RecursiveDoubling,
        Algorithm::Ps,
        Algorithm::PsCentral,
        Algorithm::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Hierarchical => "hierarchical",
            Algorithm::Tree => "tree",
            Algorithm::HalvingDoubling => "halving-doubling",
            Algorithm::RecursiveDoubling => "recursive-doubling",
            Algorithm::Ps => "ps",
            Algorithm::PsCentral => "ps-central",
            Algorithm::Auto => "auto",
        }
    }

    /// Parses a name; `butterfly` and `nccl` are accepted as aliases.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "butterfly" => Some(Algorithm::HalvingDoubling),
            "nccl" => Some(Algorithm::Auto),
            _ => Self::ALL.into_iter().find(|a| a.name() == s),
        }
    }
}

/// How the ranks of a group sit on nodes: `per_node` consecutive ranks on each of `nodes` nodes,
/// or unknown/irregular (`per_node == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub ranks: u32,
    pub per_node: u32,
}

impl Layout {
    /// Every rank on its own, nothing known about nodes.
    pub fn flat(ranks: u32) -> Self {
        Layout { ranks, per_node: 0 }
    }

    /// From the node of each rank, in rank order. Regular only if ranks come node by node with the
    /// same count on every node.
    pub fn from_nodes(nodes: impl IntoIterator<Item = u32>) -> Self {
        let mut ranks = 0u32;
        let mut run = 0u32;
        let mut per_node = 0u32;
        let mut prev: Option<u32> = None;
        let mut regular = true;
        for n in nodes {
            ranks += 1;
            if prev == Some(n) {
                run += 1;
            } else {
                if prev.is_some() {
                    regular &= per_node == 0 || run == per_node;
                    per_node = run;
                }
                run = 1;
            }
            prev = Some(n);
        }
        regular &= per_node == 0 || run == per_node;
        let per_node = if per_node == 0 { run } else { per_node };
        Layout { ranks, per_node: if regular { per_node } else { 0 } }
    }

    pub fn nodes(&self) -> u32 {
        self.ranks.checked_div(self.per_node).unwrap_or(0)
    }

    /// True if the ranks span more than one node (or nothing is known about nodes).
    fn multi_node(&self) -> bool {
        self.per_node == 0 || self.per_node < self.ranks
    }
}

/// A transfer's `rail` when any route will do.
pub const NO_RAIL: u32 = u32::MAX;

/// One point-to-point transfer of a step, between group ranks: bytes on the wire, the NIC it
/// crosses between nodes (`rail`, an index into each node's NICs, or [`NO_RAIL`]), how long it
/// waits before its bytes move (its route's latency, or exactly `latency_ns` when the collective
/// model times its hops itself), and the most it can move per ns on its own (`cap`, infinite if
/// only the links limit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub rail: u32,
    pub latency: Latency,
    pub cap: f64,
}

/// How long a transfer waits before its bytes move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// Its route's latency.
    Route,
    /// Exactly this many ns (a pipelined protocol's share of the hop latencies).
    Exact(Nanos),
}

/// A transfer with no protocol effects.
fn t(src: u32, dst: u32, bytes: u64) -> Transfer {
    Transfer { src, dst, bytes, rail: NO_RAIL, latency: Latency::Route, cap: f64::INFINITY }
}

/// The largest power of two not above `ranks` (at least 1): the butterflies' core.
pub fn largest_pow2(ranks: u32) -> u32 {
    1 << (u32::BITS - 1 - ranks.max(1).leading_zeros())
}

/// The butterflies' fold for ranks beyond the largest power of two `pow2`: at the first of `steps`
/// steps each extra rank r sends its `bytes` to r - pow2, at the last it gets the result back.
/// Emits those transfers and returns None on the fold steps; otherwise the step's index among the
/// power-of-two steps.
fn fold_step(ranks: u32, pow2: u32, bytes: u64, step: u32, steps: u32, f: &mut impl FnMut(Transfer)) -> Option<u32> {
    let extra = ranks > pow2;
    if extra && (step == 0 || step == steps - 1) {
        for r in pow2..ranks {
            let (src, dst) = if step == 0 { (r, r - pow2) } else { (r - pow2, r) };
            f(t(src, dst, bytes));
        }
        return None;
    }
    Some(step - extra as u32)
}

/// A lowered collective.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing to send (one rank, or zero bytes).
    Empty,
    /// Every step, rank r sends `chunk` bytes to rank (r+1) mod n.
    Ring { ranks: u32, chunk: u64, steps: u32 },
    /// The ring over ranks that come node by node, `per_node` on each of `nodes` nodes, run as
    /// `per_node` rings side by side (NCCL's channels), ring c entering every node at local rank c
    /// and leaving it from local rank c - 1, so each rank's NIC carries one ring: every step,
    /// local rank j sends `chunk` / `per_node` bytes to local rank j + 1 of the next node and the
    /// rest of its `chunk` to local rank j + 1 of its own.
    StripedRing { per_node: u32, nodes: u32, chunk: u64, steps: u32 },
    /// One step: the root (rank 0) sends `chunk` bytes to every other rank.
    FromRoot { ranks: u32, chunk: u64 },
    /// One step: every other rank sends `chunk` bytes to the root (rank 0).
    ToRoot { ranks: u32, chunk: u64 },
    /// Root's buffer in `pieces` pieces of `chunk` bytes pipelined along the ring 0 -> 1 -> ... :
    /// at step s, rank i forwards piece s - i.
    RingBroadcast { ranks: u32, chunk: u64, pieces: u32 },
    /// Two-level ring: `per_node - 1` intra steps of `intra` bytes, `2 (nodes - 1)` inter steps of
    /// `inter` bytes, `per_node - 1` intra steps again.
    Hierarchical { per_node: u32, nodes: u32, intra: u64, inter: u64 },
    /// Binomial tree over `depth` levels with `bytes` per edge: reduce (up) and/or broadcast (down).
    Tree { ranks: u32, depth: u32, bytes: u64, up: bool, down: bool },
    /// Recursive halving/doubling on `pow2` ranks; ranks >= pow2 fold in before and out after.
    HalvingDoubling { ranks: u32, pow2: u32, bytes: u64 },
    /// Recursive doubling on `pow2` ranks, the whole `bytes` each step; ranks >= pow2 fold in
    /// before and out after.
    RecursiveDoubling { ranks: u32, pow2: u32, bytes: u64 },
    /// All-to-all of `chunk` bytes per pair, `steps` times (push, pull).
    AllToAll { ranks: u32, chunk: u64, steps: u32 },
    /// HybridEP's two-level token exchange on `nodes` nodes of `per_node` ranks, in one step (its
    /// RDMA and NVLink stages are pipelined chunk by chunk: deepseek-ai/DeepEP hybrid-ep branch,
    /// docs/README_Hybrid-EP.md, "Hierarchical Communication Design", "warp-level pipeline"):
    /// every rank sends `inter` bytes to the rank of its local index on each other node and
    /// `intra` bytes to each other rank of its own node (its own tokens and those it forwards).
    HybridAllToAll { per_node: u32, nodes: u32, inter: u64, intra: u64 },
    /// Everyone to the root, then the root to everyone, `bytes` each way.
    Central { ranks: u32, bytes: u64 },
    /// NCCL's lowering of one call ([`nccl::plan::NcclPlan`]).
    Nccl(Arc<nccl::plan::NcclPlan>),
}

impl Plan {
    /// Lowers `op` on `ranks` ranks with nothing known about nodes (see [`Plan::lower_on`]).
    pub fn lower(op: CollectiveOp, algorithm: Algorithm, ranks: u32, bytes: u64) -> Plan {
        Self::lower_on(op, algorithm, Layout::flat(ranks), bytes)
    }

    /// Lowers `op` with `bytes` per rank on ranks laid out as `layout`.
    pub fn lower_on(op: CollectiveOp, algorithm: Algorithm, layout: Layout, bytes: u64) -> Plan {
        let ranks = layout.ranks;
        if ranks < 2 || bytes == 0 {
            return Plan::Empty;
        }
        let share = bytes.div_ceil(ranks as u64);
        let depth = u32::BITS - (ranks - 1).leading_zeros(); // ceil(log2 ranks)
        let tree = |up, down| Plan::Tree { ranks, depth, bytes, up, down };
        let ring = Plan::Ring { ranks, chunk: share, steps: 2 * (ranks - 1) };
        match (op, algorithm) {
            (CollectiveOp::AllReduce, Algorithm::Ring) => ring,
            (CollectiveOp::AllReduce, Algorithm::Hierarchical) => {
                let (g, m) = (layout.per_node, layout.nodes());
                if g < 2 || m < 2 {
                    return ring;
                }
                let intra = bytes.div_ceil(g as u64);
                Plan::Hierarchical { per_node: g, nodes: m, intra, inter: intra.div_ceil(m as u64) }
            }
            (CollectiveOp::AllReduce, Algorithm::Tree) => tree(true, true),
            (CollectiveOp::AllReduce, Algorithm::HalvingDoubling) => {
                Plan::HalvingDoubling { ranks, pow2: largest_pow2(ranks), bytes }
            }
            (CollectiveOp::AllReduce, Algorithm::RecursiveDoubling) => {
                Plan::RecursiveDoubling { ranks, pow2: largest_pow2(ranks), bytes }
            }
            (CollectiveOp::AllReduce, Algorithm::Ps) => Plan::AllToAll { ranks, chunk: share, steps: 2 },
            (CollectiveOp::AllReduce, Algorithm::PsCentral) => Plan::Central { ranks, bytes },
            (CollectiveOp::AllReduce, Algorithm::Auto) => {
                if layout.multi_node() && bytes < AUTO_TREE_BELOW {
                    tree(true, true)
                } else {
                    ring
                }
            }
            (CollectiveOp::Broadcast, Algorithm::Tree) => tree(false, true),
            (CollectiveOp::Reduce, Algorithm::Tree) => tree(true, false),
            (CollectiveOp::Broadcast, Algorithm::Ring | Algorithm::Auto) => {
                // NCCL pipelines a broadcast along its ring in pieces; 2N pieces keeps the fill and
                // drain short without making each piece latency-bound.
                let pieces = (2 * ranks).min(bytes.min(u32::MAX as u64) as u32).max(1);
                Plan::RingBroadcast { ranks, chunk: bytes.div_ceil(pieces as u64), pieces }
            }
            // Other rooted operations go directly between the root and each rank.
            (CollectiveOp::Broadcast, _) => Plan::FromRoot { ranks, chunk: bytes },
            (CollectiveOp::Scatter, _) => Plan::FromRoot { ranks, chunk: share },
            (CollectiveOp::Reduce, _) => Plan::ToRoot { ranks, chunk: bytes },
            (CollectiveOp::Gather, _) => Plan::ToRoot { ranks, chunk: share },
            // Every algorithm runs these as one half of the ring all-reduce: N-1 steps of K/N.
            (CollectiveOp::AllGather | CollectiveOp::ReduceScatter, _) => {
                Plan::Ring { ranks, chunk: share, steps: ranks - 1 }
            }
            (CollectiveOp::AllToAll, _) => Plan::AllToAll { ranks, chunk: share, steps: 1 },
            (CollectiveOp::SendRecv, _) => Plan::Ring { ranks, chunk: bytes, steps: 1 },
            (CollectiveOp::HybridAllToAll { experts, top_k }, _) => {
                Self::hybrid_all_to_all(layout, bytes, experts, top_k)
            }
        }
    }

    /// [`CollectiveOp::HybridAllToAll`] of one rank's `bytes` of tokens on `layout`. Under uniform
    /// routing a token reaches a given rank with probability q = R(ranks) / ranks and a given node
    /// with probability R(nodes) / nodes, R being [`expected_ranks_per_token`] over that many
    /// equal holders of the experts. Each rank sends q x `bytes` of its own tokens to every other
    /// rank of its node and forwards as much from each remote node's rank of its local index, so
    /// `nodes` x q x `bytes` to each local peer. On one node, or on ranks not laid out node by
    /// node, it is the flat all-to-all of q x `bytes` a pair.
    fn hybrid_all_to_all(layout: Layout, bytes: u64, experts: u32, top_k: u32) -> Plan {
        let ranks = layout.ranks;
        let reach = |holders: u32| expected_ranks_per_token(experts, top_k, holders) / holders as f64;
        let pair = (bytes as f64 * reach(ranks)).ceil() as u64;
        let (g, m) = (layout.per_node, layout.nodes());
        if g < 1 || m < 2 || experts % m != 0 {
            return Plan::AllToAll { ranks, chunk: pair, steps: 1 };
        }
        let inter = (bytes as f64 * reach(m)).ceil() as u64;
        Plan::HybridAllToAll { per_node: g, nodes: m, inter, intra: pair * m as u64 }
    }

    /// This plan with a ring of `op` across nodes run as one ring per local rank
    /// ([`Plan::StripedRing`]), as NCCL runs it: one ring per channel, the channels spread over
    /// the node's NICs (src/graph/search.cc `ncclTopoCompute`, each ring entering and leaving a
    /// node through a NIC of its own), so 1/G of the bytes cross through each GPU's NIC instead of
    /// all of them through one. ABCI's nccl-tests measure 19.9 GB/s of bus bandwidth for a 32 MiB
    /// all-reduce on 4 nodes of 4 V100s with 2 EDR adapters a node
    /// (`/work/shared/data/derived/abci_nccl_tests.csv`), more than the 12.5 GB/s one adapter
    /// moves. Point-to-point ring steps (`send-recv`) keep their partners; other plans are kept.
    pub fn over_channels(self, op: CollectiveOp, layout: Layout) -> Plan {
        let (g, m) = (layout.per_node, layout.nodes());
        match self {
            Plan::Ring { ranks, chunk, steps }
                if op != CollectiveOp::SendRecv && g >= 2 && m >= 2 && ranks == g * m =>
            {
                Plan::StripedRing { per_node: g, nodes: m, chunk, steps }
            }
            p => p,
        }
    }

    pub fn step_count(&self) -> u32 {
        match *self {
            Plan::Nccl(ref p) => p.step_count(),
            Plan::Empty => 0,
            Plan::Ring { steps, .. } | Plan::StripedRing { steps, .. } | Plan::AllToAll { steps, .. } => steps,
            Plan::FromRoot { .. } | Plan::ToRoot { .. } | Plan::HybridAllToAll { .. } => 1,
            Plan::RingBroadcast { ranks, pieces, .. } => ranks - 2 + pieces,
            Plan::Hierarchical { per_node, nodes, .. } => 2 * (per_node - 1) + 2 * (nodes - 1),
            Plan::Tree { depth, up, down, .. } => depth * (up as u32 + down as u32),
            Plan::HalvingDoubling { ranks, pow2, .. } => 2 * pow2.trailing_zeros() + if ranks > pow2 { 2 } else { 0 },
            Plan::RecursiveDoubling { ranks, pow2, .. } => pow2.trailing_zeros() + if ranks > pow2 { 2 } else { 0 },
            Plan::Central { .. } => 2,
        }
    }

    /// Steps with the same class move exactly the same transfers (same pairs, same bytes), so the
    /// engine can time a class once. Ring steps are all alike.
    pub fn step_class(&self, step: u32) -> u32 {
        match *self {
            Plan::Nccl(ref p) => p.step_class(step),
            Plan::Empty
            | Plan::Ring { .. }
            | Plan::StripedRing { .. }
            | Plan::FromRoot { .. }
            | Plan::ToRoot { .. }
            | Plan::AllToAll { .. }
            | Plan::HybridAllToAll { .. } => 0,
            // Every sender busy in the middle of the pipeline; fill and drain steps differ.
            Plan::RingBroadcast { ranks, pieces, .. } => {
                if step + 2 >= ranks && step < pieces {
                    0
                } else {
                    step + 1
                }
            }
            // Intra-node steps (before and after) are alike, and so are the inter-node ones.
            Plan::Hierarchical { per_node, nodes, .. } => {
                let inter = step >= per_node - 1 && step < per_node - 1 + 2 * (nodes - 1);
                inter as u32
            }
            Plan::Tree { .. }
            | Plan::HalvingDoubling { .. }
            | Plan::RecursiveDoubling { .. }
            | Plan::Central { .. } => step,
        }
    }

    /// Calls `f` for every transfer of step `step`, in rank order.
    pub fn for_each_transfer(&self, step: u32, mut f: impl FnMut(Transfer)) {
        debug_assert!(step < self.step_count());
        match *self {
            Plan::Nccl(ref p) => p.for_each_transfer(step, f),
            Plan::Empty => {}
            Plan::Ring { ranks, chunk, .. } => {
                for r in 0..ranks {
                    f(t(r, (r + 1) % ranks, chunk));
                }
            }
            Plan::StripedRing { per_node: g, nodes: m, chunk, .. } => {
                let across = chunk.div_ceil(g as u64);
                let within = chunk - across;
                for node in 0..m {
                    for local in 0..g {
                        let next = (local + 1) % g;
                        if within > 0 {
                            f(t(node * g + local, node * g + next, within));
                        }
                        f(t(node * g + local, ((node + 1) % m) * g + next, across));
                    }
                }
            }
            Plan::FromRoot { ranks, chunk } => (1..ranks).for_each(|r| f(t(0, r, chunk))),
            Plan::ToRoot { ranks, chunk } => (1..ranks).for_each(|r| f(t(r, 0, chunk))),
            Plan::RingBroadcast { ranks, chunk, pieces } => {
                for i in 0..ranks - 1 {
                    if step >= i && step - i < pieces {
                        f(t(i, i + 1, chunk));
                    }
                }
            }
            Plan::Hierarchical { per_node: g, nodes: m, intra, inter } => {
                let intra_steps = g - 1;
                let inter_phase = step >= intra_steps && step < intra_steps + 2 * (m - 1);
                for node in 0..m {
                    for local in 0..g {
                        let src = node * g + local;
                        if inter_phase {
                            f(t(src, ((node + 1) % m) * g + local, inter));
                        } else {
                            f(t(src, node * g + (local + 1) % g, intra));
                        }
                    }
                }
            }
            Plan::Tree { ranks, depth, bytes, up, .. } => {
                // Up: level k joins ranks 2^k apart (children with bit k set send to the parent).
                // Down retraces the levels from the top.
                let level = if up && step < depth { step } else { depth - 1 - (step - if up { depth } else { 0 }) };
                let going_up = up && step < depth;
                let span = 1u32 << level;
                let mut parent = 0;
                while parent + span < ranks {
                    let child = parent + span;
                    let (src, dst) = if going_up { (child, parent) } else { (parent, child) };
                    f(t(src, dst, bytes));
                    parent += span << 1;
                }
            }
            Plan::HalvingDoubling { ranks, pow2, bytes } => {
                let Some(s) = fold_step(ranks, pow2, bytes, step, self.step_count(), &mut f) else { return };
                let rounds = pow2.trailing_zeros();
                // Halving: partner distance pow2/2, pow2/4, ...; each sends half of what it holds.
                // Doubling retraces the distances with the held share growing back.
                let (distance, held) = if s < rounds {
                    (pow2 >> (s + 1), bytes >> (s + 1))
                } else {
                    let k = s - rounds;
                    (1 << k, bytes >> (rounds - k))
                };
                for r in 0..pow2 {
                    f(t(r, r ^ distance, held.max(1)));
                }
            }
            Plan::RecursiveDoubling { ranks, pow2, bytes } => {
                let Some(s) = fold_step(ranks, pow2, bytes, step, self.step_count(), &mut f) else { return };
                // Partners 1, 2, 4, ... apart, the whole buffer each way every step.
                let distance = 1 << s;
                for r in 0..pow2 {
                    f(t(r, r ^ distance, bytes));
                }
            }
            Plan::AllToAll { ranks, chunk, .. } => {
                for src in 0..ranks {
                    for dst in (0..ranks).filter(|&d| d != src) {
                        f(t(src, dst, chunk));
                    }
                }
            }
            Plan::HybridAllToAll { per_node: g, nodes: m, inter, intra } => {
                for node in 0..m {
                    for local in 0..g {
                        let src = node * g + local;
                        (0..g).filter(|&i| i != local).for_each(|i| f(t(src, node * g + i, intra)));
                        (0..m).filter(|&b| b != node).for_each(|b| f(t(src, b * g + local, inter)));
                    }
                }
            }
            Plan::Central { ranks, bytes } => {
                for r in 1..ranks {
                    let (src, dst) = if step == 0 { (r, 0) } else { (0, r) };
                    f(t(src, dst, bytes));
                }
            }
        }
    }

    /// How it ran, for reports: the NCCL choice (`ring/LL128 x12`) or the ideal algorithm.
    pub fn label(&self) -> String {
        match self {
            Plan::Nccl(p) => p.label(),
            Plan::Empty => "none".into(),
            Plan::Ring { .. } | Plan::StripedRing { .. } | Plan::RingBroadcast { .. } => "ideal ring".into(),
            Plan::FromRoot { .. } | Plan::ToRoot { .. } => "ideal direct".into(),
            Plan::Hierarchical { .. } => "ideal hierarchical".into(),
            Plan::Tree { .. } => "ideal tree".into(),
            Plan::HalvingDoubling { .. } => "ideal halving-doubling".into(),
            Plan::RecursiveDoubling { .. } => "ideal recursive-doubling".into(),
            Plan::AllToAll { .. } => "ideal all-to-all".into(),
            Plan::HybridAllToAll { .. } => "ideal hybrid-ep".into(),
            Plan::Central { .. } => "ideal ps-central".into(),
        }
    }

    /// Bytes the busiest rank sends over the whole collective (for reports and checks).
    pub fn bytes_sent_per_rank(&self) -> u64 {
        let mut sent: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for s in 0..self.step_count() {
            self.for_each_transfer(s, |t| *sent.entry(t.src).or_default() += t.bytes);
        }
        sent.values().copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(p: &Plan) -> Vec<Vec<Transfer>> {
        (0..p.step_count())
            .map(|s| {
                let mut v = Vec::new();
                p.for_each_transfer(s, |t| v.push(t));
                v
            })
            .collect()
    }

    #[test]
    fn ring_sends_two_n_minus_one_chunks() {
        let p = Plan::lower(CollectiveOp::AllReduce, Algorithm::Ring, 4, 1000);
        assert_eq!(p, Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Ring, Layout::flat(4), 1000));
        assert_eq!(p.step_count(), 6);
        let s0 = &steps(&p)[0];
        assert_eq!(s0.len(), 4);
        assert_eq!(s0[3], t(3, 0, 250));
        assert_eq!(p.bytes_sent_per_rank(), 1500);
        assert_eq!(Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Ring, Layout::flat(1), 1000), Plan::Empty);
    }

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::parse(a.name()), Some(a));
        }
        assert_eq!(Algorithm::parse("butterfly"), Some(Algorithm::HalvingDoubling));
        assert_eq!(Algorithm::parse("carrier-pigeon"), None);
    }

    #[test]
    fn layout_detects_regular_nodes() {
        assert_eq!(Layout::from_nodes([0, 0, 1, 1, 2, 2]), Layout { ranks: 6, per_node: 2 });
        assert_eq!(Layout::from_nodes([0, 0, 0]), Layout { ranks: 3, per_node: 3 });
        assert_eq!(Layout::from_nodes([0, 0, 1]).per_node, 0);
        assert_eq!(Layout::from_nodes([0, 1, 1]).per_node, 0);
        assert_eq!(Layout::from_nodes([0, 0, 1, 1, 0, 0]).per_node, 2); // per-node runs, not ids, matter
    }

    #[test]
    fn hierarchical_moves_one_node_share_across_nodes() {
        // 2 nodes x 4 ranks, 8000 bytes: 3 intra steps of 2000, 2 inter steps of 1000, 3 intra.
        let p =
            Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Hierarchical, Layout { ranks: 8, per_node: 4 }, 8000);
        let s = steps(&p);
        assert_eq!(s.len(), 8);
        assert!(s[0].iter().all(|t| t.src / 4 == t.dst / 4 && t.bytes == 2000));
        assert!(s[3].iter().all(|t| t.src / 4 != t.dst / 4 && t.src % 4 == t.dst % 4 && t.bytes == 1000));
        assert!(s[7].iter().all(|t| t.src / 4 == t.dst / 4));
        // Irregular layout: a flat ring.
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Hierarchical, Layout::flat(8), 8000);
        assert_eq!(p.step_count(), 14);
    }

    #[test]
    fn tree_reduces_to_rank_zero_and_back() {
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Tree, Layout::flat(5), 100);
        let s = steps(&p);
        assert_eq!(s.len(), 6); // ceil(log2 5) = 3 levels, up and down
        assert_eq!(s[0], vec![t(1, 0, 100), t(3, 2, 100)]);
        assert_eq!(s[2], vec![t(4, 0, 100)]);
        assert_eq!(s[3], vec![t(0, 4, 100)]);
        assert_eq!(s[5].len(), 2);
        // Every rank but 0 receives exactly once on the way down.
        let mut got = [0; 5];
        s[3..].iter().flatten().for_each(|t| got[t.dst as usize] += 1);
        assert_eq!(got, [0, 1, 1, 1, 1]);
    }

    #[test]
    fn halving_doubling_folds_extra_ranks() {
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::HalvingDoubling, Layout::flat(4), 1000);
        let s = steps(&p);
        assert_eq!(s.len(), 4);
        assert!(s[0].iter().all(|t| t.dst == t.src ^ 2 && t.bytes == 500));
        assert!(s[1].iter().all(|t| t.dst == t.src ^ 1 && t.bytes == 250));
        assert!(s[2].iter().all(|t| t.dst == t.src ^ 1 && t.bytes == 250));
        assert!(s[3].iter().all(|t| t.dst == t.src ^ 2 && t.bytes == 500));
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::HalvingDoubling, Layout::flat(6), 1000);
        let s = steps(&p);
        assert_eq!(s.len(), 6);
        assert_eq!(s[0], vec![t(4, 0, 1000), t(5, 1, 1000)]);
        assert_eq!(s[5], vec![t(0, 4, 1000), t(1, 5, 1000)]);
    }

    /// OpenMPI's recursive doubling on 4 ranks: partners 1 then 2 apart, the whole 1000 bytes each
    /// step, so 2000 bytes sent per rank (halving-doubling sends 500 + 250 + 250 + 500 = 1500). On 6
    /// ranks the two beyond 4 fold in first and are served last: 2 + 2 steps.
    #[test]
    fn recursive_doubling_sends_the_whole_buffer_every_step() {
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::RecursiveDoubling, Layout::flat(4), 1000);
        let s = steps(&p);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0], vec![t(0, 1, 1000), t(1, 0, 1000), t(2, 3, 1000), t(3, 2, 1000)]);
        assert_eq!(s[1], vec![t(0, 2, 1000), t(1, 3, 1000), t(2, 0, 1000), t(3, 1, 1000)]);
        assert_eq!(p.bytes_sent_per_rank(), 2000);
        let hd = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::HalvingDoubling, Layout::flat(4), 1000);
        assert_eq!(hd.bytes_sent_per_rank(), 1500);
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::RecursiveDoubling, Layout::flat(6), 1000);
        let s = steps(&p);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0], vec![t(4, 0, 1000), t(5, 1, 1000)]);
        assert!(s[1].iter().all(|t| t.dst == t.src ^ 1 && t.bytes == 1000) && s[1].len() == 4);
        assert!(s[2].iter().all(|t| t.dst == t.src ^ 2 && t.bytes == 1000) && s[2].len() == 4);
        assert_eq!(s[3], vec![t(0, 4, 1000), t(1, 5, 1000)]);
        assert_eq!(Algorithm::parse("recursive-doubling"), Some(Algorithm::RecursiveDoubling));
    }

    #[test]
    fn parameter_servers_push_then_pull() {
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Ps, Layout::flat(4), 1000);
        assert_eq!(steps(&p).iter().map(Vec::len).collect::<Vec<_>>(), vec![12, 12]);
        assert_eq!(p.bytes_sent_per_rank(), 2 * 3 * 250);
        let p = Plan::lower_on(CollectiveOp::AllReduce, Algorithm::PsCentral, Layout::flat(4), 1000);
        let s = steps(&p);
        assert!(s[0].iter().all(|t| t.dst == 0) && s[1].iter().all(|t| t.src == 0));
        assert_eq!(p.bytes_sent_per_rank(), 3000);
    }

    #[test]
    fn auto_picks_tree_for_small_messages_across_nodes_only() {
        let two_nodes = Layout { ranks: 8, per_node: 4 };
        let one_node = Layout { ranks: 4, per_node: 4 };
        let small = AUTO_TREE_BELOW / 2;
        assert!(matches!(
            Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Auto, two_nodes, small),
            Plan::Tree { .. }
        ));
        assert!(matches!(Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Auto, one_node, small), Plan::Ring { .. }));
        let big = AUTO_TREE_BELOW * 4;
        assert!(matches!(Plan::lower_on(CollectiveOp::AllReduce, Algorithm::Auto, two_nodes, big), Plan::Ring { .. }));
    }

    #[test]
    fn a_ring_across_nodes_runs_one_ring_per_local_rank_through_its_own_nic() {
        // 2 nodes of 2 ranks, an all-gather of 4000 bytes: chunks of 1000, 3 steps. Local rank j
        // sends half of its chunk to local j + 1 of its node and half to local j + 1 of the next.
        let two_by_two = Layout { ranks: 4, per_node: 2 };
        let striped = |op, layout, bytes| Plan::lower_on(op, Algorithm::Ring, layout, bytes).over_channels(op, layout);
        let p = striped(CollectiveOp::AllGather, two_by_two, 4000);
        assert_eq!(p, Plan::StripedRing { per_node: 2, nodes: 2, chunk: 1000, steps: 3 });
        let s = steps(&p);
        assert_eq!(s.len(), 3);
        let want = vec![
            t(0, 1, 500),
            t(0, 3, 500),
            t(1, 0, 500),
            t(1, 2, 500),
            t(2, 3, 500),
            t(2, 1, 500),
            t(3, 2, 500),
            t(3, 0, 500),
        ];
        assert!(s.iter().all(|step| *step == want));
        // Each rank sends and receives the ring's (N-1)/N of the buffer, as the single ring does,
        // but only 1/G of it crosses between nodes from each rank: 1500 of the single ring's 3000
        // here, 750 of 3000 with 4 ranks a node (3 of 4 chunks stay inside the node).
        assert_eq!(p.bytes_sent_per_rank(), 3000);
        let across = |p: &Plan, g: u32| {
            let mut b = 0;
            (0..p.step_count())
                .for_each(|k| p.for_each_transfer(k, |x| b += (x.src / g != x.dst / g && x.src == 0) as u64 * x.bytes));
            b
        };
        assert_eq!(across(&p, 2), 1500);
        let single = Plan::lower(CollectiveOp::AllGather, Algorithm::Ring, 4, 4000);
        assert_eq!(single.bytes_sent_per_rank(), 3000);
        let p = striped(CollectiveOp::ReduceScatter, Layout { ranks: 8, per_node: 4 }, 8000);
        assert_eq!(across(&p, 4), 7 * 250);
        // All-reduce: 2(N-1) steps; one rank a node, or one node: the plain ring.
        let p = striped(CollectiveOp::AllReduce, two_by_two, 4000);
        assert_eq!(p.step_count(), 6);
        assert!(matches!(p, Plan::StripedRing { .. }));
        let rail = Layout { ranks: 4, per_node: 1 };
        assert!(matches!(striped(CollectiveOp::AllGather, rail, 4000), Plan::Ring { .. }));
        let node = Layout { ranks: 4, per_node: 4 };
        assert!(matches!(striped(CollectiveOp::AllGather, node, 4000), Plan::Ring { .. }));
        // Point-to-point ring steps keep their partners.
        assert!(matches!(striped(CollectiveOp::SendRecv, two_by_two, 4000), Plan::Ring { .. }));
        // Without channels (the default route), the single ring.
        assert!(matches!(
            Plan::lower_on(CollectiveOp::AllGather, Algorithm::Ring, two_by_two, 4000),
            Plan::Ring { .. }
        ));
    }

    #[test]
    fn hybrid_ep_across_nodes_runs_at_its_measured_in_training_fraction() {
        // The Nsight capture's 0.660 ms a dispatch or combine against the schedule's 0.355 ms.
        assert!((HYBRID_EP_TRAINING_EFFICIENCY - 0.5379).abs() < 1e-3);
        let op = CollectiveOp::HybridAllToAll { experts: 128, top_k: 8 };
        assert_eq!(in_training_efficiency(op, Layout { ranks: 16, per_node: 8 }), HYBRID_EP_TRAINING_EFFICIENCY);
        // One node (the flat exchange), ranks not laid out by node, other collectives: unchanged.
        assert_eq!(in_training_efficiency(op, Layout { ranks: 8, per_node: 8 }), 1.0);
        assert_eq!(in_training_efficiency(op, Layout::flat(16)), 1.0);
        assert_eq!(in_training_efficiency(CollectiveOp::AllToAll, Layout { ranks: 16, per_node: 8 }), 1.0);
    }

    #[test]
    fn hybrid_ep_sends_a_token_once_per_remote_node_and_fans_it_out_inside() {
        // 2 nodes of 2 ranks, 8 experts (2 a rank, 4 a node), top 2, 1200 bytes of tokens a rank.
        let op = CollectiveOp::HybridAllToAll { experts: 8, top_k: 2 };
        let p = Plan::lower_on(op, Algorithm::Auto, Layout { ranks: 4, per_node: 2 }, 1200);
        // A given rank is missed with probability C(6,2)/C(8,2) = 15/28, a node with
        // C(4,2)/C(8,2) = 6/28: 1200 x 13/28 to each local peer from each node (own and
        // forwarded), 1200 x 22/28 once to the other node's rank of the same local index.
        let (pair, inter) = ((1200.0f64 * 13.0 / 28.0).ceil() as u64, (1200.0f64 * 22.0 / 28.0).ceil() as u64);
        assert_eq!(p, Plan::HybridAllToAll { per_node: 2, nodes: 2, inter, intra: 2 * pair });
        assert_eq!(
            steps(&p),
            vec![vec![
                t(0, 1, 2 * pair),
                t(0, 2, inter),
                t(1, 0, 2 * pair),
                t(1, 3, inter),
                t(2, 3, 2 * pair),
                t(2, 0, inter),
                t(3, 2, 2 * pair),
                t(3, 1, inter)
            ]]
        );
        // What crosses between nodes: one copy a token and node, where the flat exchange of the
        // flex dispatcher sends one to each rank it reaches there.
        let flat = Plan::lower_on(CollectiveOp::AllToAll, Algorithm::Auto, Layout::flat(4), 4 * pair);
        let across = |p: &Plan| {
            let mut b = 0;
            p.for_each_transfer(0, |x| b += if x.src / 2 != x.dst / 2 { x.bytes } else { 0 });
            b
        };
        assert!(across(&p) < across(&flat), "{} vs {}", across(&p), across(&flat));
        // On one node (or ranks not node by node) it is the flat exchange of the tokens each rank needs.
        let one = Plan::lower_on(op, Algorithm::Auto, Layout { ranks: 4, per_node: 4 }, 1200);
        let four = Plan::AllToAll { ranks: 4, chunk: (1200.0f64 * 13.0 / 28.0).ceil() as u64, steps: 1 };
        assert_eq!(one, four);
        assert_eq!(Plan::lower_on(op, Algorithm::Auto, Layout::flat(4), 1200), four);
        assert_eq!(op.name(), "hybrid-all-to-all");
    }

    #[test]
    fn gather_scatter_halves_and_all_to_all() {
        for op in [CollectiveOp::AllGather, CollectiveOp::ReduceScatter] {
            let p = Plan::lower(op, Algorithm::Ring, 4, 1000);
            assert_eq!(p, Plan::Ring { ranks: 4, chunk: 250, steps: 3 });
            assert_eq!(p.bytes_sent_per_rank(), 750); // (N-1)/N of the buffer
        }
        let p = Plan::lower(CollectiveOp::AllToAll, Algorithm::Ring, 4, 1000);
        assert_eq!(steps(&p)[0].len(), 12);
        assert_eq!(p.bytes_sent_per_rank(), 750);
        for op in CollectiveOp::ALL {
            assert!(!op.name().is_empty());
        }
        // A send-recv moves the whole buffer one step round the ring, in both directions on 2.
        let p = Plan::lower(CollectiveOp::SendRecv, Algorithm::Ring, 2, 1000);
        assert_eq!(steps(&p), vec![vec![t(0, 1, 1000), t(1, 0, 1000)]]);
        assert_eq!(Plan::lower(CollectiveOp::SendRecv, Algorithm::Ring, 4, 1000).bytes_sent_per_rank(), 1000);
    }

    #[test]
    fn ring_broadcast_pipelines_pieces() {
        let p = Plan::lower_on(CollectiveOp::Broadcast, Algorithm::Ring, Layout::flat(3), 600);
        let s = steps(&p);
        assert_eq!(s.len(), 1 + 6); // ranks - 2 + pieces
        assert_eq!(s[0], vec![t(0, 1, 100)]);
        assert_eq!(s[1].len(), 2);
        assert_eq!(s[6], vec![t(1, 2, 100)]);
    }
}

#[cfg(test)]
mod step_class_tests {
    use super::*;

    /// Steps of one class must move exactly the same transfers.
    #[test]
    fn steps_of_a_class_are_identical() {
        let layouts = [Layout::flat(6), Layout::from_nodes([0, 0, 0, 1, 1, 1, 2, 2, 2])];
        for layout in layouts {
            for alg in Algorithm::ALL {
                for op in CollectiveOp::ALL {
                    let p = Plan::lower_on(op, alg, layout, 1 << 20);
                    let mut first: std::collections::HashMap<u32, Vec<Transfer>> = Default::default();
                    for s in 0..p.step_count() {
                        let mut t = Vec::new();
                        p.for_each_transfer(s, |x| t.push(x));
                        let e = first.entry(p.step_class(s)).or_insert_with(|| t.clone());
                        assert_eq!(*e, t, "{op:?} {alg:?} step {s}");
                    }
                }
            }
        }
    }
}
