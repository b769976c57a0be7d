//! One vocabulary across commands (docs/glossary.md): every CSV column, JSON key and text-table
//! heading is a documented name; JSON is an array of results (validate's report aside); CSV and
//! JSON name the same fields; CSV numbers carry a fixed precision.

mod common;

use common::dagsim;
use serde_json::Value;
use std::collections::BTreeSet;

/// Every command that prints a result table, as a user would call it (run from the repository
/// root, quiet). `calibrate` fits a shipped NCCL measurement; the sweep is the tests' small one.
const COMMANDS: &[&[&str]] = &[
    &["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "1,2"],
    &["predict", "--trace", "traces/alexnet_k80.csv", "--gpus", "4"],
    &["predict", "--hybrid", "traces/dettmers_alexnet_titanx.csv", "--gpus", "1,4"],
    &[
        "predict",
        "--model",
        "llama2-7b",
        "--topology",
        "dgx-a100",
        "--parallel",
        "tp=4,pp=2,dp=2,sp=on",
        "--global-batch",
        "16",
    ],
    &[
        "compare",
        "--trace",
        "traces/alexnet_k80.csv",
        "--gpus",
        "4",
        "--strategies",
        "none,wfbp,wfbp+runtime=ddp",
        "--best-fusion",
    ],
    &["plan", "--model", "llama2-7b", "--topology", "dgx-a100", "--gpus", "8", "--global-batch", "16"],
    &["validate", "validation/tf2017_k80_alexnet.csv"],
    &["trace", "compare"],
    &["calibrate", "topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl", "--topology", "abci-v"],
    &["collective", "--topology", "abci-v", "--gpus", "4", "-b", "1K", "-e", "4K"],
    &["collective", "--check", "topologies/measured/abci/bcast_intra_vnode_4gpu.nccl", "--topology", "abci-v"],
    &["sweep", "tests/fixtures/sweep_small.toml"],
];

/// The names the glossary documents, and its `prefix<...>` patterns (`util_<kind>`).
struct Glossary {
    names: BTreeSet<String>,
    prefixes: Vec<String>,
}

impl Glossary {
    fn load() -> Glossary {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/glossary.md")).unwrap();
        let mut g = Glossary { names: BTreeSet::new(), prefixes: Vec::new() };
        for line in text.lines().filter(|l| l.starts_with("| `")) {
            let cell = line.split('|').nth(1).unwrap();
            for name in cell.split('`').skip(1).step_by(2) {
                match name.find('<') {
                    Some(i) => g.prefixes.push(name[..i].to_string()),
                    None => {
                        g.names.insert(name.to_string());
                    }
                }
            }
        }
        assert!(g.names.len() > 100, "the glossary table was not read: {:?}", g.names);
        g
    }

    fn knows(&self, name: &str) -> bool {
        self.names.contains(name) || self.prefixes.iter().any(|p| name.starts_with(p.as_str()) && name.len() > p.len())
    }
}

fn output(cmd: &[&str], format: &str) -> String {
    let o = dagsim().arg("-q").args(cmd).args(["--format", format]).output().unwrap();
    // validate exits 1 when its gate fails; the output is still a report.
    assert!(matches!(o.status.code(), Some(0 | 1)), "{cmd:?} {format}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn csv_header(text: &str) -> Vec<String> {
    csv::Reader::from_reader(text.as_bytes()).headers().unwrap().iter().map(String::from).collect()
}

/// Every key of a JSON value with its path; the children of `utilisation` are resource kinds
/// (CSV `util_<kind>`), not field names, and are left out.
fn json_keys(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| json_keys(i, path, out)),
        Value::Object(map) => {
            for (k, child) in map {
                out.push((path.to_string(), k.clone()));
                if k != "utilisation" {
                    json_keys(child, &format!("{path}.{k}"), out);
                }
            }
        }
        _ => {}
    }
}

/// A key of a `breakdown` or `stages` object is a category, documented as `<category>_s`.
fn documented(g: &Glossary, path: &str, key: &str) -> bool {
    let in_category = path.ends_with(".breakdown") || path.ends_with(".stages");
    g.knows(key) || (in_category && g.knows(&format!("{key}_s")))
}

#[test]
fn every_csv_column_and_json_key_is_in_the_glossary() {
    let g = Glossary::load();
    let mut missing = BTreeSet::new();
    for cmd in COMMANDS {
        for name in csv_header(&output(cmd, "csv")) {
            if !g.knows(&name) {
                missing.insert(format!("`{name}` (CSV of {})", cmd.join(" ")));
            }
        }
        let mut keys = Vec::new();
        json_keys(&serde_json::from_str(&output(cmd, "json")).unwrap(), "", &mut keys);
        for (path, key) in keys {
            if !documented(&g, &path, &key) {
                missing.insert(format!("`{key}` (JSON {path} of {})", cmd.join(" ")));
            }
        }
    }
    let timeline = dagsim()
        .args(["timeline", "--trace", "traces/alexnet_k80.csv", "--gpus", "2", "--format", "csv"])
        .output()
        .unwrap();
    for name in csv_header(&String::from_utf8(timeline.stdout).unwrap()) {
        if !g.knows(&name) {
            missing.insert(format!("`{name}` (CSV of timeline)"));
        }
    }
    assert!(missing.is_empty(), "not in docs/glossary.md:\n{}", missing.into_iter().collect::<Vec<_>>().join("\n"));
}

