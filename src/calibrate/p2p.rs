//! GPU-to-GPU matrices (CUDA's p2pBandwidthLatencyTest and Tartan's per-size variant of it) as
//! calibration input. The per-size form (`===== <bytes> =====` blocks, each with a
//! `<Kind>-Latency` matrix of one message's time in us) fits one curve for the links of a kind
//! from every directly linked GPU pair; the plain form (one bandwidth and one latency matrix)
//! gives a latency and a flat rate per directly linked pair. Either way the result is checked by
//! running single transfers through the engine on the calibrated machine.

use super::simulate_transfers;
use crate::error::{Error, Location, Result};
use crate::hw::calibration::{Calibration, CurvePoint, LinkCalibration, Provenance};
use crate::hw::{LinkKind, Topology};
use std::path::Path;

/// A square matrix indexed [src GPU][dst GPU].
pub type Matrix = Vec<Vec<f64>>;

/// Times of one message between every GPU pair, at one or more sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct P2pTable {
    pub input: String,
    /// (message bytes, time_us[src][dst]); the diagonal is ignored.
    pub sizes: Vec<(u64, Matrix)>,
    /// Plain form only: bandwidth matrix (GB/s) and latency matrix (us).
    pub plain: Option<(Matrix, Matrix)>,
}

/// One measured pair and size against the calibrated model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct P2pCheck {
    pub from: String,
    pub to: String,
    pub bytes: u64,
    pub measured_us: f64,
    pub predicted_us: f64,
}

impl P2pCheck {
    pub fn error(&self) -> f64 {
        (self.predicted_us - self.measured_us) / self.measured_us
    }
}

/// Reads the square matrix that follows the line containing `title` (a `D\D` header, then rows
/// `i v0 v1 ...`). Returns `None` if the title is absent.
fn matrix_after(lines: &[&str], title: &str, path: &Path) -> Result<Option<Matrix>> {
    let Some(start) = lines.iter().position(|l| l.trim() == title || l.starts_with(title)) else {
        return Ok(None);
    };
    let mut rows = Vec::new();
    for (k, line) in lines.iter().enumerate().skip(start + 2) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.first().and_then(|c| c.parse::<usize>().ok()) != Some(rows.len()) {
            break;
        }
        let row =
            cols[1..].iter().map(|c| c.parse::<f64>()).collect::<std::result::Result<Vec<_>, _>>().map_err(|_| {
                Error::parse(Location::line(path, k + 1), "matrix row has a value that is not a number")
            })?;
        // Latencies (us) and bandwidths (GB/s) alike must be finite and positive and in range.
        for (j, &v) in row.iter().enumerate() {
            let ok = if title.contains("Bandwidth") {
                crate::units::check_rate_gb_s(v).map(|_| ())
            } else {
                crate::units::check_duration_us(v).map(|_| ())
            };
            ok.map_err(|m| Error::parse(Location::line(path, k + 1).with_field(format!("column {j}")), m))?;
        }
        rows.push(row);
    }
    if rows.is_empty() || rows.iter().any(|r| r.len() != rows.len()) {
        return Err(Error::parse(
            Location::line(path, start + 1),
            format!("`{title}` is not followed by a square matrix"),
        ));
    }
    Ok(Some(rows))
}

/// Reads either form; `kind` picks the per-size latency matrix (`NVLink-Latency`, `PCIe-Latency`).
pub fn read_p2p(path: &Path, kind: LinkKind) -> Result<P2pTable> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_p2p(&text, path, kind)
}

