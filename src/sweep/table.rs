//! Sweep result tables: records to a table with a fixed column order (`point`, `grid.*`, the
//! prediction columns, then `util_*` sorted), CSV/JSON/text writers, reading a table back, merging
//! shard tables, and the sweep plots drawn from a table (so plots can be redrawn from a merged
//! CSV). Knows nothing of how records were computed.

use super::run::Record;
use crate::error::{Error, Location, Result};
use crate::report::plot::{breakdown_chart, speedup_chart, Bar, Panel, Series, MAX_SERIES_PER_PANEL};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A header and rows of cells, one row per grid point, sorted by point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Lays records out as a table. The column order is that of the first record, except that
    /// `util_*` columns come last as the sorted union over all records (link kinds vary by topology).
    pub fn from_records(records: &[Record]) -> Table {
        let mut records: Vec<&Record> = records.iter().collect();
        records.sort_by_key(|r| r.point);
        let mut header = vec!["point".to_string()];
        if let Some(first) = records.first() {
            header.extend(first.cells.iter().map(|(k, _)| k.clone()).filter(|k| !k.starts_with("util_")));
        }
        let utils: std::collections::BTreeSet<&str> = records
            .iter()
            .flat_map(|r| r.cells.iter().map(|(k, _)| k.as_str()))
            .filter(|k| k.starts_with("util_"))
            .collect();
        header.extend(utils.into_iter().map(String::from));
        let rows = records
            .iter()
            .map(|r| {
                let mut row = vec![r.point.to_string()];
                row.extend(header[1..].iter().map(|k| r.get(k).unwrap_or("").to_string()));
                row
            })
            .collect();
        Table { header, rows }
    }

    /// Rows back to records (empty cells dropped), for resuming and merging.
    pub fn records(&self, path: &Path) -> Result<Vec<Record>> {
        self.rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let point = row[0].parse::<usize>().map_err(|_| {
                    Error::parse(
                        Location::line(path, i + 2).with_field("point"),
                        format!("`{}` is not a point number", row[0]),
                    )
                })?;
                let cells = self.header[1..]
                    .iter()
                    .zip(&row[1..])
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Ok(Record { point, cells })
            })
            .collect()
    }

    /// Reads a sweep CSV; the first column must be `point`.
    pub fn read_csv(path: &Path) -> Result<Table> {
        let mut r = csv::Reader::from_path(path).map_err(|e| csv_error(path, e))?;
        let header: Vec<String> = r.headers().map_err(|e| csv_error(path, e))?.iter().map(String::from).collect();
        if header.first().map(String::as_str) != Some("point") {
            return Err(Error::parse(Location::line(path, 1), "not a sweep table: the first column must be `point`"));
        }
        let mut rows = Vec::new();
        for rec in r.records() {
            rows.push(rec.map_err(|e| csv_error(path, e))?.iter().map(String::from).collect());
        }
        Ok(Table { header, rows })
    }

    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    pub fn write_csv(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(&self.header)?;
        for row in &self.rows {
            w.write_record(row)?;
        }
        w.flush()
    }

    /// An array of objects with keys in column order; cells that read as numbers are numbers,
    /// empty cells are null, `grid.*` cells stay strings (they are the axis values as written).
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let rows: Vec<OrderedRow> = self
            .rows
            .iter()
            .map(|row| {
                OrderedRow(
                    self.header
                        .iter()
                        .zip(row)
                        .map(|(k, v)| {
                            let value = match (v.parse::<i64>(), v.parse::<f64>()) {
                                _ if k.starts_with("grid.") => serde_json::json!(v),
                                _ if v.is_empty() => serde_json::Value::Null,
                                (Ok(i), _) => serde_json::json!(i),
                                (_, Ok(x)) if x.is_finite() => serde_json::json!(x),
                                _ => serde_json::json!(v),
                            };
                            (k.as_str(), value)
                        })
                        .collect(),
                )
            })
            .collect();
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)
    }

    /// A table for people: the grid columns and the headline numbers.
    pub fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut cols: Vec<usize> = vec![0];
        cols.extend((0..self.header.len()).filter(|&i| self.header[i].starts_with("grid.")));
        for name in ["gpus", "iteration_time_s", "throughput_samples_per_s", "speedup", "scaling_efficiency"] {
            cols.extend(self.column(name));
        }
        let width =
            |i: usize| self.rows.iter().map(|r| r[i].len().min(14)).chain([self.header[i].len()]).max().unwrap_or(0);
        let widths: Vec<usize> = cols.iter().map(|&i| width(i)).collect();
        let line = |cells: Vec<String>| {
            cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ")
        };
        writeln!(out, "{}", line(cols.iter().map(|&i| self.header[i].clone()).collect()))?;
        for row in &self.rows {
            let cells = cols
                .iter()
                .map(|&i| match row[i].parse::<f64>() {
                    Ok(x) if row[i].contains('.') => format!("{x:.6}"),
                    _ => row[i].clone(),
                })
                .collect();
            writeln!(out, "{}", line(cells))?;
        }
        Ok(())
    }
}

