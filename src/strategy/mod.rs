//! Strategies: the choices that shape the DAG (what overlaps with what, how gradients are
//! aggregated). A strategy is written as features joined by `+`, optionally with `key=value`
//! settings, e.g. `io+wfbp` or `wfbp+allreduce=ring+comm=trace`. Parsing and naming live here; the
//! DAG builder reads the resulting [`Strategy`].

pub mod compress;
pub mod hybrid;
pub mod runtime;

use crate::collective::Algorithm;
use crate::error::{Error, Result};
use crate::units::Nanos;
use compress::{Codec, CodecCost};
pub use runtime::Runtime;
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

impl CommSource {
    /// The name outputs carry (`comm_source`).
    pub fn name(self) -> &'static str {
        match self {
            CommSource::Model => "model",
            CommSource::Trace => "trace",
        }
    }
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
    /// Master-GPU data parallelism (PyTorch DataParallel; ScaleDNN II-B) instead of all-reduce.
    pub master: bool,
    /// ScaleDNN IV-A: each GPU's mini-batch goes straight from host memory (master mode).
    pub split: bool,
    /// ScaleDNN IV-B: the next batch's copies run on a separate stream during compute (master mode).
    pub preload: bool,
    /// Wire format of the weights the master broadcasts (ScaleDNN IV-C: `3to1`).
    pub weights: Codec,
    /// Wire format of gradients in all-reduce (FP16, BF16, Dettmers' 8-bit).
    pub grads: Codec,
    /// Codec costs: ns per element to encode/decode (None = the codec's default), per-tensor
    /// launch cost, and the GPU's speed relative to Dettmers' GTX Titan (scales 8-bit defaults).
    pub encode_ns: Option<f64>,
    pub decode_ns: Option<f64>,
    pub launch_ns: Nanos,
    pub gpu_speed: f64,
    /// `grad-dtype=fp32`: a mixed-precision (FP16) workload's gradients are all-reduced in FP32,
    /// as frameworks that keep FP32 variables and cast them for FP16 compute do (TensorFlow's
    /// AMP and Keras `mixed_float16`, Horovod without `Compression.fp16`; docs/strategies.md).
    pub fp32_grads: bool,
    /// Mixed precision (GradientFlow 2.5): compute times divided by `fp16_speedup`, FP16 gradients.
    pub mixed: bool,
    pub fp16_speedup: f64,
    /// Lazy all-reduce / tensor fusion threshold θ in bytes (GradientFlow 3.1); `u64::MAX` fuses
    /// everything into one all-reduce after the backward pass.
    pub fusion: Option<u64>,
    /// Coarse-grained sparse communication (GradientFlow 3.2): fraction of 32K-gradient chunks sent.
    pub sparse: Option<f64>,
    /// Priority scheduling (P3/ByteScheduler): gradient pieces of at most this many bytes, lowest
    /// layer first; the next forward pass of a layer waits only for that layer's gradients.
    pub priority_partition: Option<u64>,
    /// Bytes of network output per sample gathered to the master for the loss (master mode).
    pub output_bytes_per_sample: u64,
    /// AccDP: training processes per GPU under MPS (each one an all-reduce rank with its own
    /// mini-batch), the utilisation one process's kernels reach alone, and each client's
    /// active-thread share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / 100).
    pub mps: Option<u32>,
    pub util: Util,
    pub threads: f64,
    /// AccDP V: data-loading workers on the host CPU. CPU time to load and augment one sample
    /// with one worker (`load_us`), workers per process, and CPU cores per node shared by all the
    /// node's processes. `None` = loading is not modelled as CPU work.
    pub loader: Option<Loader>,
    /// The framework runtime that groups and launches gradient communication (`runtime=NAME`);
    /// `None`: one all-reduce per layer (Caffe-MPI, as the DAG paper models it) or the
    /// `fusion=`/`priority=` variants.
    pub runtime: Option<Runtime>,
}

