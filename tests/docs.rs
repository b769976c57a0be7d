//! Docs that run. Every command in the project's Markdown (fenced `sh` blocks in README.md, docs/
//! and the READMEs of the shipped folders) and every example in a subcommand's `--help` is run
//! against the built binary, in a temporary copy of the repository's shipped files; each document's
//! commands run in order in one directory, so a later command can read what an earlier one wrote.
//! Shown outputs are never typed by hand:
//!
//! - a ```` ```text ```` block whose first line is `$ COMMAND` holds COMMAND's stdout;
//! - `<!-- output: COMMAND -->` ... `<!-- end output -->` holds COMMAND's stdout as Markdown
//!   (a table the page renders).
//!
//! Both are compared with a fresh run; `DAGSIM_REGEN_DOCS=1 cargo test --release --test docs`
//! rewrites them. A block that cannot run here says why in its info string
//! (```` ```sh skip: needs an NVIDIA GPU ````) and is reported as ignored with that reason; a
//! command block not tagged `sh` is an error, so no command escapes the check. Shipped paths a
//! command names (`traces/...`, `sweeps/...`) must exist, skipped or not, and so must the targets
//! of relative Markdown links.

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Folders of shipped inputs: a command naming a path under one of them must find it.
const SHIPPED: [&str; 10] =
    ["traces", "topologies", "scenarios", "sweeps", "validation", "slurm", "notebooks", "examples", "docs", "assets"];

/// Help examples that cannot run in a test (those containing the pattern), each with the reason it
/// is reported with.
const HELP_SKIPS: [(&str, &str); 5] = [
    ("calibrate --gpu", "measures a real GPU: needs an NVIDIA GPU and a build with --features cuda"),
    ("replay --gpu", "runs on a real GPU: needs an NVIDIA GPU and a build with --features cuda"),
    ("my-node.json", "reads the topology that `calibrate --gpu` writes on a GPU machine"),
    ("~/", "writes into the user's home directory"),
    ("every case", "the whole benchmark (minutes of CPU on up to 8,192 GPUs) is run by hand, not in tests"),
];

/// Subcommands that exist only in a build with `--features cuda`.
const CUDA_ONLY: [&str; 1] = ["replay"];

/// Seconds one documented command may run before it counts as hung.
const COMMAND_TIMEOUT_S: u32 = 300;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn regen() -> bool {
    std::env::var_os("DAGSIM_REGEN_DOCS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// The Markdown files whose commands are checked: README.md, docs/*.md and every README.md of a
/// shipped folder (any depth).
fn documents() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    for dir in SHIPPED {
        walk(&root().join(dir), &mut |p| {
            let rel = p.strip_prefix(root()).unwrap().to_path_buf();
            let is_doc = p.extension().is_some_and(|e| e == "md")
                && (rel.starts_with("docs") || p.file_name().is_some_and(|n| n == "README.md"));
            if is_doc {
                out.push(rel);
            }
        });
    }
    out.sort();
    out
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "out" {
            continue;
        }
        if p.is_dir() {
            walk(&p, f);
        } else {
            f(&p);
        }
    }
}

/// A working directory holding a copy of the shipped folders, and `dagsim` on PATH.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for d in SHIPPED {
            walk(&root().join(d), &mut |p| {
                let to = dir.path().join(p.strip_prefix(root()).unwrap());
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(p, &to).unwrap();
            });
        }
        for f in ["README.md", "Cargo.toml"] {
            std::fs::copy(root().join(f), dir.path().join(f)).unwrap();
        }
        let bin = dir.path().join(".bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_dagsim"), bin.join("dagsim")).unwrap();
        std::fs::create_dir_all(dir.path().join(".home")).unwrap();
        Sandbox { dir }
    }

    /// Runs one shell command line; returns (exit code, stdout, stderr).
    fn run(&self, command: &str) -> (i32, String, String) {
        let d = self.dir.path();
        let path = format!("{}:{}", d.join(".bin").display(), std::env::var("PATH").unwrap_or_default());
        let out = Command::new("timeout")
            .arg(COMMAND_TIMEOUT_S.to_string())
            .args(["bash", "-eo", "pipefail", "-c", command])
            .current_dir(d)
            .env("PATH", path)
            .env("HOME", d.join(".home"))
            .env("COLUMNS", "100")
            .env_remove("DAGSIM_REGEN_DOCS")
            .output()
            .expect("bash and timeout are installed");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }
}

