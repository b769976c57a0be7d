//! dagsim: predicts how fast distributed DNN training runs, by discrete-event simulation of a DAG
//! of compute and communication tasks on a model of the machine.
//!
//! The data flows one way (see ARCHITECTURE.md):
//! [`workload`] + [`hw`] + [`strategy`] -> [`dag`] builder -> [`sim`] engine -> [`report`].
//! [`predict`] wires the stages together; [`scenario`] reads the files that bundle a setup.
//! The library never prints or exits; `src/cli` does.

pub mod atomic_file;
pub mod bench;
pub mod calibrate;
pub mod collective;
pub mod compare;
pub mod dag;
pub mod error;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod hw;
pub mod limits;
pub mod parallel;
pub mod plan_bound;
pub mod plan_search;
pub mod predict;
pub mod predict_hybrid;
pub mod predict_plan;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod strategy;
pub mod sweep;
pub mod units;
pub mod validate;
pub mod workload;

pub use error::{Error, Result};