/// A JSON object that keeps its keys in the given order.
struct OrderedRow<'a>(Vec<(&'a str, serde_json::Value)>);

impl serde::Serialize for OrderedRow<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

fn csv_error(path: &Path, e: csv::Error) -> Error {
    let line = e.position().map(|p| p.line() as usize);
    Error::parse(Location { path: path.into(), line, field: None }, e.to_string())
}

/// Joins shard tables: every point once (a point in two inputs must have identical cells), sorted
/// by point. Inputs must share their non-utilisation columns.
pub fn merge(paths: &[PathBuf], on_conflict: OnConflict) -> Result<Table> {
    // Rows are the same scenario when their grid cells and GPU count agree (their point numbers
    // should too); two such rows that differ in any other cell conflict.
    let key = |r: &Record| -> Vec<(String, String)> {
        r.cells.iter().filter(|(k, _)| k.starts_with("grid.") || k == "gpus").cloned().collect()
    };
    let mut by_key: BTreeMap<Vec<(String, String)>, (Record, &Path)> = BTreeMap::new();
    let mut first_header: Option<(Vec<String>, &Path)> = None;
    for path in paths {
        let table = Table::read_csv(path)?;
        let fixed: Vec<String> = table.header.iter().filter(|h| !h.starts_with("util_")).cloned().collect();
        match &first_header {
            None => first_header = Some((fixed, path)),
            Some((h, p)) if *h != fixed => {
                return Err(Error::parse(
                    Location::line(path, 1),
                    format!("its columns differ from those of {} (different sweeps?)", p.display()),
                ))
            }
            Some(_) => {}
        }
        for (i, rec) in table.records(path)?.into_iter().enumerate() {
            let k = key(&rec);
            match by_key.get(&k) {
                Some((other, p)) if *other != rec => match on_conflict {
                    OnConflict::Refuse => {
                        let differ: Vec<&str> = rec
                            .cells
                            .iter()
                            .filter(|(c, v)| other.get(c) != Some(v.as_str()))
                            .map(|(c, _)| c.as_str())
                            .take(4)
                            .collect();
                        let what = if rec.point != other.point {
                            format!("point {} is the same scenario as point {}", rec.point, other.point)
                        } else {
                            format!("point {}", rec.point)
                        };
                        return Err(Error::parse(
                            Location::line(path, i + 2),
                            format!(
                                "{what} of {} but differs in {}; rerun the stale shard, or choose with \
                                     --on-conflict first|last",
                                p.display(),
                                differ.join(", ")
                            ),
                        ));
                    }
                    OnConflict::First => {}
                    OnConflict::Last => {
                        by_key.insert(k, (rec, path));
                    }
                },
                Some(_) => {}
                None => {
                    by_key.insert(k, (rec, path));
                }
            }
        }
    }
    let mut records: Vec<(Record, &Path)> = by_key.into_values().collect();
    records.sort_by_key(|(r, _)| r.point);
    if let Some(w) = records.windows(2).find(|w| w[0].0.point == w[1].0.point) {
        let (a, b) = (w[0].1.display(), w[1].1.display());
        let files = if a.to_string() == b.to_string() { format!("in {a}") } else { format!("in {a} and {b}") };
        return Err(Error::invalid(
            "merged sweep",
            format!(
                "point {} names two different scenarios {files} (the inputs come from different sweeps)",
                w[0].0.point
            ),
        ));
    }
    let records: Vec<Record> = records.into_iter().map(|(r, _)| r).collect();
    Ok(Table::from_records(&records))
}

