//! Input of the hybrid data/model-parallel strategy (Krizhevsky's "one weird trick" as Dettmers'
//! Appendix 5.1 models it): a per-layer table of baseline and model-parallel kernel times and of
//! measured synchronisation times at 32 and 8 bits. Reads the table format documented in
//! `traces/README.md`; the DAG is built by `dag::hybrid`. Knows nothing of machines or the engine.

use crate::error::{Error, Location, Result};
use crate::units::Nanos;
use std::path::Path;

/// What a table row describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// A data-parallel layer: its gradient is synchronised after its backward pass.
    Conv,
    /// The activations handed from the data-parallel to the model-parallel part (no compute).
    Activation,
    /// A model-parallel fully connected layer: its output activations and errors are exchanged.
    Fc,
}

/// One row. Times are per mini-batch on one GPU, in ns.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridRow {
    pub kind: RowKind,
    pub name: String,
    /// Time to send this row's buffer to every other GPU, 32-bit and (if measured) 8-bit.
    pub sync32_ns: Nanos,
    pub sync8_ns: Option<Nanos>,
    /// Baseline (whole layer on one GPU) forward, backward (errors) and update (weight gradient).
    pub fprop_ns: Nanos,
    pub bprop_ns: Nanos,
    pub update_ns: Nanos,
    /// Model-parallel slice (output units / K) for one sub-batch; FC rows only.
    pub par_fprop_ns: Nanos,
    pub par_bprop_ns: Nanos,
    pub par_update_ns: Nanos,
}

/// Word size of the exchanged buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Bits32,
    /// Dettmers' 8-bit approximation; rows without an 8-bit time fall back to 32-bit (his Table 3
    /// leaves the convolution gradients at 32 bits because they are hidden anyway).
    Bits8,
}

impl HybridRow {
    pub fn sync_ns(&self, p: Precision) -> Nanos {
        match p {
            Precision::Bits32 => self.sync32_ns,
            Precision::Bits8 => self.sync8_ns.unwrap_or(self.sync32_ns),
        }
    }
}

/// A whole table.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridTable {
    pub name: String,
    /// One full pass of the whole network on one GPU (forward, backward, update).
    pub total_ns: Nanos,
    pub batch_per_gpu: u32,
    /// Rows in forward order: conv rows, then the activation row, then FC rows.
    pub rows: Vec<HybridRow>,
}

