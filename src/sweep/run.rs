//! Running a sweep: the pending grid points of a shard on all cores (rayon), each point's result
//! appended to a journal as soon as it is known, so an interrupted sweep resumes where it stopped.
//! The journal is a side file (`<output>.partial`, one JSON record per line, a torn last line is
//! ignored); the caller writes the finished table atomically and then deletes the journal.

use super::{Point, Shard, Sweep};
use crate::error::{Error, Result};
use crate::predict::Setup;
use crate::report::{csv_fields, ratio_cell, Prediction};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// One finished grid point: its number and its cells (`grid.*`, prediction columns, `util_*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub point: usize,
    pub cells: Vec<(String, String)>,
}

/// Column holding the hash of every input a result was computed from (see [`inputs_hash`]).
pub const INPUTS_COLUMN: &str = "inputs_hash";

/// A hash of everything a prediction depends on: the resolved setup (workload as read from its
/// trace or synthesised, topology with its calibration, strategy, iterations) and the dagsim
/// version. Editing a trace, topology, calibration or scenario, or upgrading dagsim, changes it,
/// so a resumed sweep recomputes exactly the results whose inputs changed. FNV-1a over the setup's
/// debug form: stable across runs, machines and thread counts (the setup holds no hash maps).
pub fn inputs_hash(setup: &Setup) -> String {
    let text = format!("dagsim {}\n{setup:?}", env!("CARGO_PKG_VERSION"));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The setup of every configuration that has a point in `shard` (None for the others).
pub fn setups(sweep: &Sweep, shard: Shard) -> Result<Vec<Option<Setup>>> {
    let g = sweep.gpus.len();
    (0..sweep.config_count())
        .map(|c| {
            if !(0..g).any(|k| shard.contains(c * g + k)) {
                return Ok(None);
            }
            let setup = sweep.scenario(c)?.setup().map_err(|e| {
                let what = format!("sweep {}, configuration `{}`", sweep.path.display(), sweep.config_label(c));
                Error::invalid(what, e.to_string())
            })?;
            Ok(Some(setup))
        })
        .collect()
}

impl Record {
    fn new(sweep: &Sweep, point: Point, p: &Prediction, inputs: String) -> Record {
        let mut cells = sweep.config_cells(point.config);
        cells.push((INPUTS_COLUMN.to_string(), inputs));
        cells.extend(csv_fields(p).into_iter().map(|(k, v)| (k.to_string(), v)));
        cells.extend(p.utilisation.iter().map(|(k, v)| (format!("util_{k}"), ratio_cell(*v))));
        Record { point: point.index, cells }
    }

    pub fn get(&self, column: &str) -> Option<&str> {
        self.cells.iter().find(|(k, _)| k == column).map(|(_, v)| v.as_str())
    }
}

/// The journal file next to an output.
pub fn journal_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}

/// Records already in a journal that belong to this sweep and shard. A record whose grid cells
/// do not match the sweep file means the journal is from another sweep: that is an error, not
/// something to silently mix in.
/// What a journal holds: its records, and whether it was started by `--fresh` (then the results
/// of the output file from before it do not count, even when the fresh run was interrupted).
#[derive(Debug, Default)]
pub struct JournalContents {
    pub records: Vec<Record>,
    pub fresh: bool,
}

/// First line of a journal started by `--fresh`.
const FRESH_MARK: &str = "{\"store\":\"fresh\"}";

pub fn read_journal(path: &Path, sweep: &Sweep, shard: Shard) -> Result<JournalContents> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(JournalContents::default()),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut out = JournalContents::default();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if i == 0 && line == FRESH_MARK {
            out.fresh = true;
            continue;
        }
        // A line cut short by a kill does not parse; that point is simply run again.
        let Ok(rec) = serde_json::from_str::<Record>(&line) else { continue };
        check_record(&rec, sweep, shard).map_err(|msg| {
            Error::parse(
                crate::error::Location::line(path, i + 1),
                format!("{msg}; this journal is from another sweep: delete it to start afresh"),
            )
        })?;
        out.records.push(rec);
    }
    Ok(out)
}

