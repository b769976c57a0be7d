//! Calibration files: link latencies and bandwidth curves (and collective efficiencies) fitted from
//! measurements, with the provenance of the fit. `dagsim calibrate` writes them; a topology file
//! (`"calibration": "file.json"`) or `dagsim predict --calibration FILE` applies one to the machine
//! after it is built ([`Machine::apply_calibration`]). Owns the format and its checks only: it does
//! not fit anything (see `crate::hw::fit`) and does not know the engine.
//!
//! Format (JSON, `format` must be [`FORMAT`]):
//!
//! ```json
//! { "format": "dagsim-calibration/1",
//!   "provenance": { "tool": "dagsim calibrate 0.1.0", "inputs": ["allreduce.nccl"],
//!                   "hardware": "4 x V100-SXM2, NVLink", "notes": "" },
//!   "links": [ { "kind": "nvlink", "latency_us": 1.1,
//!                "bandwidth": [ { "bytes": 1024, "gb_s": 0.9 }, { "bytes": 8388608, "gb_s": 22.5 } ] },
//!              { "from": "n0.gpu0", "to": "n0.gpu1", "latency_us": 1.0,
//!                "bandwidth": [ { "bytes": 0, "gb_s": 20.0 } ] } ],
//!   "collectives": [ { "op": "all-reduce", "algorithm": "ring", "efficiency": 0.9 } ],
//!   "nccl": [ { "transport": "p2p-nvlink", "hop_latency_us": 0.39 } ],
//!   "nccl_protocols": [ { "protocol": "LL128", "start_us": 50.0, "rate_factor": 0.55 } ],
//!   "fit": [ ... per-point measured vs model, written by the fitter, ignored when applied ... ] }
//! ```
//!
//! A `links` entry matches every link of a `kind`, or the one directed link `from` -> `to`
//! (device names as the machine prints them). Kind entries are applied first, then pair entries,
//! so a pair entry overrides its kind. Sizes are message bytes; rates are GB/s (1e9 bytes/s).
//! A collective efficiency e > 0 makes that collective move bytes/e: below 1 it captures what the
//! library loses beyond the links (kernel time, protocol); above 1, what it gains over the model's
//! algorithm on the same links (e.g. NCCL pipelines a broadcast in far more pieces, over several
//! channels). Fitted from measurements (`dagsim calibrate`), not assumed. An `nccl` entry (under
//! the NCCL collective model only) adds its latency to every hop its transport carries, on top of
//! NCCL's per-protocol hardware latency; `calibrate --collective-model nccl` fits it. An
//! `nccl_protocols` entry gives one protocol a fixed start cost per call and a factor on its rate;
//! `nccl_channel_us` a time every channel beyond the first adds to each call.

use super::{BandwidthCurve, LinkKind, Machine};
use crate::collective::{Algorithm, CollectiveModel, CollectiveOp};
use crate::error::{Error, Location, Result};
use crate::units::{gb_per_s_to_bytes_per_ns, us_to_ns};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The value of the `format` field this version reads and writes.
pub const FORMAT: &str = "dagsim-calibration/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub format: String,
    pub provenance: Provenance,
    #[serde(default)]
    pub links: Vec<LinkCalibration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveEfficiency>,
    /// Per NCCL transport, the latency each hop adds to NCCL's per-protocol hardware latency
    /// (applies under the NCCL collective model only; `calibrate --collective-model nccl` fits it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nccl: Vec<NcclHopCalibration>,
    /// Per NCCL protocol, a fixed start cost per call and a factor on the rate the model gives
    /// the protocol (NCCL model only; absent in older files, which then load unchanged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nccl_protocols: Vec<NcclProtocolCalibration>,
    /// Time (us) each channel beyond the first adds to every NCCL call (NCCL model only; absent
    /// in older files). NCCL 2.8.4 hands block 0 its work as the launch argument and has every
    /// other block read its work element and then the abort flag from host-mapped memory before it
    /// starts (`load_coll`, common.h v2.8.4-1 l.44-50, 93; `workFifo` and `abortFlag` from
    /// `cudaHostAlloc`, channel.cc l.28, init.cc l.239); the ABCI single-node all-reduces take
    /// about 1.0-1.3 us more per added channel where each channel's piece stays one LL grain, on
    /// 6- and 14-step rings alike (topologies/measured/abci). No public figure gives it, so only
    /// `calibrate --collective-model nccl` sets it, from the user's own measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_channel_us: Option<f64>,
    /// The fitter's report, kept with the numbers it justifies. Not used when applying.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fit: Vec<FitPoint>,
}

