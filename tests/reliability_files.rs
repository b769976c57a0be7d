//! Outputs are never left half-written (issue 18, item 6): an interrupted run removes the
//! temporary file it was writing and leaves no output behind. The writer itself (fsync of the file
//! and of its directory, removal on error) is unit-tested in `src/atomic_file.rs`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// SIGINT while a large timeline is being written: exit 130, no temporary, no output file.
#[test]
fn an_interrupt_while_writing_removes_the_temporary_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.json");
    let repo = env!("CARGO_MANIFEST_DIR");
    // Tries larger timelines until one is caught mid-write (each is a few seconds of writing).
    for iterations in ["40", "160", "640"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dagsim"))
            .current_dir(repo)
            .args(["timeline", "--trace", "traces/alexnet_k80.csv", "--topology", "k80-cluster", "--gpus", "16"])
            .args(["--iterations", iterations, "--detail", "full", "--max-size", "0", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let mut caught = false;
        while started.elapsed() < Duration::from_secs(120) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if !temporaries(dir.path()).is_empty() {
                let ok = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success();
                caught = ok;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let o = child.wait_with_output().unwrap();
        if !caught || o.status.success() {
            // Finished before the signal landed: clean up and try a larger one.
            let _ = std::fs::remove_file(&out);
            assert!(temporaries(dir.path()).is_empty(), "a finished run left {:?}", temporaries(dir.path()));
            continue;
        }
        assert_eq!(o.status.code(), Some(130), "stderr: {}", String::from_utf8_lossy(&o.stderr));
        assert!(temporaries(dir.path()).is_empty(), "left {:?}", temporaries(dir.path()));
        assert!(!out.exists(), "a half-written output was left in place");
        return;
    }
    panic!("no run was caught while writing; make the timeline larger");
}

/// The output is fsynced before it is renamed into place, and its directory after (so the rename
/// survives a crash), seen through `strace` where it is installed (skipped, saying so, elsewhere).
#[test]
fn an_output_is_fsynced_renamed_and_its_directory_fsynced() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("skipped: strace is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.txt");
    let o = Command::new("strace")
        .args(["-f", "-e", "trace=openat,fsync,fdatasync,rename,renameat,renameat2", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_dagsim"))
        .current_dir(dir.path())
        .arg("predict")
        .arg("--trace")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/alexnet_k80.csv"))
        .args(["--gpus", "2", "--format", "json", "-o", "p.json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The descriptor a matching openat returned.
    let fd_of = |l: &str| l.rsplit("= ").next().unwrap().trim().to_string();
    let tmp_open =
        lines.iter().position(|l| l.contains("openat(") && l.contains(".p.json.") && l.contains(".tmp")).expect(&text);
    let tmp_fd = fd_of(lines[tmp_open]);
    let rename = lines.iter().position(|l| l.contains("rename") && l.contains("\"p.json\"")).expect(&text);
    let synced_before = lines[tmp_open..rename]
        .iter()
        .any(|l| l.contains(&format!("fsync({tmp_fd})")) || l.contains(&format!("fdatasync({tmp_fd})")));
    assert!(synced_before, "the temporary is not fsynced before the rename:\n{text}");
    let dir_open = lines[rename..]
        .iter()
        .position(|l| l.contains("openat(") && l.contains("O_RDONLY") && !l.contains(".tmp"))
        .expect(&text);
    let dir_fd = fd_of(lines[rename + dir_open]);
    assert!(
        lines[rename + dir_open..].iter().any(|l| l.contains(&format!("fsync({dir_fd})"))),
        "the directory is not fsynced after the rename:\n{text}"
    );
}

/// A byte-order mark before a trace is stripped: the trace reads as the same workload, never as
/// another format (a second mark, or an unknown header, is an error: tests/bad_inputs.rs).
#[test]
fn a_byte_order_mark_is_stripped_never_read_as_another_format() {
    use dagsim::workload::{read_trace_str, TraceFormat};
    for p in ["traces/alexnet_k80.csv", "traces/alexnet_titanx_caffe.csv"] {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).unwrap();
        let plain = read_trace_str(&text, Path::new(p), TraceFormat::Auto).unwrap();
        let marked = read_trace_str(&format!("\u{feff}{text}"), Path::new(p), TraceFormat::Auto).unwrap();
        assert_eq!(format!("{plain:?}"), format!("{marked:?}"), "{p}");
    }
}
