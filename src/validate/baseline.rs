//! Baselines: the same rows predicted another way, reported beside dagsim's own predictions so a
//! gain (or a loss) is visible row by row and set by set (`dagsim validate --baseline NAME`).
//!
//! A baseline is a named change to each row's setup before it is simulated; to add one, add an
//! entry to [`BASELINES`]. Baselines never see a row's measured value.

use crate::collective::CollectiveModel;
use crate::error::{Error, Result};
use crate::predict::Setup;
use crate::predict_hybrid::HybridSetup;

/// One way of predicting the rows other than dagsim's default.
#[derive(Debug)]
pub struct Baseline {
    /// Name given to `--baseline`.
    pub name: &'static str,
    /// One line for help and reports.
    pub about: &'static str,
    /// Turns a row's setup into the baseline's.
    pub setup: fn(&mut Setup),
    /// The same for rows of Dettmers' hybrid scheme.
    pub hybrid: fn(&mut HybridSetup),
}

/// The baselines dagsim knows.
pub const BASELINES: &[Baseline] = &[Baseline {
    name: "ideal-ring",
    about: "collectives as idealised rings at link rates: no NCCL protocols, channels or library latencies",
    setup: |s| s.topology.collectives = CollectiveModel::Ideal,
    hybrid: |h| h.topology.collectives = CollectiveModel::Ideal,
}];

/// The baseline called `name`; the error names `--baseline` and lists the known ones.
pub fn find(name: &str) -> Result<&'static Baseline> {
    BASELINES.iter().find(|b| b.name == name).ok_or_else(|| {
        let known: Vec<&str> = BASELINES.iter().map(|b| b.name).collect();
        Error::invalid("--baseline", format!("unknown baseline `{name}` (known: {})", known.join(", ")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_unknown_ones_are_refused() {
        for (i, b) in BASELINES.iter().enumerate() {
            assert!(BASELINES[i + 1..].iter().all(|o| o.name != b.name), "{}", b.name);
            assert!(find(b.name).is_ok());
        }
        let e = find("oracle").unwrap_err().to_string();
        assert!(e.contains("--baseline") && e.contains("ideal-ring"), "{e}");
    }
}
