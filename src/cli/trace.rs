//! `dagsim trace`: make workloads without a measured trace (`gen` from the model zoo and GPU
//! specs), convert measured profiles (`import`), write a workload as a Chakra execution trace
//! (`export-chakra`), check synthesis against shipped measurements
//! (`compare`), show per-GPU memory (`memory`) and list what is known (`list`).

use super::exit;
use super::output::{emit, Format};
use dagsim::error::{Error, Result};
use dagsim::workload::compare::{run_validation, ValidationRow};
use dagsim::workload::gpu::GPUS;
use dagsim::workload::import::{read_profile, ProfileFormat};
use dagsim::workload::memory::Optimizer;
use dagsim::workload::source::WorkloadSource;
use dagsim::workload::zoo::{Model, MODEL_NAMES};
use dagsim::workload::{native_trace, Precision};
use std::io::Write;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  dagsim trace gen --model resnet50 --gpu v100-pcie --batch 64 -o resnet50_v100.csv
  dagsim trace gen --model resnet50 --gpu v100-pcie --batch 64 --precision fp16 --calibrate-throughput 253
  dagsim trace import --profile-format pipedream traces/profiles/pipedream/vgg16/graph.txt --batch 128 -o vgg16.csv
  dagsim trace export-chakra --trace traces/alexnet_k80.csv -o alexnet_k80.et
  dagsim trace import --profile-format chakra alexnet_k80.et -o alexnet_from_chakra.csv
  dagsim trace compare
  dagsim trace memory --model bert-large --gpu v100 --batch 16
  dagsim trace list";

#[derive(Debug, clap::Args)]
#[command(about = "Make, import and check layer-wise traces", after_help = EXAMPLES)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Synthesise a trace from a zoo model on a GPU (roofline per layer, optional calibration).
    Gen(GenArgs),
    /// Convert a measured profile (PipeDream, Caffe, B-Caffe, Kineto, Chakra ET) to a native trace.
    Import(ImportArgs),
    /// Write a workload as a Chakra execution trace: the DAG one data-parallel rank runs.
    ExportChakra(ExportChakraArgs),
    /// Compare synthetic layer times with the measured profiles under traces/profiles.
    Compare(CompareArgs),
    /// Memory footprint per GPU of a zoo model, with an out-of-memory check.
    Memory(MemoryArgs),
    /// List zoo models and GPUs.
    List,
}

#[derive(Debug, clap::Args)]
struct ModelArgs {
    /// Zoo model or transformer config, or a Hugging Face config.json (see `dagsim trace list`).
    #[arg(long, value_name = "NAME")]
    model: String,
    /// GPU name or alias (v100-sxm2, "Tesla V100", k80, a100, 1080ti, ...).
    #[arg(long, value_name = "NAME")]
    gpu: String,
    /// Samples per GPU per iteration.
    #[arg(long, value_name = "N")]
    batch: u32,
    /// fp32, or fp16/bf16/fp8 for mixed precision (tensor cores where the GPU has them).
    #[arg(long, value_name = "P", default_value = "fp32")]
    precision: Precision,
    /// Optimizer (sgd, momentum, adam); default adam for BERT, momentum otherwise.
    #[arg(long, value_name = "OPT")]
    optimizer: Option<Optimizer>,
    /// Sequence length for BERT and transformer models (default: the config's).
    #[arg(long, value_name = "TOKENS")]
    seq_len: Option<u32>,
}

impl ModelArgs {
    fn source(&self, calibrate_throughput: Option<f64>) -> WorkloadSource {
        WorkloadSource {
            model: Some(self.model.clone()),
            gpu: Some(self.gpu.clone()),
            batch: Some(self.batch),
            precision: Some(self.precision),
            optimizer: self.optimizer,
            seq_len: self.seq_len,
            calibrate_throughput,
            ..WorkloadSource::default()
        }
    }
}

#[derive(Debug, clap::Args)]
struct GenArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Measured single-GPU samples/s at this batch size: layer times are scaled to match it.
    #[arg(long, value_name = "SAMPLES_PER_S")]
    calibrate_throughput: Option<f64>,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ExportChakraArgs {
    /// The workload: a native or Shi trace, or a profile with --profile-format.
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Read --trace with this importer (pipedream, caffe, bcaffe, kineto, chakra).
    #[arg(long, value_name = "FORMAT")]
    profile_format: Option<ProfileFormat>,
    /// The Chakra ET file to write (binary; written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// Profile format (`--profile-format` as in `predict`; `--format` is its old name).
    #[arg(long = "profile-format", alias = "format", value_name = "FORMAT")]
    format: ProfileFormat,
    /// The profile file.
    file: PathBuf,
    /// Samples per iteration, when the profile does not say (PipeDream, B-Caffe, Kineto).
    #[arg(long, value_name = "N")]
    batch: Option<u32>,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Folder holding the shipped profiles.
    #[arg(long, value_name = "DIR", default_value = "traces/profiles")]
    dir: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write to FILE instead of stdout (written atomically).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct MemoryArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Input batches pre-loaded onto the GPU ahead of use (ScaleDNN-style pre-loading).
    #[arg(long, value_name = "N", default_value_t = 0)]
    preload_batches: u32,
}

