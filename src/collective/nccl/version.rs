//! The NCCL versions dagsim knows, and the constants of each one's cost model: one sourced table
//! per version, as NCCL keeps them in `src/graph/tuning.cc` (latencies, per-protocol bandwidth
//! caps, the tree correction factors), `src/graph/topo.h` (link widths the graph search assumes)
//! and `src/graph/search.cc` (the speeds the search tries). Every number names its file and tag;
//! `cargo test --lib nccl::version` checks a few of them against those lines.
//!
//! Only the ring and tree algorithms are modelled; CollNet (SHARP) and NVLS are named so that a
//! request for them gets a clear answer.

use serde::Serialize;

/// An NCCL release whose tuning model dagsim carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NcclVersion {
    /// 2.3.7-1 (October 2018): the last release before trees (2.4, January 2019); rings only,
    /// LL or Simple by size thresholds, no cost model. What 2018 measurements ran (CUDA 9).
    V2_3_7,
    /// 2.8.4-1 (January 2021): what the ABCI nccl-tests outputs in `topologies/measured/abci` ran.
    V2_8_4,
    /// 2.18.3-1 (July 2023): PyTorch 2.1's bundled NCCL.
    V2_18_3,
    /// 2.21.5-1 (April 2024): PyTorch 2.4-2.6's bundled NCCL.
    V2_21_5,
}

impl NcclVersion {
    pub const ALL: [NcclVersion; 4] =
        [NcclVersion::V2_3_7, NcclVersion::V2_8_4, NcclVersion::V2_18_3, NcclVersion::V2_21_5];

    /// The version used when none is asked for: the newest one dagsim carries.
    pub const DEFAULT: NcclVersion = NcclVersion::V2_21_5;

    pub fn name(self) -> &'static str {
        match self {
            NcclVersion::V2_3_7 => "2.3.7",
            NcclVersion::V2_8_4 => "2.8.4",
            NcclVersion::V2_18_3 => "2.18.3",
            NcclVersion::V2_21_5 => "2.21.5",
        }
    }

    /// The git tag of NVIDIA/nccl the tables were read from.
    pub fn tag(self) -> &'static str {
        match self {
            NcclVersion::V2_3_7 => "v2.3.7-1",
            NcclVersion::V2_8_4 => "v2.8.4-1",
            NcclVersion::V2_18_3 => "v2.18.3-1",
            NcclVersion::V2_21_5 => "v2.21.5-1",
        }
    }

    /// Parses `2.8.4`, `2.8.4-1` or `v2.8.4-1`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().trim_start_matches('v');
        let s = s.strip_suffix("-1").unwrap_or(s);
        Self::ALL.into_iter().find(|v| v.name() == s)
    }

    pub fn names() -> String {
        Self::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
    }

    pub fn tables(self) -> &'static Tables {
        match self {
            NcclVersion::V2_3_7 => &V2_3_7,
            NcclVersion::V2_8_4 => &V2_8_4,
            NcclVersion::V2_18_3 => &V2_18_3,
            NcclVersion::V2_21_5 => &V2_21_5,
        }
    }
}

/// NCCL's algorithms, in its own index order (`NCCL_ALGO_*` in `devcomm.h`). dagsim lowers ring and
/// tree; the others exist so that forcing one is refused by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NcclAlgo {
    Tree,
    Ring,
    CollnetDirect,
    CollnetChain,
    Nvls,
    NvlsTree,
}

impl NcclAlgo {
    pub const ALL: [NcclAlgo; 6] = [
        NcclAlgo::Tree,
        NcclAlgo::Ring,
        NcclAlgo::CollnetDirect,
        NcclAlgo::CollnetChain,
        NcclAlgo::Nvls,
        NcclAlgo::NvlsTree,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NcclAlgo::Tree => "tree",
            NcclAlgo::Ring => "ring",
            NcclAlgo::CollnetDirect => "collnet-direct",
            NcclAlgo::CollnetChain => "collnet-chain",
            NcclAlgo::Nvls => "nvls",
            NcclAlgo::NvlsTree => "nvls-tree",
        }
    }

    /// Case-insensitive, as `NCCL_ALGO` is; `collnet` means collnet-direct.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        if s == "collnet" {
            return Some(NcclAlgo::CollnetDirect);
        }
        Self::ALL.into_iter().find(|a| a.name() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// NCCL's protocols (`NCCL_PROTO_*`): LL moves 8-byte flagged lines, LL128 128-byte lines with one
/// 8-byte flag, Simple plain buffers with a fence per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Proto {
    #[serde(rename = "LL")]
    Ll,
    #[serde(rename = "LL128")]
    Ll128,
    Simple,
}

impl Proto {
    pub const ALL: [Proto; 3] = [Proto::Ll, Proto::Ll128, Proto::Simple];