/// Where the numbers came from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Program (and version) that wrote the file, e.g. `dagsim calibrate 0.1.0`.
    pub tool: String,
    /// Measurement files the fit read.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Machine measured, as far as the inputs say.
    #[serde(default)]
    pub hardware: String,
    #[serde(default)]
    pub notes: String,
}

/// Fitted latency and bandwidth curve for the links of one kind, or one directed device pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkCalibration {
    /// Link kind name (`pcie`, `nvlink`, `nvswitch`, `qpi`, `ethernet`, `infiniband`, `storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub latency_us: f64,
    /// Achievable rate of one message by size; piecewise-linear between points, flat beyond.
    pub bandwidth: Vec<CurvePoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurvePoint {
    pub bytes: u64,
    pub gb_s: f64,
}

/// Fraction of the modelled link rate one collective algorithm achieves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveEfficiency {
    pub op: CollectiveOp,
    pub algorithm: Algorithm,
    pub efficiency: f64,
    /// The collective model it was fitted under (`ideal` when absent, as files before the NCCL
    /// model were); it applies only under that model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A hop latency fitted through the NCCL model for one transport: every hop the transport carries
/// takes `hop_latency_us` more than NCCL's per-protocol figure (tuning.cc `hwLat`), whatever the
/// protocol (a property of the machine's path, not of the protocol).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclHopCalibration {
    /// `p2p-nvlink`, `p2p-pcie`, `shm`, `net-ib`, `net-ib-gdr`, `net-socket`.
    pub transport: crate::collective::nccl::transport::Transport,
    pub hop_latency_us: f64,
}

/// How one NCCL protocol runs on the measured machine beyond NCCL's own tuner figures, fitted
/// through the NCCL model: every call the tuner gives this protocol starts `start_us` later, and
/// every hop moves its bytes at `rate_factor` times the rate the model gives the protocol. The
/// tuner still chooses the protocol by NCCL's own figures (as NCCL does), so the fitted costs
/// follow NCCL's protocol switches at sizes the fit never saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclProtocolCalibration {
    /// `LL`, `LL128` or `Simple` (any case, as `NCCL_PROTO`).
    pub protocol: String,
    /// Fixed time (us) added once to every call run with this protocol.
    #[serde(default)]
    pub start_us: f64,
    /// Multiplies the rate of every hop of a call run with this protocol (1: the model's rate).
    #[serde(default = "one")]
    pub rate_factor: f64,
}

fn one() -> f64 {
    1.0
}

impl NcclProtocolCalibration {
    /// The protocol, or what is wrong with one field: (field, message).
    fn checked(&self) -> std::result::Result<crate::collective::nccl::version::Proto, (&'static str, String)> {
        let proto = crate::collective::nccl::version::Proto::parse(&self.protocol)
            .ok_or(("protocol", format!("unknown NCCL protocol `{}` (known: LL, LL128, Simple)", self.protocol)))?;
        crate::units::check_duration_us(self.start_us).map_err(|m| ("start_us", m))?;
        if !(self.rate_factor.is_finite() && self.rate_factor > 0.0 && self.rate_factor <= 100.0) {
            return Err(("rate_factor", format!("must be a factor in (0, 100], found {}", self.rate_factor)));
        }
        Ok(proto)
    }
}

