//! The real-GPU backend (cargo feature `cuda`): measures this machine's GPUs to calibrate dagsim's
//! costs ([`measure`] fills [`calibration::GpuMeasurements`], [`fit`] and [`calibration`] turn
//! them into latency/bandwidth curves, a topology file and, in [`link_calibration`], the machines'
//! shared calibration format and an nccl-tests table), and replays a simulated DAG on real
//! GPUs to check a prediction ([`replay`]).
//!
//! CUDA libraries are loaded at run time (cudarc's dynamic loading), so this builds anywhere; every
//! entry point first checks that the driver library is present ([`device::ensure_driver`]) and
//! returns [`crate::Error::Gpu`] instead of letting cudarc panic. Like the rest of the library it
//! never prints or exits; it does not touch the engine, the DAG builder or the report writers.
//! [`stats`], [`fit`], [`calibration`] and the planning half of [`replay`] are pure and tested
//! without a GPU; the CUDA-calling code ([`device`], [`measure`], [`replay::execute`]) needs one.

pub mod calibration;
pub mod device;
pub mod fit;
pub mod link_calibration;
pub mod measure;
pub mod replay;
pub mod stats;
