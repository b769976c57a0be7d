//! Units at the edges. Inside the engine, time is an integer number of nanoseconds ([`Nanos`]) and
//! bandwidth is bytes per nanosecond, which is numerically equal to GB/s (1 GB = 1e9 bytes).
//! Conversions from user-facing units happen here and nowhere else.

/// Simulated time in nanoseconds. Integer, so every run is bit-for-bit reproducible.
pub type Nanos = u64;

/// Microseconds (as written in traces) to integer nanoseconds, rounded to nearest.
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
/// before its last byte arrives.
pub fn transfer_ns(bytes: f64, rate: f64) -> Nanos {
    debug_assert!(rate > 0.0);
    (bytes / rate).ceil() as Nanos
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
}