/// One measured point against the fitted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitPoint {
    pub input: String,
    pub op: CollectiveOp,
    /// GPUs (ranks) that ran it (`ranks` in files written before `gpus` was the one name; read
    /// still).
    #[serde(rename = "gpus", alias = "ranks")]
    pub ranks: u32,
    pub bytes: u64,
    pub measured_us: f64,
    /// The model's time (`model_us` in files written before 0.2; read still).
    #[serde(alias = "model_us")]
    pub predicted_us: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
    /// True if the point was left out of the fit (a prediction, not a reproduction).
    pub held_out: bool,
}

impl Calibration {
    /// An empty calibration with the current format tag.
    pub fn new(provenance: Provenance) -> Self {
        Calibration {
            format: FORMAT.into(),
            provenance,
            links: Vec::new(),
            collectives: Vec::new(),
            nccl: Vec::new(),
            nccl_protocols: Vec::new(),
            nccl_channel_us: None,
            fit: Vec::new(),
        }
    }

    /// Reads and checks a calibration file; errors name the file and the line or entry.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let c: Calibration =
            serde_json::from_str(text).map_err(|e| Error::parse(Location::line(path, e.line()), e.to_string()))?;
        c.check(path)?;
        Ok(c)
    }

    /// Writes the file as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a calibration always serialises") + "\n"
    }

    fn check(&self, path: &Path) -> Result<()> {
        let at = |field: String| Location::file(path).with_field(field);
        if self.format != FORMAT {
            return Err(Error::parse(at("format".into()), format!("expected `{FORMAT}`, found `{}`", self.format)));
        }
        for (i, l) in self.links.iter().enumerate() {
            let field = |f: &str| at(format!("links[{i}].{f}"));
            match (&l.kind, &l.from, &l.to) {
                (Some(k), None, None) => {
                    if LinkKind::parse(k).is_none() {
                        return Err(Error::parse(field("kind"), format!("unknown link kind `{k}`")));
                    }
                }
                (None, Some(_), Some(_)) => {}
                _ => return Err(Error::parse(at(format!("links[{i}]")), "give either `kind` or both `from` and `to`")),
            }
            l.check_values().map_err(|(f, m)| Error::parse(field(&f), m))?;
        }
        for (i, c) in self.collectives.iter().enumerate() {
            check_efficiency(c.efficiency).map_err(|m| Error::parse(at(format!("collectives[{i}].efficiency")), m))?;
        }
        for (i, n) in self.nccl.iter().enumerate() {
            crate::units::check_duration_us(n.hop_latency_us)
                .map_err(|m| Error::parse(at(format!("nccl[{i}].hop_latency_us")), m))?;
        }
        for (i, p) in self.nccl_protocols.iter().enumerate() {
            p.checked().map_err(|(f, m)| Error::parse(at(format!("nccl_protocols[{i}].{f}")), m))?;
        }
        if let Some(c) = self.nccl_channel_us {
            crate::units::check_duration_us(c).map_err(|m| Error::parse(at("nccl_channel_us".to_string()), m))?;
        }
        Ok(())
    }
}

/// A collective efficiency: the fraction of the modelled rate reached, in [1e-3, 1e3].
fn check_efficiency(e: f64) -> std::result::Result<(), String> {
    if e.is_finite() && (1e-3..=1e3).contains(&e) {
        Ok(())
    } else {
        Err(format!("expected an efficiency in [0.001, 1000], found `{}`", crate::units::show(e)))
    }
}

impl LinkCalibration {
    /// Latency and every curve point in range; the error names the field (`latency_us`,
    /// `bandwidth[k].gb_s`). Checked when a file is read and again when applied, since fitted
    /// calibrations never pass through a file.
    fn check_values(&self) -> std::result::Result<(), (String, String)> {
        crate::units::check_duration_us(self.latency_us).map_err(|m| ("latency_us".to_string(), m))?;
        if self.bandwidth.is_empty() {
            return Err(("bandwidth".into(), "needs at least one point".into()));
        }
        for (k, p) in self.bandwidth.iter().enumerate() {
            crate::units::check_rate_gb_s(p.gb_s).map_err(|m| (format!("bandwidth[{k}].gb_s"), m))?;
            crate::units::check_bytes(p.bytes).map_err(|m| (format!("bandwidth[{k}].bytes"), m))?;
        }
        Ok(())
    }
}