    pub fn name(self) -> &'static str {
        match self {
            Proto::Ll => "LL",
            Proto::Ll128 => "LL128",
            Proto::Simple => "Simple",
        }
    }

    /// Case-insensitive, as `NCCL_PROTO` is.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// NCCL's collective functions in its index order (`ncclFunc_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Func {
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllReduce,
}

/// Which row of the per-architecture tables applies (`compCapIndex` in tuning.cc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Arch {
    /// Compute capability 6.x (P100).
    Pascal,
    /// 7.x (V100, T4).
    Volta,
    /// 8.x (A100, A10, A40, RTX 30).
    Ampere,
    /// 9.x (H100).
    Hopper,
}

impl Arch {
    /// From a GPU's architecture name (`GpuSpec::arch`) or model name; unknown GPUs count as Volta,
    /// the oldest row NCCL's tables have.
    pub fn from_name(s: &str) -> Arch {
        let s = s.to_ascii_lowercase();
        let any = |keys: &[&str]| keys.iter().any(|k| s.contains(k));
        if any(&["hopper", "h100", "h200", "h800", "gh200"]) {
            Arch::Hopper
        } else if any(&["ampere", "a100", "a800", "a10", "a30", "a40", "rtx 30", "rtx30", "a6000"]) {
            Arch::Ampere
        } else if any(&["pascal", "p100", "p40", "1080", "titan x"]) {
            Arch::Pascal
        } else {
            Arch::Volta
        }
    }

    /// Compute capability times ten (70 for Volta), as NCCL compares them.
    pub fn compcap(self) -> u32 {
        match self {
            Arch::Pascal => 60,
            Arch::Volta => 70,
            Arch::Ampere => 80,
            Arch::Hopper => 90,
        }
    }

    /// Row of the Volta/Ampere/Hopper tables (Pascal shares Volta's, as NCCL's `compCapIndex` does).
    fn row(self) -> usize {
        match self {
            Arch::Pascal | Arch::Volta => 0,
            Arch::Ampere => 1,
            Arch::Hopper => 2,
        }
    }
}

/// The host CPU family, which NCCL's tuner and P2P rules look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuVendor {
    /// Intel Xeon, Skylake or later (P2P allowed through the root complex).
    #[default]
    Intel,
    /// Intel Broadwell and older: NCCL keeps P2P below the root complex (`paths.cc`).
    IntelBroadwell,
    Amd,
    Power,
    Arm,
}

impl CpuVendor {
    pub const ALL: [CpuVendor; 5] =
        [CpuVendor::Intel, CpuVendor::IntelBroadwell, CpuVendor::Amd, CpuVendor::Power, CpuVendor::Arm];

