//! Summaries of repeated timings: median and spread. Pure arithmetic on samples already taken;
//! knows nothing of CUDA, so it is tested without a GPU.

use serde::{Deserialize, Serialize};
use statrs::statistics::{Data, Max, Min, OrderStatistics};

/// Repeated measurements of one quantity (seconds, or any unit the caller names) reduced to the
/// median and its spread. The median is the reported value: it ignores the odd slow repetition a
/// mean would absorb (a clock ramp, a page fault, another process on the GPU).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub median: f64,
    /// First and third quartiles: the interquartile range is the spread.
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
    pub max: f64,
    pub samples: u32,
}

impl Summary {
    /// Summarises finite samples; `None` if there are none (or any is not finite).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut data = Data::new(samples.to_vec());
        Some(Summary {
            median: data.median(),
            q1: data.lower_quartile(),
            q3: data.upper_quartile(),
            min: data.min(),
            max: data.max(),
            samples: samples.len() as u32,
        })
    }

    /// Interquartile range over the median: 0.02 means the middle half of the repetitions lies
    /// within 2% of the reported value.
    pub fn relative_spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.q3 - self.q1) / self.median
        }
    }

    /// The same summary with every value multiplied by `k` (a change of units).
    pub fn scaled(&self, k: f64) -> Summary {
        Summary {
            median: self.median * k,
            q1: self.q1 * k,
            q3: self.q3 * k,
            min: self.min * k,
            max: self.max * k,
            samples: self.samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.samples), (3.0, 1.0, 5.0, 3));
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.median, 2.5);
    }

    #[test]
    fn one_outlier_moves_the_max_not_the_median() {
        let mut xs = vec![1.0; 9];
        xs.push(100.0);
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.median, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.relative_spread(), 0.0);
    }

    #[test]
    fn spread_is_the_interquartile_range_over_the_median() {
        let xs: Vec<f64> = (1..=9).map(f64::from).collect();
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.median, 5.0);
        assert!(s.q1 < s.median && s.median < s.q3, "{s:?}");
        assert!((s.relative_spread() - (s.q3 - s.q1) / 5.0).abs() < 1e-12);
        assert!(s.relative_spread() > 0.5 && s.relative_spread() < 1.2, "{s:?}");
    }

    #[test]
    fn empty_or_non_finite_samples_give_none() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn scaling_changes_units_only() {
        let s = Summary::of(&[1e-3, 2e-3, 3e-3]).unwrap().scaled(1e3);
        assert!((s.median - 2.0).abs() < 1e-12 && (s.max - 3.0).abs() < 1e-12 && s.samples == 3);
    }
}
