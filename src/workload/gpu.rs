//! GPU specifications: peak arithmetic throughput by precision, memory bandwidth and size, SM
//! count and host link, for the GPUs the seeds and the measured data use. Figures are the vendor's
//! published datasheet peaks (boost clock, dense math); sources are listed in `docs/workloads.md`.
//! This module only describes hardware; it knows nothing of layers, traces or the engine.

use crate::error::{Error, Result};
use serde::Serialize;

/// Arithmetic precision of a training run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats everywhere.
    Fp32,
    /// Mixed precision: FP16 math (tensor cores where the GPU has them), FP32 master weights.
    Fp16,
    /// Mixed precision with BF16 math on tensor cores (Ampere and later), FP32 master weights.
    Bf16,
    /// FP8 GEMMs (Transformer Engine on Hopper and later); activations, gradients and the
    /// non-GEMM math stay in BF16, master weights in FP32.
    Fp8,
}

impl Precision {
    /// The name used on the command line and in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
        }
    }

    /// Bytes of one activation or gradient element. FP8 training keeps activations and
    /// gradients in BF16 (only GEMM inputs are cast to FP8), so it is 2 as well.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16 | Precision::Bf16 | Precision::Fp8 => 2,
        }
    }

    /// True for the mixed-precision modes (16-bit or 8-bit math, FP32 master weights).
    pub fn is_mixed(self) -> bool {
        self != Precision::Fp32
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "single" => Ok(Precision::Fp32),
            "fp16" | "mixed" | "amp" | "half" => Ok(Precision::Fp16),
            "bf16" | "bfloat16" | "amp_bf16" => Ok(Precision::Bf16),
            "fp8" | "float8" | "amp_fp8" => Ok(Precision::Fp8),
            _ => Err(format!("unknown precision `{s}` (expected one of: fp32, fp16, bf16, fp8)")),
        }
    }
}

/// A GPU's NVLink ports taken together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NvLink {
    pub generation: u32,
    /// Sum over the GPU's links, per direction, GB/s (half the "bidirectional" datasheet figure).
    pub gbs_per_direction: f64,
}

/// One GPU model (one die: a K80 board holds two of these).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GpuSpec {
    /// Canonical name, e.g. `v100-sxm2`.
    pub name: &'static str,
    /// Marketing name.
    pub full_name: &'static str,
    /// Architecture generation (Kepler, Maxwell, Pascal, Volta, Ampere, Hopper).
    pub arch: &'static str,
    /// Streaming multiprocessors (parallel width: small layers cannot fill many SMs).
    pub sms: u32,
    /// Peak FP32 throughput, TFLOPS (1e12 floating-point operations per second).
    pub fp32_tflops: f64,
    /// Peak FP16 throughput without tensor cores, TFLOPS (equal to FP32 where FP16 is not faster).
    pub fp16_tflops: f64,
    /// Peak dense FP16 tensor-core throughput, TFLOPS, if the GPU has tensor cores (also the BF16
    /// rate where `bf16` is true).
    pub tensor_tflops: Option<f64>,
    /// The tensor cores run BF16 at the FP16 rate (Ampere and later).
    pub bf16: bool,
    /// Peak dense FP8 tensor-core throughput, TFLOPS (Hopper and later).
    pub fp8_tflops: Option<f64>,
    /// NVLink generation and the GPU's total NVLink bandwidth per direction, GB/s (None: no NVLink).
    pub nvlink: Option<NvLink>,
    /// Peak device-memory bandwidth, GB/s (1e9 bytes per second).
    pub mem_bw_gbs: f64,
    /// Device memory, GiB.
    pub mem_gib: f64,
    /// Host link: PCIe generation and lanes.
    pub pcie_gen: u32,
    pub pcie_lanes: u32,
    /// Accepted spellings besides `name` (compared after normalising, see [`GpuSpec::by_name`]).
    #[serde(skip)]
    pub aliases: &'static [&'static str],
}

