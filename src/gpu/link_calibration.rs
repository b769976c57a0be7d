//! The GPU measurements in the machines' shared calibration format (`dagsim-calibration/1`, owned
//! by `src/hw/calibration.rs` of the machines work), so `predict --calibration` applies them, and
//! the all-reduce series as an nccl-tests table, so `dagsim calibrate` can fit collectives to it.
//! Pure conversion; no CUDA.
//!

use super::calibration::{CalibrationFile, Direction, HostMemory, LinkFit, DIRECT_PEER_FACTOR};
use crate::error::{Error, Result};
use format::{Calibration, CurvePoint, LinkCalibration, Provenance};

/// The shared calibration format of the machines module.
pub use crate::hw::calibration as format;

/// The fit with the median bandwidth (the lower middle for an even count): a measured curve, not
/// an average of curves.
fn median_fit<'a>(fits: impl Iterator<Item = &'a LinkFit>) -> Option<&'a LinkFit> {
    let mut v: Vec<&LinkFit> = fits.collect();
    v.sort_by(|a, b| a.bandwidth_gb_s.total_cmp(&b.bandwidth_gb_s));
    v.get(v.len().saturating_sub(1) / 2).copied()
}

fn link(kind: &str, fit: &LinkFit) -> LinkCalibration {
    LinkCalibration {
        kind: Some(kind.into()),
        from: None,
        to: None,
        latency_us: fit.latency_us,
        bandwidth: fit.curve.iter().map(|&(bytes, gb_s)| CurvePoint { bytes, gb_s }).collect(),
    }
}

/// Link-kind entries from the GPU fits: `pcie` from the median GPU's pinned host-to-device fit,
/// and `nvlink` from the median peer fit when every pair had direct access and peers beat the host
/// link by [`DIRECT_PEER_FACTOR`] (the same rule as the derived topology). These are end-to-end
/// curves: on a machine whose GPU-host route has several PCIe hops each hop gets the whole latency.
pub fn link_calibration(file: &CalibrationFile) -> Result<Calibration> {
    let m = &file.measurements;
    let h2d = file.fits.host_copies.iter().filter(|f| f.direction == Direction::H2d && f.memory == HostMemory::Pinned);
    let pcie = median_fit(h2d.map(|f| &f.fit))
        .ok_or_else(|| Error::Gpu("the calibration has no pinned host-to-device fit to calibrate PCIe with".into()))?;
    let mut cal = Calibration::new(Provenance {
        tool: format!("dagsim calibrate --gpu {}", file.dagsim_version),
        inputs: Vec::new(),
        hardware: match m.devices.first() {
            Some(d) => format!("{} x {}", m.devices.len(), d.name),
            None => String::new(),
        },
        notes: format!(
            "CUDA-event medians of {} repetitions after {} warm-up runs; pcie = pinned host-to-device copies",
            m.settings.repetitions, m.settings.warmup
        ),
    });
    cal.links.push(link("pcie", pcie));
    let all_direct = !m.peer_copies.is_empty() && m.peer_copies.iter().all(|s| s.peer_access);
    if let Some(peer) = median_fit(file.fits.peer_copies.iter().map(|f| &f.fit)) {
        if all_direct && peer.bandwidth_gb_s > DIRECT_PEER_FACTOR * pcie.bandwidth_gb_s {
            cal.links.push(link("nvlink", peer));
            cal.provenance.notes += "; nvlink = peer copies";
        }
    }
    Ok(cal)
}

/// The measured all-reduce as an nccl-tests `all_reduce_perf` table (what `dagsim calibrate`
/// reads), or `None` if none was measured. Our all-reduce is in place; both the out-of-place and the
/// in-place columns hold its median, as a comment line in the table says.
pub fn nccl_tests_table(file: &CalibrationFile) -> Option<String> {
    let m = &file.measurements;
    let ar = m.allreduce.as_ref()?;
    let n = ar.devices.len() as f64;
    let (min, max) = (ar.points.first()?.bytes, ar.points.last()?.bytes);
    let mut t = format!(
        "# nThread 1 nGpus {} minBytes {min} maxBytes {max} step: 4(factor) warmup iters: {} iters: {} validation: 0\n",
        ar.devices.len(),
        m.settings.warmup,
        m.settings.repetitions
    );
    t += "# written by dagsim calibrate --gpu: in-place ncclAllReduce medians (CUDA events), in both time columns\n";
    for (rank, &d) in ar.devices.iter().enumerate() {
        let name = m.devices.iter().find(|x| x.ordinal == d).map_or("unknown", |x| x.name.as_str());
        t += &format!("#   Rank {rank:2} Pid 0 on localhost device {d:2} [0x00] {name}\n");
    }
    t += "#                                                     out-of-place                       in-place\n";
    t += "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n";
    t += "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n";
    for p in &ar.points {
        let us = p.time_s.median * 1e6;
        let algbw = p.bytes as f64 / us / 1e3;
        let busbw = algbw * 2.0 * (n - 1.0) / n;
        let cols = format!("{us:8.2} {algbw:7.2} {busbw:7.2}    N/A");
        t += &format!("{:12} {:13}   float     sum {cols} {cols}\n", p.bytes, p.bytes / 4);
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::calibration::{tests::synthetic, CalibrationFile};

    #[test]
    fn links_carry_the_median_host_fit_and_a_direct_peer_link() {
        let file = CalibrationFile::new(synthetic(250.0));
        let cal = link_calibration(&file).unwrap();
        assert_eq!(cal.format, "dagsim-calibration/1");
        assert_eq!(cal.links[0].kind.as_deref(), Some("pcie"));
        // Devices measured 24 and 22 GB/s: the lower middle (22) is a real measured curve.
        let h = file.fits.host_copies.iter().find(|f| f.device == 1).unwrap();
        assert_eq!(cal.links[0].latency_us, h.fit.latency_us);
        assert_eq!(cal.links[0].bandwidth.len(), h.fit.curve.len());
        assert_eq!(cal.links[0].bandwidth[3].gb_s, h.fit.curve[3].1);
        assert_eq!(cal.links[1].kind.as_deref(), Some("nvlink"));
        let back: format::Calibration = serde_json::from_str(&cal.to_json()).unwrap();
        assert_eq!(back, cal);
        assert!(cal.provenance.hardware.starts_with("2 x Synthetic GPU"));
    }

    #[test]
    fn slow_peers_give_no_nvlink_entry() {
        let cal = link_calibration(&CalibrationFile::new(synthetic(20.0))).unwrap();
        assert_eq!(cal.links.len(), 1);
    }

    #[test]
    fn nccl_table_has_ranks_and_times_in_microseconds() {
        let file = CalibrationFile::new(synthetic(250.0));
        let t = nccl_tests_table(&file).unwrap();
        // What the nccl-tests reader of `dagsim calibrate` looks for to recognise the table.
        assert!(t.contains("# nThread") && t.contains("out-of-place"));
        assert_eq!(t.lines().filter(|l| l.trim_start().starts_with("#   Rank")).count(), 2);
        let ar = file.measurements.allreduce.as_ref().unwrap();
        let rows: Vec<Vec<&str>> =
            t.lines().filter(|l| !l.starts_with('#')).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows.len(), ar.points.len());
        for (row, p) in rows.iter().zip(&ar.points) {
            assert_eq!(row[0].parse::<u64>().unwrap(), p.bytes);
            assert_eq!(row[4], row[8], "both time columns hold the same median");
            let us: f64 = row[4].parse().unwrap();
            assert!((us - p.time_s.median * 1e6).abs() <= 0.005 + 1e-9, "{us} vs {}", p.time_s.median);
        }
    }
}
