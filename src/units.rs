//! Units at the edges. Inside the engine, time is an integer number of nanoseconds ([`Nanos`]) and
//! bandwidth is bytes per nanosecond, which is numerically equal to GB/s (1 GB = 1e9 bytes).
//! Conversions from user-facing units happen here and nowhere else, and so do the range checks
//! every reader applies to what it reads ([`check_duration_us`], [`check_rate_gb_s`],
//! [`check_bytes`]): a value outside these ranges is an input error, never a wrapped or saturated
//! time. The ranges are documented in `docs/limits.md`.

/// Simulated time in nanoseconds. Integer, so every run is bit-for-bit reproducible.
pub type Nanos = u64;

/// The longest single duration an input may give (a layer, a latency, a step): 10^6 s, about 11.6
/// days, i.e. 10^12 us. A million such durations still fit in [`MAX_TIME_NS`].
pub const MAX_DURATION_US: f64 = 1e12;
/// Slowest rate an input may give: 10^-6 GB/s (1 kB/s). Slower would be a typo in the unit.
pub const MIN_RATE_GB_S: f64 = 1e-6;
/// Fastest rate an input may give: 10^6 GB/s (1 PB/s), far above any link or memory.
pub const MAX_RATE_GB_S: f64 = 1e6;
/// Largest byte count an input may give (a gradient, a sample, a message): 2^50 bytes (1 PiB).
pub const MAX_BYTES: u64 = 1 << 50;
/// The latest instant the engine represents: 2^62 ns (about 146 years). An event later than this
/// is reported as an overflow naming the task, never wrapped.
pub const MAX_TIME_NS: Nanos = 1 << 62;

/// Microseconds (as written in traces) to integer nanoseconds, rounded to nearest. Saturates for
/// values beyond `u64`; readers check with [`check_duration_us`] first.
pub fn us_to_ns(us: f64) -> Nanos {
    (us * 1e3).round() as Nanos
}

/// Integer nanoseconds to seconds, for reports.
pub fn ns_to_s(ns: f64) -> f64 {
    ns * 1e-9
}

/// GB/s (1e9 bytes per second) to the engine's bytes per nanosecond. The same number.
pub fn gb_per_s_to_bytes_per_ns(gbps: f64) -> f64 {
    gbps
}

/// Gbit/s (network line rates such as 10 GbE) to bytes per nanosecond.
pub fn gbit_per_s_to_bytes_per_ns(gbit: f64) -> f64 {
    gbit / 8.0
}

/// Time for `bytes` at `rate` bytes/ns, rounded up to a whole nanosecond so a transfer never ends
/// before its last byte arrives. Saturates at `u64::MAX` (the engine reports an instant past
/// [`MAX_TIME_NS`] as an overflow).
pub fn transfer_ns(bytes: f64, rate: f64) -> Nanos {
    debug_assert!(rate > 0.0);
    (bytes / rate).ceil() as Nanos
}

/// A number as a person reads it: plain, or in exponent notation when very large or small.
pub fn show(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-4..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A duration in microseconds as read from an input: finite, not negative, at most
/// [`MAX_DURATION_US`]. The error says what was found and what is expected.
pub fn check_duration_us(us: f64) -> Result<f64, String> {
    if us.is_nan() {
        return Err("expected a time in microseconds, found NaN".into());
    }
    if us < 0.0 {
        return Err(format!("time must not be negative, found `{}`", show(us)));
    }
    if us > MAX_DURATION_US {
        return Err(format!("time of {} us is beyond the limit of {MAX_DURATION_US:e} us (11.6 days)", show(us)));
    }
    Ok(us)
}

/// Parses a duration in microseconds (see [`check_duration_us`]).
pub fn parse_duration_us(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(x) => check_duration_us(x).map_err(|m| format!("{m} (read from `{v}`)")),
        Err(_) => Err(format!("expected a time in microseconds, found `{v}`")),
    }
}

