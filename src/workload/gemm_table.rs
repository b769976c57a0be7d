//! Dense GEMM throughput by shape, measured on one GPU, as an efficiency relative to the GPU's
//! best-shape rate: the shape side of a GEMM's time where a public by-shape measurement exists
//! (Blackwell: XLA's B200 cuBLAS table, `gemm_tables/README.md`). The cost model multiplies its
//! best-shape rate (MAMF at the sustained clock, or `--matmul-tflops`) by this efficiency, so the
//! table brings the shape dependence and the GPU's own measured best rate keeps the level.
//!
//! The grid is (rows, n, k): rows = batch x m, since a batched GEMM of b x m rows runs as many
//! output tiles as one of b x m rows; the table itself bears this out (its b = 2 and 4 entries at
//! m = 1024 against b = 1 at m = 2048 and 4096: median ratio 0.99 for FP8, 1.00 for BF16). Between
//! grid points the rate is interpolated linearly in log2 of each dimension (the grid doubles per
//! step). XLA's own interpolator (`matmul_interpolator.cc`) holds every dimension at the grid's
//! edge (256 to 4096), which would run a training GEMM deeper or wider than 4096 at the rate of
//! a 4096-cube; here wider outputs and deeper K extend as the table's own trends show
//! ([`GemmTable::tflops`]), never past the best-shape rate.

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// The B200 table (XLA @ 71feedd), rows `b,m,n,k,bf16,fp8_e4m3` in TFLOP/s.
const B200_XLA_CSV: &str = include_str!("gemm_tables/b200_xla.csv");

/// The best-shape rates the B200 table's efficiencies are relative to: Stas Bekman's MAMF for the
/// B200 (ml-engineering `compute/accelerator/README.md`, BF16 1745.0 and FP8 e4m3 3432.5 TFLOP/s;
/// the same figures as `MATMUL_EFFICIENCY`'s b200 row). Both are short benchmarks at the boost
/// clock, as the table's kernels are (a few calls each), so the ratio carries no clock.
const B200_BEST_TFLOPS: (f64, f64) = (1745.0, 3432.5);

/// Grid of each axis, as powers of two: rows 2^8..2^14, n and k 2^8..2^12.
const ROWS_LOG2: (u32, u32) = (8, 14);
const NK_LOG2: (u32, u32) = (8, 12);

/// Which measured operand type a GEMM runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GemmType {
    /// BF16 (also used for FP16, which the table does not measure).
    Half,
    /// FP8 e4m3 x e4m3 -> BF16 (also read for Transformer Engine's e4m3 x e5m2 backward GEMMs:
    /// the table's mixed pairs are a median 0.1% from it at large shapes).
    Fp8,
}

/// A by-shape GEMM throughput grid of one GPU.
#[derive(Debug)]
pub(super) struct GemmTable {
    /// TFLOP/s by (rows, n, k) grid index, for [`GemmType::Half`] and [`GemmType::Fp8`].
    half: Vec<f64>,
    fp8: Vec<f64>,
    best: (f64, f64),
}

fn axis_len((lo, hi): (u32, u32)) -> usize {
    (hi - lo + 1) as usize
}

fn index(r: usize, n: usize, k: usize) -> usize {
    let nk = axis_len(NK_LOG2);
    (r * nk + n) * nk + k
}