impl HybridTable {
    /// Compute not itemised in the rows: `total - sum(rows)`, run as one data-parallel task.
    pub fn residual_ns(&self) -> Nanos {
        self.total_ns - self.itemised_ns()
    }
    fn itemised_ns(&self) -> Nanos {
        self.rows.iter().map(|r| r.fprop_ns + r.bprop_ns + r.update_ns).sum()
    }
    /// Baseline time of the FC rows (Dettmers' "fc time").
    pub fn fc_ns(&self) -> Nanos {
        self.rows.iter().filter(|r| r.kind == RowKind::Fc).map(|r| r.fprop_ns + r.bprop_ns + r.update_ns).sum()
    }
    /// The same table with a different full-pass total (e.g. the convnet2 kernels' 177 ms): the
    /// difference lands in the data-parallel residual.
    pub fn with_total_ns(&self, total_ns: Nanos) -> Result<Self> {
        if total_ns < self.itemised_ns() {
            return Err(Error::invalid("total", format!("{total_ns} ns is less than the itemised rows")));
        }
        Ok(HybridTable { total_ns, ..self.clone() })
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parses `# key: value` lines (`total_ms`, `batch_per_gpu`), a header row, then one row per
    /// layer. Empty cells mean "not measured" (8-bit sync) or "not applicable" (zero time).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let mut total_ns = None;
        let mut batch = 0u32;
        let mut header: Option<Vec<String>> = None;
        let mut rows = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let at = |field: &str| Location::line(path, line_no).with_field(field);
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix('#') {
                if let Some((k, v)) = meta.split_once(':') {
                    let v = v.trim();
                    match k.trim() {
                        "total_ms" => total_ns = Some(ms(v).ok_or_else(|| Error::parse(at("total_ms"), "not a time"))?),
                        "batch_per_gpu" => {
                            batch = v.parse().map_err(|_| Error::parse(at("batch_per_gpu"), "not a count"))?
                        }
                        _ => {}
                    }
                }
                continue;
            }
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            let Some(h) = &header else {
                header = Some(cells.iter().map(|c| c.to_string()).collect());
                for need in COLUMNS {
                    if !cells.contains(need) {
                        return Err(Error::parse(at(need), "header lacks this column"));
                    }
                }
                continue;
            };
            if cells.len() != h.len() {
                return Err(Error::parse(
                    Location::line(path, line_no),
                    format!("{} cells, header has {}", cells.len(), h.len()),
                ));
            }
            let cell = |name: &str| cells[h.iter().position(|c| c == name).expect("checked")];
            let time = |name: &str| -> Result<Option<Nanos>> {
                let c = cell(name);
                if c.is_empty() {
                    return Ok(None);
                }
                ms(c).map(Some).ok_or_else(|| Error::parse(at(name), format!("`{c}` is not a time in ms")))
            };
            let t0 = |name: &str| time(name).map(|t| t.unwrap_or(0));
            let kind = match cell("kind") {
                "conv" => RowKind::Conv,
                "activation" => RowKind::Activation,
                "fc" => RowKind::Fc,
                other => return Err(Error::parse(at("kind"), format!("`{other}`: expected conv, activation or fc"))),
            };
            let row = HybridRow {
                kind,
                name: cell("name").to_string(),
                sync32_ns: time("sync32_ms")?.ok_or_else(|| Error::parse(at("sync32_ms"), "missing"))?,
                sync8_ns: time("sync8_ms")?,
                fprop_ns: t0("fprop_ms")?,
                bprop_ns: t0("bprop_ms")?,
                update_ns: t0("update_ms")?,
                par_fprop_ns: t0("par_fprop_ms")?,
                par_bprop_ns: t0("par_bprop_ms")?,
                par_update_ns: t0("par_update_ms")?,
            };
            if kind == RowKind::Fc && row.par_fprop_ns + row.par_bprop_ns + row.par_update_ns == 0 {
                return Err(Error::parse(at("par_fprop_ms"), "an fc row needs its model-parallel times"));
            }
            rows.push(row);
        }
        let kinds: Vec<RowKind> = rows.iter().map(|r| r.kind).collect();
        let convs = kinds.iter().take_while(|&&k| k == RowKind::Conv).count();
        let order_ok = kinds.get(convs) == Some(&RowKind::Activation)
            && kinds.len() > convs + 1
            && kinds[convs + 1..].iter().all(|&k| k == RowKind::Fc);
        if !order_ok {
            return Err(Error::parse(
                Location::file(path),
                "rows must be conv rows, then exactly one activation row, then at least one fc row",
            ));
        }
        let total_ns = total_ns.ok_or_else(|| Error::parse(Location::file(path), "no `# total_ms:` line"))?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let table = HybridTable { name, total_ns: 0, batch_per_gpu: batch, rows };
        table.with_total_ns(total_ns).map_err(|_| {
            Error::parse(Location::file(path).with_field("total_ms"), "less than the sum of the rows' times")
        })
    }
}

const COLUMNS: &[&str] = &[
    "kind",
    "name",
    "sync32_ms",
    "sync8_ms",
    "fprop_ms",
    "bprop_ms",
    "update_ms",
    "par_fprop_ms",
    "par_bprop_ms",
    "par_update_ms",
];

/// Milliseconds as written to integer ns; rejects negatives and non-numbers.
fn ms(s: &str) -> Option<Nanos> {
    let v: f64 = s.parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| (v * 1e6).round() as Nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = "# total_ms: 10\nkind,name,sync32_ms,sync8_ms,fprop_ms,bprop_ms,update_ms,par_fprop_ms,par_bprop_ms,par_update_ms\n\
        conv,c1,0.5,,1,1,1,,,\nactivation,a,0.2,0.1,,,,,,\nfc,f1,0.3,,1,1,1,0.5,0.5,0.5\n";

    #[test]
    fn parses_rows_and_residual() {
        let t = HybridTable::parse(TINY, Path::new("t.csv")).unwrap();
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.residual_ns(), 4_000_000);
        assert_eq!(t.fc_ns(), 3_000_000);
        assert_eq!(t.rows[1].sync_ns(Precision::Bits8), 100_000);
        assert_eq!(t.rows[2].sync_ns(Precision::Bits8), 300_000, "falls back to 32-bit");
    }

    #[test]
    fn bad_tables_name_line_and_field() {
        let e = HybridTable::parse(&TINY.replace("conv,c1,0.5", "conv,c1,x"), Path::new("t.csv")).unwrap_err();
        assert!(e.to_string().contains("t.csv:3 (field `sync32_ms`)"), "{e}");
        let e = HybridTable::parse(&TINY.replace("total_ms: 10", "total_ms: 5"), Path::new("t.csv")).unwrap_err();
        assert!(e.to_string().contains("total_ms"), "{e}");
        let e = HybridTable::parse(&TINY.replace("activation,a", "conv,a"), Path::new("t.csv")).unwrap_err();
        assert!(e.to_string().contains("exactly one activation row"), "{e}");
    }
}