pub fn run(args: Args) -> Result<u8> {
    match args.command {
        Command::Gen(a) => gen(a),
        Command::Import(a) => import(a),
        Command::ExportChakra(a) => export_chakra(a),
        Command::Compare(a) => compare(a),
        Command::Memory(a) => memory(a),
        Command::List => list(),
    }
}

fn gen(a: GenArgs) -> Result<u8> {
    let source = a.model.source(a.calibrate_throughput);
    let workload = source.load()?;
    if let Some(w) = source.footprint(0)?.and_then(|f| f.oom_warning(&workload.name)) {
        eprintln!("warning: {w}");
    }
    let m = &a.model;
    let mut comments = vec![format!(
        "source: dagsim trace gen --model {} --gpu {} --batch {} --precision {}{} (synthetic: roofline per layer, docs/workloads.md)",
        m.model,
        m.gpu,
        m.batch,
        m.precision.name(),
        a.calibrate_throughput.map(|x| format!(" --calibrate-throughput {x}")).unwrap_or_default()
    )];
    comments.push(format!("gpu: {}", dagsim::workload::GpuSpec::by_name(&m.gpu)?.full_name));
    let text = native_trace(&workload, &comments);
    emit(a.output.as_deref(), |w| w.write_all(text.as_bytes()))?;
    Ok(exit::OK)
}

fn export_chakra(a: ExportChakraArgs) -> Result<u8> {
    let source = WorkloadSource { trace: Some(a.trace), profile_format: a.profile_format, ..Default::default() };
    let workload = source.load()?;
    let bytes = dagsim::workload::import::write_chakra_et(&workload);
    emit(Some(&a.output), |w| w.write_all(&bytes))?;
    Ok(exit::OK)
}

fn import(a: ImportArgs) -> Result<u8> {
    let mut workload = match a.format {
        // A Chakra trace becomes a workload directly (update and data load included).
        ProfileFormat::Chakra => dagsim::workload::import::read_chakra_et(&a.file)?,
        f => read_profile(&a.file, f)?.to_workload(),
    };
    if let Some(b) = a.batch {
        workload.batch_per_gpu = b;
    }
    let kind = format!("{:?}", a.format).to_lowercase();
    let comments = vec![format!("source: imported from {} ({kind} profile)", a.file.display())];
    let text = native_trace(&workload, &comments);
    emit(a.output.as_deref(), |w| w.write_all(text.as_bytes()))?;
    Ok(exit::OK)
}

fn compare(a: CompareArgs) -> Result<u8> {
    let rows = run_validation(&a.dir)?;
    emit(a.output.as_deref(), |w| match a.format {
        Format::Text => write_compare_text(w, &rows),
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &rows)?;
            writeln!(w)
        }
        Format::Csv => write_compare_csv(w, &rows),
    })?;
    Ok(exit::OK)
}

fn write_compare_text(w: &mut dyn Write, rows: &[ValidationRow]) -> std::io::Result<()> {
    writeln!(w, "Synthetic vs measured per-layer times (median |error| over matched layers; iteration = forward+backward total)")?;
    writeln!(
        w,
        "{:32} {:12} {:16} {:>13} {:>8} | {:>9} {:>7} | {:>6} {:>8} {:>9} {:>7} | {:>9} {:>7}",
        "profile",
        "model",
        "gpu_model",
        "batch_per_gpu",
        "matched",
        "raw layer",
        "iter",
        "factor",
        "floor us",
        "cal layer",
        "iter",
        "xfer layer",
        "iter"
    )?;
    for r in rows {
        let c = &r.comparison;
        writeln!(
            w,
            "{:32} {:12} {:16} {:>13} {:>4}/{:<3} | {:>8.1}% {:>6.1}% | {:>6.2} {:>8.0} {:>8.1}% {:>6.1}% | {:>8.1}% {:>6.1}%",
            r.file,
            c.model,
            c.gpu,
            c.batch,
            c.matched,
            c.measured_layers,
            100.0 * c.median_layer_error,
            100.0 * c.iteration_error,
            c.calibration_factor,
            c.layer_overhead_us,
            100.0 * c.median_layer_error_calibrated,
            100.0 * c.iteration_error_calibrated,
            100.0 * r.median_layer_error_transfer,
            100.0 * r.iteration_error_transfer
        )?;
    }
    writeln!(
        w,
        "cal = factor x synthetic + floor per layer, matching this profile's measured total; floor = per-layer overhead of a \
         host-timed profiler (PipeDream), learned from the other profiles of that profiler; xfer = the factor of the first \
         profile on the same GPU"
    )
}