impl GpuSpec {
    /// Looks a GPU up by name. Case, spaces, dashes, underscores and the words "nvidia", "tesla",
    /// "geforce" and "gtx" are ignored, so "Tesla V100", "v100" and "V100-SXM2" all work; a bare
    /// family name picks the variant the seeds use most (V100 -> SXM2, A100 -> SXM4 40 GB).
    pub fn by_name(name: &str) -> Result<&'static GpuSpec> {
        let key = normalise(name);
        GPUS.iter().find(|g| normalise(g.name) == key || g.aliases.iter().any(|a| normalise(a) == key)).ok_or_else(
            || {
                Error::invalid(
                    "GPU",
                    format!(
                        "unknown GPU `{name}`; known: {}",
                        GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
                    ),
                )
            },
        )
    }

    /// Peak throughput for dense math at `precision`, in FLOP per nanosecond (= GFLOP/s / 1, i.e.
    /// TFLOPS * 1000). FP16 uses tensor cores when present; BF16 and FP8 use theirs where the GPU
    /// has them and otherwise fall back to the FP16 and BF16 rates ([`GpuSpec::supports`] says
    /// which GPUs really run them).
    pub fn peak_flops_per_ns(&self, precision: Precision) -> f64 {
        let half = self.tensor_tflops.unwrap_or(self.fp16_tflops);
        let tflops = match precision {
            Precision::Fp32 => self.fp32_tflops,
            Precision::Fp16 => half,
            Precision::Bf16 if self.bf16 => half,
            Precision::Bf16 => self.fp32_tflops,
            Precision::Fp8 => self.fp8_tflops.unwrap_or(if self.bf16 { half } else { self.fp32_tflops }),
        };
        tflops * 1e3
    }

    /// Whether the GPU has hardware for `precision` (BF16: Ampere and later; FP8: Hopper and later).
    pub fn supports(&self, precision: Precision) -> bool {
        match precision {
            Precision::Fp32 | Precision::Fp16 => true,
            Precision::Bf16 => self.bf16,
            Precision::Fp8 => self.fp8_tflops.is_some(),
        }
    }

    /// Peak throughput for element-wise math that cannot use tensor cores, FLOP per nanosecond.
    pub fn vector_flops_per_ns(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Fp32 => self.fp32_tflops * 1e3,
            Precision::Fp16 | Precision::Bf16 | Precision::Fp8 => self.fp16_tflops * 1e3,
        }
    }

    /// Device memory bandwidth in bytes per nanosecond (numerically GB/s).
    pub fn mem_bytes_per_ns(&self) -> f64 {
        self.mem_bw_gbs
    }

    /// Device memory in bytes.
    pub fn mem_bytes(&self) -> u64 {
        (self.mem_gib * (1u64 << 30) as f64) as u64
    }

    /// Theoretical host-link bandwidth in GB/s (per direction), from PCIe generation and lanes.
    pub fn host_link_gbs(&self) -> f64 {
        let per_lane = match self.pcie_gen {
            1 => 0.25,
            2 => 0.5,
            3 => 0.985,
            4 => 1.969,
            _ => 3.938,
        };
        per_lane * self.pcie_lanes as f64
    }
}

/// Lower-case, without separators and vendor words.
fn normalise(name: &str) -> String {
    let mut s: String = name.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    for word in ["nvidia", "tesla", "geforce", "gtx"] {
        s = s.replace(word, "");
    }
    s
}

