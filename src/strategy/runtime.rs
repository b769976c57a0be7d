//! Training frameworks' gradient runtimes: how a framework groups per-tensor gradients into
//! collectives (or pushes to parameter servers), when it launches them and which fixed costs it
//! pays. Written `runtime=NAME` in a strategy spec, with the runtime's own `key=value` settings
//! (`io+wfbp+runtime=horovod+cycle_ms=1`). Each default comes from the framework's source or docs
//! at the version named next to it (docs/strategies.md, "Framework runtimes", has the table). This module
//! parses and names; `dag::exchange` turns a runtime into tasks.

use crate::error::{Error, Result};
use crate::units::Nanos;
use serde::Serialize;

/// One framework runtime with its settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "name")]
pub enum Runtime {
    /// Caffe-MPI as the DAG paper models it: one all-reduce per learnable layer, launched as the
    /// layer's backward ends. The behaviour of strategies without a runtime.
    CaffeMpi,
    /// Plain NCCL from a framework hook: one all-reduce per gradient tensor, in the order backward
    /// produces them, each paying the framework's call cost.
    Nccl(Calls),
    /// Horovod's background loop: every cycle it agrees with all ranks on the tensors ready
    /// everywhere and all-reduces them fused into buffers of at most `fusion` bytes.
    Horovod(Horovod),
    /// PyTorch DistributedDataParallel: gradients fill buckets (the first one small) in the
    /// order backward produces them; a full bucket is all-reduced, buckets in order.
    Ddp(Ddp),
    /// BytePS: per partition, reduce-scatter inside a node, copy to host, one push per node to
    /// the partition's CPU server, summation on the server's CPU, pull, copy back, all-gather.
    BytePs(BytePs),
    /// ByteScheduler over all-reduce: tensors cut into partitions, sent lowest layer first, each
    /// partition paying the scheduler's overhead.
    ByteScheduler(ByteScheduler),
    /// TensorFlow/MXNet parameter servers: every tensor lives on one server (round robin; MXNet
    /// splits large ones across all servers); workers push gradients, the server sums and
    /// updates on its CPU, workers pull the parameters back.
    Ps(Ps),
    /// CUDA-aware OpenMPI's all-reduce on GPU buffers (`ompi/mca/coll/cuda`): the whole buffer
    /// is copied to host memory, all-reduced between the processes there with the sums on their
    /// CPUs, and copied back. Grouped one all-reduce per layer, as Caffe-MPI.
    OpenMpi(OpenMpi),
    /// PyTorch 0.4's DistributedDataParallel on the Gloo backend (THD): gradients cut into 1 MiB
    /// buckets in parameter order, each all-reduced by a reduction thread as soon as backward has
    /// filled it (`torch/nn/parallel/distributed.py` v0.4: `bucket_bytes_cap = 1 * MB`,
    /// `_take_tensors(module.parameters(), ...)`, `_queue_reduction`), with Gloo's CUDA
    /// all-reduce, which stages through host memory: `CudaAllreduceHalvingDoublingPipelined` with
    /// `CudaHostWorkspace` (THD `GlooCache.hpp`; the GPUDirect variant only with ibverbs, not in
    /// the default build, pytorch/pytorch#2827), i.e. copy to pinned host memory, then recursive
    /// halving and doubling between processes with each received block summed on the CPU
    /// (`gloo/cuda_allreduce_halving_doubling.cc`, 2018: `waitRecv`, `fn_->call`, `stream.wait()`
    /// each step), then back. Write `allreduce=halving-doubling` with it.
    Gloo(Gloo),
}

