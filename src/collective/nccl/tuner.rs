//! NCCL's tuner: for every function, algorithm and protocol a latency and a bandwidth computed
//! from the communicator's graphs (`ncclTopoTuneModel` in src/graph/tuning.cc), the choice of the
//! fastest for a message size (`ncclTopoGetAlgoTime` and `getAlgoInfo`/`topoGetAlgoInfo` in
//! src/enqueue.cc), and the channel and thread counts that size gets. A faithful transcription of
//! the rules, version by version, from the constants in [`super::version`]; nothing here is
//! fitted. The tuner decides *what* NCCL runs; how long it takes is the engine's job.

use super::version::{fixed, Arch, CpuVendor, Fabric, Func, NcclAlgo, NcclVersion, PathType, Proto, Tables};
use serde::Serialize;

/// What the tuner needs to know about one graph (ring or tree), as NCCL's `ncclTopoGraph`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GraphSummary {
    /// Channels the search found (before the communicator duplicates them).
    pub channels: u32,
    /// GB/s per channel inside a node and across nodes (`speedIntra/Inter`, `bwIntra/Inter`).
    pub speed_intra: f64,
    pub speed_inter: f64,
    /// Farthest path between consecutive GPUs of a channel, and between a GPU and its NIC.
    pub type_intra: PathType,
    pub type_inter: PathType,
    /// True for the plain TREE pattern (2.18+ gives it 0.85 of the bandwidth); false for split and
    /// balanced trees and for rings.
    pub plain_tree: bool,
    /// All channels follow the same GPU order.
    pub same_channels: bool,
}

/// The communicator as the tuner sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommSummary {
    pub version: NcclVersion,
    pub ranks: u32,
    pub nodes: u32,
    pub arch: Arch,
    pub cpu: CpuVendor,
    pub ring: GraphSummary,
    pub tree: GraphSummary,
    /// Channels the communicator runs (the ring graph's, duplicated, at most 32).
    pub channels: u32,
}

/// Latency (us) and algorithm bandwidth (GB/s) of one (algorithm, protocol) for one function; a
/// bandwidth of 0 means disabled.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Cost {
    pub latency_us: f64,
    pub algbw_gb_s: f64,
    /// The bus bandwidth before the algorithm ratio (what a rank's links must carry).
    pub busbw_gb_s: f64,
}

/// The tuner's tables for one communicator: [function][algorithm (tree, ring)][protocol].
#[derive(Debug, Clone)]
pub struct Tuner {
    pub comm: CommSummary,
    costs: [[[Cost; 3]; 2]; 5],
    /// `maxThreads[algo][proto]`.
    max_threads: [[u32; 3]; 2],
    /// Why a protocol or algorithm is off, when it is (for messages and errors).
    pub disabled: Vec<String>,
}

/// Forced choices, as `NCCL_ALGO` and `NCCL_PROTO` give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Force {
    pub algo: Option<NcclAlgo>,
    pub proto: Option<Proto>,
}

/// What NCCL runs for one call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Choice {
    pub algo: NcclAlgo,
    pub proto: Proto,
    /// Channels and threads per channel this size gets (`getAlgoInfo`).
    pub channels: u32,
    pub threads: u32,
    /// The tuner's own time estimate, us.
    pub model_us: f64,
    /// NCCL itself fell back from a forced algorithm it cannot run for this function (e.g. tree
    /// for a broadcast): the algorithm it runs instead.
    pub fallback_from: Option<NcclAlgo>,
}

impl Choice {
    /// What a send/recv pattern runs: Simple on one channel per peer, with no tuner estimate.
    pub fn point_to_point() -> Self {
        Choice {
            algo: NcclAlgo::Ring,
            proto: Proto::Simple,
            channels: 1,
            threads: fixed::SIMPLE_MAX_THREADS,
            model_us: 0.0,
            fallback_from: None,
        }
    }
}

fn algo_slot(a: NcclAlgo) -> Option<usize> {
    match a {
        NcclAlgo::Tree => Some(0),
        NcclAlgo::Ring => Some(1),
        _ => None,
    }
}

const ALGOS: [NcclAlgo; 2] = [NcclAlgo::Tree, NcclAlgo::Ring];
const FUNCS: [Func; 5] = [Func::Broadcast, Func::Reduce, Func::AllGather, Func::ReduceScatter, Func::AllReduce];