    pub fn name(self) -> &'static str {
        match self {
            CpuVendor::Intel => "intel",
            CpuVendor::IntelBroadwell => "intel-broadwell",
            CpuVendor::Amd => "amd",
            CpuVendor::Power => "power",
            CpuVendor::Arm => "arm",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    fn is_intel(self) -> bool {
        matches!(self, CpuVendor::Intel | CpuVendor::IntelBroadwell)
    }
}

/// How a version caps LL128 bandwidth per channel.
#[derive(Debug, Clone, Copy)]
pub enum Ll128Caps {
    /// One cap per function (broadcast, reduce, all-gather, reduce-scatter, all-reduce), GB/s per
    /// graph channel (2.8.4 `ll128MaxBwPerCh`).
    PerFunction([f64; 5]),
    /// Per architecture row and node-count column (2.18+ `perChMaxRingLL128Bws`,
    /// `perChMaxTreeLL128Bws`).
    PerArch { ring: [[f64; 3]; 3], tree: [[f64; 3]; 3] },
}

/// One version's cost-model constants. Latencies in microseconds, bandwidths in GB/s, as in NCCL.
#[derive(Debug)]
pub struct Tables {
    pub version: NcclVersion,
    /// `baseLat[algo][proto]`, per collective call (tuning.cc).
    pub base_lat: [[f64; 3]; 6],
    /// `hwLat[NVLink|PCI|NET][algo][proto]`, per step or tree level (tuning.cc).
    pub hw_lat: [[[f64; 3]; 6]; 3],
    /// `llMaxBws[row][min(nNodes,3)-1]`: a cap on LL bus bandwidth; single node by GPU generation,
    /// several nodes by CPU vendor (Intel row 0, AMD row 1).
    pub ll_max_bws: [[f64; 3]; 3],
    /// `perChMaxTreeBws[arch][nodes]`, GB/s per graph channel.
    pub tree_max_bw_per_ch: [[f64; 3]; 3],
    pub ll128: Ll128Caps,
    /// Ring LL bus bandwidth as a fraction of the graph's: (several nodes, all-reduce or reduce)
    /// and (one node, other functions). 2.8.4/2.18.3: 1/4 and 1/3; 2.21.5: 1/2 for all.
    pub ring_ll_fraction: (f64, f64),
    /// `treeCorrectionFactor[proto][log2(bytes/64)]` for sizes 64 B to 256 MiB.
    pub tree_correction: [[f64; 23]; 3],
    /// Inter-node steps of a ring all-reduce: 2(nNodes-1) (2.8.4) or 2 nNodes (2.18+).
    pub inter_steps_two_n: bool,
    /// 2.18+: a per-step network post overhead (`getNetOverhead`: 1 us Intel, 2 us AMD; x3 for
    /// Simple) raises the intra-node latency of rings spanning nodes.
    pub net_overhead: bool,
    /// 2.8.4 only: A100 bus bandwidth capped at 235 GB/s (`compCap80`).
    pub ampere_cap: Option<f64>,
    /// 2.18+: trees of the plain TREE pattern (no split/balanced tree) get 0.85 of the bandwidth.
    pub tree_pattern_penalty: Option<f64>,
    /// NVLink width per link by architecture (topo.h `SMxx_NVLINK_WIDTH`/`_BW`).
    pub nvlink_width: [f64; 4],
    /// PCIe Gen3 x16 width (`PCI_WIDTH`/`PCI_BW`).
    pub pci_width: f64,
    /// Intel Skylake+ inter-socket width (`SKL_QPI_WIDTH`/`SKL_QPI_BW`), older Intel (`QPI_WIDTH`),
    /// AMD (`AMD_BW` from 2.21, else QPI).
    pub skl_qpi_width: f64,
    pub qpi_width: f64,
    pub amd_width: f64,
    /// Speed a path through an Intel root complex must have for a P2P speed s: s x this factor
    /// (`INTEL_P2P_OVERHEAD`: 12/9 in 2.8.4, 6/5 in 2.18+).
    pub intel_p2p_overhead: f64,
    /// Speeds the graph search tries, inside a node and across nodes (search.cc `speedArray*`);
    /// Hopper has its own arrays from 2.18.
    pub speeds_intra: &'static [f64],
    pub speeds_inter: &'static [f64],
    pub speeds_intra_sm90: &'static [f64],
    pub speeds_inter_sm90: &'static [f64],
    /// 2.18+: channels are not duplicated on Ampere-or-later with more than 4 channels under 50 GB/s.
    pub dup_needs_50_on_ampere: bool,
    /// 2.18+: LL128 also needs a single GPU generation and allows PXN paths on Hopper; 2.8.4 needs
    /// Volta or Ampere with NVLink inside the node.
    pub ll128_rule_218: bool,
    /// 2.18+: the ring "plateau" latency factor applies from 64 bytes per channel and rank (1.9 before
    /// Ampere, 1.4 after); 2.8.4: from nRanks/16 x 64 KiB, always 1.9.
    pub plateau_218: bool,
    /// The ring "plateau" factor exists (2.8+ tuning.cc); 2.5 and earlier have none.
    pub plateau: bool,
    /// The version has trees (2.4+) and LL128 (2.5+).
    pub has_tree: bool,
    pub has_ll128: bool,
    /// 2.3: no cost model; LL or Simple by the per-thread byte thresholds of `ncclGetCollResource`
    /// (common_coll.h): (pre-Volta, Volta+) bytes per thread, doubled across nodes (init.cu).
    pub ll_thread_threshold: Option<(u64, u64)>,
    /// 2.5 and earlier: a ring spanning nodes pays the network's per-step latency on every step
    /// (`hw[a] = nNodes == 1 ? intraHw : NCCL_HW_NET`); 2.8+ counts intra and inter steps apart.
    pub ring_net_lat_every_step: bool,
}

// Latency tables. Rows are algorithms in NCCL's order: Tree, Ring, CollNetDirect, CollNetChain,
// NVLS, NVLSTree; columns LL, LL128, Simple. 2.8.4 has only Tree, Ring, CollNet (its CollNet row
// is kept in the CollNetDirect slot).

/// NVIDIA/nccl v2.3.7-1 has no cost model: rings only (src/misc/rings.cu), LL below
/// `nRanks x nRings x 256 threads x threadThreshold` bytes (src/include/common_coll.h
/// `ncclGetCollResource`; core.h `NCCL_THREAD_THRESHOLD` 64, `NCCL_THREAD_THRESHOLD_PREVOLTA` 32,
/// doubled on several nodes by init.cu `ncclThreadThreshold`), Simple above. Its kernels' times
/// come from the nearest releases that state them: per-step latencies of one node from the first
/// cost model, v2.5.6-1 src/graph/tuning.cc (`baseLat` Ring {3.6, 3.6, 8.4}; `hwLat` NVLink Ring
/// {.4, 2.5, 5.7}, PCI Ring {1.0, 2.5, 5.7}); a ring spanning nodes pays 6 us per step, v2.4.2-1
/// src/init.cu `ncclTreeThreshold` (`ringlatinter = 6`, the ring latency of NCCL's first
/// algorithm choice, three months after 2.3.7, with the same ring kernels and network transport),
/// on every step as v2.5.6's model does. Ring LL bus bandwidth 1/4 of the graph's (v2.5.6
/// `busBw *= 1.0/4.0`), no LL cap. The graph search, which 2.3 does not have, uses 2.8.4's
/// widths and speeds for the channel count.
/// v2.8.4-1 src/graph/search.cc `speedArray`: one list for intra- and inter-node channels on every
/// GPU generation (2.3.7, which has no graph search, borrows it; see V2_3_7).
const SPEED_ARRAY_2_8_4: &[f64] =
    &[42.0, 30.0, 24.0, 21.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12];

static V2_3_7: Tables = Tables {
    version: NcclVersion::V2_3_7,
    base_lat: [[0.0; 3], [3.6, 3.6, 8.4], [0.0; 3], [0.0; 3], [0.0; 3], [0.0; 3]],
    hw_lat: [
        // NVLink
        [[0.0; 3], [0.4, 2.5, 5.7], [0.0; 3], [0.0; 3], [0.0; 3], [0.0; 3]],
        // PCI
        [[0.0; 3], [1.0, 2.5, 5.7], [0.0; 3], [0.0; 3], [0.0; 3], [0.0; 3]],
        // NET
        [[0.0; 3], [6.0, 6.0, 6.0], [0.0; 3], [0.0; 3], [0.0; 3], [0.0; 3]],
    ],
    ll_max_bws: [[f64::INFINITY; 3]; 3],
    tree_max_bw_per_ch: [[0.0; 3]; 3],
    ll128: Ll128Caps::PerFunction([0.0; 5]),
    ring_ll_fraction: (1.0 / 4.0, 1.0 / 4.0),
    tree_correction: [[1.0; 23]; 3],
    inter_steps_two_n: false,
    net_overhead: false,
    ampere_cap: None,
    tree_pattern_penalty: None,
    nvlink_width: [18.0, 21.0, 21.0, 21.0],
    pci_width: 12.0,
    skl_qpi_width: 9.0,
    qpi_width: 6.0,
    amd_width: 6.0,
    intel_p2p_overhead: 12.0 / 9.0,
    speeds_intra: SPEED_ARRAY_2_8_4,
    speeds_inter: SPEED_ARRAY_2_8_4,
    speeds_intra_sm90: SPEED_ARRAY_2_8_4,
    speeds_inter_sm90: SPEED_ARRAY_2_8_4,
    dup_needs_50_on_ampere: false,
    ll128_rule_218: false,
    plateau_218: false,
    plateau: false,
    has_tree: false,
    has_ll128: false,
    ll_thread_threshold: Some((32, 64)),
    ring_net_lat_every_step: true,
};

/// NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc, `baseLat`, `hwLat`, `llMaxBws`, `perChMaxTreeBws`,
/// `ll128MaxBwPerCh`, `treeCorrectionFactor`; src/graph/topo.h widths; src/graph/search.cc
/// `speedArray`.
static V2_8_4: Tables = Tables {
    version: NcclVersion::V2_8_4,
    base_lat: [[4.4, 4.4, 0.0], [3.6, 10.0, 8.4], [4.4, 4.4, 0.0], [0.0; 3], [0.0; 3], [0.0; 3]],
    hw_lat: [
        // NVLink
        [[0.52, 1.25, 28.0], [0.47, 1.9, 3.4], [0.5, 1.2, 4.0], [0.0; 3], [0.0; 3], [0.0; 3]],
        // PCI
        [[1.0, 1.9, 28.0], [1.0, 2.5, 5.7], [1.0, 1.9, 5.5], [0.0; 3], [0.0; 3], [0.0; 3]],
        // NET
        [[5.0, 8.5, 28.0], [2.7, 4.0, 9.6], [5.0, 5.0, 10.7], [0.0; 3], [0.0; 3], [0.0; 3]],
    ],
    ll_max_bws: [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [87.7, 22.5, 19.0]],
    tree_max_bw_per_ch: [[26.5, 18.5, 10.0], [24.0, 22.5, 16.0], [24.0, 22.5, 16.0]],
    ll128: Ll128Caps::PerFunction([18.8, 12.0, 18.3, 15.2, 16.9]),
    ring_ll_fraction: (1.0 / 4.0, 1.0 / 3.0),
    tree_correction: [
        [
            1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0,
            1.0, 1.0,
        ],
        [
            1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.5, 0.6, 0.6, 0.7, 0.7, 0.8, 0.9, 0.9,
            0.92, 0.92,
        ],
        [
            0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8,
            0.9, 0.9,
        ],
    ],
    inter_steps_two_n: false,
    net_overhead: false,
    ampere_cap: Some(235.0),
    tree_pattern_penalty: None,
    // SM60 18, SM70 21, SM80 21 (SM86 12 is not a row here); Hopper did not exist: SM80's.
    nvlink_width: [18.0, 21.0, 21.0, 21.0],
    pci_width: 12.0,
    skl_qpi_width: 9.0,
    qpi_width: 6.0,
    amd_width: 6.0,
    intel_p2p_overhead: 12.0 / 9.0,
    speeds_intra: SPEED_ARRAY_2_8_4,
    speeds_inter: SPEED_ARRAY_2_8_4,
    speeds_intra_sm90: SPEED_ARRAY_2_8_4,
    speeds_inter_sm90: SPEED_ARRAY_2_8_4,
    dup_needs_50_on_ampere: false,
    ll128_rule_218: false,
    plateau_218: false,
    plateau: true,
    has_tree: true,
    has_ll128: true,
    ll_thread_threshold: None,
    ring_net_lat_every_step: false,
};

const TREE_CORRECTION_218: [[f64; 23]; 3] = [
    [1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0],
    [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9],
];

/// NVIDIA/nccl v2.18.3-1 src/graph/tuning.cc (`baseLat`, `hwLat`, `llMaxBws`,
/// `perChMaxRingLL128Bws`, `perChMaxTreeLL128Bws`, `perChMaxTreeBws`, `treeCorrectionFactor`,
/// `getNetOverhead`); src/graph/topo.h (`SM*_NVLINK_BW`, `PCI_BW`, `SKL_QPI_BW`,
/// `INTEL_P2P_OVERHEAD`); src/graph/search.cc (`speedArrayIntra/Inter`, `sm90SpeedArray*`).
static V2_18_3: Tables = Tables {
    version: NcclVersion::V2_18_3,
    base_lat: [
        [6.8, 14.0, 0.0],
        [6.6, 14.0, 8.4],
        [6.8, 14.0, 0.0],
        [6.8, 14.0, 0.0],
        [0.0, 0.0, 23.0],
        [0.0, 0.0, 23.0],
    ],
    hw_lat: [
        [[0.6, 1.25, 4.0], [0.6, 1.9, 3.4], [0.0, 0.0, 8.0], [0.0, 0.0, 4.75], [0.0; 3], [0.0; 3]],
        [[1.0, 1.9, 6.0], [1.0, 2.5, 5.7], [0.0, 0.0, 8.0], [0.0, 0.0, 8.0], [0.0; 3], [0.0; 3]],
        [[5.0, 8.5, 14.0], [2.7, 4.0, 14.0], [0.0, 0.0, 10.7], [0.0, 0.0, 14.0], [0.0, 0.0, 18.0], [0.0, 0.0, 19.0]],
    ],
    ll_max_bws: [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [87.7, 22.5, 19.0]],
    tree_max_bw_per_ch: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0]],
    ll128: Ll128Caps::PerArch {
        ring: [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 36.7]],
        tree: [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0]],
    },
    ring_ll_fraction: (1.0 / 4.0, 1.0 / 3.0),
    tree_correction: TREE_CORRECTION_218,
    inter_steps_two_n: true,
    net_overhead: true,
    ampere_cap: None,
    tree_pattern_penalty: Some(0.85),
    nvlink_width: [18.0, 20.0, 20.0, 20.0],
    pci_width: 12.0,
    skl_qpi_width: 10.0,
    qpi_width: 6.0,
    amd_width: 6.0,
    intel_p2p_overhead: 6.0 / 5.0,
    speeds_intra: &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0],
    speeds_inter: &[
        48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12,
    ],
    speeds_intra_sm90: &[60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0],
    speeds_inter_sm90: &[48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12],
    dup_needs_50_on_ampere: true,
    ll128_rule_218: true,
    plateau_218: true,
    plateau: true,
    has_tree: true,
    has_ll128: true,
    ll_thread_threshold: None,
    ring_net_lat_every_step: false,
};