/// The fraction of the GPU an MPS client's kernels need when they run alone (AccDP Sec. III).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Util {
    /// Not given: the workload's per-layer utilisation when it carries one (a zoo model
    /// synthesised for a GPU and batch), else 1 (the kernels fill the GPU).
    Default,
    /// `util=auto`: the workload's per-layer utilisation; a workload without one is an error.
    Auto,
    /// `util=U`: every kernel of a process reaches U alone (e.g. a measured average).
    Fixed(f64),
}

/// Data-loading workers as a processor-shared CPU resource (AccDP Sec. V).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Loader {
    pub load_ns_per_sample: Nanos,
    pub workers: u32,
    pub cores: u32,
}

/// GradientFlow's chunk size for coarse-grained sparse communication: 32K gradients.
pub const SPARSE_CHUNK_ELEMENTS: u64 = 32 * 1024;

/// Named strategies users can list (`dagsim predict --help` shows them).
pub const NAMED: &[(&str, &str)] = &[
    ("none", "no overlap: read, copy, forward, backward, aggregate, update in sequence (CNTK; Eq. 2)"),
    ("io", "I/O overlap: the next batch is read and copied during compute (Eq. 3)"),
    ("wfbp", "wait-free backprop only: each layer's all-reduce overlaps the remaining backward pass"),
    ("io+wfbp", "I/O overlap and wait-free backprop, one all-reduce per layer (Caffe-MPI; Eq. 4-5); also `caffe-mpi`"),
    ("runtime=ddp", "PyTorch DDP: 25 MB buckets (the first 1 MB) in backward order, one all-reduce each; the default"),
    (
        "runtime=horovod",
        "Horovod: tensors ready each 1 ms cycle fused into 128 MB buffers (0.21+; 0.16-0.20: 5 ms, 64 MB)",
    ),
    ("runtime=byteps", "BytePS: 4 MB partitions, local reduce, one push per node to CPU servers, pull, broadcast"),
    (
        "runtime=bytescheduler",
        "ByteScheduler: partitions of 1M parameters sent lowest layer first, scheduler cost per partition",
    ),
    ("runtime=ps", "TensorFlow/MXNet parameter servers: push to the tensor's server, sum and update there, pull"),
    ("runtime=nccl", "one NCCL all-reduce per gradient tensor as backward produces it"),
    (
        "io+allreduce=halving-doubling+runtime=openmpi",
        "CUDA-aware OpenMPI: each layer's all-reduce copied to host memory, summed on the CPUs, copied back",
    ),
    ("master", "master-GPU data parallelism: HtoD to the master, PtoP scatter, broadcast, reduce (ScaleDNN II-B)"),
    ("master+split", "CPU-side batch splitting: each GPU's mini-batch straight from host memory (ScaleDNN IV-A)"),
    ("master+split+preload", "plus pre-loading the next batch on a copy stream (ScaleDNN IV-B)"),
    ("master+split+preload+weights=3to1", "plus 3:1 lossy weight compression before the broadcast (ScaleDNN IV-C)"),
    ("wfbp+grads=8bit", "8-bit gradients with Dettmers' codec cost (also fp16, bf16)"),
    ("wfbp+mixed+fp16_speedup=1.12", "mixed precision: faster compute, FP16 gradients (GradientFlow 2.5)"),
    (
        "io+wfbp+runtime=horovod+grad-dtype=fp32",
        "an FP16 (AMP) workload whose framework all-reduces its FP32 variables' gradients (TF AMP, Keras)",
    ),
    ("wfbp+fusion=4M", "lazy all-reduce with threshold θ = 4 MB (GradientFlow 3.1); fusion=inf: one after backward"),
    ("wfbp+fusion=4M+sparse=0.15", "coarse-grained sparse chunks, 15% of 32K-gradient chunks sent (GradientFlow 3.2)"),
    ("wfbp+priority=1M", "P3/ByteScheduler: 1 MB gradient pieces, lowest layer first"),
    ("wfbp+mps=3+util=0.3+threads=0.33", "AccDP: 3 processes per GPU under MPS, kernels 30% utilised alone"),
];

