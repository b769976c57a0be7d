//! Compression of weights or gradients on the wire: the ratio and the GPU time to encode and
//! decode. Sources: FP16 and BFloat16 (2:1; ScaleDNN V-D compares BFloat16, Horovod uses FP16),
//! Dettmers' 8-bit approximation (4:1; he measures about 1 ns to compress and 0.5 ns to decompress
//! an element on his GPU), ScaleDNN's lossy weight format (3 FP32 values in one, 3:1, IV-C).
//! Pure arithmetic; the DAG builders place the codec tasks.

use crate::units::Nanos;
use serde::Serialize;

/// A wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Codec {
    /// FP32 as is.
    #[default]
    None,
    Fp16,
    Bf16,
    /// Dettmers' 8-bit approximation.
    Int8,
    /// ScaleDNN's base-delta exponent + truncated mantissa: three FP32 in one.
    Lossy3to1,
}

/// Default GPU cost of the element-wise casts (FP16, BF16, 3:1): read 4 bytes and write 2 (or
/// 1.33) per element, memory-bound; 0.02 ns/element is 6 bytes at 300 GB/s, a mid-range GPU's
/// memory bandwidth. An assumption, overridable with `encode_ns=`/`decode_ns=`.
pub const CAST_NS_PER_ELEMENT: f64 = 0.02;
/// Dettmers (Sec. 3.2): compressing 8-bit about 1 ns/element, decompressing 0.5 ns/element on his
/// GTX Titan X, divided by the strategy's `gpu_speed` factor for other GPUs.
pub const INT8_ENCODE_NS: f64 = 1.0;
pub const INT8_DECODE_NS: f64 = 0.5;
/// Default fixed cost per tensor per codec kernel (a CUDA launch); why small models with many
/// small tensors lose (ScaleDNN V-B). An assumption, overridable with `launch_us=`.
pub const LAUNCH_NS: Nanos = 5_000;

impl Codec {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" | "fp32" => Codec::None,
            "fp16" => Codec::Fp16,
            "bf16" => Codec::Bf16,
            "8bit" | "int8" => Codec::Int8,
            "3to1" | "lossy" => Codec::Lossy3to1,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Fp16 => "fp16",
            Codec::Bf16 => "bf16",
            Codec::Int8 => "8bit",
            Codec::Lossy3to1 => "3to1",
        }
    }

    /// FP32 bytes in per wire byte out.
    pub fn ratio(self) -> u64 {
        match self {
            Codec::None => 1,
            Codec::Fp16 | Codec::Bf16 => 2,
            Codec::Lossy3to1 => 3,
            Codec::Int8 => 4,
        }
    }

    /// Bytes on the wire for `fp32_bytes` of FP32 data.
    pub fn wire_bytes(self, fp32_bytes: u64) -> u64 {
        fp32_bytes.div_ceil(self.ratio())
    }

    /// Default (encode, decode) ns per element on a GPU of relative speed `gpu_speed`.
    pub fn default_costs(self, gpu_speed: f64) -> (f64, f64) {
        match self {
            Codec::None => (0.0, 0.0),
            Codec::Int8 => (INT8_ENCODE_NS / gpu_speed, INT8_DECODE_NS / gpu_speed),
            _ => (CAST_NS_PER_ELEMENT, CAST_NS_PER_ELEMENT),
        }
    }
}

/// A codec with its costs resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CodecCost {
    pub codec: Codec,
    pub encode_ns_per_element: f64,
    pub decode_ns_per_element: f64,
    pub launch_ns: Nanos,
}

impl CodecCost {
    /// The same costs for another wire format.
    pub fn with_codec(self, codec: Codec) -> Self {
        CodecCost { codec, ..self }
    }

    /// True when encoding and decoding cost nothing (no codec, or FP16 gradients under mixed
    /// precision, which are produced in FP16).
    pub fn is_free(&self) -> bool {
        self.codec == Codec::None
            || (self.encode_ns_per_element == 0.0 && self.decode_ns_per_element == 0.0 && self.launch_ns == 0)
    }

    /// Time to encode `fp32_bytes` held in `tensors` tensors (one kernel per tensor).
    pub fn encode_ns(&self, fp32_bytes: u64, tensors: u64) -> Nanos {
        self.cost(self.encode_ns_per_element, fp32_bytes, tensors)
    }
    pub fn decode_ns(&self, fp32_bytes: u64, tensors: u64) -> Nanos {
        self.cost(self.decode_ns_per_element, fp32_bytes, tensors)
    }
    fn cost(&self, per_element: f64, bytes: u64, tensors: u64) -> Nanos {
        if self.codec == Codec::None || bytes == 0 {
            return 0;
        }
        (per_element * (bytes / 4) as f64).round() as Nanos + self.launch_ns * tensors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_costs() {
        assert_eq!(Codec::Lossy3to1.wire_bytes(300), 100);
        assert_eq!(Codec::Int8.wire_bytes(4000), 1000);
        assert_eq!(Codec::Fp16.wire_bytes(3), 2, "rounds up");
        let (e, d) = Codec::Int8.default_costs(2.0);
        let c = CodecCost { codec: Codec::Int8, encode_ns_per_element: e, decode_ns_per_element: d, launch_ns: 100 };
        // 1000 elements at 0.5 ns plus two launches; decoding at 0.25 ns.
        assert_eq!(c.encode_ns(4000, 2), 700);
        assert_eq!(c.decode_ns(4000, 1), 350);
        let none = CodecCost { codec: Codec::None, ..c };
        assert_eq!(none.encode_ns(4000, 2), 0);
        assert_eq!(Codec::parse("3to1"), Some(Codec::Lossy3to1));
        assert_eq!(Codec::parse("zip"), None);
    }
}
