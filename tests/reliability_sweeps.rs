//! Sweeps keyed on their inputs (issue 18): a resumed sweep recomputes exactly the results whose
//! inputs changed and says how many; `--fresh` starts a new journal that a plain rerun resumes;
//! `sweep merge` refuses conflicting rows unless told which wins.

mod common;
use common::dagsim;
use std::path::Path;

/// A two-configuration sweep over a private copy of the AlexNet trace.
fn setup(dir: &Path) {
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/alexnet_k80.csv"), dir.join("t.csv")).unwrap();
    std::fs::write(
        dir.join("s.toml"),
        "[base]\niterations = 3\nworkload.trace = \"t.csv\"\n[grid]\ngpus = [1, 2, 4]\nstrategy = [\"none\", \"io+wfbp\"]\n",
    )
    .unwrap();
}

fn sweep(dir: &Path, out: &str, extra: &[&str]) -> String {
    let o = dagsim().arg("sweep").arg(dir.join("s.toml")).arg("-o").arg(dir.join(out)).args(extra).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stderr).unwrap()
}

#[test]
fn a_resumed_sweep_recomputes_what_changed_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let log = sweep(dir.path(), "out.csv", &[]);
    assert!(log.contains("(0 resumed, 0 recomputed"), "{log}");
    let before = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    assert!(before.lines().next().unwrap().contains("inputs_hash"), "{before}");
    let log = sweep(dir.path(), "out.csv", &[]);
    assert!(log.contains("(6 resumed, 0 recomputed"), "{log}");
    // Edit the trace: every result was computed from the old one, so all six are stale.
    let t = dir.path().join("t.csv");
    let text = std::fs::read_to_string(&t).unwrap().replace("1,conv1,3.27e+06", "1,conv1,4.27e+06");
    std::fs::write(&t, text).unwrap();
    let log = sweep(dir.path(), "out.csv", &[]);
    assert!(log.contains("(0 resumed, 6 recomputed"), "{log}");
    let after = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    assert_ne!(before, after, "the results follow the edited trace");
    // Edit the sweep's base so that only the strategy `none` changes: 3 stale, 3 kept.
    std::fs::write(
        dir.path().join("s.toml"),
        "[base]\niterations = 3\nworkload.trace = \"t.csv\"\nworkload.batch_per_gpu = 1024\n[grid]\ngpus = [1, 2, 4]\nstrategy = [\"none\", \"io+wfbp\"]\n",
    )
    .unwrap();
    let log = sweep(dir.path(), "out.csv", &[]);
    assert!(log.contains("(6 resumed, 0 recomputed"), "the batch equals the trace's: same inputs: {log}");
}

#[test]
fn an_interrupted_fresh_sweep_resumes_from_its_own_journal() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    sweep(dir.path(), "out.csv", &[]);
    let out = dir.path().join("out.csv");
    // Fake a `--fresh` run killed after two points: its journal is marked fresh.
    let table = dagsim::sweep::table::Table::read_csv(&out).unwrap();
    let records = table.records(&out).unwrap();
    let mut journal = String::from("{\"store\":\"fresh\"}\n");
    for r in &records[..2] {
        journal += &serde_json::to_string(r).unwrap();
        journal.push('\n');
    }
    std::fs::write(dagsim::sweep::run::journal_path(&out), journal).unwrap();
    // A plain rerun resumes the fresh run: the two journal points, not the six of the old output.
    let log = sweep(dir.path(), "out.csv", &["-v"]);
    assert!(log.contains("(2 resumed, 0 recomputed"), "{log}");
    assert_eq!(log.lines().filter(|l| l.starts_with("point ")).count(), 4, "{log}");
    assert!(!dagsim::sweep::run::journal_path(&out).exists());
}

#[test]
fn merge_refuses_conflicting_rows_unless_told_which_wins() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    sweep(dir.path(), "a.csv", &[]);
    let a = dir.path().join("a.csv");
    let b = dir.path().join("b.csv");
    // The same scenario computed from other inputs: one number and the hash differ.
    let text = std::fs::read_to_string(&a).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = header.iter().position(|h| *h == "iteration_time_s").unwrap();
    let mut cells: Vec<String> = lines[1].split(',').map(String::from).collect();
    cells[col] = "99.5".into();
    lines[1] = cells.join(",");
    std::fs::write(&b, lines.join("\n") + "\n").unwrap();
    let o = dagsim().args(["sweep", "merge"]).arg(&a).arg(&b).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("b.csv:2") && err.contains("point 0") && err.contains("iteration_time_s"), "{err}");
    assert!(err.contains("--on-conflict"), "{err}");
    for (which, expect) in [("first", false), ("last", true)] {
        let o = dagsim().args(["sweep", "merge", "--on-conflict", which]).arg(&a).arg(&b).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let merged = String::from_utf8(o.stdout).unwrap();
        assert_eq!(merged.lines().count(), 7);
        assert_eq!(merged.contains(",99.5,"), expect, "{which}: {merged}");
    }
    // Identical rows in both files are no conflict.
    let o = dagsim().args(["sweep", "merge"]).arg(&a).arg(&a).output().unwrap();
    assert!(o.status.success());
}

#[test]
fn a_sweep_plot_with_an_infinite_value_is_refused_not_looped_on() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    sweep(dir.path(), "a.csv", &[]);
    let a = dir.path().join("a.csv");
    let text = std::fs::read_to_string(&a).unwrap();
    let header: Vec<String> = text.lines().next().unwrap().split(',').map(String::from).collect();
    let col = header.iter().position(|h| h == "speedup").unwrap();
    let rows: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut c: Vec<&str> = l.split(',').collect();
            if i == 2 {
                c[col] = "inf";
            }
            c.join(",")
        })
        .collect();
    std::fs::write(&a, rows.join("\n") + "\n").unwrap();
    let o = dagsim()
        .args(["sweep", "plot"])
        .arg(&a)
        .arg("--dir")
        .arg(dir.path().join("p"))
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("row 3") && err.contains("speedup") && err.contains("`inf`"), "{err}");
}
