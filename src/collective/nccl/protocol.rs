//! What a protocol does to the bytes: how many cross the wire per data byte (LL sends 16-byte
//! lines carrying 8 data bytes with their flags; LL128 128-byte lines carrying 120; Simple plain
//! buffers), how big a pipelined chunk is, and how fast one channel can go (the per-channel
//! ceilings and link fractions NCCL's tuner uses, from [`super::version::Tables`]). Pure functions
//! of the version's constants; nothing is fitted here.

use super::version::{fixed, Arch, CpuVendor, Func, NcclAlgo, NcclVersion, Proto, Tables};

/// Wire bytes per data byte.
pub fn wire_factor(p: Proto) -> f64 {
    match p {
        Proto::Ll => (fixed::LL_LINE_BYTES / 8) as f64,
        Proto::Ll128 => fixed::LL128_LINE_BYTES as f64 / fixed::LL128_DATA_BYTES as f64,
        Proto::Simple => 1.0,
    }
}

/// Data bytes of one buffer step (`buffSizes[p] / NCCL_STEPS`, in data, init.cc defaults).
pub fn step_data_bytes(p: Proto) -> u64 {
    match p {
        // DEFAULT_LL_BUFFSIZE = lines/thread x threads x steps x 16 B; half of it is data.
        Proto::Ll => fixed::LL_LINES_PER_THREAD * fixed::LL_MAX_THREADS as u64 * fixed::LL_LINE_BYTES / 2,
        // DEFAULT_LL128_BUFFSIZE = 120 elements x 640 threads x 8 steps x 8 B; 120 of 128 is data.
        Proto::Ll128 => {
            fixed::LL128_ELEMS_PER_THREAD * fixed::LL128_MAX_THREADS as u64 * 8 * fixed::LL128_DATA_BYTES
                / fixed::LL128_LINE_BYTES
        }
        Proto::Simple => fixed::SIMPLE_BUFFSIZE / fixed::STEPS,
    }
}

/// Data bytes of one pipelined piece of a tree all-reduce (enqueue.cc `computeColl`: the Simple
/// chunk is halved until each channel has enough chunks for the tree's depth; LL128 likewise by
/// `nstepsLL128`).
pub fn tree_chunk_bytes(p: Proto, bytes: u64, channels: u32, depth: u32, ranks: u32, nodes: u32) -> u64 {
    let nc = channels.max(1) as u64;
    let depth = depth.max(1) as u64;
    match p {
        Proto::Simple => {
            let mut chunk = step_data_bytes(p);
            while bytes / (nc * chunk) < depth * 8 && chunk > 131_072 {
                chunk /= 2;
            }
            while bytes / (nc * chunk) < depth * 4 && chunk > 65_536 {
                chunk /= 2;
            }
            while bytes / (nc * chunk) < depth && chunk > 32_768 {
                chunk /= 2;
            }
            chunk
        }
        Proto::Ll128 => {
            let mut chunk = fixed::LL128_ELEMS_PER_THREAD * fixed::LL128_MAX_THREADS as u64 * 8;
            let ppn = ranks as f64 / nodes.max(1) as f64;
            let steps = 1.0 + (63 - (nodes.max(1) as u64).leading_zeros()) as f64 + 0.1 * ppn;
            while ((bytes / (nc * chunk)) as f64) < steps * 64.0 / ppn && chunk > 131_072 {
                chunk /= 2;
            }
            while ((bytes / (nc * chunk)) as f64) < steps * 16.0 / ppn && chunk > 32_768 {
                chunk /= 2;
            }
            chunk * fixed::LL128_DATA_BYTES / fixed::LL128_LINE_BYTES
        }
        Proto::Ll => step_data_bytes(p),
    }
}

/// Data bytes of one piece of a broadcast or reduce pipelined along the ring (chunk steps 1) when
/// a hop crosses the network: the proxy posts a send only once the GPU has filled a whole buffer
/// step (net.cc v2.8.4-1 l.289-324, `sizesFifo` per step), so pieces are steps.
pub fn pipeline_chunk_bytes(p: Proto) -> u64 {
    step_data_bytes(p)
}