/// Checks that a record (from a journal or an earlier output) is the grid point it claims to be.
pub fn check_record(rec: &Record, sweep: &Sweep, shard: Shard) -> std::result::Result<(), String> {
    if rec.point >= sweep.point_count() || !shard.contains(rec.point) {
        return Err(format!("point {} is not in this sweep/shard", rec.point));
    }
    let point = sweep.point(rec.point);
    for (k, v) in sweep.config_cells(point.config) {
        if rec.get(&k) != Some(v.as_str()) {
            return Err(format!("point {} has {k} = {:?}, the sweep file says {v:?}", rec.point, rec.get(&k)));
        }
    }
    if rec.get("gpus") != Some(point.gpus.to_string().as_str()) {
        return Err(format!(
            "point {} has gpus = {:?}, the sweep file says {}",
            rec.point,
            rec.get("gpus"),
            point.gpus
        ));
    }
    Ok(())
}

/// Appends records to the journal, one flushed line each.
pub struct Journal {
    file: Mutex<std::fs::File>,
    path: PathBuf,
}

impl Journal {
    pub fn open(path: &Path) -> Result<Journal> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| Error::io(path, e))?;
        Ok(Journal { file: Mutex::new(file), path: path.into() })
    }

    /// Starts a new, empty journal for a `--fresh` run, marked so that a resumed run ignores the
    /// results of the output file from before (written atomically, so the mark is never torn).
    pub fn start_fresh(path: &Path) -> Result<Journal> {
        crate::atomic_file::write_atomically(path, |w| writeln!(w, "{FRESH_MARK}"))?;
        Journal::open(path)
    }

    fn append(&self, rec: &Record) -> Result<()> {
        let mut line = serde_json::to_string(rec).expect("records serialise");
        line.push('\n');
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(line.as_bytes()).map_err(|e| Error::io(&self.path, e))
    }
}

/// Grid points of `shard` not among `done`, in order.
pub fn pending_points(sweep: &Sweep, shard: Shard, done: &[Record]) -> Vec<Point> {
    let mut finished = vec![false; sweep.point_count()];
    for r in done {
        finished[r.point] = true;
    }
    (0..sweep.point_count()).filter(|&i| shard.contains(i) && !finished[i]).map(|i| sweep.point(i)).collect()
}

/// Simulates `points` in parallel. Each result goes to the journal (if any) and to `on_done` as it
/// finishes; the returned records are sorted by point. Speedups are over one GPU of the same
/// configuration, simulated once per configuration.
pub fn run_points(
    sweep: &Sweep,
    points: &[Point],
    journal: Option<&Journal>,
    on_done: &(dyn Fn(&Record) + Sync),
) -> Result<Vec<Record>> {
    use rayon::prelude::*;
    let configs = sweep.config_count();
    let mut setups: Vec<Option<Setup>> = vec![None; configs];
    for p in points {
        if setups[p.config].is_none() {
            let setup = sweep.scenario(p.config)?.setup().map_err(|e| {
                let what = format!("sweep {}, configuration `{}`", sweep.path.display(), sweep.config_label(p.config));
                Error::invalid(what, e.to_string())
            })?;
            setups[p.config] = Some(setup);
        }
    }
    let hashes: Vec<Option<String>> = setups.iter().map(|s| s.as_ref().map(inputs_hash)).collect();
    let single_gpu: Vec<OnceLock<Result<Prediction, String>>> = (0..configs).map(|_| OnceLock::new()).collect();
    let results: Vec<Result<Record>> = points
        .par_iter()
        .map(|&point| {
            let setup = setups[point.config].as_ref().expect("set up above");
            let base = single_gpu[point.config]
                .get_or_init(|| setup.predict(1).map_err(|e| e.to_string()))
                .as_ref()
                .map_err(|e| Error::invalid(format!("sweep point {}", point.index), e.clone()))?;
            let mut pred = if point.gpus == 1 { base.clone() } else { setup.predict(point.gpus)? };
            pred.set_baseline(base.throughput_samples_per_s);
            let inputs = hashes[point.config].clone().expect("hashed above");
            let rec = Record::new(sweep, point, &pred, inputs);
            if let Some(j) = journal {
                j.append(&rec)?;
            }
            on_done(&rec);
            Ok(rec)
        })
        .collect();
    let mut out = results.into_iter().collect::<Result<Vec<_>>>()?;
    out.sort_by_key(|r| r.point);
    Ok(out)
}
