//! What `dagsim calibrate --gpu` measures and writes: [`GpuMeasurements`] (GEMM times per dtype
//! and size, host-device copy times pinned and pageable, peer copy times between every GPU pair,
//! NCCL all-reduce times), the fits derived from them ([`Fits`]: TFLOP/s, latency + bandwidth
//! curves), the JSON file holding both, and a topology file for `dagsim predict --topology`.
//! Pure data and arithmetic: the CUDA side that fills these structs lives in `measure`.

use super::fit::{curve_points, AlphaBeta};
use super::stats::Summary;
use crate::error::{Error, Location, Result};
use crate::hw::topology::LinkSpec;
use crate::hw::Topology;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Written into every file, checked on reading.
pub const FORMAT: &str = "dagsim-gpu-calibration/1";

/// A peer link counts as a direct GPU-GPU link (NVLink) in the derived topology when its fitted
/// bandwidth beats the host link by this factor; otherwise peer traffic is modelled through the
/// host, as PCIe peer copies are.
pub const DIRECT_PEER_FACTOR: f64 = 1.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    H2d,
    D2h,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemory {
    Pinned,
    Pageable,
}

/// How the timings were taken.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Untimed runs before each measured series.
    pub warmup: u32,
    /// Timed runs per point; the point's value is their median.
    pub repetitions: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// CUDA device ordinal.
    pub ordinal: u32,
    pub name: String,
    /// "major.minor".
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub memory_bytes: u64,
}

/// Time of one square GEMM (C = A B, all n x n) on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmPoint {
    pub device: u32,
    pub dtype: Dtype,
    pub n: u32,
    pub time_s: Summary,
}

/// Time of one message of `bytes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizePoint {
    pub bytes: u64,
    pub time_s: Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCopySeries {
    pub device: u32,
    pub direction: Direction,
    pub memory: HostMemory,
    pub points: Vec<SizePoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCopySeries {
    pub src: u32,
    pub dst: u32,
    /// Whether direct peer access was enabled (otherwise the driver stages through the host).
    pub peer_access: bool,
    pub points: Vec<SizePoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduceSeries {
    pub devices: Vec<u32>,
    /// `bytes` is the buffer size per GPU (f32 sum).
    pub points: Vec<SizePoint>,
}

/// Everything one calibration run measured. Times are seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuMeasurements {
    pub settings: Settings,
    pub devices: Vec<DeviceInfo>,
    pub gemm: Vec<GemmPoint>,
    pub host_copies: Vec<HostCopySeries>,
    pub peer_copies: Vec<PeerCopySeries>,
    pub allreduce: Option<AllReduceSeries>,
    /// What was skipped and why (a library missing, one GPU only, ...).
    pub notes: Vec<String>,
}

/// A fitted link: alpha-beta parameters plus the bandwidth curve (bytes, bytes/ns) that with the
/// fitted latency reproduces each measured median.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkFit {
    pub latency_us: f64,
    pub bandwidth_gb_s: f64,
    pub max_relative_error: f64,
    pub curve: Vec<(u64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmThroughput {
    pub device: u32,
    pub dtype: Dtype,
    pub n: u32,
    /// 2 n^3 over the median time.
    pub tflops: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCopyFit {
    pub device: u32,
    pub direction: Direction,
    pub memory: HostMemory,
    pub fit: LinkFit,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCopyFit {
    pub src: u32,
    pub dst: u32,
    pub fit: LinkFit,
}

/// What the measurements say in the units dagsim's models use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fits {
    pub gemm: Vec<GemmThroughput>,
    pub host_copies: Vec<HostCopyFit>,
    pub peer_copies: Vec<PeerCopyFit>,
    pub allreduce: Option<LinkFit>,
}

/// The calibration file: measurements and their fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationFile {
    pub format: String,
    pub dagsim_version: String,
    pub measurements: GpuMeasurements,
    pub fits: Fits,
}

impl CalibrationFile {
    pub fn new(measurements: GpuMeasurements) -> Self {
        let fits = fit_all(&measurements);
        CalibrationFile {
            format: FORMAT.to_string(),
            dagsim_version: env!("CARGO_PKG_VERSION").to_string(),
            measurements,
            fits,
        }
    }

    pub fn write_json(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *w, self)?;
        writeln!(w)
    }

    /// Reads a calibration file; errors name the file and line.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let file: CalibrationFile =
            serde_json::from_str(text).map_err(|e| Error::parse(Location::line(path, e.line()), e.to_string()))?;
        if file.format != FORMAT {
            return Err(Error::parse(
                Location::file(path).with_field("format"),
                format!("expected `{FORMAT}`, found `{}`", file.format),
            ));
        }
        Ok(file)
    }
}

