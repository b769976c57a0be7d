//! Readers for benchmark outputs users already have: nccl-tests tables (`all_reduce_perf`,
//! `broadcast_perf`, ...) and OSU micro-benchmark collective latency tables. Each becomes a
//! [`Measurement`]: one collective, a rank count, and (bytes, microseconds) points. Errors name the
//! file and line.

use crate::collective::CollectiveOp;
use crate::error::{Error, Location, Result};
use std::path::Path;

/// Measured times of one collective at several sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// The file it came from, as given.
    pub input: String,
    pub op: CollectiveOp,
    /// Ranks (GPUs) and hosts, when the file says; `0` when it does not (plain OSU tables).
    pub ranks: u32,
    pub hosts: u32,
    /// GPU model as the file names it (nccl-tests), else empty.
    pub hardware: String,
    /// (message bytes, time in microseconds), in file order.
    pub points: Vec<(u64, f64)>,
}

/// Reads a nccl-tests or OSU output, recognised by its header.
pub fn read_measurement(path: &Path, op_hint: Option<CollectiveOp>) -> Result<Measurement> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    if text.contains("out-of-place") && text.contains("# nThread") {
        parse_nccl_tests(&text, path)
    } else if text.contains("# OSU") {
        parse_osu(&text, path, op_hint)
    } else {
        Err(Error::parse(
            Location::file(path),
            "not a recognised benchmark output (expected an nccl-tests table or an OSU latency table)",
        ))
    }
}

fn nccl_op(text: &str, path: &Path) -> Result<CollectiveOp> {
    // nccl-tests prints a `redop` column only for reductions; the rooted tests print `root`.
    let header = text.lines().find(|l| l.contains("size") && l.contains("count")).unwrap_or("");
    let lower = path.to_string_lossy().to_lowercase();
    if header.contains("redop") && !header.contains("root") {
        Ok(CollectiveOp::AllReduce)
    } else if header.contains("root") && (lower.contains("bcast") || lower.contains("broadcast")) {
        Ok(CollectiveOp::Broadcast)
    } else if header.contains("root") && header.contains("redop") {
        Ok(CollectiveOp::Reduce)
    } else {
        Err(Error::parse(Location::file(path), "cannot tell which collective this nccl-tests table measures"))
    }
}

/// nccl-tests: `#   Rank  0 Pid ... on  host device 0 [..] Model` lines, then rows of
/// `size count type [redop] [root] time algbw busbw error ...`; the out-of-place time is taken.
pub fn parse_nccl_tests(text: &str, path: &Path) -> Result<Measurement> {
    let op = nccl_op(text, path)?;
    let mut hosts: Vec<String> = Vec::new();
    let mut ranks = 0;
    let mut hardware = String::new();
    let mut points = Vec::new();
    // Column of the out-of-place time: after size, count, type and the optional redop/root.
    let header = text.lines().find(|l| l.contains("size") && l.contains("count")).unwrap_or("");
    let time_col = 3 + header.contains("redop") as usize + header.contains("root") as usize;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("#") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            if words.first() == Some(&"Rank") {
                ranks += 1;
                if let Some(pos) = words.iter().position(|w| *w == "on") {
                    let host = words.get(pos + 1).unwrap_or(&"").to_string();
                    if !hosts.contains(&host) {
                        hosts.push(host);
                    }
                }
                if let Some(close) = rest.find(']') {
                    hardware = rest[close + 1..].trim().to_string();
                }
            }
            continue;
        }
        let cols: Vec<&str> = t.split_whitespace().collect();
        if cols.len() <= time_col || cols[0].parse::<u64>().is_err() {
            continue;
        }
        let bytes: u64 = cols[0].parse().expect("checked above");
        let us: f64 = cols[time_col].parse().map_err(|_| {
            Error::parse(Location::line(path, i + 1), format!("time `{}` is not a number", cols[time_col]))
        })?;
        if !(us.is_finite() && us > 0.0) {
            return Err(Error::parse(Location::line(path, i + 1), "time must be positive"));
        }
        points.push((bytes, us));
    }
    if points.is_empty() {
        return Err(Error::parse(Location::file(path), "no measurement rows found"));
    }
    if ranks == 0 {
        return Err(Error::parse(Location::file(path), "no `# Rank` lines: cannot tell how many GPUs ran"));
    }
    Ok(Measurement { input: path.display().to_string(), op, ranks, hosts: hosts.len() as u32, hardware, points })
}