/// The framework-side cost of one communication call (dispatch from the framework's thread and
/// the CUDA launch), paid on the communicator before the transfer starts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calls {
    pub call_ns: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Horovod {
    /// HOROVOD_FUSION_THRESHOLD: largest fused buffer, bytes (0: no fusion).
    pub fusion: u64,
    /// HOROVOD_CYCLE_TIME: period of the background loop.
    pub cycle_ns: Nanos,
    /// HOROVOD_CACHE_CAPACITY > 0: steady-state negotiation is one bit-vector all-reduce per
    /// cycle; 0 (and Horovod before 0.16.2): every rank sends rank 0 a request per ready tensor
    /// and rank 0 broadcasts the responses.
    pub cache: bool,
    pub call_ns: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ddp {
    /// bucket_cap_mb, in bytes.
    pub bucket: u64,
    /// The first bucket's cap (dist._DEFAULT_FIRST_BUCKET_BYTES), bytes.
    pub first_bucket: u64,
    pub call_ns: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BytePs {
    /// BYTEPS_PARTITION_BYTES.
    pub partition: u64,
    /// BYTEPS_SCHEDULING_CREDIT in partitions (0: FIFO without credit control, the default).
    pub credit: u32,
    /// Server processes, one per node from the first (co-located mode); None: one per node.
    pub servers: Option<u32>,
    /// Bytes per second one server sums (all its engine threads together).
    pub sum_bytes_per_s: f64,
    pub call_ns: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ByteScheduler {
    /// BYTESCHEDULER_PARTITION: parameters (gradient elements) per partition, not bytes.
    pub partition: u64,
    /// BYTESCHEDULER_CREDIT: parameters in flight. Parsed and printed; the model runs one
    /// partition at a time on the communicator, in priority order (credit is not modelled).
    pub credit: u64,
    /// The scheduler's own cost per partition (Python core loop, callbacks).
    pub sched_ns: Nanos,
    pub call_ns: Nanos,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ps {
    pub servers: Option<u32>,
    /// Sum a node's GPUs' gradients before pushing (MXNet's kvstore, tf_cnn_benchmarks'
    /// distributed_replicated); false: every GPU pushes its own (TF parameter_server).
    pub local: bool,
    /// Tensors larger than this are split evenly over all servers (MXNET_KVSTORE_BIGARRAY_BOUND
    /// elements x 4 bytes); u64::MAX: never (TensorFlow places whole variables).
    pub split_above: u64,
    /// Bytes per second a server handles per push (receive and sum) and per pull (serialise and
    /// send), on its CPU.
    pub sum_bytes_per_s: f64,
    pub call_ns: Nanos,
    /// Push each tensor as backward produces it (MXNet's dependency engine); false: a GPU's
    /// pushes wait for its whole backward pass, as TensorFlow 1.x's copy-out waits for
    /// everything queued on the GPU's compute stream (`ThenWaitFor(send_stream)` in
    /// `core/common_runtime/gpu/gpu_util.cc`).
    pub overlap: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpenMpi {
    /// Bytes per second one process sums on its CPU (received data added into its buffer).
    pub sum_bytes_per_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gloo {
    /// DDP's bucket cap for non-NCCL backends, cut in parameter order.
    pub bucket: u64,
    /// Bytes per second one process sums on its CPU (each received block added into its own).
    pub sum_bytes_per_s: f64,
}

/// PyTorch 0.4 DDP's bucket cap for Gloo (`bucket_bytes_cap = 1 * MB`, MB = 1024 * 1024).
pub const GLOO_DDP_BUCKET: u64 = 1 << 20;

/// Framework-side cost of one communication call: one CUDA kernel launch, the same 5 us
/// assumption as a codec kernel's (`compress::LAUNCH_NS`).
pub const CALL_NS: Nanos = super::compress::LAUNCH_NS;

/// Horovod's defaults as a user installing it today gets them: 0.21.0 to 0.28.1
/// (`horovod/common/operations.cc`, InitializeHorovodOnce) set the fusion threshold to 128 MiB and
/// the cycle time to 1 ms; the response cache holds 1024 entries (`global_state.h`; it exists since
/// 0.16.2). Horovod 0.16 to 0.20 used 64 MiB and 5 ms: write `fusion=64M+cycle_ms=5` for those.
pub const HOROVOD_FUSION: u64 = 128 << 20;
pub const HOROVOD_CYCLE_NS: Nanos = 1_000_000;

/// PyTorch DDP (`torch/nn/parallel/distributed.py`, bucket_cap_mb=25, and
/// `dist._DEFAULT_FIRST_BUCKET_BYTES` = 1 MiB, v1.8 to v2.x).
pub const DDP_BUCKET: u64 = 25 << 20;
pub const DDP_FIRST_BUCKET: u64 = 1 << 20;

/// BytePS 0.2.5 (`byteps/common/global.cc`: `_partition_bytes = 4096000`;
/// `scheduled_queue.cc`: BYTEPS_SCHEDULING_CREDIT unset disables scheduling).
pub const BYTEPS_PARTITION: u64 = 4_096_000;

/// ByteScheduler (bytedance/byteps branch `bytescheduler`, `bytescheduler/common/bytecore.py`):
/// BYTESCHEDULER_PARTITION 1,000,000 and BYTESCHEDULER_CREDIT 4,000,000, both counted in
/// parameters ("Partition unit, i.e., the number of parameters"; `tensor_size()` is the element
/// count), so 4 MB and 16 MB of FP32 gradients. The credit is auto-tuned by default
/// (BYTESCHEDULER_CREDIT_TUNING=1), which the model does not do.
pub const BYTESCHEDULER_PARTITION: u64 = 1_000_000;
pub const BYTESCHEDULER_CREDIT: u64 = 4_000_000;

/// MXNet 1.x `src/kvstore/kvstore_dist.h`: MXNET_KVSTORE_BIGARRAY_BOUND = 1,000,000 elements.
pub const MXNET_BIGARRAY_BYTES: u64 = 1_000_000 * 4;

/// A server's summation rate: one pass that reads an incoming gradient and adds it into the
/// accumulator (read two streams, write one) at one core's streaming bandwidth. A single
/// Skylake-class core streams about 12 GB/s (a serial sum reads 13-17 GB/s on an i7-12700H,
/// duvanenko.tech.blog "Maximum read bandwidth", 2023), so a pass that moves 3 bytes per byte
/// summed runs near 4 GB/s per thread; BytePS runs 4 engine threads (BYTEPS_SERVER_ENGINE_THREAD,
/// `byteps/server/server.cc` 0.2.5): 16 GB/s per server. An estimate from those two sources.
pub const SERVER_SUM_BYTES_PER_S: f64 = 16e9;

/// A TensorFlow parameter-server task's throughput over gRPC (each push and each pull costs
/// `bytes / rate` on the server's CPU): TensorFlow's `RecvTensor` RPC, the one a ps task serves
/// for every push and pull, moving a 128 MB tensor between two TensorFlow processes of one host
/// with the gRPC that TensorFlow shipped until its August 2017 upgrade (so also in the May 2017
/// build of validation/tf2017.csv): 569 MB/s measured and 520 MB/s quoted from issue #6116 for
/// the same size (Y. Bulatov, `benchmark_grpc_recv.py --data_mb=128`, tensorflow/tensorflow issue
/// #6256, 2016-12-11); 0.55 GB/s is the middle of the two. The same gRPC measured elsewhere spans
/// 0.1-0.9 GB/s: 0.9 GB/s adding 10 MB tensors into a variable on another process (#6116,
/// 2016-12-09, Xeon E5-2630 v3), 100-200 MB/s between machines (byronyi, #6116, 2017-08-09) and
/// 196 MB/s on one host (PR #11261, 2017-07-04). Which one a given host reaches is not known
/// beforehand; validation/README.md (tf2017) says what 0.9 GB/s would change and what it waits on.
pub const TF_PS_BYTES_PER_S: f64 = 0.55e9;

/// One MPI process summing a received buffer into its own on one core: the per-thread rate of
/// [`SERVER_SUM_BYTES_PER_S`] (a core streams about 12 GB/s; a sum moves 3 bytes per byte summed),
/// since OpenMPI's reduction operators (`ompi/mca/op/base`) are a single-threaded loop.
pub const MPI_SUM_BYTES_PER_S: f64 = SERVER_SUM_BYTES_PER_S / 4.0;

/// The runtime names users write.
pub const NAMES: &[&str] = &["caffe-mpi", "nccl", "horovod", "ddp", "byteps", "bytescheduler", "ps", "openmpi", "gloo"];

/// Settings each runtime takes (besides the strategy's own).
fn keys(name: &str) -> &'static [&'static str] {
    match name {
        "caffe-mpi" => &[],
        "nccl" => &["call_us"],
        "horovod" => &["fusion", "cycle_ms", "cache", "call_us"],
        "ddp" => &["bucket_mb", "first_bucket_mb", "call_us"],
        "byteps" => &["partition", "credit", "servers", "sum_gbps", "call_us"],
        "bytescheduler" => &["partition", "credit", "sched_us", "call_us"],
        "ps" => &["servers", "local", "split", "sum_gbps", "call_us", "overlap"],
        "openmpi" => &["sum_gbps"],
        "gloo" => &["bucket_mb", "sum_gbps"],
        _ => &[],
    }
}

/// Every runtime setting key (the strategy parser routes these here).
pub const SETTINGS: &[&str] = &[
    "cycle_ms",
    "cache",
    "bucket_mb",
    "first_bucket_mb",
    "partition",
    "credit",
    "servers",
    "sum_gbps",
    "sched_us",
    "call_us",
    "local",
    "split",
    "overlap",
];

impl Runtime {
    /// Builds runtime `name` with `settings` (key, value) over its defaults. A setting the
    /// runtime does not take, or a bad value, is an error naming it.
    pub fn parse(name: &str, settings: &[(String, String)]) -> Result<Runtime> {
        if !NAMES.contains(&name) {
            return Err(Error::invalid(
                "strategy field `runtime`",
                format!("unknown runtime `{name}` (known: {})", NAMES.join(", ")),
            ));
        }
        let taken = keys(name);
        for (k, _) in settings {
            if !taken.contains(&k.as_str()) {
                let takes = if taken.is_empty() { "no settings".to_string() } else { taken.join(", ") };
                return Err(Error::invalid(
                    format!("strategy field `{k}`"),
                    format!("runtime `{name}` does not take `{k}` (it takes {takes})"),
                ));
            }
        }
        let get = |k: &str| settings.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let bad = |k: &str, v: &str, what: &str| {
            Error::invalid(format!("strategy field `{k}`"), format!("runtime `{name}`: `{k}` needs {what}, not `{v}`"))
        };
        let positive = |k: &str, default: f64| -> Result<f64> {
            match get(k) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| bad(k, v, "a positive number")),
            }
        };
        let non_negative_us = |k: &str, default: Nanos| -> Result<Nanos> {
            match get(k) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0 && *x <= crate::units::MAX_DURATION_US)
                    .map(crate::units::us_to_ns)
                    .ok_or_else(|| bad(k, v, "a non-negative time in microseconds, at most 1e12")),
            }
        };
        let bytes = |k: &str, default: u64| -> Result<u64> {
            match get(k) {
                None => Ok(default),
                Some(v) => super::parse_bytes(v).filter(|&b| b > 0).ok_or_else(|| {
                    bad(k, v, "a size in bytes greater than zero (e.g. 4M; K, M, G are powers of 1024)")
                }),
            }
        };
        let parameters = |k: &str, default: u64| -> Result<u64> {
            match get(k) {
                None => Ok(default),
                Some(v) => super::parse_bytes(v).filter(|&b| b > 0).ok_or_else(|| {
                    bad(k, v, "a number of parameters greater than zero (e.g. 1000000; K, M are powers of 1024)")
                }),
            }
        };
        let count = |k: &str| -> Result<Option<u32>> {
            match get(k) {
                None => Ok(None),
                Some(v) => {
                    v.parse::<u32>().ok().filter(|&n| n > 0).map(Some).ok_or_else(|| bad(k, v, "a positive count"))
                }
            }
        };
        let flag = |k: &str, default: bool| -> Result<bool> {
            match get(k) {
                None => Ok(default),
                Some("1" | "on" | "true") => Ok(true),
                Some("0" | "off" | "false") => Ok(false),
                Some(v) => Err(bad(k, v, "on or off")),
            }
        };
        let call_ns = non_negative_us("call_us", CALL_NS)?;
        // Rates and sizes within the ranges of every input (docs/limits.md).
        let sum = |default: f64| -> Result<f64> {
            let x = positive("sum_gbps", default / 1e9)?;
            crate::units::check_rate_gb_s(x / 8.0).map_err(|m| {
                bad("sum_gbps", get("sum_gbps").unwrap_or(""), &format!("a rate in Gbit/s in range ({m})"))
            })?;
            Ok(x * 1e9)
        };
        let mb = |k: &str, default: u64| -> Result<u64> {
            let x = positive(k, default as f64 / (1u64 << 20) as f64)?;
            let bytes = (x * (1u64 << 20) as f64).round().max(1.0);
            if bytes > crate::units::MAX_BYTES as f64 {
                return Err(bad(k, get(k).unwrap_or(""), "a size in MiB of at most 2^30 (1 PiB)"));
            }
            Ok(bytes as u64)
        };
        Ok(match name {
            "caffe-mpi" => Runtime::CaffeMpi,
            "nccl" => Runtime::Nccl(Calls { call_ns }),
            "horovod" => {
                // fusion=0 disables fusion, as HOROVOD_FUSION_THRESHOLD=0 does.
                let fusion = match get("fusion") {
                    None => HOROVOD_FUSION,
                    Some("inf") => u64::MAX,
                    Some(v) => super::parse_bytes(v).ok_or_else(|| bad("fusion", v, "bytes (e.g. 64M), 0 or inf"))?,
                };
                let cycle_ms = match get("cycle_ms") {
                    None => HOROVOD_CYCLE_NS as f64 / 1e6,
                    Some(v) => v
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x >= 0.0 && *x * 1e3 <= crate::units::MAX_DURATION_US)
                        .ok_or_else(|| bad("cycle_ms", v, "a non-negative time in milliseconds, at most 1e9"))?,
                };
                let cache = match get("cache") {
                    None => true,
                    Some(v) => {
                        v.parse::<u32>().map(|c| c > 0).map_err(|_| bad("cache", v, "a cache capacity (0 disables)"))?
                    }
                };
                Runtime::Horovod(Horovod { fusion, cycle_ns: (cycle_ms * 1e6).round() as Nanos, cache, call_ns })
            }
            "ddp" => Runtime::Ddp(Ddp {
                bucket: mb("bucket_mb", DDP_BUCKET)?,
                first_bucket: mb("first_bucket_mb", DDP_FIRST_BUCKET)?,
                call_ns,
            }),
            "byteps" => Runtime::BytePs(BytePs {
                partition: bytes("partition", BYTEPS_PARTITION)?,
                credit: match get("credit") {
                    None => 0,
                    Some(v) => v
                        .parse::<u32>()
                        .map_err(|_| bad("credit", v, "a number of partitions (0: no credit control)"))?,
                },
                servers: count("servers")?,
                sum_bytes_per_s: sum(SERVER_SUM_BYTES_PER_S)?,
                call_ns,
            }),
            "bytescheduler" => Runtime::ByteScheduler(ByteScheduler {
                partition: parameters("partition", BYTESCHEDULER_PARTITION)?,
                credit: parameters("credit", BYTESCHEDULER_CREDIT)?,
                sched_ns: non_negative_us("sched_us", BYTESCHEDULER_SCHED_NS)?,
                call_ns,
            }),
            "ps" => Runtime::Ps(Ps {
                servers: count("servers")?,
                local: flag("local", true)?,
                split_above: match get("split") {
                    None => MXNET_BIGARRAY_BYTES,
                    Some("off" | "inf") => u64::MAX,
                    Some(v) => super::parse_bytes(v)
                        .filter(|&b| b > 0)
                        .ok_or_else(|| bad("split", v, "a size in bytes, or off"))?,
                },
                sum_bytes_per_s: sum(TF_PS_BYTES_PER_S)?,
                call_ns,
                overlap: flag("overlap", true)?,
            }),
            "openmpi" => Runtime::OpenMpi(OpenMpi { sum_bytes_per_s: sum(MPI_SUM_BYTES_PER_S)? }),
            // Gloo's sum is one thread's loop over the received block, as OpenMPI's.
            "gloo" => Runtime::Gloo(Gloo {
                bucket: mb("bucket_mb", GLOO_DDP_BUCKET)?,
                sum_bytes_per_s: sum(MPI_SUM_BYTES_PER_S)?,
            }),
            _ => unreachable!("checked against NAMES"),
        })
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            Runtime::CaffeMpi => "caffe-mpi",
            Runtime::Nccl(_) => "nccl",
            Runtime::Horovod(_) => "horovod",
            Runtime::Ddp(_) => "ddp",
            Runtime::BytePs(_) => "byteps",
            Runtime::ByteScheduler(_) => "bytescheduler",
            Runtime::Ps(_) => "ps",
            Runtime::OpenMpi(_) => "openmpi",
            Runtime::Gloo(_) => "gloo",
        }
    }

    /// `runtime=NAME` followed by the settings that differ from the defaults, in a fixed order,
    /// so that the name parses back to the same runtime.
    pub fn spec(&self) -> String {
        let default = Runtime::parse(self.kind_name(), &[]).expect("defaults parse");
        let mut parts = vec![format!("runtime={}", self.kind_name())];
        let num = |x: f64| format!("{x}");
        let us = |ns: Nanos| num(ns as f64 / 1e3);
        let mut push = |changed: bool, k: &str, v: String| {
            if changed {
                parts.push(format!("{k}={v}"));
            }
        };
        match (self, &default) {
            (Runtime::CaffeMpi, _) => {}
            (Runtime::Nccl(c), Runtime::Nccl(d)) => push(c.call_ns != d.call_ns, "call_us", us(c.call_ns)),
            (Runtime::Horovod(h), Runtime::Horovod(d)) => {
                let fusion = if h.fusion == u64::MAX { "inf".into() } else { super::format_bytes(h.fusion) };
                push(h.fusion != d.fusion, "fusion", fusion);
                push(h.cycle_ns != d.cycle_ns, "cycle_ms", num(h.cycle_ns as f64 / 1e6));
                push(h.cache != d.cache, "cache", if h.cache { "1024".into() } else { "0".into() });
                push(h.call_ns != d.call_ns, "call_us", us(h.call_ns));
            }
            (Runtime::Ddp(x), Runtime::Ddp(d)) => {
                let mb = |b: u64| num(b as f64 / (1u64 << 20) as f64);
                push(x.bucket != d.bucket, "bucket_mb", mb(x.bucket));
                push(x.first_bucket != d.first_bucket, "first_bucket_mb", mb(x.first_bucket));
                push(x.call_ns != d.call_ns, "call_us", us(x.call_ns));
            }
            (Runtime::BytePs(x), Runtime::BytePs(d)) => {
                push(x.partition != d.partition, "partition", super::format_bytes(x.partition));
                push(x.credit != d.credit, "credit", x.credit.to_string());
                push(x.servers != d.servers, "servers", x.servers.map_or(String::new(), |s| s.to_string()));
                push(x.sum_bytes_per_s != d.sum_bytes_per_s, "sum_gbps", num(x.sum_bytes_per_s / 1e9));
                push(x.call_ns != d.call_ns, "call_us", us(x.call_ns));
            }
            (Runtime::ByteScheduler(x), Runtime::ByteScheduler(d)) => {
                push(x.partition != d.partition, "partition", super::format_bytes(x.partition));
                push(x.credit != d.credit, "credit", super::format_bytes(x.credit));
                push(x.sched_ns != d.sched_ns, "sched_us", us(x.sched_ns));
                push(x.call_ns != d.call_ns, "call_us", us(x.call_ns));
            }
            (Runtime::Ps(x), Runtime::Ps(d)) => {
                push(x.servers != d.servers, "servers", x.servers.map_or(String::new(), |s| s.to_string()));
                push(x.local != d.local, "local", if x.local { "on".into() } else { "off".into() });
                let split = if x.split_above == u64::MAX { "off".into() } else { super::format_bytes(x.split_above) };
                push(x.split_above != d.split_above, "split", split);
                push(x.sum_bytes_per_s != d.sum_bytes_per_s, "sum_gbps", num(x.sum_bytes_per_s / 1e9));
                push(x.call_ns != d.call_ns, "call_us", us(x.call_ns));
                push(x.overlap != d.overlap, "overlap", if x.overlap { "on".into() } else { "off".into() });
            }
            (Runtime::OpenMpi(x), Runtime::OpenMpi(d)) => {
                push(x.sum_bytes_per_s != d.sum_bytes_per_s, "sum_gbps", num(x.sum_bytes_per_s / 1e9));
            }
            (Runtime::Gloo(x), Runtime::Gloo(d)) => {
                push(x.bucket != d.bucket, "bucket_mb", num(x.bucket as f64 / (1u64 << 20) as f64));
                push(x.sum_bytes_per_s != d.sum_bytes_per_s, "sum_gbps", num(x.sum_bytes_per_s / 1e9));
            }
            _ => unreachable!("the default has the same kind"),
        }
        parts.join("+")
    }

    /// Runtimes whose GPU collectives are NCCL's: plain NCCL, PyTorch DDP (ProcessGroupNCCL),
    /// Horovod's and ByteScheduler's GPU all-reduce, BytePS's intra-node reduce. Not Caffe-MPI as
    /// the DAG paper models it, MPI's host-side all-reduce, nor parameter servers.
    pub fn launches_nccl(&self) -> bool {
        matches!(
            self,
            Runtime::Nccl(_) | Runtime::Horovod(_) | Runtime::Ddp(_) | Runtime::ByteScheduler(_) | Runtime::BytePs(_)
        )
    }

    /// Runtimes whose gradients go to parameter servers rather than through an all-reduce.
    pub fn uses_servers(&self) -> bool {
        matches!(self, Runtime::BytePs(_) | Runtime::Ps(_))
    }

    /// The framework-side cost of one communication call.
    pub fn call_ns(&self) -> Nanos {
        match self {
            Runtime::CaffeMpi | Runtime::OpenMpi(_) | Runtime::Gloo(_) => 0,
            Runtime::Nccl(c) => c.call_ns,
            Runtime::Horovod(h) => h.call_ns,
            Runtime::Ddp(d) => d.call_ns,
            Runtime::BytePs(b) => b.call_ns,
            Runtime::ByteScheduler(b) => b.call_ns,
            Runtime::Ps(p) => p.call_ns,
        }
    }

    /// The bucket and partition sizes the user set (not the framework's defaults), in bytes of
    /// gradients of `element_bytes` each, with their field names, which must not exceed the
    /// model's gradients. A default is never refused: DDP and BytePS run a model smaller than
    /// one bucket or partition as a single one.
    pub fn chosen_sizes(&self, element_bytes: u64) -> Vec<(&'static str, u64)> {
        let default = Runtime::parse(self.kind_name(), &[]).expect("defaults parse");
        let mut out = Vec::new();
        let mut chosen = |field, size: u64, default_size: u64| {
            if size != default_size {
                out.push((field, size));
            }
        };
        match (self, &default) {
            (Runtime::Ddp(d), Runtime::Ddp(x)) => {
                chosen("bucket_mb", d.bucket, x.bucket);
                chosen("first_bucket_mb", d.first_bucket, x.first_bucket);
            }
            (Runtime::BytePs(b), Runtime::BytePs(x)) => chosen("partition", b.partition, x.partition),
            (Runtime::Gloo(g), Runtime::Gloo(x)) => chosen("bucket_mb", g.bucket, x.bucket),
            (Runtime::ByteScheduler(b), Runtime::ByteScheduler(x)) => {
                let bytes = |parameters: u64| parameters.saturating_mul(element_bytes);
                chosen("partition", bytes(b.partition), bytes(x.partition))
            }
            _ => {}
        }
        out
    }
}