/// [`read_p2p`] on text already in memory; `path` names it in messages.
pub fn parse_p2p(text: &str, path: &Path, kind: LinkKind) -> Result<P2pTable> {
    let lines: Vec<&str> = text.lines().collect();
    let input = path.display().to_string();
    let title = match kind {
        LinkKind::Nvlink => "NVLink-Latency",
        _ => "PCIe-Latency",
    };
    let mut sizes: Vec<(u64, Matrix)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        if let Some(size) = t.strip_prefix("=====").and_then(|r| r.strip_suffix("=====")) {
            let bytes: u64 = size
                .trim()
                .parse()
                .map_err(|_| Error::parse(Location::line(path, i + 1), format!("`{size}` is not a size in bytes")))?;
            let end = lines[i + 1..].iter().position(|l| l.starts_with("=====")).map_or(lines.len(), |p| i + 1 + p);
            // `lines[i..end]` restarts line numbers at the block; errors inside it say the block.
            if let Some(m) = matrix_after(&lines[i..end], title, path)? {
                if let Some((first_bytes, first)) = sizes.first() {
                    if m.len() != first.len() {
                        return Err(Error::parse(
                            Location::line(path, i + 1),
                            format!(
                                "the `{title}` matrix for {bytes} bytes is {n}x{n}, but the one for {first_bytes} bytes \
                                 is {f}x{f}: every block must cover the same GPUs",
                                n = m.len(),
                                f = first.len()
                            ),
                        ));
                    }
                }
                sizes.push((bytes, m));
            }
            i = end;
        } else {
            i += 1;
        }
    }
    if !sizes.is_empty() {
        return Ok(P2pTable { input, sizes, plain: None });
    }
    let bw = matrix_after(&lines, "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)", path)?;
    let lat = matrix_after(&lines, "P2P=Enabled Latency Matrix (us)", path)?;
    match (bw, lat) {
        (Some(bw), Some(lat)) if bw.len() == lat.len() => Ok(P2pTable { input, sizes, plain: Some((bw, lat)) }),
        _ => Err(Error::parse(
            Location::file(path),
            format!("no `===== <bytes> =====` blocks with `{title}`, nor P2P=Enabled bandwidth and latency matrices"),
        )),
    }
}