impl GemmTable {
    /// The B200 table, parsed once.
    pub(super) fn b200() -> Result<&'static GemmTable> {
        static TABLE: OnceLock<std::result::Result<GemmTable, String>> = OnceLock::new();
        TABLE
            .get_or_init(|| GemmTable::parse(B200_XLA_CSV, B200_BEST_TFLOPS))
            .as_ref()
            .map_err(|e| Error::invalid("gemm_tables/b200_xla.csv", e.clone()))
    }

    /// Reads `b,m,n,k,bf16,fp8` rows; a grid point is every b = 1 entry (rows = m) and the
    /// m = 4096 entries of b = 2 and 4 (rows 8192 and 16384). Every grid point must be given.
    fn parse(csv: &str, best: (f64, f64)) -> std::result::Result<GemmTable, String> {
        let size = axis_len(ROWS_LOG2) * axis_len(NK_LOG2) * axis_len(NK_LOG2);
        let (mut half, mut fp8) = (vec![f64::NAN; size], vec![f64::NAN; size]);
        let log2_in = |v: u64, (lo, hi): (u32, u32)| {
            (v.is_power_of_two() && (lo..=hi).contains(&v.trailing_zeros())).then(|| (v.trailing_zeros() - lo) as usize)
        };
        for (line_no, line) in csv.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') || line.starts_with("b,") {
                continue;
            }
            let fields: Vec<&str> = line.split(',').collect();
            let bad = || format!("line {line_no}: expected b,m,n,k,bf16,fp8 with positive numbers, got '{line}'");
            if fields.len() != 6 {
                return Err(bad());
            }
            let dims: Vec<u64> = fields[..4]
                .iter()
                .map(|f| f.parse::<u64>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| bad())?;
            let rates: Vec<f64> = fields[4..]
                .iter()
                .map(|f| f.parse::<f64>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| bad())?;
            if rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
                return Err(bad());
            }
            let (b, m, n, k) = (dims[0], dims[1], dims[2], dims[3]);
            if b > 1 && m != 1 << NK_LOG2.1 {
                continue; // batched entries below m = 4096 duplicate b = 1 rows
            }
            let cell = (log2_in(b * m, ROWS_LOG2), log2_in(n, NK_LOG2), log2_in(k, NK_LOG2));
            let (Some(r), Some(n), Some(k)) = cell else {
                return Err(format!("line {line_no}: shape {b} x {m} x {n} x {k} is off the power-of-two grid"));
            };
            let i = index(r, n, k);
            if !half[i].is_nan() {
                return Err(format!("line {line_no}: rows {} x n {} x k {} given twice", b * m, dims[2], dims[3]));
            }
            half[i] = rates[0];
            fp8[i] = rates[1];
        }
        if half.iter().any(|v| v.is_nan()) {
            return Err(format!("{} grid points missing", half.iter().filter(|v| v.is_nan()).count()));
        }
        Ok(GemmTable { half, fp8, best })
    }

    /// TFLOP/s of a `rows` x `n` x `k` GEMM of type `ty`: the table's, interpolated in log2 of
    /// each dimension; past its edges, by what the table itself shows:
    /// - n beyond 4096 folds into rows (the rate follows the output tiles: swapping m and n moves
    ///   the table's rates by a median 0.0% FP8 and 0.6% BF16), and rows beyond 16384 hold;
    /// - k beyond 4096 follows a time linear in k through the table's k = 2048 and 4096 rates (a
    ///   fixed cost per output tile plus its main loop; drawn through k = 1024 and 2048, this line
    ///   predicts the k = 4096 entries of outputs of 4096 rows x 2048 and larger within 1.3% for
    ///   BF16, and for FP8 2-6% fast in five of six, 11% slow in one);
    /// - below 256 each dimension holds at 256.
    pub(super) fn tflops(&self, ty: GemmType, rows: u64, n: u64, k: u64) -> f64 {
        let values = match ty {
            GemmType::Half => &self.half,
            GemmType::Fp8 => &self.fp8,
        };
        let n_max = (1u64 << NK_LOG2.1) as f64;
        let (mut rows, mut n) = (rows.max(1) as f64, n.max(1) as f64);
        if n > n_max {
            rows *= n / n_max;
            n = n_max;
        }
        let k = k.max(1) as f64;
        if k <= n_max {
            return grid_tflops(values, rows, n, k);
        }
        let (k2, k4) = (n_max / 2.0, n_max);
        let (t2, t4) = (k2 / grid_tflops(values, rows, n, k2), k4 / grid_tflops(values, rows, n, k4));
        let per_k = (t4 - t2) / (k4 - k2);
        if per_k <= 0.0 {
            return k4 / t4;
        }
        k / (t4 + per_k * (k - k4))
    }

    /// [`GemmTable::tflops`] over the same GPU's best-shape rate: the fraction of the best rate
    /// a `rows` x `n` x `k` GEMM reaches (at most all of it).
    pub(super) fn efficiency(&self, ty: GemmType, rows: u64, n: u64, k: u64) -> f64 {
        let best = match ty {
            GemmType::Half => self.best.0,
            GemmType::Fp8 => self.best.1,
        };
        (self.tflops(ty, rows, n, k) / best).min(1.0)
    }
}