fn log2i(x: u64) -> u32 {
    if x == 0 {
        0
    } else {
        63 - x.leading_zeros()
    }
}

impl Tuner {
    /// `ncclTopoTuneModel` for one communicator.
    pub fn new(comm: CommSummary) -> Tuner {
        let t: &Tables = comm.version.tables();
        let (nodes, ranks) = (comm.nodes.max(1), comm.ranks);
        let mut costs = [[[Cost::default(); 3]; 2]; 5];
        // Simple ring threads: 256 when the ring graph is no faster than one PCIe Gen3 x16.
        let simple_ring = if comm.ring.speed_intra * comm.ring.channels as f64 <= fixed::PCI_WIDTH {
            256
        } else {
            fixed::SIMPLE_MAX_THREADS
        };
        let max_threads = [
            [fixed::LL_MAX_THREADS, fixed::LL128_MAX_THREADS, fixed::SIMPLE_MAX_THREADS],
            [fixed::LL_MAX_THREADS, fixed::LL128_MAX_THREADS, simple_ring],
        ];
        let mut disabled = Vec::new();
        if ranks <= 1 {
            return Tuner { comm, costs, max_threads, disabled };
        }
        let arch = comm.arch;
        let ll_max_bw = t.ll_max_bw(arch, comm.cpu, nodes);
        let tree_max = t.tree_max_bw_per_ch(arch, nodes);
        let ppn = ranks as f64 / nodes as f64;
        let graph = |a: NcclAlgo| if a == NcclAlgo::Tree { comm.tree } else { comm.ring };
        let intra_fabric =
            |a: NcclAlgo| if graph(a).type_intra == PathType::Nvl { Fabric::Nvlink } else { Fabric::Pci };
        let fabric = |a: NcclAlgo| if nodes == 1 { intra_fabric(a) } else { Fabric::Net };

        for f in FUNCS {
            let n = ranks as f64;
            let nsteps = match f {
                Func::AllReduce => 2.0 * (n - 1.0),
                Func::ReduceScatter | Func::AllGather => n - 1.0,
                Func::Broadcast | Func::Reduce => n,
            };
            let nn = nodes as f64;
            let inter_steps = match f {
                Func::AllReduce if t.inter_steps_two_n => {
                    if nodes > 1 {
                        2.0 * nn
                    } else {
                        0.0
                    }
                }
                Func::AllReduce => 2.0 * (nn - 1.0),
                Func::ReduceScatter | Func::AllGather => nn - 1.0,
                Func::Broadcast | Func::Reduce => nn,
            };
            for a in ALGOS {
                // Only all-reduce has a tree, and only from 2.4.
                if (f != Func::AllReduce || !t.has_tree) && a != NcclAlgo::Ring {
                    continue;
                }
                let g = graph(a);
                for p in Proto::ALL {
                    let speed = if nodes <= 2 { g.speed_intra } else { g.speed_inter };
                    let mut bus = g.channels as f64 * speed;
                    if let Some(cap) = t.ampere_cap {
                        if arch == Arch::Ampere {
                            bus = bus.min(cap);
                        }
                    }
                    let chans = g.channels as f64;
                    match (a, p) {
                        (NcclAlgo::Ring, Proto::Ll) => {
                            let frac = if nodes > 1 || f == Func::AllReduce || f == Func::Reduce {
                                t.ring_ll_fraction.0
                            } else {
                                t.ring_ll_fraction.1
                            };
                            bus = ll_max_bw.min(bus * frac);
                        }
                        (NcclAlgo::Ring, Proto::Ll128) => {
                            let frac = if ppn < 2.0 { 0.7 } else { 0.92 };
                            bus = (bus * frac).min(chans * t.ll128_max_bw_per_ch(a, f, arch, nodes));
                        }
                        _ => {}
                    }
                    if a == NcclAlgo::Tree {
                        bus = (bus * 0.92).min(chans * tree_max);
                        match p {
                            Proto::Ll => bus = (bus / 3.8).min(ll_max_bw),
                            Proto::Ll128 => {
                                let frac = if nodes == 1 {
                                    7.0 / 9.0
                                } else if t.version == NcclVersion::V2_8_4 {
                                    0.915
                                } else {
                                    120.0 / 128.0
                                };
                                bus = (bus * frac).min(chans * t.ll128_max_bw_per_ch(a, f, arch, nodes));
                            }
                            Proto::Simple => {}
                        }
                        if let (Some(pen), true) = (t.tree_pattern_penalty, g.plain_tree) {
                            bus *= pen;
                        }
                    }
                    let ratio = if a == NcclAlgo::Ring { n / nsteps } else { 0.5 };
                    let mut lat = t.base_lat(a, p);
                    let mut intra_lat = t.hw_lat(intra_fabric(a), a, p);
                    let inter_lat = t.hw_lat(Fabric::Net, a, p);
                    if t.version == NcclVersion::V2_8_4 && nodes > 1 && p == Proto::Ll {
                        intra_lat *= 1.8;
                    }
                    if t.ring_net_lat_every_step && nodes > 1 {
                        intra_lat = inter_lat;
                    }
                    if a == NcclAlgo::Ring {
                        let hop = t.hw_lat(fabric(a), a, p);
                        if f == Func::Reduce || f == Func::Broadcast {
                            if g.same_channels {
                                lat += hop;
                            } else {
                                let hop = if p == Proto::Simple { t.hw_lat(fabric(a), NcclAlgo::Tree, p) } else { hop };
                                lat += nsteps * hop;
                            }
                        } else {
                            if nodes > 1 {
                                let mut overhead = t.net_overhead_us(comm.cpu);
                                if p == Proto::Simple {
                                    overhead *= 3.0;
                                }
                                intra_lat = intra_lat.max(overhead);
                            }
                            lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
                        }
                    } else {
                        lat += 2.0 * ((ranks / nodes - 1) as f64 * intra_lat + log2i(nodes as u64) as f64 * inter_lat);
                    }
                    costs[f as usize][algo_slot(a).expect("tree or ring")][p.index()] =
                        Cost { latency_us: lat, algbw_gb_s: bus * ratio, busbw_gb_s: bus };
                }
            }
        }
        if !t.has_tree {
            disabled.push(format!("NCCL {} has no tree (trees came in 2.4)", comm.version.name()));
        }
        // LL128 is on by default only where NVIDIA tested it.
        for a in ALGOS {
            let g = graph(a);
            let on = if !t.has_ll128 {
                false
            } else if t.ll128_rule_218 {
                // Hopper also accepts PXN paths (a NIC reached through another GPU's NVLink);
                // dagsim does not classify PXN, so the PCIe rule applies to every generation.
                g.type_inter <= PathType::Pxb
                    && g.type_intra <= PathType::Nvb
                    && matches!(arch, Arch::Volta | Arch::Ampere | Arch::Hopper)
            } else {
                g.type_inter <= PathType::Pxb
                    && g.type_intra <= PathType::Nvl
                    && matches!(arch, Arch::Volta | Arch::Ampere)
            };
            if !on {
                for f in FUNCS {
                    costs[f as usize][algo_slot(a).expect("tree or ring")][Proto::Ll128.index()].algbw_gb_s = 0.0;
                }
                if !t.has_ll128 {
                    if a == NcclAlgo::Ring {
                        disabled.push(format!("NCCL {} has no LL128 (it came in 2.5)", comm.version.name()));
                    }
                    continue;
                }
                disabled.push(format!(
                    "LL128 off for {} (NCCL {} enables it only on Volta/Ampere{} with NVLink inside the node and the NIC \
                     at most a PCIe switch away)",
                    a.name(),
                    comm.version.name(),
                    if t.ll128_rule_218 { "/Hopper" } else { "" }
                ));
            }
        }
        Tuner { comm, costs, max_threads, disabled }
    }

