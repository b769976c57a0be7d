//! Fits of measured transfer times: the alpha-beta model t(s) = latency + s / bandwidth, and the
//! piecewise bandwidth curve that, together with that latency, reproduces every measured point
//! in dagsim's link model. Pure arithmetic on (bytes, seconds) pairs; no CUDA.

use serde::{Deserialize, Serialize};

/// A link's latency and asymptotic bandwidth, fitted from (message bytes, seconds) points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlphaBeta {
    pub latency_s: f64,
    pub bandwidth_bytes_per_s: f64,
    /// Largest relative error of the fit over the points it was fitted to.
    pub max_relative_error: f64,
}

impl AlphaBeta {
    /// Predicted time of one message of `bytes`.
    pub fn time_s(&self, bytes: f64) -> f64 {
        self.latency_s + bytes / self.bandwidth_bytes_per_s
    }

    /// Least squares on relative error: minimises sum(((a + b*s - t) / t)^2), so the small
    /// messages (where latency shows) weigh as much as the large ones (where bandwidth shows).
    /// A negative intercept (noise on a bandwidth-bound series) is clamped to zero latency and
    /// the slope refitted. Needs at least two distinct sizes and positive times.
    pub fn fit(points: &[(u64, f64)]) -> Option<AlphaBeta> {
        if points.iter().any(|&(_, t)| !(t.is_finite() && t > 0.0)) {
            return None;
        }
        let mut sizes: Vec<u64> = points.iter().map(|p| p.0).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            return None;
        }
        // Weighted normal equations with weights w = 1/t^2.
        let (mut sw, mut sws, mut swss, mut swt, mut swst) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(s, t) in points {
            let (s, w) = (s as f64, 1.0 / (t * t));
            sw += w;
            sws += w * s;
            swss += w * s * s;
            swt += w * t;
            swst += w * s * t;
        }
        let det = sw * swss - sws * sws;
        let (mut alpha, mut slope) = ((swss * swt - sws * swst) / det, (sw * swst - sws * swt) / det);
        if alpha < 0.0 {
            alpha = 0.0;
            slope = swst / swss;
        }
        if !(slope.is_finite() && slope > 0.0 && alpha.is_finite()) {
            return None;
        }
        let mut fit = AlphaBeta { latency_s: alpha, bandwidth_bytes_per_s: 1.0 / slope, max_relative_error: 0.0 };
        fit.max_relative_error =
            points.iter().map(|&(s, t)| ((fit.time_s(s as f64) - t) / t).abs()).fold(0.0, f64::max);
        Some(fit)
    }
}

/// Points (message bytes, bytes per ns = GB/s) for a `BandwidthCurve` on a link with latency
/// `latency_s`: each measured time minus the latency gives the rate the bytes moved at, so the
/// engine's "wait the latency, then move the bytes at the curve's rate" reproduces the measured
/// time at every measured size. Points whose time does not exceed the latency are dropped.
pub fn curve_points(points: &[(u64, f64)], latency_s: f64) -> Vec<(u64, f64)> {
    let mut out: Vec<(u64, f64)> = points
        .iter()
        .filter(|&&(s, t)| s > 0 && t > latency_s)
        .map(|&(s, t)| (s, s as f64 / ((t - latency_s) * 1e9)))
        .collect();
    out.sort_by_key(|p| p.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(latency_s: f64, bw: f64, noise: &[f64]) -> Vec<(u64, f64)> {
        (0..12)
            .map(|i| {
                let s = 4u64 << (2 * i); // 4 B .. 16 MiB
                (s, (latency_s + s as f64 / bw) * (1.0 + noise[i % noise.len()]))
            })
            .collect()
    }

    #[test]
    fn recovers_latency_and_bandwidth_of_an_exact_curve() {
        let f = AlphaBeta::fit(&synthetic(8e-6, 12e9, &[0.0])).unwrap();
        assert!((f.latency_s - 8e-6).abs() < 1e-12, "{f:?}");
        assert!((f.bandwidth_bytes_per_s / 12e9 - 1.0).abs() < 1e-9, "{f:?}");
        assert!(f.max_relative_error < 1e-9);
    }

    #[test]
    fn recovers_parameters_within_noise() {
        let f = AlphaBeta::fit(&synthetic(2e-6, 90e9, &[0.03, -0.02, 0.01, -0.03, 0.02])).unwrap();
        assert!((f.latency_s / 2e-6 - 1.0).abs() < 0.05, "{f:?}");
        assert!((f.bandwidth_bytes_per_s / 90e9 - 1.0).abs() < 0.05, "{f:?}");
        assert!(f.max_relative_error > 0.01 && f.max_relative_error < 0.1, "{f:?}");
    }

    #[test]
    fn negative_intercept_is_clamped_to_zero_latency() {
        // Pure bandwidth with the small sizes measured fast: the free fit would go negative.
        let pts = vec![(1000, 0.9e-7), (1_000_000, 1e-4), (10_000_000, 1e-3)];
        let f = AlphaBeta::fit(&pts).unwrap();
        assert_eq!(f.latency_s, 0.0);
        assert!((f.bandwidth_bytes_per_s / 1e10 - 1.0).abs() < 0.05, "{f:?}");
    }

    #[test]
    fn too_few_sizes_or_bad_times_do_not_fit() {
        assert!(AlphaBeta::fit(&[(1024, 1e-5), (1024, 1.1e-5)]).is_none());
        assert!(AlphaBeta::fit(&[(1024, 1e-5), (2048, 0.0)]).is_none());
        assert!(AlphaBeta::fit(&[]).is_none());
    }

    #[test]
    fn curve_with_latency_reproduces_each_measured_time() {
        let pts = synthetic(5e-6, 15e9, &[0.04, -0.01]);
        let f = AlphaBeta::fit(&pts).unwrap();
        let curve = curve_points(&pts, f.latency_s);
        // Only points measured faster than the fitted latency (noise on tiny messages) drop out.
        let kept: Vec<(u64, f64)> = pts.iter().copied().filter(|&(_, t)| t > f.latency_s).collect();
        assert!(kept.len() >= pts.len() - 2 && kept.len() == curve.len(), "{} of {}", curve.len(), pts.len());
        for (&(s, t), &(cs, rate)) in kept.iter().zip(&curve) {
            assert_eq!(s, cs);
            let replayed = f.latency_s + s as f64 / (rate * 1e9);
            assert!((replayed / t - 1.0).abs() < 1e-12);
        }
        // Large messages approach the asymptotic bandwidth (15 GB/s = 15 bytes/ns).
        assert!((curve.last().unwrap().1 / 15.0 - 1.0).abs() < 0.05);
    }
}
