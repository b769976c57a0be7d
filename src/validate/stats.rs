//! Error statistics for predicted-vs-measured pairs: relative errors, their summary (mean, median,
//! worst) and rank agreement (Kendall's tau-b). Pure functions on numbers; knows nothing of rows or
//! files.

use serde::Serialize;

/// Signed relative error of a prediction: (predicted - measured) / measured.
pub fn relative_error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

/// Median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Summary of a list of signed relative errors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ErrorSummary {
    pub rows: usize,
    /// Mean of |error|.
    pub mean_abs: f64,
    pub median_abs: f64,
    /// Largest |error|, and the index of the first row that has it.
    pub worst_abs: f64,
    pub worst_index: usize,
    /// Mean signed error, in the errors' own sign (`validate` flips time rows into optimism).
    pub mean_signed: f64,
}

/// Summarises signed relative errors; `None` when there are none.
pub fn summarize(errors: &[f64]) -> Option<ErrorSummary> {
    if errors.is_empty() {
        return None;
    }
    let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    let n = errors.len() as f64;
    let (worst_index, worst_abs) =
        abs.iter()
            .copied()
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |best, (i, a)| if a > best.1 { (i, a) } else { best });
    Some(ErrorSummary {
        rows: errors.len(),
        mean_abs: abs.iter().sum::<f64>() / n,
        median_abs: median(&abs).expect("not empty"),
        worst_abs,
        worst_index,
        mean_signed: errors.iter().sum::<f64>() / n,
    })
}

/// Rank agreement between two orderings of the same items.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankAgreement {
    /// Pairs ordered the same way by both.
    pub concordant: u64,
    /// Pairs ordered oppositely.
    pub discordant: u64,
    /// Kendall's tau-b (corrects for ties); `None` when either side is all ties.
    pub tau_b: Option<f64>,
}

/// Kendall's tau-b of `xs` against `ys` (same length): (C - D) / sqrt((n0 - n1)(n0 - n2)), with n0
/// all pairs and n1, n2 the pairs tied in x and in y. O(n^2), meant for a handful of strategies.
pub fn kendall_tau_b(xs: &[f64], ys: &[f64]) -> RankAgreement {
    assert_eq!(xs.len(), ys.len(), "kendall_tau_b needs paired values");
    let n = xs.len();
    let (mut concordant, mut discordant, mut tied_x, mut tied_y) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..n {
        for j in i + 1..n {
            let dx = xs[i].total_cmp(&xs[j]) as i8;
            let dy = ys[i].total_cmp(&ys[j]) as i8;
            if dx == 0 {
                tied_x += 1;
            }
            if dy == 0 {
                tied_y += 1;
            }
            match dx * dy {
                1 => concordant += 1,
                -1 => discordant += 1,
                _ => {}
            }
        }
    }
    let pairs = (n * n.saturating_sub(1) / 2) as u64;
    let denom = ((pairs - tied_x) as f64 * (pairs - tied_y) as f64).sqrt();
    let tau_b = (denom > 0.0).then(|| (concordant as f64 - discordant as f64) / denom);
    RankAgreement { concordant, discordant, tau_b }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn relative_error_is_signed_against_the_measurement() {
        assert!(close(relative_error(110.0, 100.0), 0.10));
        assert!(close(relative_error(75.0, 100.0), -0.25));
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn summary_by_hand() {
        // |e| = 0.1, 0.3, 0.05, 0.2: mean 0.1625, median 0.15, worst 0.3 at index 1, signed mean -0.0875.
        let s = summarize(&[0.1, -0.3, 0.05, -0.2]).unwrap();
        assert_eq!(s.rows, 4);
        assert!(close(s.mean_abs, 0.1625));
        assert!(close(s.median_abs, 0.15));
        assert!(close(s.worst_abs, 0.3));
        assert_eq!(s.worst_index, 1);
        assert!(close(s.mean_signed, -0.0875));
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn kendall_without_ties_by_hand() {
        // Pairs of x=[1,2,3,4,5], y=[3,1,2,5,4]: 10 pairs, discordant (1,2),(1,3),(4,5) -> C=7, D=3.
        let r = kendall_tau_b(&[1.0, 2.0, 3.0, 4.0, 5.0], &[3.0, 1.0, 2.0, 5.0, 4.0]);
        assert_eq!((r.concordant, r.discordant), (7, 3));
        assert!(close(r.tau_b.unwrap(), 0.4));
        let same = kendall_tau_b(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]);
        assert!(close(same.tau_b.unwrap(), 1.0));
        let reversed = kendall_tau_b(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]);
        assert!(close(reversed.tau_b.unwrap(), -1.0));
    }

    #[test]
    fn kendall_with_ties_matches_scipy_documentation() {
        // scipy.stats.kendalltau documentation example: tau-b = -0.47140452079103173.
        let r = kendall_tau_b(&[12.0, 2.0, 1.0, 12.0, 2.0], &[1.0, 4.0, 7.0, 1.0, 0.0]);
        assert!((r.tau_b.unwrap() - -0.471_404_520_791_031_7).abs() < 1e-12, "{:?}", r);
    }

    #[test]
    fn kendall_is_undefined_when_one_side_is_constant() {
        assert_eq!(kendall_tau_b(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).tau_b, None);
        assert_eq!(kendall_tau_b(&[1.0], &[1.0]).tau_b, None);
    }
}
