//! Fuzzing every reader on the stable toolchain (issue 18). For each target, a seed corpus from
//! the shipped files is mutated by a deterministic generator (byte flips, inserted and deleted
//! ranges, numbers swapped for NaN, infinities, huge, tiny, negative and overflowing values,
//! truncation, a byte-order mark, lines spliced from other seeds); inputs a reader accepts join
//! the corpus so mutations reach deeper. Every run must return `Ok` or an `Err` whose message
//! names the input file; a panic, or a run that takes over 10 s, is a crash: the input is saved
//! under `target/fuzz-crashes/` and the binary exits 1. Such inputs, once fixed, are kept under
//! `tests/fuzz/regressions/` and run first on every run of their target.
//!
//! `cargo test --release --test fuzz` runs each target a fixed number of times (CI); more with
//! `cargo test --release --test fuzz -- --runs 1000000 [--target NAME] [--seed N]`.

mod targets;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs per target when not told otherwise (CI): a few seconds for all targets together.
const DEFAULT_RUNS: u64 = 3_000;

/// xorshift64*: small, fast, the same sequence everywhere.
pub struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Values that broke readers before, or might.
const INTERESTING: &[&str] = &[
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "1e308",
    "1e300",
    "-1e300",
    "1e-300",
    "0",
    "-0",
    "-1",
    "1e19",
    "18446744073709551616",
    "4294967295",
    "4294967296",
    "2147483648",
    "-2147483649",
    "0.0",
    "1.5",
    "9e15",
    "",
    "\"\"",
    "null",
    "true",
    "[]",
    "{}",
    "1e12",
    "1e13",
    "65536",
    "1000000000",
    "0x10",
    "1_000",
];

fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(11) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(out.len() + 1);
                let b = [b'0', b'9', b'.', b',', b'-', b'e', b'\n', b' ', b'"', b'#', b'=', b'[', b'{', 0xff, b'\t']
                    [rng.below(15)];
                out.insert(i, b);
            }
            2 if !out.is_empty() => {
                let i = rng.below(out.len());
                let n = 1 + rng.below(16.min(out.len() - i));
                out.drain(i..i + n);
            }
            3 if !out.is_empty() => {
                let i = rng.below(out.len());
                let n = 1 + rng.below(64.min(out.len() - i));
                let piece = out[i..i + n].to_vec();
                let at = rng.below(out.len() + 1);
                out.splice(at..at, piece);
            }
            4..=6 => replace_number(rng, &mut out),
            7 if !out.is_empty() => {
                let n = rng.below(out.len());
                out.truncate(n);
            }
            8 => {
                if !out.starts_with(b"\xEF\xBB\xBF") {
                    out.splice(0..0, b"\xEF\xBB\xBF".iter().copied());
                }
            }
            9 if !corpus.is_empty() => {
                // A line from another seed, spliced at a line start.
                let other = &corpus[rng.below(corpus.len())];
                let lines: Vec<&[u8]> = other.split(|&b| b == b'\n').collect();
                let line = lines[rng.below(lines.len())].to_vec();
                let starts: Vec<usize> = std::iter::once(0)
                    .chain(out.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i + 1))
                    .collect();
                let at = starts[rng.below(starts.len())];
                let mut piece = line;
                piece.push(b'\n');
                out.splice(at..at, piece);
            }
            _ => {
                // Swap two lines.
                let text = String::from_utf8_lossy(&out).into_owned();
                let mut lines: Vec<&str> = text.split('\n').collect();
                if lines.len() > 1 {
                    let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
                    lines.swap(a, b);
                    out = lines.join("\n").into_bytes();
                }
            }
        }
    }
    out
}

/// Replaces one number in the input (a run of digits, dots, signs and exponents) by an
/// interesting value.
fn replace_number(rng: &mut Rng, out: &mut Vec<u8>) {
    let starts: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].is_ascii_digit() && (i == 0 || !out[i - 1].is_ascii_alphanumeric()))
        .collect();
    if starts.is_empty() {
        return;
    }
    let s = starts[rng.below(starts.len())];
    let mut e = s;
    while e < out.len() && (out[e].is_ascii_digit() || matches!(out[e], b'.' | b'e' | b'E' | b'+' | b'-')) {
        e += 1;
    }
    let v = INTERESTING[rng.below(INTERESTING.len())];
    out.splice(s..e, v.bytes());
}

struct Args {
    runs: u64,
    only: Option<String>,
    seed: u64,
}

fn args() -> Args {
    let mut a = Args { runs: DEFAULT_RUNS, only: None, seed: 1 };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let next = argv.get(i + 1).cloned();
        match argv[i].as_str() {
            "--runs" => a.runs = next.and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(a.runs),
            "--target" => a.only = next,
            "--seed" => a.seed = next.and_then(|v| v.parse().ok()).unwrap_or(a.seed),
            _ => {
                i += 1;
                continue; // cargo test's own arguments (filters, --nocapture) are not ours
            }
        }
        i += 2;
    }
    a
}

fn crash_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-crashes")
}

/// The saved inputs of `target` under `tests/fuzz/regressions/` (`TARGET-HASH.input`, as
/// `target/fuzz-crashes/` names them), sorted by name.
fn regressions(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/regressions");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // TARGET-<16 hex digits>.input: `trace` must not pick up `trace-table6`'s inputs.
        let hash = name.strip_prefix(target).and_then(|r| r.strip_prefix('-')?.strip_suffix(".input"));
        hash.is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).collect()
}