/// Data bytes a GPU forwards at once along a chain inside a node, with `threads` threads: LL and
/// LL128 carry a flag in every line, so the next GPU reads (and forwards) each round of lines as
/// it lands rather than waiting for the step. LL: one 8-byte word per thread per round
/// (prims_ll.h v2.8.4-1 l.119-129, `offset += nthreads`); LL128: `ELEMINC` = 240 data words per
/// warp per round (prims_ll128.h v2.8.4-1 l.242-289: `LL128INC` = 32 x 8 words less one flag word
/// in 16). Simple signals a whole slice (one step for broadcast and reduce) at once.
pub fn forward_unit_bytes(p: Proto, threads: u32) -> u64 {
    let warps = (threads / fixed::WARP).max(1) as u64;
    match p {
        Proto::Ll => threads.max(1) as u64 * 8,
        Proto::Ll128 => {
            let inc = fixed::WARP as u64 * fixed::LL128_SHMEM_ELEMS_PER_THREAD;
            (inc - inc / (fixed::LL128_LINE_BYTES / 8)) * 8 * warps
        }
        Proto::Simple => step_data_bytes(p),
    }
}

/// Data bytes one channel moves per step of a ring all-reduce, summed over the kernel's loop
/// iterations: each iteration cuts its bytes into `ranks x channels` pieces of
/// `realChunkSize`, rounded up to the protocol's grain, so below a full loop the first pieces are
/// full and the last ones empty, and a step lasts as long as its largest piece. LL rounds to
/// `nthreads` x 8 bytes, LL128 to `nthreads` x 30 bytes (`NCCL_LL128_SHMEM_ELEMS_PER_THREAD` x
/// `DATAELEMS` x 8 / `LINEELEMS` / 2), Simple aligns to (`nthreads` less the sync warp) x 8 bytes
/// (all_reduce.h v2.8.4-1 l.12-37, 261-285, 458-484; runRing, all_reduce.h v2.18.3-1 l.13-43).
/// Versions whose kernels were not read here (2.3.7, 2.21.5: host-side chunk counts) split evenly.
pub fn ring_allreduce_step_bytes(v: NcclVersion, p: Proto, bytes: u64, ranks: u32, channels: u32, threads: u32) -> u64 {
    let pieces = ranks.max(1) as u64 * channels.max(1) as u64;
    if !(NcclVersion::V2_8_4..=NcclVersion::V2_18_3).contains(&v) {
        return bytes.div_ceil(pieces).max(1);
    }
    let nt = threads.max(1) as u64;
    let chunk = match p {
        Proto::Simple => step_data_bytes(p) * fixed::ALLREDUCE_CHUNKSTEPS,
        _ => step_data_bytes(p),
    };
    let grain = match p {
        Proto::Ll => nt * 8,
        Proto::Ll128 => {
            fixed::LL128_SHMEM_ELEMS_PER_THREAD * nt * (fixed::LL128_DATA_BYTES / 8) * 8
                / (fixed::LL128_LINE_BYTES / 8)
                / 2
        }
        Proto::Simple => nt * 8,
    };
    let (mut total, mut offset) = (0, 0);
    while offset < bytes {
        let rem = bytes - offset;
        let real = match p {
            Proto::Simple => rem.div_ceil(pieces).min(chunk).div_ceil(grain) * grain,
            _ => (rem.div_ceil(pieces * grain) * grain).min(chunk),
        };
        total += real.min(rem);
        offset += pieces * chunk;
    }
    total.max(1)
}

/// The share of a ring all-reduce's (channel, rank) pieces that hold data, given the bytes one
/// channel moves per step summed over the loops ([`ring_allreduce_step_bytes`]): the kernel lays
/// pieces out rank-chunk by rank-chunk across the channels and the last ones of a partial loop
/// stay empty, so `ranks x channels x step bytes` overstates what the links carry.
pub fn ring_fill(bytes: u64, ranks: u32, channels: u32, step_bytes: u64) -> f64 {
    let slots = ranks.max(1) as f64 * channels.max(1) as f64 * step_bytes.max(1) as f64;
    (bytes as f64 / slots).clamp(0.0, 1.0)
}

/// Most pieces a pipelined chain is cut into: beyond this, the fill and drain of the pipeline
/// (span - 1 pieces) is under a thousandth of the time for any span up to a few ranks per piece, and
/// finer pieces only cost simulation steps.
pub const MAX_PIPELINE_PIECES: u64 = 1024;