/// What `sweep merge` does with two rows for the same scenario that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// Refuse to merge, naming both files and the cells that differ.
    #[default]
    Refuse,
    /// Keep the row from the file listed first.
    First,
    /// Keep the row from the file listed last.
    Last,
}

/// Files written by [`write_plots`].
pub const PLOT_FILES: [&str; 4] = ["speedup.png", "speedup.svg", "breakdown.png", "breakdown.svg"];

/// Speedup versus GPUs (one line per configuration) and the breakdown bars of every point, as PNG
/// and SVG in `dir`. Returns the files written.
pub fn write_plots(table: &Table, title: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let col = |name: &str| {
        table.column(name).ok_or_else(|| Error::invalid("sweep table", format!("it has no `{name}` column to plot")))
    };
    let (gpus, speedup) = (col("gpus")?, col("speedup")?);
    let parts = [col("compute_s")?, col("communication_s")?, col("io_s")?, col("idle_s")?];
    let grid: Vec<usize> = (0..table.header.len()).filter(|&i| table.header[i].starts_with("grid.")).collect();
    let num = |row: &[String], i: usize| row[i].parse::<f64>().unwrap_or(f64::NAN);
    // A plot's axes grow to its largest value: refuse what no axis can hold (an infinite or absurd
    // value made the chart library loop forever) before drawing anything.
    for (r, row) in table.rows.iter().enumerate() {
        for &c in [gpus, speedup].iter().chain(&parts) {
            let v = num(row, c);
            if !(v.is_finite() && (0.0..=1e12).contains(&v)) {
                return Err(Error::invalid(
                    format!("sweep table, row {} (point {}), column `{}`", r + 2, row[0], table.header[c]),
                    format!("`{}` cannot be plotted: expected a finite number between 0 and 1e12", row[c]),
                ));
            }
        }
    }
    let names: Vec<String> = grid.iter().map(|&i| short_name(&table.header[i])).collect();
    let values = |row: &[String]| grid.iter().map(|&i| short_value(&row[i])).collect::<Vec<_>>();
    // One line per configuration (grid values), in the order the table first shows them.
    let mut configs: Vec<Config> = Vec::new();
    for row in &table.rows {
        let key = values(row);
        let point = (num(row, gpus), num(row, speedup));
        match configs.iter_mut().find(|c| c.0 == key) {
            Some(c) => c.1.push(point),
            None => configs.push((key, vec![point])),
        }
    }
    for c in &mut configs {
        c.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let panels = facet(&names, configs);
    let total = |row: &[String]| parts.iter().map(|&i| num(row, i)).sum::<f64>();
    let column = time_scale_column(&table.rows, &grid, total);
    let mut bar_panels: Vec<(String, Vec<Bar>)> = Vec::new();
    for row in &table.rows {
        let v = values(row);
        let title = column.map(|c| format!("{}={}", names[c], v[c])).unwrap_or_default();
        let bar = Bar {
            label: format!(
                "{} | {} GPU{}",
                describe(&names, &v, column),
                row[gpus],
                if row[gpus] == "1" { "" } else { "s" }
            ),
            seconds: parts.map(|i| num(row, i)),
        };
        match bar_panels.iter_mut().find(|p| p.0 == title) {
            Some(p) => p.1.push(bar),
            None => bar_panels.push((title, vec![bar])),
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut written = Vec::new();
    for ext in ["png", "svg"] {
        let p = dir.join(format!("speedup.{ext}"));
        speedup_chart(&p, &format!("{title}: speedup vs GPUs"), &panels)?;
        written.push(p);
        let p = dir.join(format!("breakdown.{ext}"));
        breakdown_chart(&p, &format!("{title}: time per iteration"), &bar_panels)?;
        written.push(p);
    }
    Ok(written)
}

/// The grid column (index into `grid`) whose values' iteration times differ most, when its
/// slowest value is over 4 times its fastest one's: the breakdown then gets a panel per value with
/// its own time axis, since on a shared axis the fast bars would be slivers.
fn time_scale_column(rows: &[Vec<String>], grid: &[usize], total: impl Fn(&[String]) -> f64) -> Option<usize> {
    let spread = |c: usize| {
        let mut longest: Vec<(&str, f64)> = Vec::new();
        for row in rows {
            let t = total(row);
            match longest.iter_mut().find(|l| l.0 == row[grid[c]]) {
                Some(l) => l.1 = l.1.max(t),
                None => longest.push((&row[grid[c]], t)),
            }
        }
        let (lo, hi) = longest.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), l| (lo.min(l.1), hi.max(l.1)));
        if lo > 0.0 {
            hi / lo
        } else {
            1.0
        }
    };
    (0..grid.len()).map(|c| (c, spread(c))).filter(|(_, s)| *s > 4.0).max_by(|a, b| a.1.total_cmp(&b.1)).map(|(c, _)| c)
}

/// A grid column's name for a legend: `grid.workload.trace` is `trace`.
fn short_name(column: &str) -> String {
    column.rsplit('.').next().unwrap_or(column).to_string()
}

/// A grid value for a legend: a file path is its file name without directory and extension.
fn short_value(value: &str) -> String {
    let p = Path::new(value);
    let is_file = value.contains('/') || [".json", ".csv", ".toml", ".txt"].iter().any(|e| value.ends_with(e));
    match p.file_stem() {
        Some(stem) if is_file => stem.to_string_lossy().into_owned(),
        _ => value.to_string(),
    }
}

/// `name=value` pairs of a configuration, leaving out column `skip` (the panel's own column).
fn describe(names: &[String], values: &[String], skip: Option<usize>) -> String {
    let parts: Vec<String> = names
        .iter()
        .zip(values)
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, (n, v))| format!("{n}={v}"))
        .collect();
    if parts.is_empty() {
        "all".to_string()
    } else {
        parts.join(" ")
    }
}

