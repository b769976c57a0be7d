//! The `--gpu` path of `dagsim calibrate`:
//! measures this machine's GPUs, writes the calibration file, and optionally a topology file for
//! `dagsim predict --topology`. With `--from FILE` it re-derives from an earlier calibration file
//! without touching a GPU.

use super::exit;
use super::output::emit;
use dagsim::error::{Error, Result};
use dagsim::gpu::calibration::{derive_topology, CalibrationFile, Dtype, Settings};
use dagsim::gpu::link_calibration::{link_calibration, nccl_tests_table};
use dagsim::gpu::measure::{geometric_sizes, measure, MeasureOptions};
use dagsim::hw::load_topology;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DtypeArg {
    F32,
    F16,
    Bf16,
}

/// The flags of `dagsim calibrate --gpu`.
#[derive(Debug, clap::Args)]
#[group(id = "gpu_measurement")]
pub struct Args {
    /// CUDA device ordinals to measure (default: all).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    devices: Vec<u32>,
    /// Untimed runs before each measured point.
    #[arg(long, default_value_t = 3, value_name = "N")]
    warmup: u32,
    /// Timed runs per point (the median is reported). `--repeat` as in `replay` and `bench`;
    /// `--repetitions` is its old name.
    #[arg(long = "repeat", alias = "repetitions", default_value_t = 20, value_name = "N")]
    repetitions: u32,
    /// Square GEMM sizes n.
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024,2048,4096,8192", value_name = "N,...")]
    gemm_sizes: Vec<u32>,
    /// GEMM data types.
    #[arg(long, value_delimiter = ',', value_enum, default_value = "f32,f16,bf16", value_name = "T,...")]
    dtypes: Vec<DtypeArg>,
    /// Smallest copy / all-reduce message (bytes); sizes grow by 4x.
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    min_bytes: u64,
    /// Largest copy / all-reduce message (bytes).
    #[arg(long, default_value_t = 256 << 20, value_name = "BYTES")]
    max_bytes: u64,
    /// Re-derive from this calibration file instead of measuring (no GPU needed).
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Also write a topology file for `dagsim predict --topology`.
    #[arg(long, value_name = "FILE")]
    topology_out: Option<PathBuf>,
    /// Also write the link fits in the shared calibration format (`predict --calibration FILE`).
    #[arg(long, value_name = "FILE")]
    calibration_out: Option<PathBuf>,
    /// Also write the measured all-reduce as an nccl-tests table (input for `dagsim calibrate`).
    #[arg(long, value_name = "FILE")]
    nccl_table: Option<PathBuf>,
    /// Topology that supplies what is not measured (network, storage, node count).
    #[arg(long, default_value = "k80-cluster", value_name = "NAME|FILE")]
    base_topology: String,
}

/// Measures (or reads `--from`) and writes the calibration file to `output` (stdout if `None`;
/// with `--from`, only if given) and the other outputs the flags ask for.
pub fn run(args: Args, output: Option<&Path>) -> Result<u8> {
    if args.repetitions == 0 {
        return Err(Error::invalid("--repeat", "must be at least 1"));
    }
    if args.min_bytes == 0 || args.min_bytes > args.max_bytes {
        return Err(Error::invalid("--min-bytes", "must be at least 1 and at most --max-bytes"));
    }
    // Load the base first so a typo fails before minutes of measuring.
    let base = args.topology_out.as_ref().map(|_| load_topology(&args.base_topology)).transpose()?;
    let file = match &args.from {
        Some(path) => CalibrationFile::load(path)?,
        None => {
            let opts = MeasureOptions {
                devices: args.devices.clone(),
                settings: Settings { warmup: args.warmup, repetitions: args.repetitions },
                gemm_sizes: args.gemm_sizes.clone(),
                dtypes: args
                    .dtypes
                    .iter()
                    .map(|d| match d {
                        DtypeArg::F32 => Dtype::F32,
                        DtypeArg::F16 => Dtype::F16,
                        DtypeArg::Bf16 => Dtype::Bf16,
                    })
                    .collect(),
                message_sizes: geometric_sizes(args.min_bytes, args.max_bytes),
            };
            CalibrationFile::new(contain_cuda_panics(|| measure(&opts))?)
        }
    };
    if args.from.is_none() || output.is_some() {
        emit(output, |w| file.write_json(w))?;
    }
    if let (Some(path), Some(base)) = (&args.topology_out, &base) {
        let source = args.from.as_deref().or(output).unwrap_or(Path::new("the measurements of this run"));
        let topology = derive_topology(&file, base, source)?;
        emit(Some(path), |w| {
            serde_json::to_writer_pretty(&mut *w, &topology)?;
            writeln!(w)
        })?;
    }
    if let Some(path) = &args.calibration_out {
        let cal = link_calibration(&file)?;
        emit(Some(path), |w| w.write_all(cal.to_json().as_bytes()))?;
    }
    if let Some(path) = &args.nccl_table {
        let table = nccl_tests_table(&file)
            .ok_or_else(|| Error::Gpu("no all-reduce was measured (it needs 2 GPUs and NCCL)".into()))?;
        emit(Some(path), |w| w.write_all(table.as_bytes()))?;
    }
    eprint!("{}", summary(&file));
    Ok(exit::OK)
}

/// A few lines for the terminal; the file holds everything.
fn summary(file: &CalibrationFile) -> String {
    let m = &file.measurements;
    let f = &file.fits;
    let mut s = String::new();
    for d in &m.devices {
        s += &format!("device {}: {} (sm_{}, {} SMs)\n", d.ordinal, d.name, d.compute_capability, d.multiprocessors);
    }
    for g in f.gemm.iter().filter(|g| Some(g.n) == f.gemm.iter().filter(|h| h.device == g.device).map(|h| h.n).max()) {
        s += &format!("  gemm device {} {} n={}: {:.1} TFLOP/s\n", g.device, g.dtype.name(), g.n, g.tflops);
    }
    for h in &f.host_copies {
        s += &format!(
            "  {:?} {:?} device {}: {:.2} GB/s, {:.1} us\n",
            h.direction, h.memory, h.device, h.fit.bandwidth_gb_s, h.fit.latency_us
        );
    }
    for p in &f.peer_copies {
        s += &format!("  peer {} -> {}: {:.2} GB/s, {:.1} us\n", p.src, p.dst, p.fit.bandwidth_gb_s, p.fit.latency_us);
    }
    if let Some(a) = &f.allreduce {
        s += &format!("  all-reduce: {:.2} GB/s algorithm bandwidth, {:.1} us\n", a.bandwidth_gb_s, a.latency_us);
    }
    for n in &m.notes {
        s += &format!("note: {n}\n");
    }
    s
}

/// Runs GPU code with cudarc's panics turned into errors. The library checks for the CUDA libraries
/// before any call, but cudarc still panics on a symbol an older driver lacks, or on a failed
/// internal assertion; the user should get an error message and exit code 2, not a backtrace.
/// The panic hook is silenced meanwhile (this is the CLI, which owns stderr).
pub(super) fn contain_cuda_panics<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    outcome.unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown failure");
        Err(Error::Gpu(format!("a CUDA library call failed: {msg} (is the driver older than CUDA 12.8?)")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_in_gpu_code_become_errors() {
        let e = contain_cuda_panics::<()>(|| panic!("Missing symbol cuFoo")).unwrap_err();
        assert!(e.to_string().contains("Missing symbol cuFoo"), "{e}");
        assert_eq!(contain_cuda_panics(|| Ok(3)).unwrap(), 3);
    }
}