/// ByteScheduler's cost per partition: its Python core loop takes a task from a priority queue,
/// checks credit, starts it through the framework's engine and runs a completion callback. An
/// assumption of 50 us (a few Python calls and a thread hand-off), overridable with `sched_us=`.
pub const BYTESCHEDULER_SCHED_NS: Nanos = 50_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, kv: &[(&str, &str)]) -> Result<Runtime> {
        let settings: Vec<(String, String)> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Runtime::parse(name, &settings)
    }

    #[test]
    fn defaults_come_from_the_frameworks() {
        let Runtime::Horovod(h) = parse("horovod", &[]).unwrap() else { panic!() };
        assert_eq!((h.fusion, h.cycle_ns, h.cache), (128 << 20, 1_000_000, true));
        let Runtime::Ddp(d) = parse("ddp", &[]).unwrap() else { panic!() };
        assert_eq!((d.bucket, d.first_bucket), (25 << 20, 1 << 20));
        let Runtime::BytePs(b) = parse("byteps", &[]).unwrap() else { panic!() };
        assert_eq!((b.partition, b.credit, b.servers), (4_096_000, 0, None));
        let Runtime::ByteScheduler(s) = parse("bytescheduler", &[]).unwrap() else { panic!() };
        assert_eq!((s.partition, s.credit), (1_000_000, 4_000_000));
        let Runtime::OpenMpi(o) = parse("openmpi", &[]).unwrap() else { panic!() };
        assert_eq!(o.sum_bytes_per_s, 4e9);
        let Runtime::Gloo(g) = parse("gloo", &[]).unwrap() else { panic!() };
        assert_eq!((g.bucket, g.sum_bytes_per_s), (1 << 20, 4e9));
    }

    #[test]
    fn settings_print_back_and_parse_to_the_same_runtime() {
        for (name, kv) in [
            ("horovod", vec![("cycle_ms", "0.1"), ("fusion", "64M"), ("cache", "0")]),
            ("ddp", vec![("bucket_mb", "50"), ("first_bucket_mb", "0.5")]),
            ("byteps", vec![("partition", "2M"), ("servers", "2"), ("credit", "4")]),
            ("bytescheduler", vec![("partition", "512K"), ("sched_us", "10")]),
            ("ps", vec![("local", "off"), ("split", "off"), ("sum_gbps", "8"), ("overlap", "off")]),
            ("nccl", vec![("call_us", "0")]),
            ("openmpi", vec![("sum_gbps", "2")]),
            ("gloo", vec![("bucket_mb", "4"), ("sum_gbps", "2")]),
        ] {
            let r = parse(name, &kv).unwrap();
            let spec = r.spec();
            let mut tokens = spec.split('+');
            let first = tokens.next().unwrap();
            assert_eq!(first, format!("runtime={name}"));
            let back: Vec<(String, String)> =
                tokens.map(|t| t.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap()).collect();
            assert_eq!(Runtime::parse(name, &back).unwrap(), r, "{spec}");
            assert_eq!(back.len(), kv.len(), "only changed settings print: {spec}");
        }
    }

    #[test]
    fn bad_settings_name_the_field() {
        let e = parse("ddp", &[("cycle_ms", "1")]).unwrap_err().to_string();
        assert!(
            e.contains("`cycle_ms`") && e.contains("runtime `ddp` does not take") && e.contains("bucket_mb"),
            "{e}"
        );
        let e = parse("ddp", &[("bucket_mb", "0")]).unwrap_err().to_string();
        assert!(e.contains("`bucket_mb`") && e.contains("positive"), "{e}");
        let e = parse("byteps", &[("partition", "0")]).unwrap_err().to_string();
        assert!(e.contains("`partition`") && e.contains("greater than zero"), "{e}");
        let e = parse("byteps", &[("servers", "0")]).unwrap_err().to_string();
        assert!(e.contains("`servers`"), "{e}");
        let e = parse("gloo", &[("bucket_mb", "0")]).unwrap_err().to_string();
        assert!(e.contains("`bucket_mb`") && e.contains("positive"), "{e}");
        let e = parse("gloo", &[("call_us", "1")]).unwrap_err().to_string();
        assert!(e.contains("runtime `gloo` does not take") && e.contains("sum_gbps"), "{e}");
        let e = parse("caffe-mpi", &[("call_us", "1")]).unwrap_err().to_string();
        assert!(e.contains("takes no settings"), "{e}");
        let e = parse("mpi", &[]).unwrap_err().to_string();
        assert!(e.contains("unknown runtime `mpi`") && e.contains("horovod"), "{e}");
    }
}