/// Calibrates the `kind` links between the first node's GPUs from a matrix table.
pub fn fit_p2p(topology: &Topology, table: &P2pTable, kind: LinkKind) -> Result<(Calibration, Vec<P2pCheck>)> {
    let n = table.plain.as_ref().map_or_else(|| table.sizes[0].1.len(), |p| p.0.len());
    let mut bare = topology.clone();
    bare.calibrated = None;
    let machine = bare.instantiate(n as u32)?;
    let gpu = |g: usize| machine.gpus[g].device;
    // Ordered pairs joined by one link of the kind.
    let direct: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .filter(|&(a, b)| {
            a != b
                && machine.out_links(gpu(a)).iter().any(|&l| {
                    let l = &machine.links[l as usize];
                    l.to == gpu(b) && l.kind == kind
                })
        })
        .collect();
    if direct.is_empty() {
        return Err(Error::invalid(
            "topology",
            format!("{}: no GPU pair of topology `{}` is joined by a {} link", table.input, topology.name, kind.name()),
        ));
    }
    let provenance = Provenance {
        tool: format!("dagsim calibrate {}", env!("CARGO_PKG_VERSION")),
        inputs: vec![table.input.clone()],
        hardware: machine.gpu_model.clone(),
        notes: format!("{} links fitted to GPU-to-GPU matrices over topology `{}`", kind.name(), topology.name),
    };
    let mut cal = Calibration::new(provenance);
    let name = |g: usize| machine.device_name(gpu(g)).to_string();
    let mut checks_at: Vec<(usize, usize, u64, f64)> = Vec::new();
    if let Some((bw, lat)) = &table.plain {
        for &(a, b) in &direct {
            cal.links.push(LinkCalibration {
                kind: None,
                from: Some(name(a)),
                to: Some(name(b)),
                latency_us: lat[a][b],
                bandwidth: vec![CurvePoint { bytes: 0, gb_s: bw[a][b] }],
            });
        }
    } else {
        // One curve for the kind: the median over direct pairs of each size's time; latency from
        // the smallest size, rates from the time beyond it.
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let times: Vec<(u64, f64)> =
            table.sizes.iter().map(|(s, m)| (*s, median(direct.iter().map(|&(a, b)| m[a][b]).collect()))).collect();
        let latency_us = times.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
        let curve: Vec<CurvePoint> = times
            .iter()
            .filter(|&&(_, t)| t > latency_us * 1.05)
            .map(|&(s, t)| CurvePoint { bytes: s, gb_s: s as f64 / ((t - latency_us) * 1e3) })
            .collect();
        if curve.is_empty() {
            return Err(Error::invalid("measurement", format!("{}: no size is slower than the latency", table.input)));
        }
        cal.links.push(LinkCalibration {
            kind: Some(kind.name().into()),
            from: None,
            to: None,
            latency_us,
            bandwidth: curve,
        });
        for (s, m) in &table.sizes {
            for &(a, b) in &direct {
                checks_at.push((a, b, *s, m[a][b]));
            }
        }
    }
    let mut fitted = machine.clone();
    fitted.apply_calibration(&cal).map_err(|e| Error::invalid(format!("fit to {}", table.input), e.to_string()))?;
    let mut checks = Vec::new();
    for (a, b, bytes, measured_us) in checks_at {
        let predicted_us = simulate_transfers(&fitted, &[(gpu(a), gpu(b), bytes)])?[0] as f64 / 1e3;
        checks.push(P2pCheck { from: name(a), to: name(b), bytes, measured_us, predicted_us });
    }
    Ok((cal, checks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::load_topology;

    /// A per-size table for a DGX-1 whose NVLink pairs take 10 us + bytes / 20 GB/s and whose
    /// other pairs take longer (they are not fitted).
    fn synthetic() -> String {
        let nv = [
            [1, 2, 3, 4],
            [0, 2, 3, 5],
            [0, 1, 3, 6],
            [0, 1, 2, 7],
            [0, 5, 6, 7],
            [1, 4, 6, 7],
            [2, 4, 5, 7],
            [3, 4, 5, 6],
        ];
        let mut text = String::new();
        for shift in [0, 10, 16, 20, 24] {
            let bytes = 1u64 << shift;
            text += &format!("===== {bytes} =====\nNVLink-Latency\n   D\\D     0 1 2 3 4 5 6 7\n");
            for (a, row) in nv.iter().enumerate() {
                let cells: Vec<String> = (0..8)
                    .map(|b| {
                        let t = 10.0 + bytes as f64 / 20e3;
                        format!("{:.3}", if row.contains(&b) { t } else { 3.0 * t })
                    })
                    .collect();
                text += &format!("     {a} {}\n", cells.join(" "));
            }
        }
        text
    }

    #[test]
    fn recovers_latency_and_rate_from_per_size_matrices() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("packet.txt");
        std::fs::write(&path, synthetic()).unwrap();
        let table = read_p2p(&path, LinkKind::Nvlink).unwrap();
        assert_eq!(table.sizes.len(), 5);
        let topo = load_topology("dgx1-p100").unwrap();
        let (cal, checks) = fit_p2p(&topo, &table, LinkKind::Nvlink).unwrap();
        let link = &cal.links[0];
        assert_eq!(link.latency_us, 10.0);
        assert!(link.bandwidth.iter().all(|p| (p.gb_s - 20.0).abs() < 0.01), "{:?}", link.bandwidth);
        assert_eq!(checks.len(), 5 * 32); // 16 cube-mesh pairs, both directions, at 5 sizes
        assert!(checks.iter().all(|c| c.error().abs() < 1e-3), "{checks:?}");
    }

    #[test]
    fn a_file_without_matrices_is_rejected_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.txt");
        std::fs::write(&path, "hello\n").unwrap();
        let e = read_p2p(&path, LinkKind::Nvlink).unwrap_err().to_string();
        assert!(e.contains("empty.txt") && e.contains("NVLink-Latency"), "{e}");
    }
}