/// NVIDIA/nccl v2.21.5-1 src/graph/tuning.cc (as 2.18.3 except: `baseLat` CollNet/NVLS rows 0,
/// `hwLat` Tree/Simple 28 us on every fabric and new CollNet/NVLS values, Hopper `llMaxBws`
/// {141, 45, 35}, ring LL at half the graph bandwidth); topo.h `SM90_NVLINK_BW` 20.6, `AMD_BW` 16;
/// search.cc `sm90SpeedArrayIntra/Inter` with 50/11 and 22 added.
static V2_21_5: Tables = Tables {
    version: NcclVersion::V2_21_5,
    base_lat: [[6.8, 14.0, 0.0], [6.6, 14.0, 8.4], [0.0; 3], [0.0; 3], [0.0; 3], [0.0; 3]],
    hw_lat: [
        [[0.6, 1.25, 28.0], [0.6, 1.9, 3.4], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8], [0.0, 0.0, 25.0], [0.0, 0.0, 25.0]],
        [[1.0, 1.9, 28.0], [1.0, 2.5, 5.7], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8], [0.0; 3], [0.0; 3]],
        [[5.0, 8.5, 28.0], [2.7, 4.0, 14.0], [0.0, 0.0, 31.0], [0.0, 0.0, 30.0], [0.0, 0.0, 18.0], [0.0, 0.0, 14.0]],
    ],
    ll_max_bws: [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0]],
    tree_max_bw_per_ch: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0]],
    ll128: Ll128Caps::PerArch {
        ring: [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 36.7]],
        tree: [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0]],
    },
    ring_ll_fraction: (0.5, 0.5),
    tree_correction: TREE_CORRECTION_218,
    inter_steps_two_n: true,
    net_overhead: true,
    ampere_cap: None,
    tree_pattern_penalty: Some(0.85),
    nvlink_width: [18.0, 20.0, 20.0, 20.6],
    pci_width: 12.0,
    skl_qpi_width: 10.0,
    qpi_width: 6.0,
    amd_width: 16.0,
    intel_p2p_overhead: 6.0 / 5.0,
    speeds_intra: &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0],
    speeds_inter: &[
        48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12,
    ],
    speeds_intra_sm90: &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0],
    speeds_inter_sm90: &[
        48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
    ],
    dup_needs_50_on_ampere: true,
    ll128_rule_218: true,
    plateau_218: true,
    plateau: true,
    has_tree: true,
    has_ll128: true,
    ll_thread_threshold: None,
    ring_net_lat_every_step: false,
};