/// The shares of a channel's threads that move a tree all-reduce's data up (reduce) and down
/// (broadcast). Every rank but the root splits its block: LL128 gives the reduce
/// `(nt x 7 / (10 x 32)) x 32` threads and the broadcast the rest ("Use 70% for reduce and 30% for
/// bcast", `NCCL_LL128_SPLIT`, devcomm.h v2.8.4-1 l.71-73; all_reduce.h v2.8.4-1 l.549-590), and
/// from 2.18 LL does the same (all_reduce.h v2.18.3-1 l.186-193, device/all_reduce.h v2.21.5-1
/// l.157-165); 2.8.4's LL tree runs up then down with every thread (all_reduce.h v2.8.4-1
/// l.361-391). An edge's rate is its slower end's: up edges the 70%, down edges the 30% (the
/// root's full block never decides). LL and LL128 move a line per thread, so their per-channel
/// rate is the threads'. Simple (an even split plus 64) is left whole: its copies are not what
/// limits a channel.
pub fn tree_thread_split(v: NcclVersion, p: Proto, threads: u32) -> (f64, f64) {
    let split = match p {
        Proto::Ll128 => true,
        Proto::Ll => v >= NcclVersion::V2_18_3,
        Proto::Simple => false,
    };
    if !split || threads < fixed::WARP {
        return (1.0, 1.0);
    }
    let up = (threads * 7 / (10 * fixed::WARP)) * fixed::WARP;
    (up as f64 / threads as f64, (threads - up) as f64 / threads as f64)
}

/// True where a tree all-reduce runs, on every rank and with all its threads, the reduce (up)
/// loop over every piece before the broadcast (down) loop, so a rank's way down starts only after
/// its way up has ended: NCCL 2.8.4's Simple and LL trees (all_reduce.h v2.8.4-1 l.114-149 under
/// `#if 1`, l.361-391). LL128 splits the threads between the two in 2.8.4 (l.549-590), and from
/// 2.18 every protocol does (`runTreeSplit`, all_reduce.h v2.18.3-1 l.170, 272, 657, 671; the
/// CUDA 11.2-11.3 builds for sm80 keep up-then-down for Simple, l.269-270, which dagsim does not
/// know about). Versions without a tree (2.3.7) never ask.
pub fn tree_up_then_down(v: NcclVersion, p: Proto) -> bool {
    v == NcclVersion::V2_8_4 && p != Proto::Ll128
}

/// The thread shares of [`tree_thread_split`] for one tree edge. The split limits the edges the
/// GPU's threads move themselves (NVLink/PCIe P2P stores and loads inside a node), not a network
/// hop: there the threads only fill the local buffer step (device memory under GPUDirect RDMA,
/// `protoLoc`, net.cc v2.8.4-1 l.83-86) and the proxy posts the whole step to the NIC once the
/// GPU has posted it (l.286-324), so the NIC, not the 30% of threads broadcasting, sets the rate
/// (the per-channel ceilings still apply).
pub fn tree_edge_thread_split(v: NcclVersion, p: Proto, threads: u32, network: bool) -> (f64, f64) {
    if network {
        (1.0, 1.0)
    } else {
        tree_thread_split(v, p, threads)
    }
}

/// A protocol's ceilings for one communicator: the fraction of a route's rate its data can use,
/// and the most one channel carries (GB/s of data) at full thread count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceilings {
    /// Fraction of the route's effective rate available to data (before wire overhead).
    pub route_fraction: f64,
    /// GB/s of data per channel (infinite when only the links limit).
    pub per_channel_gb_s: f64,
}