    pub fn cost(&self, f: Func, a: NcclAlgo, p: Proto) -> Cost {
        match algo_slot(a) {
            Some(s) => self.costs[f as usize][s][p.index()],
            None => Cost::default(),
        }
    }

    /// `ncclTopoGetAlgoTime`: the tuner's time for `bytes`, or `None` where disabled.
    pub fn time_us(&self, f: Func, a: NcclAlgo, p: Proto, bytes: u64) -> Option<f64> {
        let c = self.cost(f, a, p);
        let mut bw = c.algbw_gb_s;
        let mut lat = c.latency_us;
        if bw <= 0.0 {
            return None;
        }
        let t = self.comm.version.tables();
        let log = log2i(bytes >> 6) as usize;
        if a == NcclAlgo::Tree && log < 23 {
            bw *= t.tree_correction[p.index()][log];
        }
        let plateau = if t.plateau_218 {
            bytes / (self.comm.channels as u64 * self.comm.ranks as u64).max(1) >= 64
        } else {
            bytes as f64 >= self.comm.ranks as f64 / 16.0 * 65536.0
        };
        if t.plateau
            && a == NcclAlgo::Ring
            && p == Proto::Simple
            && self.comm.nodes > 1
            && f == Func::AllReduce
            && plateau
        {
            lat *= if !t.plateau_218 || self.comm.arch.compcap() < 80 { 1.9 } else { 1.4 };
        }
        Some(lat + bytes as f64 / (1000.0 * bw))
    }