impl LinkCalibration {
    pub fn curve(&self) -> BandwidthCurve {
        let pts = self.bandwidth.iter().map(|p| (p.bytes, gb_per_s_to_bytes_per_ns(p.gb_s))).collect();
        BandwidthCurve::from_points(pts).expect("checked when the calibration was read")
    }
}

impl Machine {
    /// Replaces the latency and bandwidth curve of every link a calibration names, and records its
    /// collective efficiencies. Errors name the entry that matches nothing.
    pub fn apply_calibration(&mut self, cal: &Calibration) -> Result<()> {
        let kinds = cal.links.iter().filter(|l| l.kind.is_some());
        let pairs = cal.links.iter().filter(|l| l.kind.is_none());
        for (i, entry) in kinds.chain(pairs).enumerate() {
            entry.check_values().map_err(|(f, m)| {
                let what = match (&entry.kind, &entry.from, &entry.to) {
                    (Some(k), _, _) => format!("kind {k}"),
                    (_, Some(a), Some(b)) => format!("{a} -> {b}"),
                    _ => "unnamed".into(),
                };
                Error::invalid(format!("calibration entry {i} ({what}), field `{f}`"), m)
            })?;
            let curve = entry.curve();
            let latency_ns = us_to_ns(entry.latency_us);
            let mut matched = 0;
            for link in &mut self.links {
                let hit = match (&entry.kind, &entry.from, &entry.to) {
                    (Some(k), _, _) => Some(link.kind) == LinkKind::parse(k),
                    (None, Some(f), Some(t)) => {
                        self.devices[link.from as usize].name == *f && self.devices[link.to as usize].name == *t
                    }
                    _ => false,
                };
                if hit {
                    link.latency_ns = latency_ns;
                    link.bandwidth = curve.clone();
                    matched += 1;
                }
            }
            if matched == 0 && entry.kind.is_none() {
                let (f, t) = (entry.from.as_deref().unwrap_or("?"), entry.to.as_deref().unwrap_or("?"));
                return Err(Error::topology(
                    self.name.clone(),
                    format!("calibration names link {f} -> {t}, which this machine does not have"),
                ));
            }
        }
        for c in &cal.collectives {
            check_efficiency(c.efficiency).map_err(|m| {
                Error::invalid(format!("calibration, {} {} efficiency", c.op.name(), c.algorithm.name()), m)
            })?;
            self.collective_efficiency.retain(|e| (e.op, e.algorithm, &e.model) != (c.op, c.algorithm, &c.model));
            self.collective_efficiency.push(c.clone());
        }
        for n in &cal.nccl {
            crate::units::check_duration_us(n.hop_latency_us)
                .map_err(|m| Error::invalid(format!("calibration, nccl {} hop_latency_us", n.transport.key()), m))?;
            let extra = &mut self.transports.nccl_hop_extra_ns;
            extra.retain(|e| e.0 != n.transport);
            extra.push((n.transport, us_to_ns(n.hop_latency_us)));
        }
        for p in &cal.nccl_protocols {
            let proto = p.checked().map_err(|(f, m)| Error::invalid(format!("calibration, nccl_protocols {f}"), m))?;
            let costs = &mut self.transports.nccl_protocol_costs;
            costs.retain(|c| c.0 != proto);
            costs.push((proto, us_to_ns(p.start_us), p.rate_factor));
        }
        if let Some(c) = cal.nccl_channel_us {
            crate::units::check_duration_us(c).map_err(|m| Error::invalid("calibration, nccl_channel_us", m))?;
            self.transports.nccl_channel_ns = us_to_ns(c);
        }
        Ok(())
    }