/// NCCL's bandwidth refinements turned into per-flow ceilings: the tuner's bus bandwidth is
/// graph speed x channels x a fraction, capped by a per-channel maximum; here the fraction
/// applies to the effective rate of each route and the cap to each channel (per graph channel in
/// NCCL's tables, so divided among the communicator's duplicated channels).
#[allow(clippy::too_many_arguments)]
pub fn ceilings(
    t: &Tables,
    f: Func,
    a: NcclAlgo,
    p: Proto,
    arch: Arch,
    cpu: CpuVendor,
    ranks: u32,
    nodes: u32,
    graph_channels: u32,
    comm_channels: u32,
    plain_tree: bool,
) -> Ceilings {
    let ll_max = t.ll_max_bw(arch, cpu, nodes);
    let per_graph = graph_channels.max(1) as f64 / comm_channels.max(1) as f64;
    let ppn = ranks as f64 / nodes.max(1) as f64;
    let mut c = Ceilings { route_fraction: 1.0, per_channel_gb_s: f64::INFINITY };
    match (a, p) {
        (NcclAlgo::Ring, Proto::Ll) => {
            c.route_fraction = if nodes > 1 || f == Func::AllReduce || f == Func::Reduce {
                t.ring_ll_fraction.0
            } else {
                t.ring_ll_fraction.1
            };
            c.per_channel_gb_s = ll_max / comm_channels.max(1) as f64;
        }
        (NcclAlgo::Ring, Proto::Ll128) => {
            c.route_fraction = if ppn < 2.0 { 0.7 } else { 0.92 };
            c.per_channel_gb_s = t.ll128_max_bw_per_ch(a, f, arch, nodes) * per_graph;
        }
        (NcclAlgo::Tree, _) => {
            c.route_fraction = 0.92 * if plain_tree { t.tree_pattern_penalty.unwrap_or(1.0) } else { 1.0 };
            c.per_channel_gb_s = t.tree_max_bw_per_ch(arch, nodes) * per_graph;
            match p {
                Proto::Ll => {
                    c.route_fraction /= 3.8;
                    c.per_channel_gb_s = c.per_channel_gb_s.min(ll_max / comm_channels.max(1) as f64);
                }
                Proto::Ll128 => {
                    c.route_fraction *= if nodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 };
                    c.per_channel_gb_s = c.per_channel_gb_s.min(t.ll128_max_bw_per_ch(a, f, arch, nodes) * per_graph);
                }
                Proto::Simple => {}
            }
        }
        _ => {}
    }
    if let (Some(cap), Arch::Ampere) = (t.ampere_cap, arch) {
        c.per_channel_gb_s = c.per_channel_gb_s.min(cap / comm_channels.max(1) as f64);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// all_reduce.h v2.8.4-1: Simple (l.114-149) and LL (l.361-391) trees reduce every piece
    /// before broadcasting any; LL128 splits its threads (l.549-590); v2.18.3-1 splits all three
    /// (`runTreeSplit`, l.272, 657, 671).
    #[test]
    fn only_2_8_4_simple_and_ll_trees_go_up_then_down() {
        assert!(tree_up_then_down(NcclVersion::V2_8_4, Proto::Simple));
        assert!(tree_up_then_down(NcclVersion::V2_8_4, Proto::Ll));
        assert!(!tree_up_then_down(NcclVersion::V2_8_4, Proto::Ll128));
        for v in [NcclVersion::V2_18_3, NcclVersion::V2_21_5] {
            for p in Proto::ALL {
                assert!(!tree_up_then_down(v, p), "{v:?} {p:?}");
            }
        }
    }

    /// Line formats (devcomm.h): LL carries 8 of 16 bytes, LL128 120 of 128.
    #[test]
    fn wire_overheads_follow_the_line_formats() {
        assert_eq!(wire_factor(Proto::Ll), 2.0);
        assert!((wire_factor(Proto::Ll128) - 128.0 / 120.0).abs() < 1e-12);
        assert_eq!(wire_factor(Proto::Simple), 1.0);
        // Buffer steps (init.cc defaults / NCCL_STEPS): LL 64 KiB of lines = 32 KiB of data;
        // LL128 614400 bytes of lines; Simple 4 MiB / 8.
        assert_eq!(step_data_bytes(Proto::Ll), 32 << 10);
        assert_eq!(step_data_bytes(Proto::Ll128), 614_400 * 120 / 128);
        assert_eq!(step_data_bytes(Proto::Simple), 512 << 10);
    }

    /// prims_ll128.h v2.8.4-1: 20 warps of 640 threads forward 20 x 240 words = 38,400 data
    /// bytes per round; prims_ll.h: 512 threads x one 8-byte word; Simple a whole 512 KiB step.
    /// NCCL_LL128_SPLIT(640) = 448 reduce threads, 192 broadcast; 2.8.4's LL tree does not split.
    #[test]
    fn tree_threads_split_seventy_thirty_for_ll128() {
        let (up, down) = tree_thread_split(NcclVersion::V2_8_4, Proto::Ll128, 640);
        assert_eq!((up, down), (448.0 / 640.0, 192.0 / 640.0));
        assert_eq!(tree_thread_split(NcclVersion::V2_8_4, Proto::Ll, 512), (1.0, 1.0));
        assert_eq!(tree_thread_split(NcclVersion::V2_21_5, Proto::Ll, 512).0, 352.0 / 512.0);
        assert_eq!(tree_thread_split(NcclVersion::V2_21_5, Proto::Simple, 512), (1.0, 1.0));
    }

    /// The 70/30 split binds the NVLink edges of a tree; a network edge's step is the NIC's.
    #[test]
    fn tree_split_binds_only_the_edges_threads_move() {
        let v = NcclVersion::V2_8_4;
        assert_eq!(tree_edge_thread_split(v, Proto::Ll128, 640, false), (448.0 / 640.0, 192.0 / 640.0));
        assert_eq!(tree_edge_thread_split(v, Proto::Ll128, 640, true), (1.0, 1.0));
        assert_eq!(tree_edge_thread_split(NcclVersion::V2_21_5, Proto::Ll, 512, true), (1.0, 1.0));
    }

    #[test]
    fn chains_forward_a_round_of_lines_not_a_step() {
        assert_eq!(forward_unit_bytes(Proto::Ll128, 640), 38_400);
        assert_eq!(forward_unit_bytes(Proto::Ll128, 320), 19_200);
        assert_eq!(forward_unit_bytes(Proto::Ll, 512), 4096);
        assert_eq!(forward_unit_bytes(Proto::Simple, 512), 512 << 10);
    }

    /// all_reduce.h v2.8.4-1: 512 KiB of floats on 4 ranks and 12 LL128 channels of 640 threads
    /// cuts into 48 pieces of 4,800 floats (19,200 bytes: 8 x 640 x 15 x 8 / (16 x 4) / 2), not
    /// 48 even pieces of 10,923 bytes; LL at 256 KiB: 2 grains of 512 threads x 8 bytes; a 32 MiB
    /// Simple ring: one loop of 48 pieces of 699,051 bytes aligned to 4,096. 2.21.5 splits evenly.
    #[test]
    fn ring_pieces_round_up_to_the_protocol_grain() {
        let v = NcclVersion::V2_8_4;
        assert_eq!(ring_allreduce_step_bytes(v, Proto::Ll128, 512 << 10, 4, 12, 640), 19_200);
        assert_eq!(ring_allreduce_step_bytes(v, Proto::Ll, 256 << 10, 4, 12, 512), 8_192);
        assert_eq!(ring_allreduce_step_bytes(v, Proto::Simple, 32 << 20, 4, 12, 512), 700_416);
        assert_eq!(ring_allreduce_step_bytes(v, Proto::Ll, 4, 4, 1, 64), 4);
        assert_eq!(ring_allreduce_step_bytes(NcclVersion::V2_18_3, Proto::Ll128, 512 << 10, 4, 12, 640), 19_200);
        assert_eq!(ring_allreduce_step_bytes(NcclVersion::V2_21_5, Proto::Ll128, 512 << 10, 4, 12, 640), 10_923);
        // Beyond one loop (LL: 48 x 32 KiB), every full loop adds a whole step's chunk.
        assert_eq!(ring_allreduce_step_bytes(v, Proto::Ll, 48 * (32 << 10) + 1, 4, 12, 512), (32 << 10) + 1);
    }

    /// all_reduce.h v2.8.4-1 l.284-294: 1 MiB of floats on 8 ranks and 24 LL channels of 512
    /// threads: pieces round up to 2 grains (8 KiB), so 128 of the 192 pieces hold data; 512 KiB
    /// on 16 channels fills all 128 of its 4 KiB pieces.
    #[test]
    fn a_partial_loop_leaves_the_last_pieces_empty() {
        let v = NcclVersion::V2_8_4;
        let step = ring_allreduce_step_bytes(v, Proto::Ll, 1 << 20, 8, 24, 512);
        assert_eq!(step, 8192);
        assert!((ring_fill(1 << 20, 8, 24, step) - 128.0 / 192.0).abs() < 1e-12);
        let step = ring_allreduce_step_bytes(v, Proto::Ll, 512 << 10, 8, 16, 512);
        assert_eq!(ring_fill(512 << 10, 8, 16, step), 1.0);
    }

    #[test]
    fn tree_chunks_shrink_for_small_messages() {
        // 64 MiB over 4 channels of a depth-5 tree: 512 KiB chunks stay (32 per channel >= 40? no:
        // 16 MiB / 512 KiB = 32 < 40, so halve once to 256 KiB).
        assert_eq!(tree_chunk_bytes(Proto::Simple, 64 << 20, 4, 5, 16, 4), 256 << 10);
        assert_eq!(tree_chunk_bytes(Proto::Simple, 1 << 20, 4, 5, 16, 4), 32 << 10);
        assert_eq!(tree_chunk_bytes(Proto::Simple, 1 << 30, 4, 5, 16, 4), 512 << 10);
    }
}