/// `cargo run --release [--locked] -- ARGS` is `dagsim ARGS`.
fn as_dagsim(command: &str) -> String {
    for prefix in ["cargo run --release --locked -- ", "cargo run --release -- "] {
        if let Some(rest) = command.strip_prefix(prefix) {
            return format!("dagsim {rest}");
        }
    }
    command.to_string()
}

/// Joins `\` continuations and drops blank and comment-only lines; each item is (line, command).
fn logical_lines(lines: &[(usize, &str)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for &(n, line) in lines {
        let (start, mut text) = pending.take().unwrap_or((n, String::new()));
        let trimmed = line.trim();
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                text.push_str(head.trim_end());
                text.push(' ');
                pending = Some((start, text));
            }
            None => {
                text.push_str(trimmed);
                if !text.trim().is_empty() && !text.trim_start().starts_with('#') {
                    out.push((start, text.trim().to_string()));
                }
            }
        }
    }
    if let Some((n, t)) = pending {
        out.push((n, t.trim().to_string()));
    }
    out
}

/// Paths under the shipped folders that a command names (inputs; outputs are exempt).
fn named_paths(command: &str) -> Vec<String> {
    const OUTPUT_FLAGS: [&str; 9] =
        ["-o", "--output", "--dir", "--plots", "--gantt", "--topology-out", "--calibration-out", "--nccl-table", ">"];
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 && OUTPUT_FLAGS.contains(&words[i - 1]) {
            continue;
        }
        for part in w.split(['=', ',', '"', '\'', '(', ')']) {
            let first = part.split('/').next().unwrap_or("");
            let glob_or_var = part.contains(['*', '?', '$', '[']);
            if part.contains('/') && SHIPPED.contains(&first) && !glob_or_var && !part.ends_with('/') {
                out.push(part.to_string());
            }
        }
    }
    out
}

/// One fenced block or generated region of a document.
#[derive(Debug)]
enum Item {
    /// Commands to run: (line, command).
    Commands(Vec<(usize, String)>),
    /// A block that cannot run here, with the reason and its commands.
    Skipped { line: usize, reason: String, commands: Vec<(usize, String)> },
    /// Shown output: the command, and the body lines [from, to) of the file it must equal.
    Output { line: usize, command: String, from: usize, to: usize, markdown: bool },
    /// A block showing a shipped file (```` ```json file=PATH ````), lines [from, to).
    File { line: usize, path: String, from: usize, to: usize },
}

