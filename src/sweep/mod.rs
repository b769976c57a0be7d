//! Sweeps: a grid of scenarios run as one job. A sweep file (TOML) holds a `[base]` scenario and a
//! `[grid]` of axes; every combination of axis values is a grid point, numbered in a fixed order
//! (axes sorted by name, `gpus` varying fastest), so the same file always gives the same points
//! and `--shard i/n` slices are deterministic. Axes are generic: an axis named by a dotted path
//! sets that scenario field (`workload.batch_per_gpu`), `strategy.KEY` appends `+KEY=value` to
//! the strategy spec, and `topology`/`batch` are short names. Owns grid expansion, execution
//! ([`run`]) and result tables ([`table`]); builds setups only through [`crate::scenario`] and
//! simulates only through [`crate::predict`].

pub mod run;
pub mod table;

use crate::error::{Error, Location, Result};
use crate::scenario::Scenario;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// GPU counts used when neither the grid nor the base scenario gives any.
pub const DEFAULT_GPUS: [u32; 5] = [1, 2, 4, 8, 16];

/// One axis of the grid: a name and the values it takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub name: String,
    pub values: Vec<toml::Value>,
}

/// A parsed sweep file.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub name: String,
    pub path: PathBuf,
    base: toml::Table,
    base_dir: PathBuf,
    /// Axes other than `gpus`, sorted by name; the first varies slowest.
    pub axes: Vec<Axis>,
    pub gpus: Vec<u32>,
}

/// One grid point: its number, the value index on each axis, and its GPU count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub index: usize,
    /// Index of the configuration (all axes but `gpus`).
    pub config: usize,
    pub gpus: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    name: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    base: toml::Table,
    #[serde(default)]
    grid: toml::Table,
}

/// `i/n`: run only the grid points whose number is `i` modulo `n` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || Error::invalid("--shard", format!("`{text}` is not I/N with 0 <= I < N (e.g. 0/4)"));
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (i.trim().parse::<u32>().map_err(|_| bad())?, n.trim().parse::<u32>().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    pub fn contains(&self, point: usize) -> bool {
        point % self.count as usize == self.index as usize
    }
}

/// A TOML value as a table cell: strings without quotes, everything else as TOML writes it.
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.starts_with(key) || l.starts_with(&format!("\"{key}\""))
        })
        .map(|i| i + 1)
}

impl Sweep {
    /// Reads a sweep file; errors name the file, and the line or axis at fault.
    pub fn load(path: &Path) -> Result<Sweep> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    /// [`Sweep::load`] on text already in memory; `path` names it and anchors relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Sweep> {
        let text = text.to_string();
        let file: SweepFile = toml::from_str(&text).map_err(|e| {
            let line = e.span().map(|sp| text[..sp.start].lines().count().max(1));
            Error::parse(Location { path: path.into(), line, field: None }, e.message().to_string())
        })?;
        let at =
            |key: &str| Location { path: path.into(), line: line_of(&text, key), field: Some(format!("grid.{key}")) };
        let mut axes = Vec::new();
        let mut gpus = None;
        for (name, values) in &file.grid {
            let toml::Value::Array(values) = values else {
                return Err(Error::parse(at(name), "an axis must be an array of values"));
            };
            if values.is_empty() {
                return Err(Error::parse(at(name), "an axis needs at least one value"));
            }
            if name == "gpus" {
                let counts: Option<Vec<u32>> = values
                    .iter()
                    .map(|v| v.as_integer().and_then(|i| u32::try_from(i).ok()).filter(|&g| g >= 1))
                    .collect();
                gpus = Some(counts.ok_or_else(|| Error::parse(at(name), "GPU counts must be integers >= 1"))?);
            } else {
                axes.push(Axis { name: name.clone(), values: values.clone() });
            }
        }
        axes.sort_by(|a, b| a.name.cmp(&b.name));
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base_gpus =
            match file.base.get("gpus") {
                Some(v) => Some(v.clone().try_into::<Vec<u32>>().map_err(|_| {
                    Error::parse(at("gpus").with_field("base.gpus"), "GPU counts must be integers >= 1")
                })?),
                None => None,
            };
        let gpus = gpus.or(base_gpus).unwrap_or_else(|| DEFAULT_GPUS.to_vec());
        let name =
            file.name.unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
        let sweep = Sweep { name, path: path.into(), base: file.base, base_dir, axes, gpus };
        // Every configuration must make a valid scenario; check now, before hours of running.
        for c in 0..sweep.config_count() {
            sweep.scenario(c)?;
        }
        Ok(sweep)
    }

    /// Configurations: combinations of all axes but `gpus`.
    pub fn config_count(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    pub fn point_count(&self) -> usize {
        self.config_count() * self.gpus.len()
    }

    /// The value index on each axis for configuration `config` (last axis fastest).
    pub fn config_values(&self, config: usize) -> Vec<&toml::Value> {
        let mut rest = config;
        let mut out = Vec::with_capacity(self.axes.len());
        for axis in self.axes.iter().rev() {
            out.push(&axis.values[rest % axis.values.len()]);
            rest /= axis.values.len();
        }
        out.reverse();
        out
    }

    pub fn point(&self, index: usize) -> Point {
        let g = self.gpus.len();
        Point { index, config: index / g, gpus: self.gpus[index % g] }
    }

    /// `(column name, value)` of each axis for a configuration; columns are `grid.<axis>`.
    pub fn config_cells(&self, config: usize) -> Vec<(String, String)> {
        self.axes
            .iter()
            .zip(self.config_values(config))
            .map(|(a, v)| (format!("grid.{}", a.name), value_text(v)))
            .collect()
    }

    /// A short label of a configuration, e.g. `strategy=none topology=k80-cluster`.
    pub fn config_label(&self, config: usize) -> String {
        let cells = self.config_cells(config);
        if cells.is_empty() {
            return self.name.clone();
        }
        cells.iter().map(|(k, v)| format!("{}={v}", &k["grid.".len()..])).collect::<Vec<_>>().join(" ")
    }

    /// The scenario of a configuration: the base with each axis value applied.
    pub fn scenario(&self, config: usize) -> Result<Scenario> {
        let mut table = self.base.clone();
        let mut strategy_settings = Vec::new();
        for (axis, value) in self.axes.iter().zip(self.config_values(config)) {
            let path: Vec<&str> = match axis.name.as_str() {
                "topology" => vec!["machine", "topology"],
                "batch" => vec!["workload", "batch_per_gpu"],
                name if name.starts_with("strategy.") => {
                    strategy_settings.push(format!("{}={}", &name["strategy.".len()..], value_text(value)));
                    continue;
                }
                name => name.split('.').collect(),
            };
            set_path(&mut table, &path, value.clone());
        }
        if !strategy_settings.is_empty() {
            let spec = table.get("strategy").and_then(|v| v.as_str()).unwrap_or(crate::strategy::DEFAULT_STRATEGY);
            let spec = std::iter::once(spec.to_string()).chain(strategy_settings).collect::<Vec<_>>().join("+");
            table.insert("strategy".into(), toml::Value::String(spec));
        }
        table.remove("gpus");
        let mut scenario: Scenario = toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| {
            Error::parse(
                Location::file(&self.path)
                    .with_field(format!("grid point configuration {}", self.config_label(config))),
                e.message().to_string(),
            )
        })?;
        scenario.base_dir = self.base_dir.clone();
        Ok(scenario)
    }
}

fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    match path {
        [] => {}
        [last] => {
            table.insert(last.to_string(), value);
        }
        [first, rest @ ..] => {
            let entry = table.entry(first.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            set_path(entry.as_table_mut().expect("made a table above"), rest, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(text: &str) -> Result<Sweep> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.toml");
        std::fs::write(&p, text).unwrap();
        Sweep::load(&p)
    }

    #[test]
    fn grid_points_are_numbered_with_gpus_fastest() {
        let s = sweep("[grid]\ngpus=[1,4]\nstrategy=['none','io']\nbatch=[8,16,32]\n").unwrap();
        assert_eq!(s.point_count(), 12);
        assert_eq!(s.axes.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["batch", "strategy"]);
        assert_eq!(s.point(5), Point { index: 5, config: 2, gpus: 4 });
        assert_eq!(s.config_label(2), "batch=16 strategy=none");
        let sc = s.scenario(2).unwrap();
        assert_eq!(sc.workload.batch_per_gpu, Some(16));
        assert_eq!(sc.strategy.as_deref(), Some("none"));
    }

    #[test]
    fn strategy_settings_append_to_the_spec() {
        let s = sweep("[base]\nstrategy='io+wfbp'\n[grid]\n'strategy.allreduce'=['ring']\n").unwrap();
        assert_eq!(s.scenario(0).unwrap().strategy.as_deref(), Some("io+wfbp+allreduce=ring"));
        assert_eq!(s.gpus, DEFAULT_GPUS);
    }

    #[test]
    fn unknown_axis_is_an_error_naming_the_file() {
        let e = sweep("[grid]\n'workload.nonsense'=[1]\n").unwrap_err().to_string();
        assert!(e.contains("s.toml") && e.contains("nonsense"), "{e}");
        let e = sweep("[grid]\ngpus=[0]\n").unwrap_err().to_string();
        assert!(e.contains("s.toml:2") && e.contains("grid.gpus"), "{e}");
    }

    #[test]
    fn shards_partition_the_points() {
        assert_eq!(Shard::parse("1/3").unwrap(), Shard { index: 1, count: 3 });
        assert!(Shard::parse("3/3").is_err() && Shard::parse("x").is_err() && Shard::parse("0/0").is_err());
        let shards: Vec<Shard> = (0..3).map(|i| Shard { index: i, count: 3 }).collect();
        for p in 0..10 {
            assert_eq!(shards.iter().filter(|s| s.contains(p)).count(), 1);
        }
    }
}
