//! dagsim: predicts how fast distributed DNN training runs, by discrete-event simulation of a DAG
//! of compute and communication tasks on a model of the machine.
//!
//! The data flows one way (see ARCHITECTURE.md):
//! [`workload`] + [`hw`] + [`strategy`] -> [`dag`] builder -> [`sim`] engine -> [`report`].
//! [`predict`] wires the stages together; [`scenario`] reads the files that bundle a setup.
//! The library never prints or exits; `src/cli` does.

pub mod bench;
pub mod collective;
pub mod dag;
pub mod error;
pub mod hw;
pub mod predict;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod strategy;
pub mod units;
pub mod validate;
pub mod workload;

pub use error::{Error, Result};