/// OSU: `# OSU MPI[-CUDA] Allreduce Latency Test`, then `size avg-latency ...` rows (or
/// `ranks,size avg-latency`). Without the prefix the rank count is not in the file; the caller
/// supplies it.
pub fn parse_osu(text: &str, path: &Path, op_hint: Option<CollectiveOp>) -> Result<Measurement> {
    let title = text.lines().find(|l| l.contains("# OSU")).unwrap_or("").to_lowercase();
    let op = if title.contains("allreduce") {
        CollectiveOp::AllReduce
    } else if title.contains("bcast") || title.contains("broadcast") {
        CollectiveOp::Broadcast
    } else if title.contains("reduce") {
        CollectiveOp::Reduce
    } else if let Some(op) = op_hint {
        op
    } else {
        return Err(Error::parse(Location::file(path), format!("unknown OSU test: {}", title.trim())));
    };
    let mut points = Vec::new();
    let mut ranks = 0;
    for (i, line) in text.lines().enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 2 || cols[0].starts_with('#') {
            continue;
        }
        // Some collections prefix the size with the process count: `8,1024   101.89`.
        let size = match cols[0].split_once(',') {
            Some((n, size)) => {
                ranks = n.parse().unwrap_or(0);
                size
            }
            None => cols[0],
        };
        let Ok(bytes) = size.parse::<u64>() else { continue };
        let us: f64 = cols[1]
            .parse()
            .map_err(|_| Error::parse(Location::line(path, i + 1), format!("latency `{}` is not a number", cols[1])))?;
        points.push((bytes, us));
    }
    if points.is_empty() {
        return Err(Error::parse(Location::file(path), "no measurement rows found"));
    }
    Ok(Measurement { input: path.display().to_string(), op, ranks, hosts: 0, hardware: String::new(), points })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NCCL: &str = "\
# nThread 1 nGpus 1 minBytes 4 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 100 validation: 1
#   Rank  0 Pid 1 on      g0185 device  0 [0x3d] Tesla V100-SXM2-16GB
#   Rank  1 Pid 2 on      g0186 device  0 [0x3d] Tesla V100-SXM2-16GB
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           4             1   float     sum     8.48    0.00    0.00  1e-07     8.34    0.00    0.00  0e+00
     1048576        262144   float     sum    79.05   13.26   19.90  2e-07    78.63   13.34   20.00  2e-07
";

    #[test]
    fn reads_nccl_tests_tables() {
        let m = parse_nccl_tests(NCCL, Path::new("x.nccl")).unwrap();
        assert_eq!((m.op, m.ranks, m.hosts), (CollectiveOp::AllReduce, 2, 2));
        assert_eq!(m.hardware, "Tesla V100-SXM2-16GB");
        assert_eq!(m.points, vec![(4, 8.48), (1048576, 79.05)]);
        let bad = NCCL.replace("79.05", "fast");
        let e = parse_nccl_tests(&bad, Path::new("x.nccl")).unwrap_err().to_string();
        assert!(e.starts_with("x.nccl:7") && e.contains("fast"), "{e}");
    }

    #[test]
    fn reads_osu_tables() {
        let text =
            "# OSU MPI-CUDA Allreduce Latency Test v5.7\n# Size  Avg Latency(us)\n4   24.32  1 2 3\n8 24.62 1 2 3\n";
        let m = parse_osu(text, Path::new("x.mpi"), None).unwrap();
        assert_eq!((m.op, m.ranks), (CollectiveOp::AllReduce, 0));
        assert_eq!(m.points, vec![(4, 24.32), (8, 24.62)]);
        let m = parse_osu("# OSU MPI Allreduce Latency Test v5.4.0\n8,4   82.28\n8,8  68.72\n", Path::new("y"), None)
            .unwrap();
        assert_eq!((m.ranks, m.points.len()), (8, 2));
    }
}