#[test]
fn text_tables_head_their_columns_with_the_glossary_names() {
    let g = Glossary::load();
    // The heading line of each table: the line that starts with its first column's name.
    let tables: [(&[&str], &str); 4] =
        [(COMMANDS[0], "gpus"), (COMMANDS[4], "strategy"), (COMMANDS[5], "plan"), (COMMANDS[10], "bytes")];
    for (cmd, first) in tables {
        let text = output(cmd, "text");
        let heading = text.lines().find(|l| l.trim_start().starts_with(first)).unwrap_or_else(|| panic!("{text}"));
        for word in heading.split_whitespace().filter(|w| *w != "|") {
            assert!(g.knows(word), "`{word}` in the text table of {cmd:?} is not in docs/glossary.md: {heading}");
        }
    }
}

#[test]
fn json_is_an_array_of_results_except_validates_report() {
    for cmd in COMMANDS {
        let v: Value = serde_json::from_str(&output(cmd, "json")).unwrap();
        if cmd[0] == "validate" {
            assert!(v.is_object() && v["rows"].is_array(), "validate prints one report with its rows: {v}");
        } else {
            assert!(v.as_array().is_some_and(|a| !a.is_empty()), "{cmd:?} prints an array of results");
        }
    }
}

/// Where a CSV column lives in the JSON row: a key of the same name at any depth, or a
/// `breakdown` category (`<category>_s`, also `plan_<category>_s` for a plan's own), or a
/// utilisation kind (`util_<kind>`).
fn json_has_column(row: &Value, column: &str) -> bool {
    let mut keys = Vec::new();
    json_keys(row, "", &mut keys);
    let named = |k: &str| keys.iter().any(|(_, key)| key == k);
    let category = |c: &str| keys.iter().any(|(p, k)| p.ends_with(".breakdown") && k == c);
    // A plan's `memory` object says `total` and `capacity`; CSV says what of.
    let alias = match column {
        "memory_per_gpu_bytes" => "total",
        "memory_capacity_bytes" => "capacity",
        _ => column,
    };
    named(column)
        || named(alias)
        || column.strip_suffix("_s").is_some_and(|c| category(c) || c.strip_prefix("plan_").is_some_and(category))
        || column.strip_prefix("util_").is_some_and(|k| row["utilisation"].get(k).is_some())
}

#[test]
fn csv_and_json_name_the_same_fields() {
    for cmd in COMMANDS {
        let csv_text = output(cmd, "csv");
        let json: Value = serde_json::from_str(&output(cmd, "json")).unwrap();
        let rows = if cmd[0] == "validate" { json["rows"].clone() } else { json };
        let first = &rows[0];
        // `point`, `grid.*` and `inputs_hash` are sweep bookkeeping, in both formats by name.
        for column in csv_header(&csv_text) {
            assert!(
                json_has_column(first, &column),
                "{cmd:?}: CSV column `{column}` has no JSON counterpart in {first}"
            );
        }
    }
}

/// Seconds, rates and ratios print with at most 9 decimals; validate's measured and predicted
/// values (units by metric) with at most 9 significant digits. `0.30000000000000004` fails both.
#[test]
fn csv_numbers_have_a_fixed_precision() {
    for cmd in COMMANDS {
        let text = output(cmd, "csv");
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header = r.headers().unwrap().clone();
        for rec in r.records() {
            for (column, cell) in header.iter().zip(rec.unwrap().iter()) {
                let Some((int, frac)) = cell.split_once('.') else { continue };
                if cell.parse::<f64>().is_err() || !frac.chars().all(|c| c.is_ascii_digit()) {
                    continue;
                }
                let digits: String = format!("{int}{frac}").trim_start_matches(['-', '0']).to_string();
                let ok = match column {
                    "measured" | "predicted" | "baseline" | "spread" => digits.len() <= 9,
                    _ => frac.len() <= 9,
                };
                assert!(ok, "{cmd:?}: `{column}` = {cell} is not at a fixed precision");
            }
        }
    }
}

/// The JSON schema's required fields are what `predict` prints, and it describes an array.
#[test]
fn the_result_schema_matches_predict() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/result.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(schema["type"], "array");
    let v: Value = serde_json::from_str(&output(COMMANDS[1], "json")).unwrap();
    for key in schema["$defs"]["prediction"]["required"].as_array().unwrap() {
        assert!(v[0].get(key.as_str().unwrap()).is_some(), "predict's JSON lacks required `{key}`");
    }
}

/// Setup flags mean the same in every command: `--seq-len`, `--optimizer` and `--precision bf16`
/// reach `predict` as they reach `trace gen`.
#[test]
fn predict_takes_the_synthesis_flags_of_trace_gen() {
    let flags = [
        "--model",
        "bert-large",
        "--gpu",
        "a100",
        "--batch",
        "8",
        "--precision",
        "bf16",
        "--optimizer",
        "sgd",
        "--seq-len",
        "128",
    ];
    let gen = dagsim().args(["trace", "gen"]).args(flags).output().unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bert.csv");
    std::fs::write(&trace, &gen.stdout).unwrap();
    let predict = ["predict", "--gpus", "1", "--topology", "dgx-a100"];
    let from_model = output(&[&predict[..], &flags[..]].concat(), "json");
    let from_trace = output(&[&predict[..], &["--trace", trace.to_str().unwrap()]].concat(), "json");
    let time = |t: &str| serde_json::from_str::<Value>(t).unwrap()[0]["iteration_time_s"].as_f64().unwrap();
    let longer = output(&[&predict[..], &flags[..10], &["--seq-len", "512"]].concat(), "json");
    let (m, t) = (time(&from_model), time(&from_trace));
    assert!((m / t - 1.0).abs() < 1e-3, "predict --model ({m} s) and the trace gen wrote ({t} s) agree");
    assert!(time(&longer) > 2.0 * time(&from_model), "--seq-len reaches predict's synthesis");
}