/// Reads a document into items; errors for command blocks that are not tagged `sh`.
fn parse(rel: &Path, text: &str) -> (Vec<Item>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut items, mut errors) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(cmd) = line.trim().strip_prefix("<!-- output:").and_then(|r| r.strip_suffix("-->")) {
            let end = (i + 1..lines.len()).find(|&j| lines[j].trim() == "<!-- end output -->");
            match end {
                Some(end) => {
                    items.push(Item::Output {
                        line: i + 1,
                        command: cmd.trim().to_string(),
                        from: i + 1,
                        to: end,
                        markdown: true,
                    });
                    i = end + 1;
                }
                None => {
                    errors.push(format!(
                        "{}:{}: `<!-- output: -->` without `<!-- end output -->`",
                        rel.display(),
                        i + 1
                    ));
                    i += 1;
                }
            }
            continue;
        }
        let Some(info) = line.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let close = (i + 1..lines.len()).find(|&j| lines[j].trim_end() == "```").unwrap_or(lines.len());
        let body: Vec<(usize, &str)> = (i + 1..close).map(|j| (j + 1, lines[j])).collect();
        let info = info.trim();
        let (lang, rest) = info.split_once(' ').unwrap_or((info, ""));
        let looks_like_commands = body.iter().any(|(_, l)| {
            let l = l.trim_start().trim_start_matches("$ ");
            l.starts_with("dagsim ") || l.starts_with("cargo ")
        });
        if let Some(file) = rest.trim().strip_prefix("file=") {
            items.push(Item::File { line: i + 1, path: file.trim().to_string(), from: i + 1, to: close });
            i = close + 1;
            continue;
        }
        match lang {
            "sh" => match rest.trim().strip_prefix("skip:") {
                Some(reason) => items.push(Item::Skipped {
                    line: i + 1,
                    reason: reason.trim().to_string(),
                    commands: logical_lines(&body),
                }),
                None => items.push(Item::Commands(logical_lines(&body))),
            },
            "text" if body.first().is_some_and(|(_, l)| l.starts_with("$ ")) => {
                // The command may continue over lines ending in `\`.
                let mut k = 0;
                let mut command = String::new();
                while k < body.len() {
                    let l = body[k].1.trim_start_matches("$ ").trim();
                    k += 1;
                    match l.strip_suffix('\\') {
                        Some(head) => command.push_str(&format!("{} ", head.trim_end())),
                        None => {
                            command.push_str(l);
                            break;
                        }
                    }
                }
                items.push(Item::Output { line: i + 1, command, from: i + 1 + k, to: close, markdown: false });
            }
            _ if looks_like_commands => errors.push(format!(
                "{}:{}: a block of commands tagged `{lang}`: tag it `sh` (it runs) or `text` starting with `$ COMMAND` (a shown output)",
                rel.display(),
                i + 1
            )),
            _ => {}
        }
        i = close + 1;
    }
    (items, errors)
}

/// The lines of a Markdown text outside fenced code blocks (0-based line number, line); a closing
/// fence line is kept (it holds no links or commands).
fn prose_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut in_code = false;
    text.lines().enumerate().filter(move |(_, line)| {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        !in_code
    })
}

/// Relative Markdown links whose target does not exist.
fn broken_links(rel: &Path, text: &str) -> Vec<String> {
    let dir = root().join(rel).parent().unwrap().to_path_buf();
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let mut rest = line;
        while let Some(p) = rest.find("](") {
            let after = &rest[p + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split('#').next().unwrap_or("");
            rest = &after[end..];
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !dir.join(target).exists() {
                out.push(format!("{}:{}: link to `{target}`, which does not exist", rel.display(), n + 1));
            }
        }
    }
    out
}