/// The grid's rate at (rows, n, k), linear in log2 of each between grid points and held at the
/// grid's edges.
fn grid_tflops(values: &[f64], rows: f64, n: f64, k: f64) -> f64 {
    // (lower grid index, weight of the upper one) on one axis.
    let locate = |v: f64, (lo, hi): (u32, u32)| {
        let x = v.log2().clamp(lo as f64, hi as f64) - lo as f64;
        let i = (x.floor() as usize).min((hi - lo - 1) as usize);
        (i, x - i as f64)
    };
    let (r, n, k) = (locate(rows, ROWS_LOG2), locate(n, NK_LOG2), locate(k, NK_LOG2));
    let w = |(_, t): (usize, f64), upper: usize| if upper == 1 { t } else { 1.0 - t };
    let mut rate = 0.0;
    for (dr, dn, dk) in (0..8).map(|c| (c >> 2, (c >> 1) & 1, c & 1)) {
        let weight = w(r, dr) * w(n, dn) * w(k, dk);
        if weight > 0.0 {
            rate += weight * values[index(r.0 + dr, n.0 + dn, k.0 + dk)];
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> &'static GemmTable {
        GemmTable::b200().expect("the shipped table parses")
    }

    #[test]
    fn grid_points_are_the_table_entries() {
        let t = table();
        // Lines of b200_xla.csv, checked by hand against the XLA source's FLOP/s.
        assert_eq!(t.tflops(GemmType::Half, 256, 256, 256), 6.765);
        assert_eq!(t.tflops(GemmType::Fp8, 256, 256, 256), 6.920);
        assert_eq!(t.tflops(GemmType::Half, 4096, 4096, 4096), 1416.867);
        assert_eq!(t.tflops(GemmType::Fp8, 4096, 4096, 4096), 2764.982);
        // Rows 16384 is the b = 4, m = 4096 entry.
        assert_eq!(t.tflops(GemmType::Fp8, 16384, 4096, 4096), 3279.677);
        assert_eq!(t.tflops(GemmType::Half, 16384, 4096, 4096), 1670.467);
        assert_eq!(t.tflops(GemmType::Fp8, 8192, 4096, 4096), 3123.542);
    }

    #[test]
    fn interpolates_in_log2_and_holds_at_the_edges() {
        let t = table();
        // k = 3072 lies 0.585 of the way from 2048 to 4096 in log2: FP8 rows 4096, n 4096 has
        // 2484.974 at k 2048 and 2764.982 at 4096.
        let w = (3072f64).log2() - 11.0;
        let want = 2484.974 + w * (2764.982 - 2484.974);
        assert!((t.tflops(GemmType::Fp8, 4096, 4096, 3072) - want).abs() < 1e-9);
        // Below the grid: held at 256. Rows past 16384 hold; n past 4096 folds into rows.
        assert_eq!(t.tflops(GemmType::Half, 64, 100, 1), 6.765);
        assert_eq!(t.tflops(GemmType::Fp8, 65536, 4096, 4096), 3279.677);
        assert_eq!(t.tflops(GemmType::Fp8, 2048, 8192, 4096), t.tflops(GemmType::Fp8, 4096, 4096, 4096));
        assert_eq!(t.tflops(GemmType::Fp8, 4096, 16384, 4096), 3279.677);
        // k past 4096: time linear in k through k 2048 and 4096. FP8 rows 4096 x n 4096: 2484.974
        // and 2764.982 TFLOP/s at k 2048 and 4096; k / rate is the time of a fixed output, up to a
        // constant, so at k 16384 the rate is 16384 / (t4 + 12288 x (t4 - t2) / 2048).
        let (t2, t4) = (2048.0 / 2484.974, 4096.0 / 2764.982);
        let want = 16384.0 / (t4 + (16384.0 - 4096.0) * (t4 - t2) / 2048.0);
        assert!((t.tflops(GemmType::Fp8, 4096, 4096, 16384) - want).abs() < 1e-9);
        assert!(want > 2764.982 && want < 3432.5, "{want}");
        // Rows between grid points mix both neighbours: 12288 rows lie 0.585 of the way from
        // 8192 to 16384.
        let want = 1466.618 + w * (1670.467 - 1466.618);
        assert!((t.tflops(GemmType::Half, 12288, 4096, 4096) - want).abs() < 1e-9);
        // The efficiency is the rate over the B200's MAMF, at most 1.
        assert!((t.efficiency(GemmType::Fp8, 16384, 4096, 4096) - 3279.677 / 3432.5).abs() < 1e-12);
        assert!(t.efficiency(GemmType::Fp8, 16384, 4096, 1 << 30) <= 1.0);
    }

    #[test]
    fn a_broken_table_names_its_line() {
        let err = GemmTable::parse("b,m,n,k,bf16,fp8\n1,256,256,256,6.7\n", (1.0, 1.0)).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        let err = GemmTable::parse("1,300,256,256,6.7,6.9\n", (1.0, 1.0)).unwrap_err();
        assert!(err.contains("off the power-of-two grid"), "{err}");
        let err = GemmTable::parse("1,256,256,256,6.7,6.9\n", (1.0, 1.0)).unwrap_err();
        assert!(err.contains("grid points missing"), "{err}");
    }
}