fn link_fit(points: &[SizePoint]) -> Option<LinkFit> {
    let pts: Vec<(u64, f64)> = points.iter().map(|p| (p.bytes, p.time_s.median)).collect();
    let ab = AlphaBeta::fit(&pts)?;
    Some(LinkFit {
        latency_us: ab.latency_s * 1e6,
        bandwidth_gb_s: ab.bandwidth_bytes_per_s / 1e9,
        max_relative_error: ab.max_relative_error,
        curve: curve_points(&pts, ab.latency_s),
    })
}

/// Fits every series that has enough points; series that cannot be fitted are left out.
pub fn fit_all(m: &GpuMeasurements) -> Fits {
    Fits {
        gemm: m
            .gemm
            .iter()
            .filter(|g| g.time_s.median > 0.0)
            .map(|g| GemmThroughput {
                device: g.device,
                dtype: g.dtype,
                n: g.n,
                tflops: 2.0 * (g.n as f64).powi(3) / g.time_s.median / 1e12,
            })
            .collect(),
        host_copies: m
            .host_copies
            .iter()
            .filter_map(|s| {
                link_fit(&s.points).map(|fit| HostCopyFit {
                    device: s.device,
                    direction: s.direction,
                    memory: s.memory,
                    fit,
                })
            })
            .collect(),
        peer_copies: m
            .peer_copies
            .iter()
            .filter_map(|s| link_fit(&s.points).map(|fit| PeerCopyFit { src: s.src, dst: s.dst, fit }))
            .collect(),
        allreduce: m.allreduce.as_ref().and_then(|a| link_fit(&a.points)),
    }
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(xs[n / 2]),
        _ => Some((xs[n / 2 - 1] + xs[n / 2]) / 2.0),
    }
}

/// Median latency and bandwidth over several fits, as a topology link.
fn median_link<'a>(fits: impl Iterator<Item = &'a LinkFit> + Clone) -> Option<LinkSpec> {
    Some(LinkSpec {
        bandwidth_gb_s: Some(median(fits.clone().map(|f| f.bandwidth_gb_s).collect())?),
        bandwidth_gbit_s: None,
        latency_us: median(fits.map(|f| f.latency_us).collect())?,
    })
}