    /// The algorithm and protocol NCCL picks for `bytes` of function `f`, with `force` applied as
    /// `NCCL_ALGO`/`NCCL_PROTO` would be; then the channels and threads that size gets.
    /// `Err` says why nothing can run (e.g. LL128 forced where it is off).
    pub fn choose(&self, f: Func, bytes: u64, force: Force) -> Result<Choice, String> {
        let mut fallback_from = None;
        let mut algos: Vec<NcclAlgo> = ALGOS.to_vec();
        if let Some(a) = force.algo {
            if algo_slot(a).is_none() {
                return Err(format!("{} is not modelled by dagsim (ring and tree are)", a.name()));
            }
            // NCCL_ALGO only restricts all-reduce; other functions run their one algorithm, the ring.
            if f == Func::AllReduce {
                algos = vec![a];
            } else if a != NcclAlgo::Ring {
                fallback_from = Some(a);
            }
        }
        if let Some(thresholds) = self.comm.version.tables().ll_thread_threshold {
            if let (Some(a), None) = (force.algo, fallback_from) {
                if self.cost(f, a, Proto::Simple).algbw_gb_s <= 0.0 {
                    return Err(format!("NCCL cannot run {} here: {}", a.name(), self.disabled.join("; ")));
                }
            }
            return self.choose_by_threshold(f, bytes, force.proto, thresholds, fallback_from);
        }
        let protos: Vec<Proto> = match force.proto {
            Some(p) => vec![p],
            None => Proto::ALL.to_vec(),
        };
        let mut best: Option<(NcclAlgo, Proto, f64)> = None;
        for &a in &algos {
            for &p in &protos {
                if let Some(t) = self.time_us(f, a, p, bytes) {
                    if best.is_none_or(|b| t < b.2) {
                        best = Some((a, p, t));
                    }
                }
            }
        }
        let (algo, proto, model_us) = best.ok_or_else(|| {
            let what = match (force.algo, force.proto) {
                (Some(a), Some(p)) => format!("{}/{}", a.name(), p.name()),
                (Some(a), None) => a.name().to_string(),
                (None, Some(p)) => p.name().to_string(),
                (None, None) => "any algorithm".into(),
            };
            let why = if self.disabled.is_empty() { String::new() } else { format!(": {}", self.disabled.join("; ")) };
            format!("NCCL cannot run {what} here{why}")
        })?;
        let (channels, threads) = self.channels_threads(algo, proto, bytes);
        Ok(Choice { algo, proto, channels, threads, model_us, fallback_from })
    }