    /// Efficiency of a collective algorithm under a collective model, from calibration (1 when not
    /// calibrated for that model).
    pub fn efficiency(&self, op: CollectiveOp, algorithm: Algorithm, model: CollectiveModel) -> f64 {
        let model_name = match model {
            CollectiveModel::Ideal => "ideal",
            CollectiveModel::Nccl(_) => "nccl",
        };
        // The ideal model runs `auto` as its ring, so the two name one schedule there.
        let same = |a: Algorithm| {
            a == algorithm
                || (model == CollectiveModel::Ideal
                    && [a, algorithm].iter().all(|x| matches!(x, Algorithm::Ring | Algorithm::Auto)))
        };
        self.collective_efficiency
            .iter()
            .find(|e| e.op == op && same(e.algorithm) && e.model.as_deref().unwrap_or("ideal") == model_name)
            .map_or(1.0, |e| e.efficiency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"format":"dagsim-calibration/1","provenance":{"tool":"test"},
        "links":[{"kind":"pcie","latency_us":2,"bandwidth":[{"bytes":0,"gb_s":5},{"bytes":1000000,"gb_s":10}]},
                 {"from":"n0.gpu0","to":"n0.cpu","latency_us":1,"bandwidth":[{"bytes":0,"gb_s":3}]}],
        "collectives":[{"op":"all-reduce","algorithm":"ring","efficiency":0.5}]}"#;

    #[test]
    fn round_trips_and_applies_kind_then_pair() {
        let cal = Calibration::parse(GOOD, Path::new("c.json")).unwrap();
        assert_eq!(Calibration::parse(&cal.to_json(), Path::new("c.json")).unwrap(), cal);
        let mut m = crate::hw::load_topology("k80-cluster").unwrap().instantiate(4).unwrap();
        m.apply_calibration(&cal).unwrap();
        for l in &m.links {
            let (from, to) = (m.device_name(l.from), m.device_name(l.to));
            match (l.kind, from, to) {
                (LinkKind::Pcie, "n0.gpu0", "n0.cpu") => assert_eq!(l.bandwidth.rate_for(10), 3.0),
                (LinkKind::Pcie, _, _) => {
                    assert_eq!(l.latency_ns, 2000);
                    assert_eq!(l.bandwidth.rate_for(500_000), 7.5);
                }
                _ => assert_ne!(l.latency_ns, 2000),
            }
        }
        assert_eq!(m.efficiency(CollectiveOp::AllReduce, Algorithm::Ring, CollectiveModel::Ideal), 0.5);
        let nccl = CollectiveModel::from_flags(Some("nccl"), None, None, None).unwrap();
        assert_eq!(m.efficiency(CollectiveOp::AllReduce, Algorithm::Ring, nccl), 1.0);
        assert_eq!(m.efficiency(CollectiveOp::Broadcast, Algorithm::Ring, CollectiveModel::Ideal), 1.0);
    }

    #[test]
    fn bad_files_name_the_entry() {
        let bad = GOOD.replace("\"gb_s\":3", "\"gb_s\":0");
        let e = Calibration::parse(&bad, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("links[1].bandwidth[0].gb_s"), "{e}");
        let bad = GOOD.replace("\"kind\":\"pcie\"", "\"kind\":\"smoke-signal\"");
        let e = Calibration::parse(&bad, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("links[0].kind") && e.contains("smoke-signal"), "{e}");
        let cal = Calibration::parse(&GOOD.replace("n0.gpu0", "n9.gpu9"), Path::new("c.json")).unwrap();
        let mut m = crate::hw::load_topology("k80-cluster").unwrap().instantiate(4).unwrap();
        let e = m.apply_calibration(&cal).unwrap_err().to_string();
        assert!(e.contains("n9.gpu9 -> n0.cpu"), "{e}");
    }
}