fn save_crash(target: &str, input: &[u8], why: &str) -> PathBuf {
    let dir = crash_dir();
    let _ = std::fs::create_dir_all(&dir);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in input {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    let p = dir.join(format!("{target}-{h:016x}.input"));
    let _ = std::fs::write(&p, input);
    let _ = std::fs::write(p.with_extension("why"), why);
    p
}

fn main() {
    let args = args();
    // Panics are caught and reported once per input, not printed by the default hook.
    let last_panic: Arc<Mutex<String>> = Arc::new(Mutex::new(String::new()));
    {
        let last = last_panic.clone();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut l) = last.lock() {
                *l = info.to_string();
            }
        }));
    }
    // Watchdog: a run that makes no progress for 10 s is a hang; save its input and stop.
    let progress = Arc::new(AtomicU64::new(0));
    let current: Arc<Mutex<(String, Vec<u8>)>> = Arc::new(Mutex::new((String::new(), Vec::new())));
    {
        let (progress, current) = (progress.clone(), current.clone());
        std::thread::spawn(move || {
            let mut seen = u64::MAX;
            loop {
                std::thread::sleep(Duration::from_secs(10));
                let now = progress.load(Ordering::Relaxed);
                if now == seen {
                    let (target, input) = current.lock().map(|c| c.clone()).unwrap_or_default();
                    let p = save_crash(&target, &input, "hang: no progress for 10 s");
                    eprintln!("fuzz: HANG in target {target}, input saved to {}", p.display());
                    std::process::exit(1);
                }
                seen = now;
            }
        });
    }

    let mut failed = 0;
    let mut passed = 0;
    let flag_targets: Vec<&str> = targets::flag_targets().iter().map(|t| t.name).collect();
    for target in targets::all().into_iter().chain(targets::flag_targets()) {
        if args.only.as_deref().is_some_and(|o| o != target.name) {
            continue;
        }
        let mut corpus = (target.seeds)();
        assert!(!corpus.is_empty(), "target {} has no seeds", target.name);
        // Inputs that crashed or hung a target before run first, every time; they do not join the
        // corpus (one of them builds a 131,072-GPU machine: mutating it would slow every run).
        let regressions = regressions(target.name);
        let seeds = corpus.len();
        let mut rng = Rng::new(args.seed ^ target.name.bytes().fold(0u64, |h, b| h.wrapping_mul(31) + b as u64));
        let (mut ok, mut errors, mut crashes) = (0u64, 0u64, 0u64);
        let mut unnamed: Vec<String> = Vec::new();
        let started = Instant::now();
        let fixed = regressions.len() + seeds;
        for run in 0..args.runs.max(fixed as u64) {
            // Every regression and seed is tried as is first, then mutants.
            let input = if (run as usize) < regressions.len() {
                regressions[run as usize].clone()
            } else if (run as usize) < fixed {
                corpus[run as usize - regressions.len()].clone()
            } else {
                let base = corpus[rng.below(corpus.len())].clone();
                mutate(&mut rng, &base, &corpus)
            };
            if let Ok(mut c) = current.lock() {
                c.0 = target.name.to_string();
                c.1.clone_from(&input);
            }
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&input)));
            progress.fetch_add(1, Ordering::Relaxed);
            if (run + 1) % 25_000 == 0 {
                // A long run that is stopped still tells how far each target got.
                eprintln!(
                    "fuzz target {}: {} runs, {} panics, {:.0} s",
                    target.name,
                    run + 1,
                    crashes,
                    started.elapsed().as_secs_f64()
                );
            }
            match result {
                Ok(Ok(())) => {
                    ok += 1;
                    if corpus.len() < 512 && (run as usize) >= fixed && rng.below(4) == 0 {
                        corpus.push(input);
                    }
                }
                Ok(Err(msg)) => {
                    errors += 1;
                    // Errors must say where they come from (the input's name).
                    // The input's name, or another file it refers to (an I/O error names that file),
                    // or the engine's overflow report naming the task; flag values name the flag.
                    let named = msg.contains(targets::INPUT_NAME)
                        || msg.contains("(os error")
                        || msg.starts_with("overflow: simulated time in task")
                        || flag_targets.contains(&target.name);
                    if !named && unnamed.len() < 3 && !unnamed.contains(&msg) {
                        unnamed.push(msg);
                    }
                }
                Err(_) => {
                    crashes += 1;
                    let why = last_panic.lock().map(|l| l.clone()).unwrap_or_default();
                    let p = save_crash(target.name, &input, &why);
                    if crashes <= 3 {
                        eprintln!("fuzz: PANIC in target {}: {why}\n      input saved to {}", target.name, p.display());
                    }
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "fuzz target {:<14} {:>9} runs ({seeds} seeds, {} regressions): {ok} accepted, {errors} refused, {crashes} panics, {:.1} s",
            target.name,
            args.runs.max(fixed as u64),
            regressions.len(),
            secs
        );
        for m in &unnamed {
            println!("      error without the input's name: {m}");
        }
        if crashes > 0 || !unnamed.is_empty() {
            failed += 1;
        } else {
            passed += 1;
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
