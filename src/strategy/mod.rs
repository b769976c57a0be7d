//! Strategies: the choices that shape the DAG (what overlaps with what, how gradients are
//! aggregated). A strategy is written as features joined by `+`, optionally with `key=value`
//! settings, e.g. `io+wfbp` or `wfbp+allreduce=ring+comm=trace`. Parsing and naming live here; the
//! DAG builder reads the resulting [`Strategy`].

pub mod hybrid;

use crate::collective::Algorithm;
use crate::error::{Error, Result};
use serde::Serialize;

/// Where gradient-communication (and data-load) times come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommSource {
    /// Computed from gradient bytes over the modelled links and collective.
    #[default]
    Model,
    /// Taken from the trace's measured columns (comm time per layer; data-layer time as the load).
    Trace,
}

/// The composed strategy the DAG builder follows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Strategy {
    /// Prefetch the next batch (read + host-to-device copy) while this one computes (Eq. 3).
    pub io_overlap: bool,
    /// Wait-free backprop: aggregate each layer's gradient as soon as it is computed (Eq. 4-5).
    pub wfbp: bool,
    pub comm_source: CommSource,
    pub allreduce: Algorithm,
}

/// Named strategies users can list (`dagsim predict --help` shows them).
pub const NAMED: &[(&str, &str)] = &[
    ("none", "no overlap: read, copy, forward, backward, aggregate, update in sequence (CNTK; Eq. 2)"),
    ("io", "I/O overlap: the next batch is read and copied during compute (Eq. 3)"),
    ("wfbp", "wait-free backprop only: each layer's all-reduce overlaps the remaining backward pass"),
    ("io+wfbp", "I/O overlap and wait-free backprop (Caffe-MPI; Eq. 4-5); the default"),
];

/// The strategy `predict` uses when none is given.
pub const DEFAULT_STRATEGY: &str = "io+wfbp";

impl Default for Strategy {
    fn default() -> Self {
        Strategy::parse(DEFAULT_STRATEGY).expect("default strategy parses")
    }
}

impl Strategy {
    /// Parses `feature+feature+key=value`. Aliases: `cntk` = none, `caffe-mpi` = io+wfbp.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut s =
            Strategy { io_overlap: false, wfbp: false, comm_source: CommSource::Model, allreduce: Algorithm::Ring };
        let bad = |msg: String| Error::invalid("strategy", format!("`{spec}`: {msg}"));
        for token in spec.split('+').map(str::trim) {
            match token.split_once('=') {
                Some(("allreduce", v)) => {
                    s.allreduce = Algorithm::parse(v)
                        .ok_or_else(|| bad(format!("unknown all-reduce algorithm `{v}` (known: ring)")))?
                }
                Some(("comm", "model")) => s.comm_source = CommSource::Model,
                Some(("comm", "trace")) => s.comm_source = CommSource::Trace,
                Some(("comm", v)) => return Err(bad(format!("comm must be `model` or `trace`, not `{v}`"))),
                Some((k, _)) => return Err(bad(format!("unknown setting `{k}` (known: allreduce, comm)"))),
                None => match token {
                    "none" | "cntk" => {}
                    "io" => s.io_overlap = true,
                    "wfbp" => s.wfbp = true,
                    "caffe-mpi" => {
                        s.io_overlap = true;
                        s.wfbp = true;
                    }
                    "" => return Err(bad("empty feature".into())),
                    other => {
                        let names: Vec<&str> = NAMED.iter().map(|n| n.0).collect();
                        return Err(bad(format!(
                            "unknown feature `{other}` (known: {}, cntk, caffe-mpi)",
                            names.join(", ")
                        )));
                    }
                },
            }
        }
        Ok(s)
    }

    /// Canonical name: features in a fixed order, then non-default settings.
    pub fn name(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if self.io_overlap {
            parts.push("io".into());
        }
        if self.wfbp {
            parts.push("wfbp".into());
        }
        if parts.is_empty() {
            parts.push("none".into());
        }
        if self.allreduce != Algorithm::default() {
            parts.push(format!("allreduce={}", self.allreduce.name()));
        }
        if self.comm_source == CommSource::Trace {
            parts.push("comm=trace".into());
        }
        parts.join("+")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_features_and_settings() {
        let s = Strategy::parse("io+wfbp+comm=trace").unwrap();
        assert!(s.io_overlap && s.wfbp && s.comm_source == CommSource::Trace);
        assert_eq!(s.name(), "io+wfbp+comm=trace");
        assert_eq!(Strategy::parse("cntk").unwrap().name(), "none");
        assert_eq!(Strategy::parse("caffe-mpi").unwrap(), Strategy::default());
        assert_eq!(Strategy::parse("wfbp+io").unwrap().name(), "io+wfbp");
    }

    #[test]
    fn rejects_unknown_names() {
        let e = Strategy::parse("io+magic").unwrap_err().to_string();
        assert!(e.contains("unknown feature `magic`"), "{e}");
        assert!(Strategy::parse("allreduce=carrier-pigeon").is_err());
        assert!(Strategy::parse("comm=guess").is_err());
        assert!(Strategy::parse("io++wfbp").is_err());
    }
}
