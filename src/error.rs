//! Typed errors for the library. Every variant names what the user has to fix: the file and line,
//! the field, the device or link. The CLI prints the message once and maps it to exit code 2.

use std::path::PathBuf;

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a piece of bad input sits: a file, optionally a line (1-based) and a field name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub field: Option<String>,
}

impl Location {
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Location { path: path.into(), line: None, field: None }
    }
    pub fn line(path: impl Into<PathBuf>, line: usize) -> Self {
        Location { path: path.into(), line: Some(line), field: None }
    }
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, " (field `{field}`)")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file was read but its content is wrong at a known place.
    #[error("{at}: {msg}")]
    Parse { at: Location, msg: String },
    /// A machine description is inconsistent (names the device or link at fault).
    #[error("topology `{topology}`: {msg}")]
    Topology { topology: String, msg: String },
    /// A value given on the command line or in a scenario is out of range or unknown.
    #[error("invalid {what}: {msg}")]
    Invalid { what: String, msg: String },
    /// The DAG is not a DAG (names a task on the cycle).
    #[error("the task graph has a cycle through task {task} ({label})")]
    Cycle { task: u32, label: String },
    /// The engine stopped with tasks that never ran (names one of them and what it waits on).
    #[error("simulation stalled at t={time_ns} ns: {pending} tasks never ran, e.g. {example}")]
    Stalled { time_ns: u64, pending: usize, example: String },
    /// Simulated time or a size would leave the integer range (names what overflowed); never wrapped.
    #[error("overflow: {what} ({msg})")]
    Overflow { what: String, msg: String },
    /// The GPU backend (feature `cuda`) is unavailable or a CUDA call failed (names the call).
    #[error("GPU backend: {0}")]
    Gpu(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    pub fn parse(at: Location, msg: impl Into<String>) -> Self {
        Error::Parse { at, msg: msg.into() }
    }
    pub fn invalid(what: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Invalid { what: what.into(), msg: msg.into() }
    }
    pub fn overflow(what: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Overflow { what: what.into(), msg: msg.into() }
    }
    pub fn topology(topology: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Topology { topology: topology.into(), msg: msg.into() }
    }
}

/// 1-based line number of a byte offset in `text` (for parsers that report spans).
pub fn line_of_offset(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
