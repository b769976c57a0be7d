//! Transformer shapes: a [`TransformerConfig`] (layers, hidden size, heads, key-value heads, MLP
//! width, vocabulary, sequence length, and the family's choices: gated MLP, norm, positions,
//! biases, tied embeddings), the named configurations dagsim ships (each with its source), and a
//! reader for Hugging Face `config.json` files. Parameter counts are exact for the shape; timing the
//! shape on a GPU is [`super::llm`]'s job. Knows nothing of GPUs, plans or the engine.

use super::moe::MoeConfig;
use crate::error::{Error, Location, Result};
use serde::Serialize;
use std::path::Path;

/// Architecture family, as far as the shape and its operations differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// GPT-2/GPT-3/Megatron: learned positions, LayerNorm with bias, GELU MLP, biases.
    Gpt,
    /// Llama 2/3: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases.
    Llama,
    /// MosaicML MPT: LayerNorm without bias, ALiBi (or learned positions), GELU, no biases.
    Mpt,
    /// BLOOM: ALiBi, an extra LayerNorm after the embedding, GELU, biases, tied embeddings.
    Bloom,
    /// NVIDIA Nemotron-4: rotary positions, LayerNorm (NeMo's `layernorm1p`: a scale and a bias),
    /// squared-ReLU MLP of two matrices, grouped-query attention, no biases, untied embeddings.
    Nemotron,
    /// BERT-style encoder: bidirectional attention, learned positions and token types.
    Encoder,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Gpt => "gpt",
            Family::Llama => "llama",
            Family::Mpt => "mpt",
            Family::Bloom => "bloom",
            Family::Nemotron => "nemotron",
            Family::Encoder => "encoder",
        }
    }
}

/// Normalisation layer kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// LayerNorm with a scale and a bias per feature.
    LayerNorm,
    /// LayerNorm with a scale only (MPT's `no_bias`).
    LayerNormNoBias,
    /// RMSNorm (scale only).
    RmsNorm,
}

impl Norm {
    fn params(self, h: u64) -> u64 {
        match self {
            Norm::LayerNorm => 2 * h,
            Norm::LayerNormNoBias | Norm::RmsNorm => h,
        }
    }
}

/// How positions enter the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// A learned table of `max_positions x hidden` (GPT, BERT, MPT with `learned_pos_emb`).
    Learned { max_positions: u64 },
    /// Rotary embeddings (no parameters; a few element-wise passes over Q and K).
    Rotary,
    /// ALiBi biases added to the attention scores (no parameters).
    Alibi,
}

/// The shape of a transformer language model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformerConfig {
    pub name: String,
    pub family: Family,
    pub layers: u32,
    pub hidden: u64,
    pub heads: u32,
    /// Key-value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: u32,
    /// Width of the MLP's hidden layer (per gate for a gated MLP).
    pub ffn_hidden: u64,
    pub vocab: u64,
    /// Training sequence length used when none is given.
    pub seq_len: u32,
    /// SwiGLU-style MLP: two input projections (gate and up) and one output projection.
    pub gated_mlp: bool,
    pub norm: Norm,
    pub position: Position,
    /// Linear layers carry biases.
    pub bias: bool,
    /// The output projection shares the input embedding's weights.
    pub tied_embeddings: bool,
    /// Dropout after attention probabilities and on the residual branches (Megatron GPT: 0.1).
    pub dropout: bool,
    /// Decoder (causal attention) or encoder (bidirectional).
    pub causal: bool,
    /// Token-type embeddings (BERT: 2).
    pub token_types: u64,
    /// Where the numbers come from.
    pub source: String,
    /// Mixture-of-experts MLPs (None: every layer has the dense MLP).
    pub moe: Option<MoeConfig>,
    /// Width of one attention head when it is not hidden / heads (Qwen3: 128 with hidden 2048 and
    /// 32 heads); None: hidden / heads.
    pub head_dim: Option<u64>,
    /// RMSNorm over each query and key head before the rotary embedding (Qwen3's `q_norm` and
    /// `k_norm`; Megatron-Core's `qk_layernorm`).
    pub qk_norm: bool,
}

/// Parameters by part; `total()` is the model's parameter count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParamCount {
    /// Token, position and token-type embeddings (and BLOOM's embedding LayerNorm).
    pub embedding: u64,
    /// One transformer layer: its attention block (with its norm) and its MLP block (with its norm).
    pub attention_block: u64,
    pub mlp_block: u64,
    /// The final norm.
    pub final_norm: u64,
    /// The output projection when it is not tied to the embedding.
    pub head: u64,
    pub layers: u32,
    /// An MoE layer's MLP block (norm, router, every expert, shared experts), and how many of the
    /// layers have it instead of `mlp_block` (0 for a dense model).
    pub moe_block: u64,
    pub moe_layers: u32,
    /// Parameters of the experts a token does not visit, over all MoE layers.
    pub inactive: u64,
}

impl ParamCount {
    pub fn per_layer(&self) -> u64 {
        self.attention_block + self.mlp_block
    }
    pub fn total(&self) -> u64 {
        let dense = (self.layers - self.moe_layers) as u64;
        self.embedding
            + self.attention_block * self.layers as u64
            + self.mlp_block * dense
            + self.moe_block * self.moe_layers as u64
            + self.final_norm
            + self.head
    }

    /// Parameters one token meets (the total for a dense model; for MoE, its top-k experts only).
    pub fn active(&self) -> u64 {
        self.total() - self.inactive
    }
}

impl TransformerConfig {
    pub fn head_dim(&self) -> u64 {
        self.head_dim.unwrap_or(self.hidden / self.heads as u64)
    }

    /// Width of the queries (and of the attention output before its projection): heads x head dim.
    pub fn q_width(&self) -> u64 {
        self.heads as u64 * self.head_dim()
    }

    /// Width of the key and value projections together (2 x kv heads x head dim).
    pub fn kv_width(&self) -> u64 {
        2 * self.kv_heads as u64 * self.head_dim()
    }

    /// Weights of the attention block's matrices: Q (h x h), K and V (h x kv width), output (h x h).
    pub fn attention_matrix_params(&self) -> u64 {
        let h = self.hidden;
        h * (self.q_width() + self.kv_width()) + self.q_width() * h
    }

    /// Weights of the MLP's matrices: two (or three when gated) h x ffn matrices.
    pub fn mlp_matrix_params(&self) -> u64 {
        (if self.gated_mlp { 3 } else { 2 }) * self.hidden * self.ffn_hidden
    }