fn write_compare_csv(w: &mut dyn Write, rows: &[ValidationRow]) -> std::io::Result<()> {
    writeln!(w, "profile,model,gpu_model,batch_per_gpu,matched,measured_layers,median_layer_abs_error,iteration_abs_error,calibration_factor,layer_overhead_us,median_layer_abs_error_calibrated,iteration_abs_error_calibrated,transfer_from,median_layer_abs_error_transfer,iteration_abs_error_transfer")?;
    for r in rows {
        let c = &r.comparison;
        writeln!(
            w,
            "{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.3},{:.6},{:.6},{},{:.6},{:.6}",
            r.file,
            c.model,
            c.gpu,
            c.batch,
            c.matched,
            c.measured_layers,
            c.median_layer_error,
            c.iteration_error,
            c.calibration_factor,
            c.layer_overhead_us,
            c.median_layer_error_calibrated,
            c.iteration_error_calibrated,
            r.transfer_from,
            r.median_layer_error_transfer,
            r.iteration_error_transfer
        )?;
    }
    Ok(())
}

fn memory(a: MemoryArgs) -> Result<u8> {
    let source = a.model.source(None);
    let f = source.footprint(a.preload_batches)?.expect("a model source has a footprint");
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut out = std::io::stdout().lock();
    let lines = [
        ("weights", f.weights),
        ("gradients", f.gradients),
        ("optimizer state", f.optimizer_state),
        ("activations", f.activations),
        ("pre-load buffers", f.preload_buffers),
        ("total", f.total),
        ("GPU memory", f.capacity),
    ];
    let write = |out: &mut dyn Write| -> std::io::Result<()> {
        writeln!(
            out,
            "{} on {} at batch {} ({}), per GPU:",
            a.model.model,
            a.model.gpu,
            a.model.batch,
            a.model.precision.name()
        )?;
        for (what, bytes) in lines {
            writeln!(out, "  {what:17} {:>8.2} GiB", gib(bytes))?;
        }
        Ok(())
    };
    write(&mut out).map_err(|e| Error::io("<stdout>", e))?;
    if let Some(w) = f.oom_warning(&a.model.model) {
        eprintln!("warning: {w}");
    }
    Ok(exit::OK)
}

fn list() -> Result<u8> {
    let mut out = String::from("Models (parameters, forward GFLOPs per sample):\n");
    for name in MODEL_NAMES {
        let m = Model::by_name(name, None)?;
        out.push_str(&format!("  {name:14} {:>7.1} M {:>8.2}\n", m.params() as f64 / 1e6, m.flops() / 1e9));
    }
    out.push_str(
        "Transformer configs (parameters, layers, hidden, heads/KV heads, seq; or a Hugging Face config.json):\n",
    );
    for n in dagsim::workload::transformer::NAMED {
        let c = (n.build)();
        out.push_str(&format!(
            "  {:14} {:>7.1} B {:>4} {:>6} {:>4}/{:<4} {:>6}\n",
            c.name,
            c.params().total() as f64 / 1e9,
            c.layers,
            c.hidden,
            c.heads,
            c.kv_heads,
            c.seq_len
        ));
    }
    out.push_str("GPUs (FP32 / FP16-or-tensor / FP8 TFLOPS, memory GB/s, GiB, NVLink gen):\n");
    for g in GPUS {
        let fp16 = g.tensor_tflops.unwrap_or(g.fp16_tflops);
        let fp8 = g.fp8_tflops.map(|x| format!("{x:>6.0}")).unwrap_or_else(|| format!("{:>6}", "-"));
        let nv = g.nvlink.map(|n| n.generation.to_string()).unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "  {:16} {:>6.1} / {:>6.1} / {fp8} {:>7.0} {:>5.0} {nv:>3}  {}\n",
            g.name, g.fp32_tflops, fp16, g.mem_bw_gbs, g.mem_gib, g.full_name
        ));
    }
    emit(None, |w| w.write_all(out.as_bytes()))?;
    Ok(exit::OK)
}