/// Every GPU dagsim knows. Datasheet peaks at boost clock; see docs/workloads.md for sources.
pub static GPUS: &[GpuSpec] = &[
    GpuSpec {
        name: "k80",
        full_name: "Tesla K80 (one GK210 die)",
        arch: "Kepler",
        sms: 13,
        fp32_tflops: 4.37,
        fp16_tflops: 4.37,
        tensor_tflops: None,
        bf16: false,
        fp8_tflops: None,
        nvlink: None,
        mem_bw_gbs: 240.0,
        mem_gib: 12.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &["gk210"],
    },
    GpuSpec {
        name: "m40",
        full_name: "Tesla M40 (12 GB)",
        arch: "Maxwell",
        sms: 24,
        fp32_tflops: 7.0,
        fp16_tflops: 7.0,
        tensor_tflops: None,
        bf16: false,
        fp8_tflops: None,
        nvlink: None,
        mem_bw_gbs: 288.0,
        mem_gib: 12.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &[],
    },
    GpuSpec {
        name: "titan-x-maxwell",
        full_name: "GeForce GTX Titan X (Maxwell, GM200)",
        arch: "Maxwell",
        sms: 24,
        fp32_tflops: 6.6,
        fp16_tflops: 6.6,
        tensor_tflops: None,
        bf16: false,
        fp8_tflops: None,
        nvlink: None,
        mem_bw_gbs: 336.5,
        mem_gib: 12.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &["titan x", "gm200"],
    },
    GpuSpec {
        name: "gtx-1080ti",
        full_name: "GeForce GTX 1080 Ti",
        arch: "Pascal",
        sms: 28,
        fp32_tflops: 11.34,
        // GP102 runs FP16 math at 1/64 rate; mixed precision saves memory only, so use FP32 rate.
        fp16_tflops: 11.34,
        tensor_tflops: None,
        bf16: false,
        fp8_tflops: None,
        nvlink: None,
        mem_bw_gbs: 484.0,
        mem_gib: 11.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &[],
    },
    GpuSpec {
        name: "p100-pcie",
        full_name: "Tesla P100 PCIe (16 GB)",
        arch: "Pascal",
        sms: 56,
        fp32_tflops: 9.3,
        fp16_tflops: 18.7,
        tensor_tflops: None,
        bf16: false,
        fp8_tflops: None,
        nvlink: None,
        mem_bw_gbs: 732.0,
        mem_gib: 16.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &[],
    },
    GpuSpec {
        name: "p100-sxm2",
        full_name: "Tesla P100 SXM2 (NVLink, 16 GB)",
        arch: "Pascal",
        sms: 56,
        fp32_tflops: 10.6,
        fp16_tflops: 21.2,
        tensor_tflops: None,
        bf16: false,
        fp8_tflops: None,
        nvlink: Some(NvLink { generation: 1, gbs_per_direction: 80.0 }),
        mem_bw_gbs: 732.0,
        mem_gib: 16.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &["p100", "p100 nvlink"],
    },
    GpuSpec {
        name: "v100-pcie",
        full_name: "Tesla V100 PCIe (16 GB)",
        arch: "Volta",
        sms: 80,
        fp32_tflops: 14.0,
        fp16_tflops: 28.0,
        tensor_tflops: Some(112.0),
        bf16: false,
        fp8_tflops: None,
        nvlink: None,
        mem_bw_gbs: 900.0,
        mem_gib: 16.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &[],
    },
    GpuSpec {
        name: "v100-sxm2",
        full_name: "Tesla V100 SXM2 (NVLink, 16 GB)",
        arch: "Volta",
        sms: 80,
        fp32_tflops: 15.7,
        fp16_tflops: 31.4,
        tensor_tflops: Some(125.0),
        bf16: false,
        fp8_tflops: None,
        nvlink: Some(NvLink { generation: 2, gbs_per_direction: 150.0 }),
        mem_bw_gbs: 900.0,
        mem_gib: 16.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &["v100", "v100 nvlink", "v100-sxm2-16gb"],
    },
    GpuSpec {
        name: "v100-sxm2-32gb",
        full_name: "Tesla V100 SXM2 (NVLink, 32 GB)",
        arch: "Volta",
        sms: 80,
        fp32_tflops: 15.7,
        fp16_tflops: 31.4,
        tensor_tflops: Some(125.0),
        bf16: false,
        fp8_tflops: None,
        nvlink: Some(NvLink { generation: 2, gbs_per_direction: 150.0 }),
        mem_bw_gbs: 900.0,
        mem_gib: 32.0,
        pcie_gen: 3,
        pcie_lanes: 16,
        aliases: &["v100 32gb"],
    },
    GpuSpec {
        name: "a100-sxm4-40gb",
        full_name: "A100 SXM4 (40 GB)",
        arch: "Ampere",
        sms: 108,
        fp32_tflops: 19.5,
        fp16_tflops: 78.0,
        tensor_tflops: Some(312.0),
        bf16: true,
        fp8_tflops: None,
        nvlink: Some(NvLink { generation: 3, gbs_per_direction: 300.0 }),
        mem_bw_gbs: 1555.0,
        mem_gib: 40.0,
        pcie_gen: 4,
        pcie_lanes: 16,
        aliases: &["a100", "a100 40gb", "a100-sxm4", "a100 sxm"],
    },
    GpuSpec {
        name: "a100-sxm4-80gb",
        full_name: "A100 SXM4 (80 GB)",
        arch: "Ampere",
        sms: 108,
        fp32_tflops: 19.5,
        fp16_tflops: 78.0,
        tensor_tflops: Some(312.0),
        bf16: true,
        fp8_tflops: None,
        nvlink: Some(NvLink { generation: 3, gbs_per_direction: 300.0 }),
        mem_bw_gbs: 2039.0,
        mem_gib: 80.0,
        pcie_gen: 4,
        pcie_lanes: 16,
        aliases: &["a100 80gb"],
    },
    GpuSpec {
        name: "h100-sxm",
        full_name: "H100 SXM5 (80 GB)",
        arch: "Hopper",
        sms: 132,
        fp32_tflops: 67.0,
        fp16_tflops: 133.8,
        tensor_tflops: Some(989.4),
        bf16: true,
        fp8_tflops: Some(1978.9),
        nvlink: Some(NvLink { generation: 4, gbs_per_direction: 450.0 }),
        mem_bw_gbs: 3350.0,
        mem_gib: 80.0,
        pcie_gen: 5,
        pcie_lanes: 16,
        aliases: &["h100", "h100 sxm5"],
    },
    GpuSpec {
        name: "h100-pcie",
        full_name: "H100 PCIe (80 GB)",
        arch: "Hopper",
        sms: 114,
        fp32_tflops: 51.2,
        fp16_tflops: 102.4,
        tensor_tflops: Some(756.0),
        bf16: true,
        fp8_tflops: Some(1513.0),
        nvlink: Some(NvLink { generation: 4, gbs_per_direction: 300.0 }),
        mem_bw_gbs: 2000.0,
        mem_gib: 80.0,
        pcie_gen: 5,
        pcie_lanes: 16,
        aliases: &[],
    },
    GpuSpec {
        name: "h200-sxm",
        full_name: "H200 SXM (141 GB)",
        arch: "Hopper",
        sms: 132,
        fp32_tflops: 67.0,
        fp16_tflops: 133.8,
        tensor_tflops: Some(989.4),
        bf16: true,
        fp8_tflops: Some(1978.9),
        nvlink: Some(NvLink { generation: 4, gbs_per_direction: 450.0 }),
        mem_bw_gbs: 4800.0,
        mem_gib: 141.0,
        pcie_gen: 5,
        pcie_lanes: 16,
        aliases: &["h200", "h200 sxm5"],
    },
    GpuSpec {
        name: "b200",
        full_name: "B200 SXM (HGX/DGX B200, 180 GB)",
        arch: "Blackwell",
        sms: 148,
        fp32_tflops: 80.0,
        fp16_tflops: 160.0,
        tensor_tflops: Some(2250.0),
        bf16: true,
        fp8_tflops: Some(4500.0),
        nvlink: Some(NvLink { generation: 5, gbs_per_direction: 900.0 }),
        mem_bw_gbs: 8000.0,
        mem_gib: 180.0,
        pcie_gen: 5,
        pcie_lanes: 16,
        aliases: &["b200 sxm", "hgx b200", "dgx b200"],
    },
    GpuSpec {
        name: "gb200",
        full_name: "GB200 (one Blackwell GPU of a GB200 NVL72, 186 GB)",
        arch: "Blackwell",
        sms: 148,
        fp32_tflops: 80.0,
        fp16_tflops: 160.0,
        tensor_tflops: Some(2500.0),
        bf16: true,
        fp8_tflops: Some(5000.0),
        nvlink: Some(NvLink { generation: 5, gbs_per_direction: 900.0 }),
        mem_bw_gbs: 8000.0,
        mem_gib: 186.0,
        pcie_gen: 5,
        pcie_lanes: 16,
        aliases: &["gb200 nvl72", "gb200 nvl"],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_spellings_resolve() {
        for (alias, name) in [
            ("V100", "v100-sxm2"),
            ("Tesla V100", "v100-sxm2"),
            ("v100-pcie", "v100-pcie"),
            ("K80", "k80"),
            ("Tesla K80", "k80"),
            ("A100", "a100-sxm4-40gb"),
            ("1080ti", "gtx-1080ti"),
            ("GTX 1080 Ti", "gtx-1080ti"),
            ("Titan X", "titan-x-maxwell"),
            ("P100", "p100-sxm2"),
            ("H100", "h100-sxm"),
            ("M40", "m40"),
            ("H200", "h200-sxm"),
            ("B200", "b200"),
            ("DGX B200", "b200"),
            ("GB200", "gb200"),
            ("A100 80GB", "a100-sxm4-80gb"),
        ] {
            assert_eq!(GpuSpec::by_name(alias).unwrap().name, name, "{alias}");
        }
    }

    #[test]
    fn names_and_aliases_are_unambiguous() {
        let mut seen = std::collections::HashSet::new();
        for g in GPUS {
            for key in std::iter::once(g.name).chain(g.aliases.iter().copied()) {
                assert!(seen.insert(normalise(key)), "`{key}` names two GPUs");
            }
        }
    }

    #[test]
    fn unknown_gpu_lists_known_ones() {
        let e = GpuSpec::by_name("voodoo2").unwrap_err().to_string();
        assert!(e.contains("voodoo2") && e.contains("v100-sxm2"), "{e}");
    }

    #[test]
    fn fp16_uses_tensor_cores_where_present() {
        let v = GpuSpec::by_name("v100").unwrap();
        assert_eq!(v.peak_flops_per_ns(Precision::Fp16), 125_000.0);
        let k = GpuSpec::by_name("k80").unwrap();
        assert_eq!(k.peak_flops_per_ns(Precision::Fp16), k.peak_flops_per_ns(Precision::Fp32));
        assert!((v.host_link_gbs() - 15.76).abs() < 0.01);
        assert_eq!(v.mem_bytes(), 16 << 30);
    }

    #[test]
    fn bf16_and_fp8_need_their_tensor_cores() {
        let (v, a, h) =
            (GpuSpec::by_name("v100").unwrap(), GpuSpec::by_name("a100").unwrap(), GpuSpec::by_name("h100").unwrap());
        assert!(!v.supports(Precision::Bf16) && a.supports(Precision::Bf16) && !a.supports(Precision::Fp8));
        assert!(h.supports(Precision::Fp8));
        assert_eq!(a.peak_flops_per_ns(Precision::Bf16), 312_000.0);
        assert_eq!(h.peak_flops_per_ns(Precision::Fp8), 1_978_900.0);
        let b = GpuSpec::by_name("b200").unwrap();
        assert_eq!(b.peak_flops_per_ns(Precision::Fp8), 4_500_000.0);
        assert_eq!(b.nvlink.unwrap().generation, 5);
        assert_eq!("bf16".parse::<Precision>().unwrap(), Precision::Bf16);
        assert_eq!(Precision::Fp8.bytes(), 2);
        assert!("fp4".parse::<Precision>().unwrap_err().contains("bf16, fp8"));
    }
}