/// One line of a speedup chart before faceting: its grid values and its (GPUs, speedup) points.
type Config = (Vec<String>, Vec<(f64, f64)>);

/// Splits configurations (grid values, points) into panels of at most [`MAX_SERIES_PER_PANEL`]
/// lines. One panel when they fit; else one panel per value of the grid column that needs the
/// fewest panels (its value is the panel's title, the other columns label the lines), and a panel
/// still too full is cut in pieces.
fn facet(names: &[String], configs: Vec<Config>) -> Vec<Panel> {
    if configs.len() <= MAX_SERIES_PER_PANEL {
        let series =
            configs.iter().map(|(v, p)| Series { label: describe(names, v, None), points: p.clone() }).collect();
        return vec![Panel { title: String::new(), series }];
    }
    // For each column: its distinct values in order, and the most configurations sharing one.
    let split = |c: usize| {
        let mut groups: Vec<(String, usize)> = Vec::new();
        for (v, _) in &configs {
            match groups.iter_mut().find(|g| g.0 == v[c]) {
                Some(g) => g.1 += 1,
                None => groups.push((v[c].clone(), 1)),
            }
        }
        groups
    };
    let best = (0..names.len())
        .map(|c| (c, split(c)))
        // A column is worth a panel per value when it has several values and some value has
        // several lines (a panel per line would be no chart).
        .filter(|(_, g)| g.len() > 1 && g.len() < configs.len())
        .min_by_key(|(_, g)| g.iter().map(|x| x.1.div_ceil(MAX_SERIES_PER_PANEL)).sum::<usize>());
    let Some((column, groups)) = best else {
        // No column splits them (one grid column or none): pieces in table order.
        return configs
            .chunks(MAX_SERIES_PER_PANEL)
            .enumerate()
            .map(|(k, chunk)| Panel {
                title: format!("part {}", k + 1),
                series: chunk
                    .iter()
                    .map(|(v, p)| Series { label: describe(names, v, None), points: p.clone() })
                    .collect(),
            })
            .collect();
    };
    let mut panels = Vec::new();
    for (value, _) in groups {
        let series: Vec<Series> = configs
            .iter()
            .filter(|(v, _)| v[column] == value)
            .map(|(v, p)| Series { label: describe(names, v, Some(column)), points: p.clone() })
            .collect();
        let pieces = series.len().div_ceil(MAX_SERIES_PER_PANEL);
        for (k, chunk) in series.chunks(MAX_SERIES_PER_PANEL).enumerate() {
            let part = if pieces > 1 { format!(" (part {} of {pieces})", k + 1) } else { String::new() };
            panels.push(Panel { title: format!("{}={value}{part}", names[column]), series: chunk.to_vec() });
        }
    }
    panels
}