fn missing_paths(rel: &Path, commands: &[(usize, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (n, c) in commands {
        for p in named_paths(c) {
            if !root().join(&p).exists() {
                let at = if *n > 0 { format!("{}:{n}", rel.display()) } else { rel.display().to_string() };
                out.push(format!("{at}: `{c}` names `{p}`, which is not shipped"));
            }
        }
    }
    out
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Normalised for comparison: trailing spaces per line and trailing blank lines dropped.
fn normalise(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    let mut text = lines.join("\n");
    while text.ends_with('\n') {
        text.pop();
    }
    text
}

/// Runs one document; returns the failures. In regeneration mode, rewrites stale outputs.
fn check_document(rel: &Path) -> Result<Completion, Failed> {
    let path = root().join(rel);
    let text = std::fs::read_to_string(&path).unwrap();
    let (items, mut failures) = parse(rel, &text);
    failures.extend(broken_links(rel, &text));
    let sandbox = Sandbox::new();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Regenerated regions, applied bottom-up after the run so line numbers stay valid.
    let mut rewrites: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for item in &items {
        match item {
            Item::Commands(commands) => {
                failures.extend(missing_paths(rel, commands));
                for (n, c) in commands {
                    let c = as_dagsim(c);
                    if c.starts_with("cargo ") {
                        continue; // reported as ignored by its own trial
                    }
                    let (code, _, stderr) = sandbox.run(&c);
                    if code != 0 {
                        failures.push(format!("{}:{n}: `{c}` exited {code}:\n{}", rel.display(), tail(&stderr, 8)));
                    }
                }
            }
            Item::Skipped { commands, .. } => failures.extend(missing_paths(rel, commands)),
            Item::File { line, path: shipped, from, to } => {
                let Ok(content) = std::fs::read_to_string(root().join(shipped)) else {
                    failures.push(format!("{}:{line}: shows `{shipped}`, which is not shipped", rel.display()));
                    continue;
                };
                let shown = lines[*from..*to].join("\n");
                if normalise(&shown) == normalise(&content) {
                    continue;
                }
                if regen() {
                    rewrites.push((*from, *to, normalise(&content).lines().map(str::to_string).collect()));
                    eprintln!("regenerated {}:{line} from `{shipped}`", rel.display());
                } else {
                    failures.push(format!(
                        "{}:{line}: the block differs from `{shipped}`; run `DAGSIM_REGEN_DOCS=1 cargo test --release --test docs` \
                         to copy the file into it.\n--- shown\n{}\n--- file\n{}",
                        rel.display(),
                        first_difference(&shown, &content),
                        first_difference(&content, &shown)
                    ));
                }
            }
            Item::Output { line, command, from, to, markdown } => {
                let c = as_dagsim(command);
                failures.extend(missing_paths(rel, &[(*line, c.clone())]));
                let (code, stdout, stderr) = sandbox.run(&c);
                if code != 0 {
                    failures.push(format!("{}:{line}: `{c}` exited {code}:\n{}", rel.display(), tail(&stderr, 8)));
                    continue;
                }
                let shown = lines[*from..*to].join("\n");
                if normalise(&shown) != normalise(&stdout) {
                    if regen() {
                        let new: Vec<String> = normalise(&stdout).lines().map(str::to_string).collect();
                        rewrites.push((*from, *to, new));
                        eprintln!("regenerated {}:{line} from `{c}`", rel.display());
                    } else {
                        let kind = if *markdown { "generated region" } else { "shown output" };
                        failures.push(format!(
                            "{}:{line}: the {kind} of `{c}` is stale; run `DAGSIM_REGEN_DOCS=1 cargo test --release --test docs` \
                             to regenerate it.\n--- shown\n{}\n--- now\n{}",
                            rel.display(),
                            first_difference(&shown, &stdout),
                            first_difference(&stdout, &shown)
                        ));
                    }
                }
            }
        }
    }
    if !rewrites.is_empty() {
        rewrites.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (from, to, new) in rewrites {
            lines.splice(from..to, new);
        }
        let mut out = lines.join("\n");
        out.push('\n');
        std::fs::write(&path, out).unwrap();
    }
    match failures.is_empty() {
        true => Ok(Completion::Completed),
        false => Err(failures.join("\n\n").into()),
    }
}

/// The lines of `a` from its first line that differs from `b`, a few of them.
fn first_difference(a: &str, b: &str) -> String {
    let (a, b) = (normalise(a), normalise(b));
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let k = la.iter().zip(&lb).position(|(x, y)| x != y).unwrap_or(la.len().min(lb.len()));
    let mut s = String::new();
    for (i, l) in la.iter().enumerate().skip(k).take(4) {
        let _ = writeln!(s, "{:>4}| {l}", i + 1);
    }
    if s.is_empty() {
        s.push_str("     (ends here)");
    }
    s
}

/// Subcommand paths (`["trace", "gen"]`, ...) read from `--help`'s Commands sections.
fn subcommands(sandbox: &Sandbox, prefix: &[String]) -> Vec<Vec<String>> {
    let (_, help, _) = sandbox.run(&format!("dagsim {} --help", prefix.join(" ")));
    let mut out = Vec::new();
    let mut in_commands = false;
    for line in help.lines() {
        if line == "Commands:" {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                in_commands = false;
                continue;
            }
            let name = line.split_whitespace().next().unwrap_or("");
            if !name.is_empty() && name != "help" && line.starts_with(&format!("  {name}")) {
                let mut path = prefix.to_vec();
                path.push(name.to_string());
                out.extend(subcommands(sandbox, &path));
                out.push(path);
            }
        }
    }
    out
}

/// The example commands of one `--help` page (lines starting with `dagsim `, continuations joined).
fn help_examples(sandbox: &Sandbox, path: &[String]) -> Vec<String> {
    let (_, help, _) = sandbox.run(&format!("COLUMNS=1000 dagsim {} --help", path.join(" ")));
    let lines: Vec<(usize, &str)> = help.lines().enumerate().collect();
    let mut commands = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].1.trim_start();
        let placeholder = l.split_whitespace().any(|w| w.starts_with('<') && w.ends_with('>') || w == "[OPTIONS]");
        if l.starts_with("dagsim ") && !placeholder {
            let mut block = vec![lines[i]];
            while block.last().unwrap().1.trim_end().ends_with('\\') && i + 1 < lines.len() {
                i += 1;
                block.push(lines[i]);
            }
            commands.extend(logical_lines(&block).into_iter().map(|(_, c)| c));
        }
        i += 1;
    }
    commands
}