/// Constants that are the same in every version carried (checked in 2.8.4, 2.18.3 and 2.21.5).
pub mod fixed {
    /// `NCCL_STEPS`: buffer slots per connection (devcomm.h / device.h).
    pub const STEPS: u64 = 8;
    /// `MAXCHANNELS`.
    pub const MAX_CHANNELS: u32 = 32;
    /// `NCCL_SIMPLE_MAX_NTHREADS`, `NCCL_LL_MAX_NTHREADS`, `NCCL_LL128_MAX_NTHREADS`.
    pub const SIMPLE_MAX_THREADS: u32 = 512;
    pub const LL_MAX_THREADS: u32 = 512;
    pub const LL128_MAX_THREADS: u32 = 640;
    /// `NCCL_LL_THREAD_THRESHOLD`, `NCCL_LL128_THREAD_THRESHOLD`, `NCCL_SIMPLE_THREAD_THRESHOLD`
    /// (comm.h): bytes per thread before more threads and channels are used.
    pub const LL_THREAD_THRESHOLD: u64 = 8;
    pub const LL128_THREAD_THRESHOLD: u64 = 8;
    pub const SIMPLE_THREAD_THRESHOLD: u64 = 64;
    /// `NCCL_LL_LINES_PER_THREAD` and the 16-byte `ncclLLFifoLine` (8 data bytes).
    pub const LL_LINES_PER_THREAD: u64 = 8;
    pub const LL_LINE_BYTES: u64 = 16;
    /// `NCCL_LL128_LINESIZE` 128 bytes of which `NCCL_LL128_DATAELEMS` = 15 of 16 words carry data;
    /// `NCCL_LL128_ELEMS_PER_THREAD` 120.
    pub const LL128_LINE_BYTES: u64 = 128;
    pub const LL128_DATA_BYTES: u64 = 120;
    pub const LL128_ELEMS_PER_THREAD: u64 = 120;
    /// `DEFAULT_BUFFSIZE` for Simple (init.cc): 4 MiB.
    pub const SIMPLE_BUFFSIZE: u64 = 1 << 22;
    /// `ALLREDUCE_CHUNKSTEPS` = NCCL_STEPS/2 (collectives.h); broadcast and reduce use 1.
    pub const ALLREDUCE_CHUNKSTEPS: u64 = 4;
    /// `WARP_SIZE`.
    pub const WARP: u32 = 32;
    /// `NCCL_LL128_SHMEM_ELEMS_PER_THREAD` (devcomm.h v2.8.4-1 l.76, device.h v2.18.3-1 l.75,
    /// v2.21.5-1 l.77): 8-byte words each thread moves per LL128 round, so a warp moves
    /// `LL128INC` = 32 x 8 words (2 KiB of lines, 1,920 data bytes) per round (prims_ll128.h).
    pub const LL128_SHMEM_ELEMS_PER_THREAD: u64 = 8;
    /// PCIe Gen3 x16 in NCCL's units, the threshold for 256 Simple threads (`PCI_WIDTH`).
    pub const PCI_WIDTH: f64 = 12.0;
}