/// A duration in microseconds, checked and converted to nanoseconds.
pub fn duration_us_to_ns(us: f64) -> Result<Nanos, String> {
    check_duration_us(us).map(us_to_ns)
}

/// A bandwidth in GB/s as read from an input: finite and within
/// [[`MIN_RATE_GB_S`], [`MAX_RATE_GB_S`]].
pub fn check_rate_gb_s(gb_s: f64) -> Result<f64, String> {
    if gb_s.is_nan() {
        return Err("expected a bandwidth in GB/s, found NaN".into());
    }
    if gb_s <= 0.0 {
        return Err(format!("bandwidth must be positive, found `{}` GB/s", show(gb_s)));
    }
    if !(MIN_RATE_GB_S..=MAX_RATE_GB_S).contains(&gb_s) {
        return Err(format!(
            "bandwidth of {} GB/s is outside the supported range [{MIN_RATE_GB_S:e}, {MAX_RATE_GB_S:e}] GB/s",
            show(gb_s)
        ));
    }
    Ok(gb_s)
}

/// A byte count as read from an input: at most [`MAX_BYTES`].
pub fn check_bytes(bytes: u64) -> Result<u64, String> {
    if bytes > MAX_BYTES {
        return Err(format!("{bytes} bytes is beyond the limit of 2^50 bytes (1 PiB)"));
    }
    Ok(bytes)
}

/// A byte count written as an integer or in float notation (`1.5e+07`), checked by [`check_bytes`].
pub fn parse_bytes(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let n = match v.parse::<u64>() {
        Ok(n) => n,
        Err(_) => match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(63) => x as u64,
            Ok(x) if x.is_finite() && x >= 0.0 && x < 2f64.powi(63) => {
                return Err(format!("expected a whole number of bytes, found `{v}`"))
            }
            Ok(x) if x.is_finite() && x >= 2f64.powi(63) => u64::MAX,
            _ => return Err(format!("expected a non-negative byte count, found `{v}`")),
        },
    };
    check_bytes(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_round_to_nanoseconds() {
        assert_eq!(us_to_ns(295.168), 295_168);
        assert_eq!(us_to_ns(17234.5), 17_234_500);
        assert_eq!(us_to_ns(1.20e6), 1_200_000_000);
    }

    #[test]
    fn transfer_time_rounds_up() {
        assert_eq!(transfer_ns(1000.0, 1.0), 1000);
        assert_eq!(transfer_ns(1001.0, 2.0), 501);
        assert_eq!(transfer_ns(10.0, gbit_per_s_to_bytes_per_ns(10.0)), 8);
    }

    #[test]
    fn durations_outside_the_range_are_refused_with_the_value() {
        assert_eq!(check_duration_us(12.5), Ok(12.5));
        assert!(check_duration_us(f64::NAN).unwrap_err().contains("NaN"));
        assert!(check_duration_us(-1.0).unwrap_err().contains("negative"));
        assert!(check_duration_us(f64::INFINITY).unwrap_err().contains("beyond the limit"));
        assert!(check_duration_us(1e300).unwrap_err().contains("1e300"));
        assert!(parse_duration_us("abc").unwrap_err().contains("`abc`"));
        assert_eq!(duration_us_to_ns(MAX_DURATION_US), Ok(1_000_000_000_000_000));
    }

    #[test]
    fn rates_outside_the_range_are_refused() {
        assert_eq!(check_rate_gb_s(12.0), Ok(12.0));
        for bad in [0.0, -3.0, 1e-300, 1e300, f64::INFINITY, f64::NAN] {
            assert!(check_rate_gb_s(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn byte_counts_parse_in_both_notations_and_are_bounded() {
        assert_eq!(parse_bytes("1.5e+07"), Ok(15_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("1.5").unwrap_err().contains("whole"));
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("1e300").unwrap_err().contains("limit"));
        assert!(parse_bytes("18446744073709551615").unwrap_err().contains("limit"));
    }
}
