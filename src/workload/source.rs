//! Where a workload comes from: a native/Shi trace file, a measured profile read by an importer,
//! or a zoo model synthesised for a GPU (optionally calibrated to a measured throughput). The
//! scenario and the CLI describe the choice with a [`WorkloadSource`]; this module resolves it.
//! It builds workloads only; it never simulates.

use super::gpu::{GpuSpec, Precision};
use super::import::{read_profile, ProfileFormat};
use super::llm::{cost, CostOptions, Recompute};
use super::memory::{footprint, Footprint, Optimizer};
use super::synth::{synthesize, SynthOptions};
use super::transformer::TransformerConfig;
use super::zoo::Model;
use super::{read_trace, TraceFormat, Workload};
use crate::error::{Error, Result};
use std::path::PathBuf;

/// Everything that may select and shape a workload (unset fields take defaults).
#[derive(Debug, Clone, Default)]
pub struct WorkloadSource {
    pub trace: Option<PathBuf>,
    /// Read `trace` with this importer instead of the native/Shi reader.
    pub profile_format: Option<ProfileFormat>,
    pub model: Option<String>,
    pub gpu: Option<String>,
    pub batch: Option<u32>,
    pub precision: Option<Precision>,
    pub optimizer: Option<Optimizer>,
    /// BERT sequence length (default 128).
    pub seq_len: Option<u32>,
    /// Measured single-GPU samples/s at this batch: synthetic times are scaled to match it.
    pub calibrate_throughput: Option<f64>,
}

impl WorkloadSource {
    /// True when a zoo model is to be synthesised.
    pub fn is_synthetic(&self) -> bool {
        self.model.is_some()
    }

    /// Resolves the source into a workload. Synthesis needs a model, a GPU and a batch size.
    pub fn load(&self) -> Result<Workload> {
        match (&self.model, &self.trace) {
            (Some(_), Some(_)) => Err(Error::invalid("workload", "give either a trace or a model, not both")),
            (Some(name), None) if !super::zoo::is_zoo_name(name) => {
                self.load_transformer(name)
            }
            (Some(model), None) => {
                let model = Model::by_name(model, self.seq_len)?;
                let gpu = self.gpu_spec()?;
                let batch = self.batch.ok_or_else(|| Error::invalid("--batch", "a synthetic workload needs a batch size"))?;
                let opts = SynthOptions {
                    batch,
                    precision: self.precision.unwrap_or(Precision::Fp32),
                    optimizer: self.optimizer.unwrap_or_else(|| Optimizer::default_for(&model)),
                };
                let mut synth = synthesize(&model, gpu, opts)?;
                if let Some(x) = self.calibrate_throughput {
                    synth.calibrate_throughput(x)?;
                }
                Ok(synth.to_workload())
            }
            (None, Some(trace)) => {
                if self.gpu.is_some() || self.precision.is_some() || self.calibrate_throughput.is_some() {
                    return Err(Error::invalid(
                        "workload",
                        "--gpu, --precision and --calibrate-throughput apply to --model, not to a trace",
                    ));
                }
                match self.profile_format {
                    // A Chakra trace becomes a workload directly (one dagsim wrote comes back exactly).
                    Some(ProfileFormat::Chakra) => super::import::read_chakra_et(trace),
                    Some(f) => Ok(read_profile(trace, f)?.to_workload()),
                    None => read_trace(trace, TraceFormat::Auto),
                }
            }
            (None, None) => Err(Error::invalid(
                "workload",
                "no workload given: use --trace FILE, or --model NAME --gpu NAME --batch N (or the same in `[workload]`)",
            )),
        }
    }

    /// A transformer (named config or Hugging Face config.json) on one GPU, whole (no tensor
    /// parallelism): one micro-batch of `batch` sequences per iteration.
    fn load_transformer(&self, name: &str) -> Result<Workload> {
        let cfg = TransformerConfig::resolve(name).map_err(|e| match e {
            Error::Invalid { .. } => Error::invalid(
                "model",
                format!(
                    "unknown model `{name}`; zoo models: {}; transformer configs: {} (or a Hugging Face config.json path)",
                    super::zoo::MODEL_NAMES.join(", "),
                    super::transformer::NAMED.iter().map(|n| n.name).collect::<Vec<_>>().join(", ")
                ),
            ),
            other => other,
        })?;
        let gpu = self.gpu_spec()?;
        let batch = self.batch.ok_or_else(|| Error::invalid("--batch", "a synthetic workload needs a batch size"))?;
        let opts = CostOptions {
            micro_batch: batch,
            seq_len: self.seq_len.unwrap_or(cfg.seq_len),
            precision: self.precision.unwrap_or(if gpu.bf16 { Precision::Bf16 } else { Precision::Fp16 }),
            tp: 1,
            sequence_parallel: false,
            recompute: Recompute::None,
            flash_attention: gpu.bf16,
            attention: None,
            matmul_tflops: None,
            loss: super::llm::LossKernel::Fused,
            softmax: super::llm::SoftmaxKernel::Fused,
            fp8_recipe: super::llm::Fp8Recipe::Delayed,
        };
        let mut c = cost(&cfg, gpu, &opts)?;
        if let Some(x) = self.calibrate_throughput {
            c.calibrate_throughput(x)?;
        }
        Ok(c.to_workload())
    }

    fn gpu_spec(&self) -> Result<&'static GpuSpec> {
        let name = self.gpu.as_deref().ok_or_else(|| Error::invalid("--gpu", "a synthetic workload needs a GPU"))?;
        GpuSpec::by_name(name)
    }

    /// Memory footprint per GPU of a synthetic workload (None for traces, whose shapes are unknown).
    pub fn footprint(&self, preload_batches: u32) -> Result<Option<Footprint>> {
        let Some(model) = &self.model else { return Ok(None) };
        if !super::zoo::is_zoo_name(model) {
            return Ok(None); // transformer configs: the parallel plan reports their memory
        }
        let model = Model::by_name(model, self.seq_len)?;
        let gpu = self.gpu_spec()?;
        let batch = self.batch.unwrap_or(1);
        let precision = self.precision.unwrap_or(Precision::Fp32);
        let optimizer = self.optimizer.unwrap_or_else(|| Optimizer::default_for(&model));
        let device_sample_bytes =
            synthesize(&model, gpu, SynthOptions { batch, precision, optimizer })?.device_sample_bytes;
        Ok(Some(footprint(&model, gpu, batch, precision, optimizer, preload_batches, device_sample_bytes)))
    }
}