/// A topology for `dagsim predict --topology`: `base` with this machine's GPUs per node, GPU
/// model, host link (median over GPUs of the pinned host-to-device fit) and, when peer copies are
/// much faster than the host link, a direct GPU-GPU link (median of the peer fits). The network
/// and storage are not measured here and stay as `base` gives them.
/// `source` names the calibration (its file, or the run that measured it) in errors.
pub fn derive_topology(file: &CalibrationFile, base: &Topology, source: &Path) -> Result<Topology> {
    let bad = |field: &str, msg: String| Error::parse(Location::file(source).with_field(field), msg);
    let m = &file.measurements;
    let fits = &file.fits;
    let h2d = fits.host_copies.iter().filter(|f| f.direction == Direction::H2d && f.memory == HostMemory::Pinned);
    let pcie = median_link(h2d.map(|f| &f.fit))
        .ok_or_else(|| bad("fits.host_copies", "no pinned host-to-device fit, so it cannot give a host link".into()))?;
    let peer = median_link(fits.peer_copies.iter().map(|f| &f.fit));
    let all_direct = m.peer_copies.iter().all(|s| s.peer_access);
    let nvlink = peer.filter(|p| {
        all_direct && p.bandwidth_gb_s.unwrap_or(0.0) > DIRECT_PEER_FACTOR * pcie.bandwidth_gb_s.unwrap_or(0.0)
    });
    let first = m.devices.first().ok_or_else(|| bad("measurements.devices", "lists no devices".into()))?;
    let mut t = base.clone();
    t.name = format!("{}-calibrated", base.name);
    t.description = format!(
        "{} x {} measured by dagsim calibrate --gpu; network and storage from `{}`",
        m.devices.len(),
        first.name,
        base.name
    );
    t.source = format!(
        "dagsim {} GPU calibration ({} warm-up, {} repetitions, medians); host link = pinned H2D fit{}",
        file.dagsim_version,
        m.settings.warmup,
        m.settings.repetitions,
        if nvlink.is_some() { ", GPU-GPU link = peer-copy fit" } else { ", peer traffic via host" }
    );
    let cluster = t.cluster.as_mut().ok_or_else(|| {
        Error::Gpu(format!(
            "base topology `{}` is a device graph; give a parametric (`cluster`) topology to take network and storage from",
            base.name
        ))
    })?;
    cluster.gpus_per_node = m.devices.len() as u32;
    cluster.gpu = first.name.clone();
    cluster.pcie = pcie;
    cluster.nvlink = nvlink;
    // Fits a topology cannot hold (a corrupt or extreme file) are refused here, naming the file,
    // rather than written out as a topology no command can load.
    let gpus = cluster.gpus_per_node;
    t.instantiate(gpus).map_err(|e| bad("fits", format!("gives no usable topology: {e}")))?;
    Ok(t)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn summary(t: f64) -> Summary {
        Summary::of(&[t * 0.99, t, t * 1.02]).unwrap()
    }

    fn series(latency_s: f64, gb_s: f64) -> Vec<SizePoint> {
        (0..10)
            .map(|i| {
                let bytes = 1024u64 << (2 * i);
                SizePoint { bytes, time_s: summary(latency_s + bytes as f64 / (gb_s * 1e9)) }
            })
            .collect()
    }

    /// Two GPUs with known latencies and bandwidths; peers at `peer_gb_s`.
    pub(crate) fn synthetic(peer_gb_s: f64) -> GpuMeasurements {
        let devices: Vec<DeviceInfo> = (0..2)
            .map(|i| DeviceInfo {
                ordinal: i,
                name: "Synthetic GPU".into(),
                compute_capability: "8.0".into(),
                multiprocessors: 108,
                memory_bytes: 40 << 30,
            })
            .collect();
        let host =
            |device, direction, memory, gb| HostCopySeries { device, direction, memory, points: series(10e-6, gb) };
        GpuMeasurements {
            settings: Settings { warmup: 3, repetitions: 20 },
            devices,
            gemm: vec![GemmPoint {
                device: 0,
                dtype: Dtype::F16,
                n: 4096,
                time_s: summary(2.0 * 4096f64.powi(3) / 200e12),
            }],
            host_copies: vec![
                host(0, Direction::H2d, HostMemory::Pinned, 24.0),
                host(1, Direction::H2d, HostMemory::Pinned, 22.0),
                host(0, Direction::D2h, HostMemory::Pageable, 8.0),
            ],
            peer_copies: vec![
                PeerCopySeries { src: 0, dst: 1, peer_access: true, points: series(3e-6, peer_gb_s) },
                PeerCopySeries { src: 1, dst: 0, peer_access: true, points: series(3e-6, peer_gb_s) },
            ],
            allreduce: Some(AllReduceSeries { devices: vec![0, 1], points: series(20e-6, peer_gb_s / 2.0) }),
            notes: vec![],
        }
    }

    #[test]
    fn fits_recover_the_synthetic_parameters() {
        let f = CalibrationFile::new(synthetic(250.0)).fits;
        assert!((f.gemm[0].tflops / 200.0 - 1.0).abs() < 1e-9, "{:?}", f.gemm);
        let h = &f.host_copies[0].fit;
        assert!((h.latency_us - 10.0).abs() < 1e-6 && (h.bandwidth_gb_s - 24.0).abs() < 1e-6, "{h:?}");
        let p = &f.peer_copies[0].fit;
        assert!((p.latency_us - 3.0).abs() < 1e-6 && (p.bandwidth_gb_s - 250.0).abs() < 1e-5, "{p:?}");
        let a = f.allreduce.unwrap();
        assert!((a.latency_us - 20.0).abs() < 1e-6 && (a.bandwidth_gb_s - 125.0).abs() < 1e-5, "{a:?}");
        assert_eq!(h.curve.len(), 10);
    }

    #[test]
    fn file_round_trips_through_json() {
        let file = CalibrationFile::new(synthetic(250.0));
        let mut buf = Vec::new();
        file.write_json(&mut buf).unwrap();
        let back = CalibrationFile::parse(std::str::from_utf8(&buf).unwrap(), Path::new("cal.json")).unwrap();
        assert_eq!(back, file);
    }

    #[test]
    fn bad_files_name_the_file_and_line_or_field() {
        let e = CalibrationFile::parse("{\n  \"format\": 3\n}", Path::new("cal.json")).unwrap_err();
        assert!(e.to_string().starts_with("cal.json:2"), "{e}");
        let mut file = CalibrationFile::new(synthetic(250.0));
        file.format = "something-else/9".into();
        let text = serde_json::to_string(&file).unwrap();
        let e = CalibrationFile::parse(&text, Path::new("cal.json")).unwrap_err();
        assert!(e.to_string().contains("field `format`"), "{e}");
    }

    #[test]
    fn derived_topology_uses_measured_links_and_instantiates() {
        let base = crate::hw::load_topology("k80-cluster").unwrap();
        let t = derive_topology(&CalibrationFile::new(synthetic(250.0)), &base, Path::new("cal.json")).unwrap();
        assert_eq!(t.cluster.as_ref().unwrap().gpus_per_node, 2);
        assert_eq!(t.cluster.as_ref().unwrap().gpu, "Synthetic GPU");
        assert!((t.cluster.as_ref().unwrap().pcie.bandwidth_gb_s.unwrap() - 23.0).abs() < 1e-6); // median of 24 and 22
        assert!((t.cluster.as_ref().unwrap().pcie.latency_us - 10.0).abs() < 1e-6);
        let nv = t.cluster.as_ref().unwrap().nvlink.as_ref().expect("250 GB/s peers are a direct link");
        assert!((nv.bandwidth_gb_s.unwrap() - 250.0).abs() < 1e-5);
        assert_eq!(
            t.cluster.as_ref().unwrap().network.link.bandwidth_gbit_s,
            base.cluster.as_ref().unwrap().network.link.bandwidth_gbit_s
        );
        let machine = t.instantiate(4).unwrap();
        assert_eq!(machine.gpu_model, "Synthetic GPU");
        // Round trip through the topology reader, as `predict --topology FILE` does.
        let text = serde_json::to_string_pretty(&t).unwrap();
        crate::hw::topology::parse_topology(&text, Path::new("t.json"), false).unwrap();
    }

    #[test]
    fn slow_peers_are_routed_through_the_host() {
        let base = crate::hw::load_topology("k80-cluster").unwrap();
        let t = derive_topology(&CalibrationFile::new(synthetic(20.0)), &base, Path::new("cal.json")).unwrap();
        assert!(t.cluster.as_ref().unwrap().nvlink.is_none());
    }

    #[test]
    fn no_host_copies_is_a_clear_error() {
        let mut m = synthetic(250.0);
        m.host_copies.clear();
        let base = crate::hw::load_topology("k80-cluster").unwrap();
        let e = derive_topology(&CalibrationFile::new(m), &base, Path::new("cal.json")).unwrap_err();
        assert!(e.to_string().contains("host-to-device"), "{e}");
        assert!(e.to_string().contains("cal.json") && e.to_string().contains("fits.host_copies"), "{e}");
    }

    /// A fit no topology can hold (found by the `gpu-calibration` fuzz target: a host link of
    /// 1e13 GB/s) is refused naming the file, not written out as an unloadable topology.
    #[test]
    fn fits_out_of_range_name_the_file() {
        let mut file = CalibrationFile::new(synthetic(250.0));
        for f in &mut file.fits.host_copies {
            f.fit.bandwidth_gb_s = 1e13;
        }
        let base = crate::hw::load_topology("k80-cluster").unwrap();
        let e = derive_topology(&file, &base, Path::new("cal.json")).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("cal.json") && text.contains("fits") && text.contains("outside the supported range"),
            "{text}"
        );
    }
}