    pub fn params(&self) -> ParamCount {
        let h = self.hidden;
        let positions = match self.position {
            Position::Learned { max_positions } => max_positions * h,
            _ => 0,
        };
        // BLOOM and BERT normalise the embedding output; BERT (post-LN) has no final norm.
        let emb_norm = if matches!(self.family, Family::Bloom | Family::Encoder) { self.norm.params(h) } else { 0 };
        let embedding = self.vocab * h + positions + self.token_types * h + emb_norm;
        let attn_bias = if self.bias { self.q_width() + self.kv_width() + h } else { 0 };
        let mlp_bias = if self.bias { (if self.gated_mlp { 2 } else { 1 }) * self.ffn_hidden + h } else { 0 };
        let (moe_block, moe_layers, inactive) = match &self.moe {
            Some(m) => {
                let n = self.layers.saturating_sub(m.dense_layers);
                let idle = m.experts.saturating_sub(m.top_k) as u64 * m.expert_matrix_params(self);
                (m.block_params(self, self.norm.params(h)), n, idle * n as u64)
            }
            None => (0, 0, 0),
        };
        ParamCount {
            embedding,
            attention_block: self.attention_matrix_params() + attn_bias + self.norm.params(h),
            mlp_block: self.mlp_matrix_params() + mlp_bias + self.norm.params(h),
            final_norm: if self.family == Family::Encoder { 0 } else { self.norm.params(h) },
            head: if self.tied_embeddings { 0 } else { self.vocab * h },
            layers: self.layers,
            moe_block,
            moe_layers,
            inactive,
        }
    }

    /// Parameters of one norm layer.
    pub fn norm_params(&self) -> u64 {
        self.norm.params(self.hidden)
    }

    /// Whether layer `i` (from 0) has a mixture-of-experts MLP.
    pub fn is_moe_layer(&self, i: u32) -> bool {
        self.moe.as_ref().is_some_and(|m| m.is_moe_layer(i))
    }

    /// Workload blocks of layer `i`: attention and MLP, or attention and the MoE layer's router,
    /// experts and combine.
    pub fn blocks_of_layer(&self, i: u32) -> usize {
        if self.is_moe_layer(i) {
            4
        } else {
            2
        }
    }

    /// Checks the shape is usable: positive sizes, heads dividing the hidden size, KV heads
    /// dividing the heads. `at` names the file or flag the config came from.
    pub fn check(&self, at: &str) -> Result<()> {
        let bad = |field: &str, msg: String| Error::invalid(format!("{at} `{field}`"), msg);
        for (field, v) in [
            ("layers", self.layers as u64),
            ("hidden", self.hidden),
            ("heads", self.heads as u64),
            ("kv_heads", self.kv_heads as u64),
            ("ffn_hidden", self.ffn_hidden),
            ("vocab", self.vocab),
            ("seq_len", self.seq_len as u64),
        ] {
            if v == 0 {
                return Err(bad(field, "must be at least 1".into()));
            }
        }
        // Upper bounds (docs/limits.md), far above any published model (PaLM 540B: hidden 18,432,
        // FFN 73,728, Chowdhery et al. 2022 Table 1; Gemma: 256,000-token vocabulary; DeepSeek-V3:
        // 256 routed experts) and low enough that parameter, byte and FLOP counts cannot wrap.
        let positions = match self.position {
            Position::Learned { max_positions } => max_positions,
            _ => 0,
        };
        let (experts, expert_ffn, shared_ffn) =
            self.moe.as_ref().map_or((0, 0, 0), |m| (m.experts as u64, m.expert_ffn, m.shared_ffn));
        for (field, v, max) in [
            ("layers", self.layers as u64, crate::limits::get().layers),
            ("hidden", self.hidden, 1 << 20),
            ("heads", self.heads as u64, 1 << 16),
            ("kv_heads", self.kv_heads as u64, 1 << 16),
            ("head_dim", self.head_dim.unwrap_or(0), 1 << 16),
            ("ffn_hidden", self.ffn_hidden, 1 << 22),
            ("vocab", self.vocab, 1 << 24),
            ("seq_len", self.seq_len as u64, 1 << 24),
            ("max_positions", positions, 1 << 24),
            ("token_types", self.token_types, 1 << 16),
            ("experts", experts, 1 << 16),
            ("expert_ffn", expert_ffn, 1 << 22),
            ("shared_ffn", shared_ffn, 1 << 22),
        ] {
            if v > max {
                return Err(bad(field, format!("{v} is beyond the supported maximum of {max}")));
            }
        }
        let (h, l) = (self.hidden as f64, self.layers as f64);
        let q = self.heads as f64 * self.head_dim.map_or(h / self.heads as f64, |d| d as f64);
        let estimate = l
            * (4.0 * h * q + 3.0 * h * (self.ffn_hidden + shared_ffn) as f64 + 3.0 * h * (experts * expert_ffn) as f64)
            + 2.0 * (self.vocab + positions + self.token_types) as f64 * h;
        if estimate > MAX_PARAMS {
            return Err(bad(
                "hidden",
                format!("the model would have about {estimate:.3e} parameters, beyond the supported {MAX_PARAMS:.0e}"),
            ));
        }
        if self.head_dim.is_none() && self.hidden % self.heads as u64 != 0 {
            return Err(bad("heads", format!("{} heads do not divide the hidden size {}", self.heads, self.hidden)));
        }
        if self.heads % self.kv_heads != 0 {
            return Err(bad(
                "kv_heads",
                format!("{} key-value heads do not divide the {} attention heads", self.kv_heads, self.heads),
            ));
        }
        if let Some(m) = &self.moe {
            m.check(at, self.layers)?;
        }
        Ok(())
    }

    /// A named configuration (case-insensitive; `-`, `_`, `.` and spaces ignored), or `None`.
    pub fn named(name: &str) -> Option<TransformerConfig> {
        let key = normalise(name);
        NAMED
            .iter()
            .find(|n| normalise(n.name) == key || n.aliases.iter().any(|a| normalise(a) == key))
            .map(|n| (n.build)())
    }

    /// A named configuration, or a Hugging Face `config.json` when `name` is a path to one.
    pub fn resolve(name: &str) -> Result<TransformerConfig> {
        if let Some(c) = Self::named(name) {
            return Ok(c);
        }
        let path = Path::new(name);
        if path.extension().is_some_and(|e| e == "json") || path.exists() {
            return read_hf_config(path);
        }
        Err(Error::invalid(
            "model",
            format!(
                "unknown model `{name}`; transformer configs: {} (or a Hugging Face config.json path)",
                NAMED.iter().map(|n| n.name).collect::<Vec<_>>().join(", ")
            ),
        ))
    }
}