/// The strategy `predict` uses when none is given: what a framework user gets by default, PyTorch
/// DDP's bucketed, overlapped all-reduce (25 MB buckets, the first 1 MB) with a prefetching loader.
/// The DAG paper's Caffe-MPI model (one all-reduce per layer) is `caffe-mpi` (or `io+wfbp`).
pub const DEFAULT_STRATEGY: &str = "io+wfbp+runtime=ddp";

impl Default for Strategy {
    fn default() -> Self {
        Strategy::parse(DEFAULT_STRATEGY).expect("default strategy parses")
    }
}

impl Strategy {
    /// Parses `feature+feature+key=value`. Aliases: `cntk` = none, `caffe-mpi` = io+wfbp.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut s = Strategy {
            io_overlap: false,
            wfbp: false,
            comm_source: CommSource::Model,
            allreduce: Algorithm::default(),
            master: false,
            split: false,
            preload: false,
            weights: Codec::None,
            grads: Codec::None,
            encode_ns: None,
            decode_ns: None,
            launch_ns: compress::LAUNCH_NS,
            gpu_speed: 1.0,
            fp32_grads: false,
            mixed: false,
            fp16_speedup: 1.0,
            fusion: None,
            sparse: None,
            priority_partition: None,
            output_bytes_per_sample: 4000,
            mps: None,
            util: Util::Default,
            threads: 1.0,
            loader: None,
            runtime: None,
        };
        let mut loader = (None, 1u32, None);
        // `runtime=NAME` and its settings, applied once every token is read.
        let mut runtime_name: Option<String> = None;
        let mut runtime_settings: Vec<(String, String)> = Vec::new();
        let bad = |msg: String| Error::invalid("strategy", format!("`{spec}`: {msg}"));
        let positive = |k: &str, v: &str| -> Result<f64> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| bad(format!("`{k}` needs a positive number, not `{v}`")))
        };
        let codec = |k: &str, v: &str| {
            Codec::parse(v)
                .ok_or_else(|| bad(format!("unknown `{k}` format `{v}` (known: none, fp16, bf16, 8bit, 3to1)")))
        };
        for token in spec.split('+').map(str::trim) {
            match token.split_once('=') {
                Some(("weights", v)) => s.weights = codec("weights", v)?,
                Some(("grads", v)) => s.grads = codec("grads", v)?,
                Some(("grad-dtype" | "grad_dtype", v)) => {
                    s.fp32_grads = match v {
                        "fp32" => true,
                        "fp16" => false,
                        _ => return Err(bad(format!("`grad-dtype` is fp32 or fp16 (the workload's), not `{v}`"))),
                    }
                }
                Some(("encode_ns", v)) => s.encode_ns = Some(positive("encode_ns", v)?),
                Some(("decode_ns", v)) => s.decode_ns = Some(positive("decode_ns", v)?),
                Some(("launch_us", v)) => {
                    s.launch_ns = if v == "0" { 0 } else { crate::units::us_to_ns(positive("launch_us", v)?) }
                }
                Some(("gpu_speed", v)) => s.gpu_speed = positive("gpu_speed", v)?,
                Some(("fp16_speedup", v)) => s.fp16_speedup = positive("fp16_speedup", v)?,
                Some(("fusion", "inf")) => s.fusion = Some(u64::MAX),
                Some(("fusion", v)) => {
                    s.fusion = Some(
                        parse_bytes(v)
                            .ok_or_else(|| bad(format!("`fusion` needs bytes (e.g. 4M) or inf, not `{v}`")))?,
                    )
                }
                Some(("priority", v)) => {
                    s.priority_partition =
                        Some(parse_bytes(v).filter(|&b| b > 0).ok_or_else(|| {
                            bad(format!("`priority` needs a piece size in bytes (e.g. 1M), not `{v}`"))
                        })?)
                }
                Some(("sparse", v)) => {
                    let f = positive("sparse", v)?;
                    if f > 1.0 {
                        return Err(bad(format!("`sparse` is a fraction of chunks in (0, 1], not `{v}`")));
                    }
                    s.sparse = Some(f)
                }
                Some(("mps", v)) => {
                    s.mps = Some(v.parse().ok().filter(|&k| (1..=48).contains(&k)).ok_or_else(|| {
                        bad(format!("`mps` needs 1 to 48 clients per GPU (Volta MPS limit), not `{v}`"))
                    })?)
                }
                Some(("load_us", v)) => loader.0 = Some(crate::units::us_to_ns(positive("load_us", v)?)),
                Some((k @ ("workers" | "cores"), v)) => {
                    let n = v
                        .parse::<u32>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad(format!("`{k}` needs a positive count, not `{v}`")))?;
                    if k == "workers" {
                        loader.1 = n
                    } else {
                        loader.2 = Some(n)
                    }
                }
                Some(("util", "auto")) => s.util = Util::Auto,
                Some((k @ ("util" | "threads"), v)) => {
                    let f = positive(k, v)?;
                    if f > 1.0 {
                        return Err(bad(format!(
                            "`{k}` is a fraction of the GPU in (0, 1]{}, not `{v}`",
                            if k == "util" { " or auto" } else { "" }
                        )));
                    }
                    if k == "util" {
                        s.util = Util::Fixed(f)
                    } else {
                        s.threads = f
                    }
                }
                Some(("outputs", v)) => {
                    s.output_bytes_per_sample =
                        parse_bytes(v).ok_or_else(|| bad(format!("`outputs` needs bytes per sample, not `{v}`")))?
                }
                Some(("allreduce", v)) => {
                    s.allreduce = Algorithm::parse(v)
                        .ok_or_else(|| bad(format!("unknown all-reduce algorithm `{v}` (known: ring)")))?
                }
                Some(("runtime", v)) => {
                    if let Some(first) = &runtime_name {
                        return Err(bad(format!("two runtimes, `{first}` and `{v}`; give one")));
                    }
                    runtime_name = Some(v.to_string())
                }
                Some((k, v)) if runtime::SETTINGS.contains(&k) => runtime_settings.push((k.to_string(), v.to_string())),
                Some(("comm", "model")) => s.comm_source = CommSource::Model,
                Some(("comm", "trace")) => s.comm_source = CommSource::Trace,
                Some(("comm", v)) => return Err(bad(format!("comm must be `model` or `trace`, not `{v}`"))),
                Some((k, _)) => {
                    return Err(bad(format!(
                        "unknown setting `{k}` (known: {}; with a runtime: {})",
                        SETTINGS.join(", "),
                        runtime::SETTINGS.join(", ")
                    )))
                }
                None => match token {
                    "none" | "cntk" => {}
                    "io" => s.io_overlap = true,
                    "wfbp" => s.wfbp = true,
                    "master" => s.master = true,
                    "split" => s.split = true,
                    "preload" => s.preload = true,
                    "mixed" => s.mixed = true,
                    "caffe-mpi" => {
                        s.io_overlap = true;
                        s.wfbp = true;
                    }
                    "" => return Err(bad("empty feature".into())),
                    other => {
                        return Err(bad(format!(
                            "unknown feature `{other}` (known: none, io, wfbp, master, split, preload, mixed, cntk, caffe-mpi)"
                        )));
                    }
                },
            }
        }
        s.apply_runtime(runtime_name, runtime_settings, spec)?;
        if (s.split || s.preload || s.weights != Codec::None) && !s.master {
            return Err(bad("split, preload and weights= belong to master-GPU data parallelism: add `master`".into()));
        }
        if s.master
            && (s.grads != Codec::None || s.fusion.is_some() || s.sparse.is_some() || s.priority_partition.is_some())
        {
            return Err(bad(
                "grads=, fusion=, sparse= and priority= shape all-reduce; `master` reduces to one GPU".into()
            ));
        }
        if s.fp32_grads && (s.mixed || s.grads != Codec::None || s.master) {
            return Err(bad(
                "grad-dtype=fp32 all-reduces an FP16 workload's gradients in FP32; it does not combine with \
                 `mixed` (FP16 gradients), a `grads=` codec or `master`"
                    .into(),
            ));
        }
        match loader {
            (Some(load_ns_per_sample), workers, Some(cores)) => {
                s.loader = Some(Loader { load_ns_per_sample, workers, cores })
            }
            (None, 1, None) => {}
            _ => return Err(bad("data loading needs both `load_us` and `cores` (and optionally `workers`)".into())),
        }
        if s.mps.is_none() && (s.util != Util::Default || s.threads != 1.0) {
            return Err(bad(
                "util= and threads= describe AccDP processes: add `mps=K` (1 for one process per GPU)".into()
            ));
        }
        if s.loader.is_some() && s.master {
            return Err(bad("load_us= models each process's own loader; `master` loads on the master's host".into()));
        }
        if s.mps.is_some() && (s.master || s.comm_source == CommSource::Trace || s.priority_partition.is_some()) {
            return Err(bad(
                "`mps` combines with all-reduce strategies modelled from bytes (not master, comm=trace or priority)"
                    .into(),
            ));
        }
        if s.master && s.io_overlap {
            return Err(bad("with `master`, use `preload` (ScaleDNN IV-B) rather than `io`".into()));
        }
        Ok(s)
    }

    /// Sets the runtime from `runtime=NAME` and its settings, and checks what it combines with.
    /// A runtime implies I/O overlap and overlapped gradients (every framework's loader prefetches
    /// and every runtime but a blocking MPI call communicates during the backward pass). With Horovod, `fusion=` is its
    /// fusion threshold.
    fn apply_runtime(&mut self, name: Option<String>, mut settings: Vec<(String, String)>, spec: &str) -> Result<()> {
        let bad = |msg: String| Error::invalid("strategy", format!("`{spec}`: {msg}"));
        let Some(name) = name else {
            return match settings.first() {
                Some((k, _)) => Err(Error::invalid(
                    format!("strategy field `{k}`"),
                    format!("`{k}` is a runtime setting: add `runtime=NAME` ({})", runtime::NAMES.join(", ")),
                )),
                None => Ok(()),
            };
        };
        if name == "horovod" {
            if let Some(f) = self.fusion.take() {
                let v = if f == u64::MAX { "inf".to_string() } else { f.to_string() };
                settings.insert(0, ("fusion".to_string(), v));
            }
        }
        let rt = Runtime::parse(&name, &settings)?;
        let conflict = |what: &str| bad(format!("`runtime={name}` decides {what}; drop it or the runtime"));
        if self.master {
            return Err(bad("`master` is PyTorch DataParallel, not a runtime of all-reduce or servers".into()));
        }
        if self.fusion.is_some() {
            return Err(conflict("how gradients are grouped (`fusion=` is Horovod's threshold with runtime=horovod)"));
        }
        if self.priority_partition.is_some() {
            return Err(conflict("the order of gradient pieces (runtime=bytescheduler partitions by priority)"));
        }
        if self.sparse.is_some() {
            return Err(conflict("what is sent (`sparse=` is GradientFlow's own runtime)"));
        }
        if self.comm_source == CommSource::Trace && rt != Runtime::CaffeMpi {
            return Err(bad(
                "comm=trace replays per-layer measured times: only runtime=caffe-mpi groups by layer".into()
            ));
        }
        if self.mps.is_some() && rt != Runtime::CaffeMpi {
            return Err(bad("`mps` clients exchange gradients one all-reduce per layer: use runtime=caffe-mpi".into()));
        }
        if rt.uses_servers() && self.allreduce != Algorithm::default() {
            return Err(bad(format!("runtime={name} sends gradients to parameter servers, not through `allreduce=`")));
        }
        self.io_overlap = true;
        // MPI_Allreduce blocks its caller (and coll/cuda's copies are synchronous): it overlaps
        // backward only where the strategy says `wfbp` (a communication thread).
        if !matches!(rt, Runtime::OpenMpi(_)) {
            self.wfbp = true;
        }
        self.runtime = Some(rt);
        Ok(())
    }

    /// Training processes per GPU (MPS clients; 1 without MPS).
    pub fn clients_per_gpu(&self) -> u32 {
        self.mps.unwrap_or(1)
    }

    /// A compute time under this strategy (mixed precision divides it by `fp16_speedup`).
    pub fn compute_ns(&self, ns: Nanos) -> Nanos {
        if self.mixed {
            (ns as f64 / self.fp16_speedup).round() as Nanos
        } else {
            ns
        }
    }

    fn codec_cost(&self, codec: Codec) -> CodecCost {
        let (e, d) = codec.default_costs(self.gpu_speed);
        CodecCost {
            codec,
            encode_ns_per_element: self.encode_ns.unwrap_or(e),
            decode_ns_per_element: self.decode_ns.unwrap_or(d),
            launch_ns: self.launch_ns,
        }
    }

    /// The weight-broadcast codec with its costs resolved.
    pub fn weight_codec(&self) -> CodecCost {
        self.codec_cost(self.weights)
    }

    /// The gradient codec: explicit `grads=`, else FP16 under mixed precision (the gradients are
    /// FP16 already, so no codec cost), else none.
    pub fn grad_codec(&self) -> CodecCost {
        match (self.grads, self.mixed) {
            (Codec::None, true) => CodecCost { launch_ns: 0, ..self.codec_cost(Codec::None) }.with_codec(Codec::Fp16),
            (c, _) => self.codec_cost(c),
        }
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
        for (on, name) in
            [(self.master, "master"), (self.split, "split"), (self.preload, "preload"), (self.mixed, "mixed")]
        {
            if on {
                parts.push(name.into());
            }
        }
        if parts.is_empty() {
            parts.push("none".into());
        }
        if self.weights != Codec::None {
            parts.push(format!("weights={}", self.weights.name()));
        }
        if self.grads != Codec::None {
            parts.push(format!("grads={}", self.grads.name()));
        }
        if self.fp32_grads {
            parts.push("grad-dtype=fp32".into());
        }
        let num = |x: f64| format!("{x}");
        for (v, k) in [(self.encode_ns, "encode_ns"), (self.decode_ns, "decode_ns")] {
            if let Some(v) = v {
                parts.push(format!("{k}={}", num(v)));
            }
        }
        if self.launch_ns != compress::LAUNCH_NS {
            parts.push(format!("launch_us={}", num(self.launch_ns as f64 / 1e3)));
        }
        if self.gpu_speed != 1.0 {
            parts.push(format!("gpu_speed={}", num(self.gpu_speed)));
        }
        if self.fp16_speedup != 1.0 {
            parts.push(format!("fp16_speedup={}", num(self.fp16_speedup)));
        }
        match self.fusion {
            Some(u64::MAX) => parts.push("fusion=inf".into()),
            Some(t) => parts.push(format!("fusion={}", format_bytes(t))),
            None => {}
        }
        if let Some(f) = self.sparse {
            parts.push(format!("sparse={}", num(f)));
        }
        if let Some(p) = self.priority_partition {
            parts.push(format!("priority={}", format_bytes(p)));
        }
        if let Some(k) = self.mps {
            parts.push(format!("mps={k}"));
        }
        match self.util {
            Util::Default => {}
            Util::Auto => parts.push("util=auto".into()),
            Util::Fixed(u) => parts.push(format!("util={}", num(u))),
        }
        if self.threads != 1.0 {
            parts.push(format!("threads={}", num(self.threads)));
        }
        if let Some(l) = self.loader {
            parts.push(format!("load_us={}", num(l.load_ns_per_sample as f64 / 1e3)));
            if l.workers != 1 {
                parts.push(format!("workers={}", l.workers));
            }
            parts.push(format!("cores={}", l.cores));
        }
        if self.output_bytes_per_sample != 4000 {
            parts.push(format!("outputs={}", self.output_bytes_per_sample));
        }
        if let Some(rt) = &self.runtime {
            parts.push(rt.spec());
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

/// Settings a spec may carry as `key=value`.
pub const SETTINGS: &[&str] = &[
    "allreduce",
    "comm",
    "weights",
    "grads",
    "grad-dtype",
    "encode_ns",
    "decode_ns",
    "launch_us",
    "gpu_speed",
    "fp16_speedup",
    "fusion",
    "sparse",
    "priority",
    "outputs",
    "mps",
    "util",
    "threads",
    "load_us",
    "workers",
    "cores",
    "runtime",
];

/// Bytes with the largest K/M/G suffix that divides them exactly (the inverse of [`parse_bytes`]).
pub fn format_bytes(b: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if b > 0 && b % (1 << shift) == 0 {
            return format!("{}{suffix}", b >> shift);
        }
    }
    b.to_string()
}

/// Bytes with an optional K/M/G suffix (powers of 1024), e.g. `4M`.
pub fn parse_bytes(v: &str) -> Option<u64> {
    let (num, mult) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    let x: f64 = num.parse().ok()?;
    (x.is_finite() && x >= 0.0).then(|| (x * mult as f64).round() as u64)
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
        assert_eq!(Strategy::parse("caffe-mpi").unwrap(), Strategy::parse("io+wfbp").unwrap());
        assert_eq!(Strategy::default().name(), "io+wfbp+runtime=ddp");
        assert_eq!(Strategy::parse("wfbp+io").unwrap().name(), "io+wfbp");
    }

    #[test]
    fn utilisation_is_derived_auto_or_fixed() {
        assert_eq!(Strategy::parse("mps=4").unwrap().util, Util::Default);
        for spec in ["wfbp+mps=4+util=auto", "wfbp+mps=4+util=1", "wfbp+grads=fp16+fusion=4M+mps=2+util=0.5"] {
            let s = Strategy::parse(spec).unwrap();
            assert_eq!(Strategy::parse(&s.name()).unwrap(), s, "{spec} prints as {}", s.name());
        }
        assert_eq!(Strategy::parse("mps=2+util=auto").unwrap().name(), "none+mps=2+util=auto");
        assert_eq!(Strategy::parse("mps=2+util=1").unwrap().util, Util::Fixed(1.0));
        assert!(Strategy::parse("util=auto").is_err(), "util= needs mps");
        let e = Strategy::parse("mps=2+util=2").unwrap_err().to_string();
        assert!(e.contains("(0, 1] or auto"), "{e}");
    }

    #[test]
    fn rejects_unknown_names() {
        let e = Strategy::parse("io+magic").unwrap_err().to_string();
        assert!(e.contains("unknown feature `magic`"), "{e}");
        assert!(Strategy::parse("allreduce=carrier-pigeon").is_err());
        assert!(Strategy::parse("comm=guess").is_err());
        assert!(Strategy::parse("io++wfbp").is_err());
    }

    /// A blocking MPI call overlaps backward only when asked; every other runtime implies it.
    #[test]
    fn openmpi_overlaps_only_with_wfbp() {
        let s = Strategy::parse("io+allreduce=halving-doubling+runtime=openmpi").unwrap();
        assert!(!s.wfbp && s.io_overlap);
        assert!(Strategy::parse("wfbp+runtime=openmpi").unwrap().wfbp);
        assert!(Strategy::parse("runtime=ddp").unwrap().wfbp);
    }
}
