//! Helpers shared by the CLI tests: the binary run from the repository root, and the check that
//! bad input exits 2 with a message instead of a panic.

#![allow(dead_code)] // each test binary uses its own subset

pub mod fat_tree;
pub mod plan;

use assert_cmd::Command;

/// The `dagsim` binary, run from the repository root so shipped paths resolve.
pub fn dagsim() -> Command {
    let mut c = Command::cargo_bin("dagsim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// Runs `dagsim args`, expects exit 2 without a panic, and every needle in stderr.
pub fn fails_with(args: &[&str], needles: &[&str]) {
    let assert = dagsim().args(args).assert().code(2);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks `{n}`: {stderr}");
    }
}

/// Asserts that two engine runs of one DAG (a shortcut and its reference path) are the same run:
/// every task's start and end, the bytes on every link, and the flows solved.
pub fn assert_same_run(fast: &dagsim::sim::Run, slow: &dagsim::sim::Run, what: &str) {
    assert_eq!(fast.start, slow.start, "{what}: task starts");
    assert_eq!(fast.end, slow.end, "{what}: task ends");
    assert_eq!(fast.link_bytes, slow.link_bytes, "{what}: bytes per link");
    assert_eq!(fast.flows, slow.flows, "{what}: flows");
}