impl Tables {
    pub fn base_lat(&self, a: NcclAlgo, p: Proto) -> f64 {
        self.base_lat[a.index()][p.index()]
    }

    /// `hwLat` for a fabric (0 NVLink, 1 PCI, 2 NET).
    pub fn hw_lat(&self, fabric: Fabric, a: NcclAlgo, p: Proto) -> f64 {
        self.hw_lat[fabric as usize][a.index()][p.index()]
    }

    /// `llMaxBws[index1][index2]`: by GPU generation on one node, by CPU vendor across nodes.
    pub fn ll_max_bw(&self, arch: Arch, cpu: CpuVendor, nodes: u32) -> f64 {
        let row = if nodes == 1 { arch.row() } else { (cpu == CpuVendor::Amd) as usize };
        self.ll_max_bws[row][node_column(nodes)]
    }

    pub fn tree_max_bw_per_ch(&self, arch: Arch, nodes: u32) -> f64 {
        self.tree_max_bw_per_ch[arch.row()][node_column(nodes)]
    }

    /// LL128's cap in GB/s per graph channel for a ring or a tree.
    pub fn ll128_max_bw_per_ch(&self, algo: NcclAlgo, f: Func, arch: Arch, nodes: u32) -> f64 {
        match self.ll128 {
            Ll128Caps::PerFunction(per) => per[f as usize],
            Ll128Caps::PerArch { ring, tree } => {
                let t = if algo == NcclAlgo::Tree { tree } else { ring };
                t[arch.row()][node_column(nodes)]
            }
        }
    }

