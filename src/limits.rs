//! Upper bounds on the size of a job, checked before any work starts so that an input beyond them
//! is refused with the bound and the flag that raises it, never an allocation abort or a run that
//! does not come back. The CLI sets them once from `--limit NAME=N` ([`set`]); the library reads
//! them with [`get`]. The table is documented in `docs/limits.md`.

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// The bounds in force. Defaults fit a 24 GiB machine with room to spare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// GPUs in one simulated configuration (DESIGN.md's 100,000-GPU target fits).
    pub gpus: u64,
    /// Layers in one workload.
    pub layers: u64,
    /// Iterations simulated per configuration.
    pub iterations: u64,
    /// Tasks in one DAG (about 200 bytes each with their edges: 20 M tasks is about 4 GiB).
    pub tasks: u64,
    /// Configurations in one sweep.
    pub sweep_runs: u64,
    /// Events (spans and flows) in one timeline file.
    pub timeline_events: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            gpus: 131_072,
            layers: 100_000,
            iterations: 10_000,
            tasks: 20_000_000,
            sweep_runs: 1_000_000,
            timeline_events: 50_000_000,
        }
    }
}

/// The names `--limit NAME=N` accepts, with a word on each.
pub const NAMES: &[(&str, &str)] = &[
    ("gpus", "GPUs in one configuration"),
    ("layers", "layers in one workload"),
    ("iterations", "iterations simulated"),
    ("tasks", "tasks in one DAG"),
    ("sweep_runs", "configurations in one sweep"),
    ("timeline_events", "events in one timeline"),
];

static CURRENT: OnceLock<Limits> = OnceLock::new();

/// Sets the limits for the rest of the process (the CLI does this once, before any work).
/// Returns false if they were already set.
pub fn set(limits: Limits) -> bool {
    CURRENT.set(limits).is_ok()
}

/// The limits in force (the defaults unless [`set`] was called).
pub fn get() -> Limits {
    CURRENT.get().copied().unwrap_or_default()
}

impl Limits {
    /// Applies one `NAME=N` setting (from `--limit`).
    pub fn apply(&mut self, spec: &str) -> Result<()> {
        let bad = |msg: String| Error::invalid("--limit", msg);
        let (name, value) = spec.split_once('=').ok_or_else(|| bad(format!("expected NAME=N, found `{spec}`")))?;
        let value: u64 = value
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| bad(format!("expected a whole number after `{name}=`, found `{value}`")))?;
        let slot = match name.trim() {
            "gpus" => &mut self.gpus,
            "layers" => &mut self.layers,
            "iterations" => &mut self.iterations,
            "tasks" => &mut self.tasks,
            "sweep_runs" => &mut self.sweep_runs,
            "timeline_events" => &mut self.timeline_events,
            other => {
                let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                return Err(bad(format!("unknown limit `{other}`; expected one of {}", names.join(", "))));
            }
        };
        *slot = value;
        Ok(())
    }

    /// The `NAME=N` settings that differ from the defaults (for a child process to get the same
    /// limits through `--limit`).
    pub fn overrides(&self) -> Vec<String> {
        let default = Limits::default();
        NAMES
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| self.value(name) != default.value(name))
            .map(|name| format!("{name}={}", self.value(name)))
            .collect()
    }

    fn value(&self, name: &str) -> u64 {
        match name {
            "gpus" => self.gpus,
            "layers" => self.layers,
            "iterations" => self.iterations,
            "tasks" => self.tasks,
            "sweep_runs" => self.sweep_runs,
            "timeline_events" => self.timeline_events,
            _ => unreachable!("limit names are fixed in this module"),
        }
    }

    /// Refuses `value` of the limit `name` when it exceeds the bound, naming the bound and the flag.
    pub fn check(&self, name: &str, value: u64) -> Result<()> {
        let bound = self.value(name);
        if value > bound {
            let what = NAMES.iter().find(|(n, _)| *n == name).map_or(name, |(_, w)| *w);
            return Err(Error::invalid(
                format!("size ({what})"),
                format!("{value} is beyond the limit of {bound}; raise it with `--limit {name}={value}` if the machine has the memory and time"),
            ));
        }
        Ok(())
    }
}

/// [`Limits::check`] against the limits in force.
pub fn check(name: &str, value: u64) -> Result<()> {
    get().check(name, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_over_the_bound_names_the_bound_and_the_flag() {
        let l = Limits::default();
        assert!(l.check("gpus", 131_072).is_ok());
        let e = l.check("gpus", 1_000_000_000).unwrap_err().to_string();
        assert!(e.contains("131072") && e.contains("--limit gpus=1000000000"), "{e}");
    }

    #[test]
    fn settings_parse_and_bad_ones_are_explained() {
        let mut l = Limits::default();
        l.apply("gpus=1_000_000").unwrap();
        assert_eq!(l.gpus, 1_000_000);
        assert!(l.apply("gpu=3").unwrap_err().to_string().contains("expected one of gpus"));
        assert!(l.apply("gpus").unwrap_err().to_string().contains("NAME=N"));
        assert!(l.apply("gpus=-1").unwrap_err().to_string().contains("whole number"));
    }

    #[test]
    fn overrides_list_only_what_differs_from_the_defaults() {
        let mut l = Limits::default();
        assert!(l.overrides().is_empty());
        l.apply("tasks=30000000").unwrap();
        assert_eq!(l.overrides(), vec!["tasks=30000000".to_string()]);
    }
}