    /// NCCL 2.3's choice (`ncclGetCollResource`, common_coll.h): the fewest LL threads (64 up to
    /// 256) and rings that give each thread at most 8 bytes per rank; failing that, LL on 256
    /// threads while each has at most `threadThreshold` bytes per rank and ring, else Simple on
    /// every ring. Forcing a protocol stands for `NCCL_LL_THRESHOLD` (0 or unbounded).
    fn choose_by_threshold(
        &self,
        f: Func,
        bytes: u64,
        proto: Option<Proto>,
        (pre_volta, volta): (u64, u64),
        fallback_from: Option<NcclAlgo>,
    ) -> Result<Choice, String> {
        const LL_RING_THRESHOLD: u64 = 8; // NCCL_LL_RING_THRESHOLD
        const LL_MIN_THREADS: u64 = 64; // NCCL_LL_MIN_NTHREADS
        const LL_MAX_THREADS: u64 = 256; // NCCL_LL_MAX_NTHREADS, = the default nThreads (MAXTHREADS)
        let ranks = self.comm.ranks.max(1) as u64;
        let rings = self.comm.channels.max(1) as u64;
        let mut threshold = if self.comm.arch.compcap() <= 60 { pre_volta } else { volta };
        if self.comm.nodes > 1 {
            threshold *= 2;
        }
        let max_rings = if ranks <= 4 { 1 } else { LL_MAX_THREADS / LL_MIN_THREADS };
        let small = threshold.min(LL_RING_THRESHOLD);
        let mut pick: Option<(u64, u64)> = None; // (rings, threads) for LL
        let mut nt = LL_MIN_THREADS;
        while nt < LL_MAX_THREADS && pick.is_none() {
            let nr = bytes.div_ceil(LL_RING_THRESHOLD * nt * ranks);
            if nr <= max_rings {
                let nr = nr.clamp(1, rings);
                if bytes <= ranks * nr * nt * small {
                    pick = Some((nr, nt));
                }
            }
            nt <<= 1;
        }
        if pick.is_none() {
            let nr = bytes.div_ceil(LL_RING_THRESHOLD * LL_MAX_THREADS * ranks).clamp(1, rings);
            if bytes <= ranks * nr * LL_MAX_THREADS * threshold {
                pick = Some((nr, LL_MAX_THREADS));
            }
        }
        let (proto, channels, threads) = match (proto, pick) {
            (Some(Proto::Ll128), _) => return Err(format!("NCCL cannot run LL128 here: {}", self.disabled.join("; "))),
            (Some(Proto::Simple), _) | (None, None) => (Proto::Simple, rings, LL_MAX_THREADS),
            (_, Some((nr, nt))) => (Proto::Ll, nr, nt),
            // LL forced beyond the thresholds: every ring, all LL threads.
            (Some(Proto::Ll), None) => (Proto::Ll, rings, LL_MAX_THREADS),
        };
        let model_us = self.time_us(f, NcclAlgo::Ring, proto, bytes).unwrap_or(0.0);
        Ok(Choice {
            algo: NcclAlgo::Ring,
            proto,
            channels: channels as u32,
            threads: threads as u32,
            model_us,
            fallback_from,
        })
    }

    /// `getAlgoInfo`'s channel and thread reduction: fewer channels (then threads) until each
    /// thread has at least its threshold of bytes.
    pub fn channels_threads(&self, a: NcclAlgo, p: Proto, bytes: u64) -> (u32, u32) {
        let slot = algo_slot(a).unwrap_or(1);
        let mut nc = self.comm.channels.max(1);
        let mut nt = self.max_threads[slot][p.index()];
        let threshold = match p {
            Proto::Ll if a == NcclAlgo::Ring => fixed::LL_THREAD_THRESHOLD * self.comm.ranks as u64,
            Proto::Ll => fixed::LL_THREAD_THRESHOLD,
            Proto::Ll128 => fixed::LL128_THREAD_THRESHOLD,
            Proto::Simple => fixed::SIMPLE_THREAD_THRESHOLD,
        };
        while bytes < nc as u64 * nt as u64 * threshold {
            if nc >= 2 {
                nc -= 1;
            } else if nt % 128 == 0 {
                nt /= 2;
            } else {
                break;
            }
        }
        (nc, nt)
    }