/// Commands quoted in prose: inline code spans starting with `dagsim `, outside fenced blocks
/// (line, command).
fn inline_commands(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        for (k, span) in line.split('`').enumerate() {
            if k % 2 == 1 && span.starts_with("dagsim ") {
                out.push((n + 1, span.to_string()));
            }
        }
    }
    out
}

/// `flag` (`--name` or `-x`) appears in `help` as an option, not as part of a longer one.
fn help_lists(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let before = help[..i].chars().next_back();
        let after = help[i + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

/// What is wrong with a command quoted in prose: a subcommand or flag `dagsim` does not have.
fn inline_command_errors(
    sandbox: &Sandbox,
    pages: &std::collections::BTreeSet<Vec<String>>,
    helps: &mut std::collections::BTreeMap<Vec<String>, String>,
    command: &str,
) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().skip(1).collect();
    // The subcommand: the longest run of words (after global flags) that names a --help page.
    let mut path: Vec<String> = Vec::new();
    for w in &words {
        if w.starts_with('-') || w.contains('=') || (path.is_empty() && !pages.contains(&vec![w.to_string()])) {
            if path.is_empty() {
                continue;
            }
            break;
        }
        let mut next = path.clone();
        next.push(w.to_string());
        if !pages.contains(&next) {
            break;
        }
        path = next;
    }
    let first = words.iter().find(|w| !w.starts_with('-') && !w.contains('='));
    if path.is_empty() && first.is_some_and(|w| CUDA_ONLY.contains(w)) && !cfg!(feature = "cuda") {
        return Vec::new(); // checked by the `--features cuda` run of this test
    }
    if path.is_empty() && first.is_some_and(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-')) {
        return vec![format!("`{command}`: `{}` is not a dagsim subcommand", first.unwrap())];
    }
    let mut help_of = |p: &Vec<String>| -> String {
        helps
            .entry(p.clone())
            .or_insert_with(|| sandbox.run(&format!("COLUMNS=1000 dagsim {} --help", p.join(" "))).1)
            .clone()
    };
    let (page, root) = (help_of(&path), help_of(&Vec::new()));
    let mut errors = Vec::new();
    for w in &words {
        let w = w.trim_start_matches('[').trim_end_matches([']', ',', '.', ')']);
        let flag = w.split(['=', '[']).next().unwrap_or("");
        let is_flag = (flag.starts_with("--") && flag.len() > 2) || (flag.len() == 2 && flag.starts_with('-'));
        if is_flag && !help_lists(&page, flag) && !help_lists(&root, flag) {
            errors.push(format!("`{command}`: `dagsim {} --help` has no `{flag}`", path.join(" ")));
        }
    }
    errors
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    for rel in documents() {
        let text = std::fs::read_to_string(root().join(&rel)).unwrap();
        let (items, _) = parse(&rel, &text);
        for item in &items {
            let skipped: Vec<(usize, String, String)> = match item {
                Item::Skipped { reason, commands, line } => {
                    vec![(*line, commands.iter().map(|c| c.1.as_str()).collect::<Vec<_>>().join("; "), reason.clone())]
                }
                Item::Commands(commands) => commands
                    .iter()
                    .filter(|(_, c)| as_dagsim(c).starts_with("cargo "))
                    .map(|(n, c)| (*n, c.clone(), "a cargo command: .ci/run builds and runs the tests itself".into()))
                    .collect(),
                Item::Output { .. } | Item::File { .. } => Vec::new(),
            };
            for (line, what, reason) in skipped {
                let name = format!("{}:{line} `{}`", rel.display(), short(uncommented(&what)));
                trials.push(Trial::ignorable_test(name, move || Ok(Completion::ignored_with(reason))));
            }
        }
        let name = format!("{} runs", rel.display());
        trials.push(Trial::ignorable_test(name, move || check_document(&rel)));
    }

    // `--help` examples, one trial per top-level command: its page and its subcommands' pages,
    // parent first, in one sandbox (so `sweep merge` can merge what `sweep` wrote).
    let sandbox = Sandbox::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut pages = subcommands(&sandbox, &[]);
    pages.sort();
    let pages_all = pages.clone();
    let mut families: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for path in pages {
        let page = format!("dagsim {} --help", path.join(" "));
        for c in help_examples(&sandbox, &path) {
            if !seen.insert(c.clone()) {
                continue;
            }
            if let Some(reason) = help_skip(&c) {
                let missing = missing_paths(Path::new(&page), &[(0, c.clone())]);
                let name = format!("{page}: `{}`", short(uncommented(&c)));
                trials.push(Trial::ignorable_test(name, move || match missing.is_empty() {
                    true => Ok(Completion::ignored_with(reason)),
                    false => Err(missing.join("\n").into()),
                }));
                continue;
            }
            families.entry(path[0].clone()).or_default().push(c);
        }
    }
    // Commands quoted in prose name real subcommands and flags.
    let known: std::collections::BTreeSet<Vec<String>> = pages_all.into_iter().collect();
    trials.push(Trial::ignorable_test("commands quoted in prose name real subcommands and flags", move || {
        let sandbox = Sandbox::new();
        let mut helps = Default::default();
        let mut failures = Vec::new();
        for rel in documents() {
            let text = std::fs::read_to_string(root().join(&rel)).unwrap();
            for (n, c) in inline_commands(&text) {
                for e in inline_command_errors(&sandbox, &known, &mut helps, &c) {
                    failures.push(format!("{}:{n}: {e}", rel.display()));
                }
            }
        }
        match failures.is_empty() {
            true => Ok(Completion::Completed),
            false => Err(failures.join("\n").into()),
        }
    }));
    for (family, examples) in families {
        let name = format!("dagsim {family} --help examples run");
        trials.push(Trial::ignorable_test(name, move || {
            let sandbox = Sandbox::new();
            let page = format!("dagsim {family} --help");
            let listed: Vec<(usize, String)> = examples.iter().map(|c| (0, c.clone())).collect();
            let mut failures = missing_paths(Path::new(&page), &listed);
            for c in &examples {
                let (code, _, stderr) = sandbox.run(c);
                if code != 0 {
                    failures.push(format!("{page}: `{c}` exited {code}:\n{}", tail(&stderr, 8)));
                }
            }
            match failures.is_empty() {
                true => Ok(Completion::Completed),
                false => Err(failures.join("\n\n").into()),
            }
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}

fn short(s: &str) -> String {
    match s.char_indices().nth(70) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// The reason a help example cannot run here, if one of [`HELP_SKIPS`] matches it.
fn help_skip(command: &str) -> Option<&'static str> {
    HELP_SKIPS.iter().find_map(|&(pattern, reason)| command.contains(pattern).then_some(reason))
}

/// A command without its trailing `# comment`, for trial names.
fn uncommented(command: &str) -> &str {
    command.find(" #").map_or(command, |i| command[..i].trim_end())
}