fn normalise(name: &str) -> String {
    name.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric()).collect()
}

/// A shipped configuration: canonical name, other spellings, and how to build it.
pub struct Named {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub build: fn() -> TransformerConfig,
}

/// A GPT-3/Megatron-style shape: learned positions, LayerNorm, GELU MLP of 4h, biases, dropout,
/// untied output layer as Megatron trains it (`--untie-embeddings-and-output-weights` off means
/// tied; the papers' parameter counts use tied weights, so tied it is).
fn megatron_gpt(name: &str, layers: u32, hidden: u64, heads: u32, vocab: u64, source: &str) -> TransformerConfig {
    TransformerConfig {
        name: name.into(),
        family: Family::Gpt,
        layers,
        hidden,
        heads,
        kv_heads: heads,
        ffn_hidden: 4 * hidden,
        vocab,
        seq_len: 2048,
        gated_mlp: false,
        norm: Norm::LayerNorm,
        position: Position::Learned { max_positions: 2048 },
        bias: true,
        tied_embeddings: true,
        dropout: true,
        causal: true,
        token_types: 0,
        moe: None,
        head_dim: None,
        qk_norm: false,
        source: source.into(),
    }
}

#[allow(clippy::too_many_arguments)]
fn llama(
    name: &str,
    layers: u32,
    hidden: u64,
    heads: u32,
    kv: u32,
    ffn: u64,
    vocab: u64,
    seq: u32,
    source: &str,
) -> TransformerConfig {
    TransformerConfig {
        name: name.into(),
        family: Family::Llama,
        layers,
        hidden,
        heads,
        kv_heads: kv,
        ffn_hidden: ffn,
        vocab,
        seq_len: seq,
        gated_mlp: true,
        norm: Norm::RmsNorm,
        position: Position::Rotary,
        bias: false,
        tied_embeddings: false,
        dropout: false,
        causal: true,
        token_types: 0,
        moe: None,
        head_dim: None,
        qk_norm: false,
        source: source.into(),
    }
}

/// A Llama-shaped model whose MLPs are mixtures of experts.
fn moe(base: TransformerConfig, moe: MoeConfig) -> TransformerConfig {
    TransformerConfig { moe: Some(moe), ..base }
}

fn mpt(name: &str, layers: u32, hidden: u64, heads: u32, vocab: u64, seq: u32, source: &str) -> TransformerConfig {
    TransformerConfig {
        name: name.into(),
        family: Family::Mpt,
        layers,
        hidden,
        heads,
        kv_heads: heads,
        ffn_hidden: 4 * hidden,
        vocab,
        seq_len: seq,
        gated_mlp: false,
        norm: Norm::LayerNormNoBias,
        position: Position::Alibi,
        bias: false,
        tied_embeddings: true,
        dropout: false,
        causal: true,
        token_types: 0,
        moe: None,
        head_dim: None,
        qk_norm: false,
        source: source.into(),
    }
}

/// A Nemotron-4 shape: a Llama-like decoder (rotary positions, grouped-query attention, no
/// biases, untied output layer) with LayerNorm and a squared-ReLU MLP of two matrices (costed as
/// the GELU MLP: one element-wise pass).
fn nemotron(name: &str, layers: u32, hidden: u64, heads: u32, source: &str) -> TransformerConfig {
    TransformerConfig {
        family: Family::Nemotron,
        gated_mlp: false,
        norm: Norm::LayerNorm,
        ..llama(name, layers, hidden, heads, 8, 4 * hidden, 256_000, 4096, source)
    }
}

/// Megatron pads GPT-2's 50,257-token vocabulary to a multiple of 128 x TP; the papers below use
/// 51,200 (Korthikanti et al. 2022, Table 3; Narayanan et al. 2021, Sec. 5.1).
const MEGATRON_VOCAB: u64 = 51_200;