/// A title for a sweep table from its content: the workloads and the grid columns varied.
pub fn describe_table(table: &Table) -> String {
    let mut workloads: Vec<&str> = Vec::new();
    if let Some(w) = table.column("workload") {
        for row in &table.rows {
            if !workloads.contains(&row[w].as_str()) {
                workloads.push(&row[w]);
            }
        }
    }
    let grid: Vec<String> =
        table.header.iter().filter(|h| h.starts_with("grid.")).map(|h| short_name(h)).filter(|h| h != "gpus").collect();
    let what = if workloads.is_empty() || workloads.len() > 3 { "sweep".to_string() } else { workloads.join(", ") };
    if grid.is_empty() {
        what
    } else {
        format!("{what} by {}", grid.join(" x "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(strategies: &[&str], topologies: &[&str]) -> Vec<Config> {
        let mut out = Vec::new();
        for s in strategies {
            for t in topologies {
                out.push((vec![s.to_string(), t.to_string()], vec![(1.0, 1.0), (2.0, 1.8)]));
            }
        }
        out
    }

    #[test]
    fn few_lines_share_one_panel_and_many_are_faceted_by_a_column() {
        let names = ["strategy".to_string(), "topology".to_string()];
        let one = facet(&names, configs(&["io", "wfbp"], &["a", "b", "c"]));
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].series[0].label, "strategy=io topology=a");
        // 3 x 4 = 12 lines: by strategy gives 3 panels of 4, by topology 4 panels of 3.
        let many = facet(&names, configs(&["none", "io", "wfbp"], &["a", "b", "c", "d"]));
        assert_eq!(many.len(), 3);
        assert!(many.iter().all(|p| p.series.len() <= MAX_SERIES_PER_PANEL));
        assert_eq!(many[1].title, "strategy=io");
        assert_eq!(many[1].series[0].label, "topology=a");
        // One column with 14 values: pieces of at most six.
        let long = facet(&names[..1], (0..14).map(|i| (vec![i.to_string()], vec![(1.0, 1.0)])).collect());
        assert_eq!(long.iter().map(|p| p.series.len()).collect::<Vec<_>>(), [6, 6, 2]);
    }

    #[test]
    fn legends_shorten_paths_and_column_names() {
        assert_eq!(short_name("grid.workload.trace"), "trace");
        assert_eq!(short_value("topologies/whatif-nvlink.json"), "whatif-nvlink");
        assert_eq!(short_value("../traces/alexnet_k80.csv"), "alexnet_k80");
        assert_eq!(short_value("io+wfbp"), "io+wfbp");
        assert_eq!(short_value("4.5"), "4.5");
    }
}