    /// Threads per channel at full size (for scaling per-channel rates).
    pub fn max_threads(&self, a: NcclAlgo, p: Proto) -> u32 {
        self.max_threads[algo_slot(a).unwrap_or(1)][p.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(channels: u32, speed: f64, type_intra: PathType) -> GraphSummary {
        GraphSummary {
            channels,
            speed_intra: speed,
            speed_inter: speed,
            type_intra,
            type_inter: PathType::Pix,
            plain_tree: false,
            same_channels: false,
        }
    }

    /// ABCI V-node as NCCL 2.8.4 sees it: 4 V100 with two NVLinks per pair give six rings at 21
    /// GB/s (search.cc), twelve channels after duplication (connect.cc).
    fn abci_v(version: NcclVersion) -> Tuner {
        let g = graph(6, version.tables().nvlink_width(Arch::Volta), PathType::Nvl);
        Tuner::new(CommSummary {
            version,
            ranks: 4,
            nodes: 1,
            arch: Arch::Volta,
            cpu: CpuVendor::Intel,
            ring: g,
            tree: g,
            channels: 12,
        })
    }

    /// Crossovers follow from the tables: LL -> LL128 between 256 and 512 KiB and LL128 -> Simple
    /// between 2 and 4 MiB for this ring (the jumps issue 3 saw in the ABCI outputs).
    #[test]
    fn abci_v_protocol_crossovers_v2_8_4() {
        let t = abci_v(NcclVersion::V2_8_4);
        let pick = |b: u64| t.choose(Func::AllReduce, b, Force::default()).unwrap();
        assert_eq!((pick(256 << 10).algo, pick(256 << 10).proto), (NcclAlgo::Ring, Proto::Ll));
        assert_eq!(pick(512 << 10).proto, Proto::Ll128);
        assert_eq!(pick(2 << 20).proto, Proto::Ll128);
        assert_eq!(pick(4 << 20).proto, Proto::Simple);
        // Ring LL: busBw = min(llMaxBw 39, 126 / 4) = 31.5; algbw = 31.5 x 4/6; latency 3.6 + 6 x .47.
        let c = t.cost(Func::AllReduce, NcclAlgo::Ring, Proto::Ll);
        assert!((c.busbw_gb_s - 31.5).abs() < 1e-9 && (c.algbw_gb_s - 21.0).abs() < 1e-9);
        assert!((c.latency_us - (3.6 + 6.0 * 0.47)).abs() < 1e-9);
        // LL128 capped by ll128MaxBwPerCh: 6 x 16.9.
        assert!((t.cost(Func::AllReduce, NcclAlgo::Ring, Proto::Ll128).busbw_gb_s - 6.0 * 16.9).abs() < 1e-9);
    }

    /// Channel and thread reduction (enqueue.cc getAlgoInfo): ring LL needs 8 x nRanks bytes per
    /// thread, so 128 KiB on 4 ranks runs on 8 of 12 channels and 8 KiB on one channel of 256 threads.
    #[test]
    fn small_messages_use_fewer_channels_and_threads() {
        let t = abci_v(NcclVersion::V2_8_4);
        assert_eq!(t.channels_threads(NcclAlgo::Ring, Proto::Ll, 128 << 10), (8, 512));
        assert_eq!(t.channels_threads(NcclAlgo::Ring, Proto::Ll, 256 << 10), (12, 512));
        assert_eq!(t.channels_threads(NcclAlgo::Ring, Proto::Ll, 8 << 10), (1, 256));
        assert_eq!(t.channels_threads(NcclAlgo::Ring, Proto::Ll, 1 << 10), (1, 64));
        assert_eq!(t.channels_threads(NcclAlgo::Ring, Proto::Simple, 4 << 20), (12, 512));
    }

    /// Across nodes the tree wins small messages (log2 latency) and the ring large ones (from 2.4).
    #[test]
    fn tree_for_small_ring_for_large_across_nodes() {
        for version in NcclVersion::ALL {
            let g = graph(2, 12.0, PathType::Nvl);
            let t = Tuner::new(CommSummary {
                version,
                ranks: 64,
                nodes: 16,
                arch: Arch::Volta,
                cpu: CpuVendor::Intel,
                ring: g,
                tree: g,
                channels: 4,
            });
            let small = t.choose(Func::AllReduce, 64 << 10, Force::default()).unwrap();
            // 2.3 has no tree (trees came in 2.4).
            let tree = if version.tables().has_tree { NcclAlgo::Tree } else { NcclAlgo::Ring };
            assert_eq!(small.algo, tree, "{version:?}");
            let big = t.choose(Func::AllReduce, 1 << 30, Force::default()).unwrap();
            assert_eq!((big.algo, big.proto), (NcclAlgo::Ring, Proto::Simple), "{version:?}");
            // Broadcast has no tree: a forced tree falls back to the ring, as NCCL does.
            let f = Force { algo: Some(NcclAlgo::Tree), proto: None };
            let b = t.choose(Func::Broadcast, 1 << 20, f).unwrap();
            assert_eq!((b.algo, b.fallback_from), (NcclAlgo::Ring, Some(NcclAlgo::Tree)));
        }
    }

    /// NCCL 2.3.7 picks LL or Simple by bytes per thread, not by time (common_coll.h
    /// `ncclGetCollResource`; core.h NCCL_LL_RING_THRESHOLD 8, NCCL_LL_MIN/MAX_NTHREADS 64/256,
    /// NCCL_THREAD_THRESHOLD 64, _PREVOLTA 32; init.cu doubles it on several nodes).
    #[test]
    fn nccl_2_3_7_switches_protocol_at_its_thread_thresholds() {
        let tuner = |ranks: u32, nodes: u32, arch: Arch| {
            let g = graph(1, 12.0, PathType::Pix);
            Tuner::new(CommSummary {
                version: NcclVersion::V2_3_7,
                ranks,
                nodes,
                arch,
                cpu: CpuVendor::Intel,
                ring: g,
                tree: g,
                channels: 2,
            })
        };
        let pick = |t: &Tuner, b: u64| {
            let c = t.choose(Func::AllReduce, b, Force::default()).unwrap();
            (c.algo, c.proto, c.channels, c.threads)
        };
        // 512 Volta ranks on 64 nodes: LL up to 512 x 2 rings x 256 threads x (64 x 2) bytes.
        let v = tuner(512, 64, Arch::Volta);
        let limit = 512 * 2 * 256 * 128;
        assert_eq!(pick(&v, limit), (NcclAlgo::Ring, Proto::Ll, 2, 256));
        assert_eq!(pick(&v, limit + 1), (NcclAlgo::Ring, Proto::Simple, 2, 256));
        // A small message: the fewest threads (64) and one ring.
        assert_eq!(pick(&v, 4096), (NcclAlgo::Ring, Proto::Ll, 1, 64));
        // Pascal's threshold is half Volta's.
        let p = tuner(512, 64, Arch::Pascal);
        assert_eq!(pick(&p, limit / 2).1, Proto::Ll);
        assert_eq!(pick(&p, limit / 2 + 1).1, Proto::Simple);
        // One node of 4 ranks: at most one ring while threads grow, then LL on 256 threads up to
        // 4 x 2 x 256 x 64 bytes.
        let one = tuner(4, 1, Arch::Volta);
        assert_eq!(pick(&one, 131_072), (NcclAlgo::Ring, Proto::Ll, 2, 256));
        assert_eq!(pick(&one, 131_073).1, Proto::Simple);
        // No tree before 2.4 and no LL128 before 2.5: forcing either fails and says why.
        let e = v.choose(Func::AllReduce, 1 << 20, Force { algo: Some(NcclAlgo::Tree), proto: None }).unwrap_err();
        assert!(e.contains("no tree"), "{e}");
        let e = v.choose(Func::AllReduce, 1 << 20, Force { algo: None, proto: Some(Proto::Ll128) }).unwrap_err();
        assert!(e.contains("no LL128"), "{e}");
        // Forcing a protocol stands for NCCL_LL_THRESHOLD.
        assert_eq!(
            v.choose(Func::AllReduce, 64, Force { algo: None, proto: Some(Proto::Simple) }).unwrap().proto,
            Proto::Simple
        );
    }

    #[test]
    fn ll128_is_off_on_pcie_and_forcing_it_fails() {
        let g = graph(1, 9.0, PathType::Phb);
        let t = Tuner::new(CommSummary {
            version: NcclVersion::V2_18_3,
            ranks: 4,
            nodes: 1,
            arch: Arch::Volta,
            cpu: CpuVendor::Intel,
            ring: g,
            tree: g,
            channels: 2,
        });
        let e = t.choose(Func::AllReduce, 1 << 20, Force { algo: None, proto: Some(Proto::Ll128) }).unwrap_err();
        assert!(e.contains("LL128"), "{e}");
        assert!(t.choose(Func::AllReduce, 1 << 20, Force::default()).unwrap().proto != Proto::Ll128);
        // 256 Simple threads when the ring is no faster than PCIe Gen3 x16 (tuning.cc).
        assert_eq!(t.max_threads(NcclAlgo::Ring, Proto::Simple), 256);
    }
}