    pub fn nvlink_width(&self, arch: Arch) -> f64 {
        self.nvlink_width[arch as usize]
    }

    /// Width NCCL gives the link between two CPU sockets.
    pub fn inter_socket_width(&self, cpu: CpuVendor) -> f64 {
        match cpu {
            CpuVendor::Intel => self.skl_qpi_width,
            CpuVendor::IntelBroadwell => self.qpi_width,
            CpuVendor::Amd => self.amd_width,
            CpuVendor::Power => 32.0, // P9_WIDTH / P9_BW, the same in every version carried
            CpuVendor::Arm => 6.0,    // ARM_WIDTH / ARM_BW
        }
    }

    /// The network post overhead (2.18+ `getNetOverhead`), us.
    pub fn net_overhead_us(&self, cpu: CpuVendor) -> f64 {
        if !self.net_overhead {
            return 0.0;
        }
        if cpu == CpuVendor::Amd {
            2.0
        } else {
            1.0
        }
    }

    /// The speeds the graph search tries (intra or inter).
    pub fn speeds(&self, arch: Arch, inter: bool) -> &'static [f64] {
        match (arch == Arch::Hopper, inter) {
            (false, false) => self.speeds_intra,
            (false, true) => self.speeds_inter,
            (true, false) => self.speeds_intra_sm90,
            (true, true) => self.speeds_inter_sm90,
        }
    }

    /// The P2P level NCCL allows on this CPU without NCCL_P2P_LEVEL (paths.cc `ncclTopoCheckP2p`):
    /// below the root complex on old Intel and ARM, through it on newer Intel, anywhere on AMD.
    pub fn p2p_level(&self, cpu: CpuVendor) -> PathType {
        match cpu {
            CpuVendor::IntelBroadwell | CpuVendor::Arm => PathType::Pxb,
            CpuVendor::Intel => PathType::Phb,
            CpuVendor::Amd | CpuVendor::Power => PathType::Sys,
        }
    }

    pub fn intel_p2p(&self, cpu: CpuVendor) -> bool {
        cpu.is_intel()
    }
}

/// `index2` of the tables: 1, 2, or more nodes.
fn node_column(nodes: u32) -> usize {
    (nodes.clamp(1, 3) - 1) as usize
}

/// The fabric class `hwLat` is indexed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    Nvlink = 0,
    Pci = 1,
    Net = 2,
}

/// NCCL's path types (topo.h `PATH_*`), from closest to farthest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PathType {
    /// Same device.
    Loc,
    /// NVLink (direct, or through an NVSwitch).
    Nvl,
    /// NVLink through an intermediate GPU.
    Nvb,
    /// Through at most one PCIe switch.
    Pix,
    /// Through several PCIe switches, not the CPU.
    Pxb,
    /// Through the PCIe host bridge (CPU root complex).
    Phb,
    /// Across CPU sockets (QPI/UPI/Infinity Fabric).
    Sys,
    /// Across the network.
    Net,
}