/// The shipped configurations. Shapes are the published ones; the tests check parameter totals
/// against the published counts.
pub static NAMED: &[Named] = &[
    Named {
        name: "gpt3-175b",
        aliases: &["gpt3", "gpt-3 175b", "gpt3 175b"],
        build: || {
            megatron_gpt(
                "gpt3-175b",
                96,
                12288,
                96,
                MEGATRON_VOCAB,
                "Brown et al. 2020 (arXiv 2005.14165) Table 2.1: 96 layers, d_model 12288, 96 heads of 128, \
                 context 2048; vocabulary 51,200 as Megatron pads it (Korthikanti et al. 2022, Table 3)",
            )
        },
    },
    Named {
        name: "megatron-22b",
        aliases: &["gpt-22b", "gpt22b"],
        build: || {
            megatron_gpt(
                "megatron-22b",
                48,
                6144,
                64,
                MEGATRON_VOCAB,
                "Korthikanti et al. 2022 (arXiv 2205.05198) Table 3: 48 layers, hidden 6144, 64 heads, seq 2048",
            )
        },
    },
    Named {
        name: "megatron-530b",
        aliases: &["turing-530b", "mt-nlg-530b", "megatron-turing-530b"],
        build: || {
            megatron_gpt(
                "megatron-530b",
                105,
                20480,
                128,
                MEGATRON_VOCAB,
                "Smith et al. 2022 (MT-NLG, arXiv 2201.11990) Sec. 3 and Korthikanti et al. 2022 Table 3: \
                 105 layers, hidden 20480, 128 heads, seq 2048",
            )
        },
    },
    Named {
        name: "megatron-1t",
        aliases: &["gpt-1t", "megatron-1008b"],
        build: || {
            megatron_gpt(
                "megatron-1t",
                128,
                25600,
                160,
                MEGATRON_VOCAB,
                "Narayanan et al. 2021 (arXiv 2104.04473) Table 1 and Korthikanti et al. 2022 Table 3: \
                 128 layers, hidden 25600, 160 heads, seq 2048",
            )
        },
    },
    Named {
        name: "llama2-7b",
        aliases: &["llama-2-7b", "llama 2 7b"],
        build: || {
            llama(
                "llama2-7b",
                32,
                4096,
                32,
                32,
                11008,
                32000,
                4096,
                "meta-llama/Llama-2-7b-hf config.json: hidden 4096, 32 layers, 32 heads, intermediate 11008, \
                 vocab 32000; Touvron et al. 2023 (arXiv 2307.09288) Table 1: context 4k",
            )
        },
    },
    Named {
        name: "llama2-13b",
        aliases: &["llama-2-13b", "llama 2 13b"],
        build: || {
            llama(
                "llama2-13b",
                40,
                5120,
                40,
                40,
                13824,
                32000,
                4096,
                "meta-llama/Llama-2-13b-hf config.json: hidden 5120, 40 layers, 40 heads, intermediate 13824, \
                 vocab 32000; context 4k",
            )
        },
    },
    Named {
        name: "llama2-70b",
        aliases: &["llama-2-70b", "llama 2 70b"],
        build: || {
            llama(
                "llama2-70b",
                80,
                8192,
                64,
                8,
                28672,
                32000,
                4096,
                "meta-llama/Llama-2-70b-hf config.json: hidden 8192, 80 layers, 64 heads, 8 KV heads (GQA), \
                 intermediate 28672, vocab 32000; context 4k",
            )
        },
    },
    Named {
        name: "llama3-8b",
        aliases: &["llama-3-8b", "llama3.1-8b", "llama 3 8b"],
        build: || {
            llama(
                "llama3-8b",
                32,
                4096,
                32,
                8,
                14336,
                128256,
                8192,
                "meta-llama/Meta-Llama-3-8B config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, \
                 intermediate 14336, vocab 128256; Dubey et al. 2024 (arXiv 2407.21783) Table 3: seq 8192",
            )
        },
    },
    Named {
        name: "llama3-70b",
        aliases: &["llama-3-70b", "llama3.1-70b", "llama 3 70b"],
        build: || {
            llama(
                "llama3-70b",
                80,
                8192,
                64,
                8,
                28672,
                128256,
                8192,
                "meta-llama/Meta-Llama-3-70B config.json: hidden 8192, 80 layers, 64 heads, 8 KV heads, \
                 intermediate 28672, vocab 128256; Dubey et al. 2024 Table 3",
            )
        },
    },
    Named {
        name: "llama3-405b",
        aliases: &["llama-3-405b", "llama3.1-405b", "llama 3.1 405b"],
        build: || {
            llama(
                "llama3-405b",
                126,
                16384,
                128,
                8,
                53248,
                128256,
                8192,
                "meta-llama/Llama-3.1-405B config.json: hidden 16384, 126 layers, 128 heads, 8 KV heads, \
                 intermediate 53248, vocab 128256; Dubey et al. 2024 Table 3: pre-training seq 8192",
            )
        },
    },
    Named {
        name: "mixtral-8x7b",
        aliases: &["mixtral", "mixtral-8x7b-v0.1"],
        build: || {
            moe(
                llama(
                    "mixtral-8x7b",
                    32,
                    4096,
                    32,
                    8,
                    14336,
                    32000,
                    4096,
                    "mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, \
                     intermediate 14336, 8 local experts, 2 per token, vocab 32000; Jiang et al. 2024 \
                     (arXiv 2401.04088): 46.7 B parameters, 12.9 B active; seq 4096 as NeMo's recipe trains it",
                ),
                MoeConfig {
                    experts: 8,
                    top_k: 2,
                    expert_ffn: 14336,
                    shared_ffn: 0,
                    shared_gate: false,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "mixtral-8x22b",
        aliases: &["mixtral-8x22b-v0.1"],
        build: || {
            moe(
                llama(
                    "mixtral-8x22b",
                    56,
                    6144,
                    48,
                    8,
                    16384,
                    32000,
                    4096,
                    "mistralai/Mixtral-8x22B-v0.1 config.json: hidden 6144, 56 layers, 48 heads, 8 KV heads, \
                     intermediate 16384, 8 local experts, 2 per token, vocab 32000; Mistral AI: 141 B \
                     parameters, 39 B active",
                ),
                MoeConfig {
                    experts: 8,
                    top_k: 2,
                    expert_ffn: 16384,
                    shared_ffn: 0,
                    shared_gate: false,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "qwen1.5-moe-a2.7b",
        aliases: &["qwen-moe-a2.7b", "qwen1.5-moe"],
        build: || {
            moe(
                llama(
                    "qwen1.5-moe-a2.7b",
                    24,
                    2048,
                    16,
                    16,
                    5632,
                    151936,
                    4096,
                    "Qwen/Qwen1.5-MoE-A2.7B config.json: hidden 2048, 24 layers, 16 heads, 60 experts of \
                     moe_intermediate 1408, 4 per token, shared expert of 5632 with a sigmoid gate, vocab \
                     151936 (Q/K/V biases, 6 K per layer, not counted); Qwen blog: 14.3 B parameters, 2.7 B \
                     active",
                ),
                MoeConfig {
                    experts: 60,
                    top_k: 4,
                    expert_ffn: 1408,
                    shared_ffn: 5632,
                    shared_gate: true,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "qwen2-57b-a14b",
        aliases: &["qwen2-moe-57b"],
        build: || {
            moe(
                llama(
                    "qwen2-57b-a14b",
                    28,
                    3584,
                    28,
                    4,
                    18944,
                    151936,
                    4096,
                    "Qwen/Qwen2-57B-A14B config.json: hidden 3584, 28 layers, 28 heads, 4 KV heads, 64 experts \
                     of moe_intermediate 2560, 8 per token, shared expert of 20480 with a sigmoid gate, vocab \
                     151936 (Q/K/V biases not counted); Yang et al. 2024 (arXiv 2407.10671) Table 1: 57 B \
                     parameters, 14 B active",
                ),
                MoeConfig {
                    experts: 64,
                    top_k: 8,
                    expert_ffn: 2560,
                    shared_ffn: 20480,
                    shared_gate: true,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "qwen3-30b-a3b",
        aliases: &["qwen3-30b", "qwen3_30b_a3b"],
        build: || TransformerConfig {
            head_dim: Some(128),
            qk_norm: true,
            ..moe(
                llama(
                    "qwen3-30b-a3b",
                    48,
                    2048,
                    32,
                    4,
                    6144,
                    151936,
                    4096,
                    "Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads of head_dim 128, 4 KV \
                     heads, 128 experts of moe_intermediate 768, 8 per token, no shared expert, vocab 151936, \
                     untied (Q/K norms, 256 parameters a layer, not counted); Qwen3 technical report (arXiv \
                     2505.09388) Table 2: 30.5 B parameters, 3.3 B active",
                ),
                MoeConfig {
                    experts: 128,
                    top_k: 8,
                    expert_ffn: 768,
                    shared_ffn: 0,
                    shared_gate: false,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "qwen3-235b-a22b",
        aliases: &["qwen3-235b", "qwen3_235b_a22b"],
        build: || TransformerConfig {
            head_dim: Some(128),
            qk_norm: true,
            ..moe(
                llama(
                    "qwen3-235b-a22b",
                    94,
                    4096,
                    64,
                    4,
                    12288,
                    151936,
                    4096,
                    "Qwen/Qwen3-235B-A22B config.json: hidden 4096, 94 layers, 64 heads of head_dim 128, 4 KV \
                     heads, 128 experts of moe_intermediate 1536, 8 per token, vocab 151936, untied; Qwen3 \
                     technical report Table 2: 235 B parameters, 22 B active",
                ),
                MoeConfig {
                    experts: 128,
                    top_k: 8,
                    expert_ffn: 1536,
                    shared_ffn: 0,
                    shared_gate: false,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "deepseek-moe-16b",
        aliases: &["deepseekmoe-16b", "deepseek-moe-16b-base"],
        build: || {
            moe(
                llama(
                    "deepseek-moe-16b",
                    28,
                    2048,
                    16,
                    16,
                    10944,
                    102400,
                    4096,
                    "deepseek-ai/deepseek-moe-16b-base config.json: hidden 2048, 28 layers, 16 heads, 64 routed \
                     experts of moe_intermediate 1408, 6 per token, 2 shared experts, first layer dense of \
                     intermediate 10944, vocab 102400, seq 4096; Dai et al. 2024 (arXiv 2401.06066): 16.4 B \
                     parameters, 2.8 B active",
                ),
                MoeConfig {
                    experts: 64,
                    top_k: 6,
                    expert_ffn: 1408,
                    shared_ffn: 2 * 1408,
                    shared_gate: false,
                    dense_layers: 1,
                },
            )
        },
    },
    Named {
        name: "grok1-314b",
        aliases: &["grok-1", "grok1", "grok-1-314b"],
        build: || {
            moe(
                llama(
                    "grok1-314b",
                    64,
                    6144,
                    48,
                    8,
                    32768,
                    131072,
                    8192,
                    "xai-org/grok-1 README (Model Specifications: 314B parameters, 8 experts, 2 per token, 64 \
                     layers, 48 query and 8 key/value heads, embedding 6,144, vocabulary 131,072, RoPE, context \
                     8,192) and model.py (key_size 128, widening_factor 8: expert FFN int(8 x 6144) x 2 / 3 = \
                     32,768, gated GELU, RMSNorm, untied output); NVIDIA dgxc-benchmarking v25.03 \
                     grok1_314b.yaml: the same shape (ffn_hidden_size 32768, fast-geglu)",
                ),
                MoeConfig {
                    experts: 8,
                    top_k: 2,
                    expert_ffn: 32768,
                    shared_ffn: 0,
                    shared_gate: false,
                    dense_layers: 0,
                },
            )
        },
    },
    Named {
        name: "nemotron4-15b",
        aliases: &["nemotron-4-15b", "nemotron4 15b"],
        build: || {
            nemotron(
                "nemotron4-15b",
                32,
                6144,
                48,
                "Parmar et al. 2024 (Nemotron-4 15B, arXiv 2402.16819) Table 1: 32 layers, hidden 6144, 48 \
                 heads, 8 KV heads, seq 4096, vocabulary 256,000, squared ReLU, RoPE, no biases, untied \
                 embeddings: 3.2 B embedding and 12.5 B non-embedding parameters; NeMo-Framework-Launcher \
                 24.12 conf/training/nemotron/nemotron_15b.yaml: ffn_hidden_size 24576, layernorm1p",
            )
        },
    },
    Named {
        name: "nemotron4-340b",
        aliases: &["nemotron-4-340b", "nemotron4 340b"],
        build: || {
            nemotron(
                "nemotron4-340b",
                96,
                18432,
                96,
                "NVIDIA 2024 (Nemotron-4 340B technical report, arXiv 2406.11704) Table 1: 96 layers, hidden \
                 18432, 96 heads, 8 KV heads, seq 4096, vocabulary 256,000, squared ReLU, RoPE, untied: 9.4 B \
                 embedding and 331.6 B non-embedding parameters; NeMo-Framework-Launcher 24.12 \
                 conf/training/nemotron/nemotron_340b.yaml: ffn_hidden_size 4 x hidden, layernorm1p",
            )
        },
    },
    Named {
        name: "mpt-7b",
        aliases: &["mpt7b"],
        build: || {
            mpt(
                "mpt-7b",
                32,
                4096,
                32,
                50432,
                2048,
                "mosaicml/mpt-7b config.json: d_model 4096, 32 layers, 32 heads, expansion 4, vocab 50432, \
                 max_seq_len 2048, ALiBi, no_bias, tied embeddings",
            )
        },
    },
    Named {
        name: "mpt-30b",
        aliases: &["mpt30b"],
        build: || {
            mpt(
                "mpt-30b",
                48,
                7168,
                64,
                50432,
                8192,
                "mosaicml/mpt-30b config.json: d_model 7168, 48 layers, 64 heads, expansion 4, vocab 50432, \
                 max_seq_len 8192, ALiBi, no_bias, tied embeddings",
            )
        },
    },
    Named {
        name: "mpt-70b",
        aliases: &["mpt70b"],
        build: || {
            mpt(
                "mpt-70b",
                80,
                8192,
                64,
                50368,
                2048,
                "mosaicml/llm-foundry scripts/train/benchmarking (70b: d_model 8192, 80 layers, 64 heads, \
                 expansion 4, vocab 50368; 64.86 B parameters at seq 2048 in its README table)",
            )
        },
    },
    Named {
        name: "bloom-176b",
        aliases: &["bloom", "bloom176b"],
        build: || TransformerConfig {
            name: "bloom-176b".into(),
            family: Family::Bloom,
            layers: 70,
            hidden: 14336,
            heads: 112,
            kv_heads: 112,
            ffn_hidden: 4 * 14336,
            vocab: 250880,
            seq_len: 2048,
            gated_mlp: false,
            norm: Norm::LayerNorm,
            position: Position::Alibi,
            bias: true,
            tied_embeddings: true,
            dropout: false,
            causal: true,
            token_types: 0,
            moe: None,
            head_dim: None,
            qk_norm: false,
            source: "bigscience/bloom config.json: hidden 14336, 70 layers, 112 heads, vocab 250880 (padded), \
                     ALiBi, embedding LayerNorm, tied embeddings; BigScience 2022 (arXiv 2211.05100) Table 3: \
                     seq 2048, 176,247 M parameters"
                .into(),
        },
    },
];

/// The largest model [`TransformerConfig::check`] accepts, in parameters (10^15, 1,000 times
/// today's largest dense models): every count below it fits u64 with room for byte and FLOP
/// products.
pub const MAX_PARAMS: f64 = 1e15;

/// Reads a Hugging Face `config.json` (model types `gpt2`, `llama`, `mistral`, `mpt`, `bloom`,
/// `bert`). Errors name the file and the field.
pub fn read_hf_config(path: &Path) -> Result<TransformerConfig> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_hf_config(&text, path)
}

/// Parses the text of a Hugging Face `config.json`; `path` names it in errors.
pub fn parse_hf_config(text: &str, path: &Path) -> Result<TransformerConfig> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Error::parse(Location::line(path, e.line()), e.to_string()))?;
    let at = |field: &str| Location::file(path).with_field(field);
    let obj = v.as_object().ok_or_else(|| Error::parse(Location::file(path), "expected a JSON object"))?;
    let model_type = obj
        .get("model_type")
        .and_then(|t| t.as_str())
        .ok_or_else(|| {
            Error::parse(
                at("model_type"),
                "missing; expected one of gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek, mpt, bloom, \
             bert",
            )
        })?
        .to_ascii_lowercase();
    // The first of `names` present, as a positive integer.
    let int = |names: &[&str]| -> Result<Option<u64>> {
        for &n in names {
            match obj.get(n) {
                None | Some(serde_json::Value::Null) => continue,
                Some(x) => {
                    return match x.as_u64() {
                        Some(u) if u > 0 => Ok(Some(u)),
                        _ => Err(Error::parse(at(n), format!("must be a positive integer, not {x}"))),
                    }
                }
            }
        }
        Ok(None)
    };
    let need = |names: &[&str]| -> Result<u64> {
        int(names)?.ok_or_else(|| Error::parse(at(names[0]), format!("missing (a `{}` config needs it)", model_type)))
    };
    let flag = |name: &str, default: bool| -> Result<bool> {
        match obj.get(name) {
            None | Some(serde_json::Value::Null) => Ok(default),
            Some(x) => x.as_bool().ok_or_else(|| Error::parse(at(name), format!("must be true or false, not {x}"))),
        }
    };
    // A dropout probability (`hidden_dropout`, `attention_dropout`): a number in [0, 1).
    let probability = |name: &str| -> Result<f64> {
        match obj.get(name) {
            None | Some(serde_json::Value::Null) => Ok(0.0),
            Some(x) => x
                .as_f64()
                .filter(|p| (0.0..1.0).contains(p))
                .ok_or_else(|| Error::parse(at(name), format!("must be a probability in [0, 1), not {x}"))),
        }
    };
    let u32_of = |x: u64, field: &str| -> Result<u32> {
        u32::try_from(x).map_err(|_| Error::parse(at(field), format!("{x} is too large")))
    };
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match obj.get("_name_or_path").and_then(|n| n.as_str()) {
        Some(n) if !n.is_empty() => n.rsplit('/').next().unwrap_or(n).to_string(),
        _ => name,
    };
    let source = format!("Hugging Face config {}", path.display());
    let cfg = match model_type.as_str() {
        "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" | "qwen2_moe" | "qwen3_moe" | "deepseek" => {
            let hidden = need(&["hidden_size"])?;
            let heads = need(&["num_attention_heads"])?;
            let kv = int(&["num_key_value_heads"])?.unwrap_or(heads);
            let seq = need(&["max_position_embeddings"])?;
            TransformerConfig {
                name,
                family: Family::Llama,
                layers: u32_of(need(&["num_hidden_layers"])?, "num_hidden_layers")?,
                hidden,
                heads: u32_of(heads, "num_attention_heads")?,
                kv_heads: u32_of(kv, "num_key_value_heads")?,
                ffn_hidden: need(&["intermediate_size"])?,
                vocab: need(&["vocab_size"])?,
                seq_len: u32_of(seq.min(8192), "max_position_embeddings")?,
                gated_mlp: true,
                norm: Norm::RmsNorm,
                position: Position::Rotary,
                bias: flag("attention_bias", false)?,
                tied_embeddings: flag("tie_word_embeddings", false)?,
                dropout: false,
                causal: true,
                token_types: 0,
                moe: match int(&["num_local_experts", "num_experts", "n_routed_experts"])? {
                    None => None,
                    Some(experts) => {
                        let expert_ffn = need(&["moe_intermediate_size", "intermediate_size"])?;
                        let shared_ffn = match int(&["shared_expert_intermediate_size"])? {
                            Some(w) => w,
                            None => int(&["n_shared_experts"])?.unwrap_or(0) * expert_ffn,
                        };
                        Some(MoeConfig {
                            experts: u32_of(experts, "num_local_experts")?,
                            top_k: u32_of(need(&["num_experts_per_tok"])?, "num_experts_per_tok")?,
                            expert_ffn,
                            shared_ffn,
                            shared_gate: model_type == "qwen2_moe",
                            dense_layers: match obj.get("first_k_dense_replace") {
                                Some(serde_json::Value::Number(n)) if n.as_u64() == Some(0) => 0,
                                _ => u32_of(int(&["first_k_dense_replace"])?.unwrap_or(0), "first_k_dense_replace")?,
                            },
                        })
                    }
                },
                head_dim: int(&["head_dim"])?.filter(|&d| d.checked_mul(heads) != Some(hidden)),
                qk_norm: model_type.starts_with("qwen3"),
                source,
            }
        }
        "gpt2" => {
            let hidden = need(&["n_embd", "hidden_size"])?;
            let positions = need(&["n_positions", "max_position_embeddings"])?;
            let heads = need(&["n_head", "num_attention_heads"])?;
            TransformerConfig {
                name,
                family: Family::Gpt,
                layers: u32_of(need(&["n_layer", "num_hidden_layers"])?, "n_layer")?,
                hidden,
                heads: u32_of(heads, "n_head")?,
                kv_heads: u32_of(heads, "n_head")?,
                ffn_hidden: int(&["n_inner"])?.unwrap_or(hidden.saturating_mul(4)),
                vocab: need(&["vocab_size"])?,
                seq_len: u32_of(int(&["n_ctx"])?.unwrap_or(positions), "n_ctx")?,
                gated_mlp: false,
                norm: Norm::LayerNorm,
                position: Position::Learned { max_positions: positions },
                bias: true,
                tied_embeddings: flag("tie_word_embeddings", true)?,
                dropout: true,
                causal: true,
                token_types: 0,
                moe: None,
                head_dim: None,
                qk_norm: false,
                source,
            }
        }
        "mpt" => {
            let hidden = need(&["d_model"])?;
            let heads = need(&["n_heads"])?;
            let attn = obj.get("attn_config").and_then(|a| a.as_object());
            let alibi = attn.and_then(|a| a.get("alibi")).and_then(|x| x.as_bool()).unwrap_or(false);
            let kv = attn.and_then(|a| a.get("kv_n_heads")).and_then(|x| x.as_u64()).unwrap_or(heads);
            let seq = need(&["max_seq_len"])?;
            let expansion = match obj.get("expansion_ratio") {
                None | Some(serde_json::Value::Null) => 4.0,
                Some(x) => x.as_f64().filter(|r| *r > 0.0).ok_or_else(|| {
                    Error::parse(at("expansion_ratio"), format!("must be a positive number, not {x}"))
                })?,
            };
            let learned = flag("learned_pos_emb", !alibi)?;
            TransformerConfig {
                name,
                family: Family::Mpt,
                layers: u32_of(need(&["n_layers"])?, "n_layers")?,
                hidden,
                heads: u32_of(heads, "n_heads")?,
                kv_heads: u32_of(kv, "attn_config.kv_n_heads")?,
                ffn_hidden: (expansion * hidden as f64).round() as u64,
                vocab: need(&["vocab_size"])?,
                seq_len: u32_of(seq, "max_seq_len")?,
                gated_mlp: false,
                norm: if flag("no_bias", true)? { Norm::LayerNormNoBias } else { Norm::LayerNorm },
                position: if learned { Position::Learned { max_positions: seq } } else { Position::Alibi },
                bias: !flag("no_bias", true)?,
                tied_embeddings: true,
                dropout: false,
                causal: true,
                token_types: 0,
                moe: None,
                head_dim: None,
                qk_norm: false,
                source,
            }
        }
        "bloom" => {
            let hidden = need(&["hidden_size", "n_embed"])?;
            let heads = need(&["n_head", "num_attention_heads"])?;
            // BloomConfig's `hidden_dropout` and `attention_dropout` (0.0 by default and in the
            // published BLOOM configs, which are for inference); a training run states its own.
            let dropout = probability("hidden_dropout")? > 0.0 || probability("attention_dropout")? > 0.0;
            TransformerConfig {
                name,
                family: Family::Bloom,
                layers: u32_of(need(&["n_layer", "num_hidden_layers"])?, "n_layer")?,
                hidden,
                heads: u32_of(heads, "n_head")?,
                kv_heads: u32_of(heads, "n_head")?,
                ffn_hidden: hidden.saturating_mul(4),
                vocab: need(&["vocab_size"])?,
                seq_len: u32_of(int(&["seq_length"])?.unwrap_or(2048), "seq_length")?,
                gated_mlp: false,
                norm: Norm::LayerNorm,
                position: Position::Alibi,
                bias: true,
                tied_embeddings: true,
                dropout,
                causal: true,
                token_types: 0,
                moe: None,
                head_dim: None,
                qk_norm: false,
                source,
            }
        }
        "bert" | "roberta" => {
            let hidden = need(&["hidden_size"])?;
            let heads = need(&["num_attention_heads"])?;
            let positions = need(&["max_position_embeddings"])?;
            TransformerConfig {
                name,
                family: Family::Encoder,
                layers: u32_of(need(&["num_hidden_layers"])?, "num_hidden_layers")?,
                hidden,
                heads: u32_of(heads, "num_attention_heads")?,
                kv_heads: u32_of(heads, "num_attention_heads")?,
                ffn_hidden: need(&["intermediate_size"])?,
                vocab: need(&["vocab_size"])?,
                seq_len: u32_of(positions.min(512), "max_position_embeddings")?,
                gated_mlp: false,
                norm: Norm::LayerNorm,
                position: Position::Learned { max_positions: positions },
                bias: true,
                tied_embeddings: true,
                dropout: true,
                causal: false,
                token_types: int(&["type_vocab_size"])?.unwrap_or(2),
                moe: None,
                head_dim: None,
                qk_norm: false,
                source,
            }
        }
        other => {
            return Err(Error::parse(
                at("model_type"),
                format!("`{other}` is not supported; expected one of gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, \
                 deepseek, mpt, bloom, bert"),
            ))
        }
    };
    cfg.check(&path.display().to_string())?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(name: &str) -> u64 {
        TransformerConfig::named(name).unwrap().params().total()
    }

    /// Within `tol` (fraction) of a published count.
    fn near(got: u64, published: f64, tol: f64) -> bool {
        ((got as f64 - published) / published).abs() <= tol
    }

    #[test]
    fn parameter_counts_match_the_published_ones() {
        // Exact counts from the released checkpoints (model cards / safetensors index totals).
        assert_eq!(total("llama2-7b"), 6_738_415_616);
        assert_eq!(total("llama2-13b"), 13_015_864_320);
        assert_eq!(total("llama2-70b"), 68_976_648_192);
        assert_eq!(total("llama3-8b"), 8_030_261_248);
        assert_eq!(total("llama3-70b"), 70_553_706_496);
        assert_eq!(total("llama3-405b"), 405_853_388_800);
        assert_eq!(total("mpt-7b"), 6_649_286_656);
        // Published round figures.
        assert!(near(total("gpt3-175b"), 175e9, 0.01));
        assert!(near(total("megatron-22b"), 22e9, 0.02));
        assert!(near(total("megatron-530b"), 530e9, 0.01));
        assert!(near(total("megatron-1t"), 1008e9, 0.01), "{}", total("megatron-1t"));
        assert!(near(total("mpt-30b"), 29.95e9, 0.01));
        assert!(near(total("mpt-70b"), 64_862_437_376.0, 0.01));
        assert!(near(total("bloom-176b"), 176_247e6, 0.001), "{}", total("bloom-176b"));
        // Nemotron-4: 3.2 B + 12.5 B and 9.4 B + 331.6 B (embedding + non-embedding, the papers').
        assert!(near(total("nemotron4-15b"), 15.7e9, 0.01), "{}", total("nemotron4-15b"));
        assert!(near(total("nemotron4-340b"), 341e9, 0.01), "{}", total("nemotron4-340b"));
    }

    #[test]
    fn moe_parameter_counts_match_the_published_total_and_active_ones() {
        let count = |name: &str| TransformerConfig::named(name).unwrap().params();
        // Mixtral 8x7B's checkpoint: 46,702,792,704 parameters.
        assert_eq!(count("mixtral-8x7b").total(), 46_702_792_704);
        for (name, total, active, tol) in [
            ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01),
            ("mixtral-8x22b", 141e9, 39e9, 0.01),
            ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, 0.01),
            ("qwen2-57b-a14b", 57e9, 14e9, 0.02),
            ("deepseek-moe-16b", 16.4e9, 2.8e9, 0.02),
            ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.01),
            ("qwen3-235b-a22b", 235e9, 22e9, 0.01),
        ] {
            let p = count(name);
            assert!(near(p.total(), total, tol), "{name}: {} vs {total}", p.total());
            assert!(near(p.active(), active, tol.max(0.02)), "{name}: active {} vs {active}", p.active());
        }
        // Grok-1: 314 B published (xai-org/grok-1 README); no active count is published.
        assert!(near(count("grok1-314b").total(), 314e9, 0.01), "{}", count("grok1-314b").total());
        let m = r#"{"model_type": "mixtral", "_name_or_path": "mistralai/Mixtral-8x7B-v0.1",
            "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
            "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2}"#;
        let c = parse_hf_config(m, Path::new("mixtral.json")).unwrap();
        assert_eq!(c.params(), count("mixtral-8x7b"));
        let d = r#"{"model_type": "deepseek", "hidden_size": 2048, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 10944,
            "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
            "num_experts_per_tok": 6, "first_k_dense_replace": 1, "vocab_size": 102400,
            "max_position_embeddings": 4096}"#;
        assert_eq!(parse_hf_config(d, Path::new("ds.json")).unwrap().params(), count("deepseek-moe-16b"));
        let bad = m.replace("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9");
        let e = parse_hf_config(&bad, Path::new("mixtral.json")).unwrap_err().to_string();
        assert!(e.contains("mixtral.json") && e.contains("top_k") && e.contains("8 experts"), "{e}");
    }

    #[test]
    fn every_named_config_is_valid_and_sourced() {
        for n in NAMED {
            let c = (n.build)();
            assert_eq!(c.name, n.name);
            c.check(n.name).unwrap();
            assert!(!c.source.is_empty());
            assert_eq!(TransformerConfig::named(&n.name.to_uppercase()).unwrap().name, n.name);
        }
        assert!(TransformerConfig::named("Llama 3.1 405B").is_some());
        let e = TransformerConfig::resolve("gpt5").unwrap_err().to_string();
        assert!(e.contains("gpt5") && e.contains("llama3-70b"), "{e}");
    }

    #[test]
    fn hugging_face_configs_read_into_the_same_shapes() {
        let llama = r#"{"model_type": "llama", "_name_or_path": "meta-llama/Llama-2-70b-hf",
            "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
            "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 32000,
            "max_position_embeddings": 4096, "tie_word_embeddings": false, "hidden_act": "silu"}"#;
        let c = parse_hf_config(llama, Path::new("llama.json")).unwrap();
        assert_eq!(c.name, "Llama-2-70b-hf");
        assert_eq!(c.params(), TransformerConfig::named("llama2-70b").unwrap().params());
        let gpt2 = r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "n_positions": 1024, "vocab_size": 50257, "n_inner": null}"#;
        // GPT-2 small: 124,439,808 parameters.
        assert_eq!(parse_hf_config(gpt2, Path::new("gpt2.json")).unwrap().params().total(), 124_439_808);
        let bert = r#"{"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24,
            "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 30522,
            "max_position_embeddings": 512, "type_vocab_size": 2}"#;
        let b = parse_hf_config(bert, Path::new("bert.json")).unwrap();
        assert!(!b.causal && b.family == Family::Encoder);
        // BERT-large without the pooler: 335,141,888 - 1024*1024 - 1024.
        assert_eq!(b.params().total(), 335_141_888 - 1024 * 1024 - 1024);
        // BLOOM: no dropout unless the config states a probability (BigScience's training runs
        // used Megatron-DeepSpeed's default 0.1).
        let bloom = r#"{"model_type": "bloom", "hidden_size": 14336, "n_layer": 6, "n_head": 64,
            "vocab_size": 250880}"#;
        assert!(!parse_hf_config(bloom, Path::new("b.json")).unwrap().dropout);
        let zero = bloom.replace("\"n_head\"", "\"hidden_dropout\": 0.0, \"attention_dropout\": 0.0, \"n_head\"");
        assert!(!parse_hf_config(&zero, Path::new("b.json")).unwrap().dropout);
        let trained = bloom.replace("\"n_head\"", "\"hidden_dropout\": 0.1, \"n_head\"");
        assert!(parse_hf_config(&trained, Path::new("b.json")).unwrap().dropout);
    }

    #[test]
    fn malformed_configs_name_the_field() {
        let e = parse_hf_config(r#"{"model_type": "llama", "hidden_size": 4096}"#, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.json") && e.contains("num_attention_heads"), "{e}");
        let e =
            parse_hf_config(r#"{"model_type": "gpt2", "n_embd": -3}"#, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("n_embd") && e.contains("positive integer"), "{e}");
        let e = parse_hf_config(r#"{"model_type": "t5"}"#, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("t5") && e.contains("llama"), "{e}");
        let e = parse_hf_config("{\"model_type\": ", Path::new("c.json")).unwrap_err().to_string();
        assert!(e.starts_with("c.json:1"), "{e}");
        let bad_heads = r#"{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
            "num_attention_heads": 32, "num_key_value_heads": 5, "intermediate_size": 11008,
            "vocab_size": 32000, "max_position_embeddings": 4096}"#;
        let e = parse_hf_config(bad_heads, Path::new("c.json")).unwrap_err().to_string();
        assert!(e.contains("kv_heads") && e.contains("5 key-value heads"), "{e}");
        for bad in ["1.5", "-0.1", "\"0.1\""] {
            let text = format!(
                r#"{{"model_type": "bloom", "hidden_size": 1024, "n_layer": 2, "n_head": 16,
                "vocab_size": 1000, "attention_dropout": {bad}}}"#
            );
            let e = parse_hf_config(&text, Path::new("c.json")).unwrap_err().to_string();
            assert!(e.contains("c.json") && e.contains("attention_dropout") && e.contains("[0, 1)"), "{e}");
        }
    }
}