impl PathType {
    pub fn name(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
            PathType::Net => "NET",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spot checks against the source lines named in each table's comment.
    #[test]
    fn tables_match_their_sources() {
        let v = NcclVersion::V2_8_4.tables();
        // v2.8.4-1 tuning.cc: baseLat Ring { 3.6, 10.0, 8.4 }; hwLat NVLINK Ring { .47, 1.9, 3.4 };
        // NET Tree { 5.0, 8.5, 28 }; ll128MaxBwPerCh all-reduce 16.9; llMaxBws Volta-N1 39.0.
        assert_eq!(v.base_lat(NcclAlgo::Ring, Proto::Simple), 8.4);
        assert_eq!(v.hw_lat(Fabric::Nvlink, NcclAlgo::Ring, Proto::Ll), 0.47);
        assert_eq!(v.hw_lat(Fabric::Net, NcclAlgo::Tree, Proto::Simple), 28.0);
        assert_eq!(v.ll128_max_bw_per_ch(NcclAlgo::Ring, Func::AllReduce, Arch::Volta, 1), 16.9);
        assert_eq!(v.ll_max_bw(Arch::Volta, CpuVendor::Intel, 1), 39.0);
        // v2.8.4-1 topo.h SM70_NVLINK_WIDTH 21.0; INTEL_P2P_OVERHEAD(speed) (speed*12/9).
        assert_eq!(v.nvlink_width(Arch::Volta), 21.0);
        assert!((v.intel_p2p_overhead - 12.0 / 9.0).abs() < 1e-12);
        let v = NcclVersion::V2_3_7.tables();
        // v2.5.6-1 tuning.cc baseLat Ring { 3.6, 3.6, 8.4 }, hwLat PCI Ring LL 1.0, NVLink Ring LL .4;
        // v2.4.2-1 init.cu ringlatinter 6; v2.3.7-1 core.h thread thresholds 32 (pre-Volta) / 64.
        assert_eq!(v.base_lat(NcclAlgo::Ring, Proto::Simple), 8.4);
        assert_eq!(v.hw_lat(Fabric::Pci, NcclAlgo::Ring, Proto::Ll), 1.0);
        assert_eq!(v.hw_lat(Fabric::Nvlink, NcclAlgo::Ring, Proto::Ll), 0.4);
        assert_eq!(v.hw_lat(Fabric::Net, NcclAlgo::Ring, Proto::Simple), 6.0);
        assert_eq!(v.ll_thread_threshold, Some((32, 64)));
        assert!(!v.has_tree && !v.has_ll128 && !v.plateau && v.ring_net_lat_every_step);
        let v = NcclVersion::V2_18_3.tables();
        // v2.18.3-1 tuning.cc: baseLat Tree { 6.8, 14.0, 0 }; hwLat NVLINK Tree Simple 4;
        // NET Ring Simple 14.0; perChMaxTreeBws Ampere N2 23.6; SM70_NVLINK_BW 20.0.
        assert_eq!(v.base_lat(NcclAlgo::Tree, Proto::Ll128), 14.0);
        assert_eq!(v.hw_lat(Fabric::Nvlink, NcclAlgo::Tree, Proto::Simple), 4.0);
        assert_eq!(v.hw_lat(Fabric::Net, NcclAlgo::Ring, Proto::Simple), 14.0);
        assert_eq!(v.tree_max_bw_per_ch(Arch::Ampere, 2), 23.6);
        assert_eq!(v.nvlink_width(Arch::Volta), 20.0);
        assert_eq!(v.speeds(Arch::Volta, false)[0], 40.0);
        assert_eq!(v.speeds(Arch::Volta, true)[0], 48.0);
        let v = NcclVersion::V2_21_5.tables();
        // v2.21.5-1: hwLat NVLINK Tree Simple back to 28; llMaxBws Hopper { 141.0, 45.0, 35.0 };
        // ring LL at busBw * .5; SM90_NVLINK_BW 20.6.
        assert_eq!(v.hw_lat(Fabric::Nvlink, NcclAlgo::Tree, Proto::Simple), 28.0);
        assert_eq!(v.ll_max_bw(Arch::Hopper, CpuVendor::Intel, 1), 141.0);
        assert_eq!(v.ring_ll_fraction, (0.5, 0.5));
        assert_eq!(v.nvlink_width(Arch::Hopper), 20.6);
        assert_eq!(v.speeds(Arch::Hopper, false)[1], 50.0);
    }

    #[test]
    fn names_parse_back() {
        for v in NcclVersion::ALL {
            assert_eq!(NcclVersion::parse(v.name()), Some(v));
            assert_eq!(NcclVersion::parse(v.tag()), Some(v));
        }
        assert_eq!(NcclVersion::parse("2.9.9"), None);
        assert_eq!(NcclVersion::parse("v2.3.7-1"), Some(NcclVersion::V2_3_7));
        for a in NcclAlgo::ALL {
            assert_eq!(NcclAlgo::parse(&a.name().to_uppercase()), Some(a));
        }
        assert_eq!(NcclAlgo::parse("CollNet"), Some(NcclAlgo::CollnetDirect));
        for p in Proto::ALL {
            assert_eq!(Proto::parse(&p.name().to_lowercase()), Some(p));
        }
        assert_eq!(Arch::from_name("Tesla V100-PCIE-16GB"), Arch::Volta);
        assert_eq!(Arch::from_name("NVIDIA A100-SXM4-40GB"), Arch::Ampere);
        assert_eq!(Arch::from_name("H100 80GB HBM3"), Arch::Hopper);
        assert_eq!(Arch::from_name("Tesla P100-SXM2"), Arch::Pascal);
    }
}
