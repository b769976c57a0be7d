//! Bad inputs (issue 18): several hundred malformed or extreme inputs across every reader and the
//! command line, each expected to exit 2 with a message naming its source and what was wrong,
//! never a panic, never a hang (each case runs under a 30 s limit), never an abort. Cases are
//! generated from the shipped files by changing one field at a time.

mod common;
use common::dagsim;
use std::path::Path;
use std::time::Duration;

struct Case {
    name: String,
    /// Files to create (name, content) in a fresh directory.
    files: Vec<(String, Vec<u8>)>,
    args: Vec<String>,
    /// Every one must appear in stderr.
    expect: Vec<String>,
}

fn case(name: impl Into<String>, files: Vec<(&str, String)>, args: &[&str], expect: &[&str]) -> Case {
    Case {
        name: name.into(),
        files: files.into_iter().map(|(n, c)| (n.to_string(), c.into_bytes())).collect(),
        args: args.iter().map(|s| s.to_string()).collect(),
        expect: expect.iter().map(|s| s.to_string()).collect(),
    }
}

fn shipped(p: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).unwrap()
}

/// (value, what the message must say) for a time field.
const BAD_TIMES: &[(&str, &str)] = &[
    ("NaN", "NaN"),
    ("inf", "beyond the limit"),
    ("-1", "negative"),
    ("1e300", "beyond the limit"),
    ("1e13", "beyond the limit"),
    ("abc", "`abc`"),
    ("-inf", "negative"),
    ("1e999", "beyond the limit"),
];

/// (value, what the message must say) for a byte count.
const BAD_BYTES: &[(&str, &str)] = &[
    ("-1", "byte count"),
    ("1.5", "whole number"),
    ("1e300", "limit"),
    ("18446744073709551616", "limit"),
    ("NaN", "byte count"),
    ("x", "byte count"),
    ("2e15", "limit"),
    ("-0.5", "byte count"),
    ("1e16", "limit"),
    ("3.7", "whole number"),
];

/// (value, what the message must say) for a bandwidth.
const BAD_RATES: &[(&str, &str)] = &[
    ("0", "positive"),
    ("-1", "positive"),
    ("1e-300", "outside the supported range"),
    ("1e300", "outside the supported range"),
    ("1e-9", "outside the supported range"),
    ("2e6", "outside the supported range"),
    ("1e-7", "outside the supported range"),
    ("5e6", "outside the supported range"),
    ("-0.5", "positive"),
];

fn native_trace_cases(out: &mut Vec<Case>) {
    let base = "# batch_per_gpu: 32\nlayer,name,forward_us,backward_us,comm_us,grad_bytes\n1,conv1,100,200,0,4096\n2,fc,50,60,0,8192\n";
    for (col, k) in [("forward_us", 2), ("backward_us", 3), ("comm_us", 4)] {
        for (v, msg) in BAD_TIMES {
            let mut lines: Vec<String> = base.lines().map(String::from).collect();
            let mut cells: Vec<String> = lines[2].split(',').map(String::from).collect();
            cells[k] = v.to_string();
            lines[2] = cells.join(",");
            out.push(case(
                format!("native {col}={v}"),
                vec![("t.csv", lines.join("\n") + "\n")],
                &["predict", "--trace", "t.csv", "--gpus", "2"],
                &["t.csv:3", col, msg],
            ));
        }
    }
    for (v, msg) in BAD_BYTES {
        let text = base.replace("1,conv1,100,200,0,4096", &format!("1,conv1,100,200,0,{v}"));
        out.push(case(
            format!("native grad_bytes={v}"),
            vec![("t.csv", text)],
            &["predict", "--trace", "t.csv", "--gpus", "2"],
            &["t.csv:3", "grad_bytes", msg],
        ));
    }
    for (v, msg) in BAD_BYTES {
        let text = format!("# sample_bytes: {v}\n{base}");
        out.push(case(
            format!("native meta sample_bytes={v}"),
            vec![("t.csv", text)],
            &["predict", "--trace", "t.csv", "--gpus", "2"],
            &["t.csv:1", "sample_bytes", msg],
        ));
    }
    for (v, msg) in BAD_TIMES {
        let text = format!("# update_us: {v}\n{base}");
        out.push(case(
            format!("native meta update_us={v}"),
            vec![("t.csv", text)],
            &["predict", "--trace", "t.csv", "--gpus", "2"],
            &["t.csv:1", "update_us", msg],
        ));
    }
    for v in ["-3", "x", "1.5", "99999999999"] {
        out.push(case(
            format!("native meta batch={v}"),
            vec![("t.csv", base.replace("batch_per_gpu: 32", &format!("batch_per_gpu: {v}")))],
            &["predict", "--trace", "t.csv", "--gpus", "2"],
            &["t.csv:1", "batch_per_gpu"],
        ));
    }
    // Headers that do not match any format: refused with both formats' headers listed.
    for header in [
        "layer,name,fwd_us,bwd_us,comm_us,grad_bytes",
        "name;forward_us;backward_us;grad_bytes",
        "Layer Name Fwd Bwd",
        "model,time",
        "\u{feff}\u{feff}layer,name",
        "<html>",
        "{\"traceEvents\": []}",
    ] {
        out.push(case(
            format!("unknown header {header}"),
            vec![("t.csv", format!("{header}\n1,a,1,2,0,0\n"))],
            &["predict", "--trace", "t.csv", "--gpus", "2"],
            &["t.csv:1", "unknown header", "forward_us", "Table VI"],
        ));
    }
    // Renamed required columns of a native header.
    for col in ["name", "backward_us", "grad_bytes"] {
        let text = base.replace(&format!(",{col}"), ",renamed").replace(&format!("{col},"), "renamed,");
        out.push(case(
            format!("native missing {col}"),
            vec![("t.csv", text)],
            &["predict", "--trace", "t.csv", "--gpus", "2"],
            &["t.csv", &format!("missing column `{col}`")],
        ));
    }
    // Ragged and truncated rows.
    for (name, text, at) in [
        ("short row", base.replace("2,fc,50,60,0,8192", "2,fc,50"), "t.csv:4"),
        ("long row", base.replace("2,fc,50,60,0,8192", "2,fc,50,60,0,8192,9"), "t.csv:4"),
        ("truncated last row", base.trim_end().trim_end_matches("60,0,8192").to_string(), "t.csv:4"),
    ] {
        out.push(case(name, vec![("t.csv", text)], &["predict", "--trace", "t.csv", "--gpus", "2"], &[at, "fields"]));
    }
}

fn table6_cases(out: &mut Vec<Case>) {
    let base = "Id Name Forward Backward Comm Size\n1 conv1 100 200 5 4096\n2 fc 50 60 7 8192\n";
    for (field, k) in [("forward", 2), ("backward", 3), ("comm", 4)] {
        for (v, msg) in BAD_TIMES {
            let mut lines: Vec<String> = base.lines().map(String::from).collect();
            let mut cells: Vec<String> = lines[1].split(' ').map(String::from).collect();
            cells[k] = v.to_string();
            lines[1] = cells.join(" ");
            out.push(case(
                format!("table6 {field}={v}"),
                vec![("t.txt", lines.join("\n") + "\n")],
                &["predict", "--trace", "t.txt", "--gpus", "2", "--batch", "8"],
                &["t.txt:2", field, msg],
            ));
        }
    }
    for (v, msg) in BAD_BYTES {
        out.push(case(
            format!("table6 size={v}"),
            vec![("t.txt", base.replace("5 4096", &format!("5 {v}")))],
            &["predict", "--trace", "t.txt", "--gpus", "2", "--batch", "8"],
            &["t.txt:2", "size", msg],
        ));
    }
    for (name, text) in [
        ("five fields", base.replace("2 fc 50 60 7 8192", "2 fc 50 60 7")),
        ("seven fields", base.replace("2 fc 50 60 7 8192", "2 fc 50 60 7 8192 1")),
        ("bad id", base.replace("2 fc 50", "x2 fc 50")),
    ] {
        out.push(case(
            format!("table6 {name}"),
            vec![("t.txt", text)],
            &["predict", "--trace", "t.txt", "--gpus", "2", "--batch", "8"],
            &["t.txt:3"],
        ));
    }
}

fn topology_cases(out: &mut Vec<Case>) {
    let k80 = shipped("topologies/k80-cluster.json");
    let fields = [
        ("\"bandwidth_gb_s\": 15.0", "pcie"),
        ("\"bandwidth_gbit_s\": 10.0", "network"),
        ("\"bandwidth_gb_s\": 1.1", "storage"),
    ];
    for (field, what) in fields {
        let key = field.split(':').next().unwrap();
        for (v, msg) in BAD_RATES {
            if what == "network" && v.ends_with("e6") {
                continue; // Gbit/s: 2e6 Gbit/s is 250,000 GB/s, inside the range
            }
            let text = k80.replace(field, &format!("{key}: {v}"));
            out.push(case(
                format!("topology {what} rate {v}"),
                vec![("topo.json", text)],
                &["predict", "--trace", "../t.csv", "--topology", "topo.json", "--gpus", "4"],
                &["topo.json", what, msg],
            ));
        }
    }
    let latencies =
        [("\"latency_us\": 5.0", "pcie"), ("\"latency_us\": 25.0", "network"), ("\"latency_us\": 50.0", "storage")];
    for (field, what) in latencies {
        for (v, msg) in [("-1", "negative"), ("1e300", "beyond the limit"), ("1e13", "beyond the limit")] {
            out.push(case(
                format!("topology {what} latency {v}"),
                vec![("topo.json", k80.replacen(field, &format!("\"latency_us\": {v}"), 1))],
                &["predict", "--trace", "../t.csv", "--topology", "topo.json", "--gpus", "4"],
                &["topo.json", msg],
            ));
        }
    }
    for (name, from, to, msg) in [
        ("nodes 0", "\"nodes\": 4", "\"nodes\": 0", "at least 1"),
        ("nodes 1e9", "\"nodes\": 4", "\"nodes\": 1000000000", "beyond the limit"),
        ("gpus_per_node huge", "\"gpus_per_node\": 4", "\"gpus_per_node\": 4000000", "beyond the limit"),
        ("nodes negative", "\"nodes\": 4", "\"nodes\": -4", "topo.json:"),
        ("efficiency 0", "\"efficiency\": 1.0", "\"efficiency\": 0", "efficiency"),
        ("efficiency 2", "\"efficiency\": 1.0", "\"efficiency\": 2", "efficiency"),
        ("unknown key", "\"nodes\": 4", "\"nodez\": 4", "nodez"),
        ("network kind", "\"kind\": \"ethernet\"", "\"kind\": \"carrier-pigeon\"", "carrier-pigeon"),
        ("truncated", "\"storage\"", "", "topo.json:"),
    ] {
        out.push(case(
            format!("topology {name}"),
            vec![("topo.json", k80.replace(from, to))],
            &["predict", "--trace", "../t.csv", "--topology", "topo.json", "--gpus", "4"],
            &["topo.json", msg],
        ));
    }
    // NVLink counts: at least one, and only on NVLink or NVSwitch links.
    let abci_a = shipped("topologies/abci-a.json");
    for (name, from, to, msg) in [
        ("nvlinks 0", "\"nvlinks\": 12", "\"nvlinks\": 0", "nvlinks must be at least 1"),
        ("nvlinks on qpi", "\"bandwidth_gb_s\": 50.0", "\"bandwidth_gb_s\": 50.0, \"nvlinks\": 2", "only NVLink"),
        ("nvlinks negative", "\"nvlinks\": 12", "\"nvlinks\": -1", "topo.json:"),
    ] {
        assert!(abci_a.contains(from), "{from}");
        out.push(case(
            format!("topology {name}"),
            vec![("topo.json", abci_a.replacen(from, to, 1))],
            &["predict", "--trace", "../t.csv", "--topology", "topo.json", "--gpus", "8"],
            &["topo.json", msg],
        ));
    }
    // Every shipped preset with one bandwidth broken.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies");
    let mut presets: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().contains("schema"))
        .collect();
    presets.sort();
    for p in presets {
        let text = std::fs::read_to_string(&p).unwrap();
        for (v, msg) in [("0", "positive"), ("1e-300", "outside the supported range"), ("1e300", "outside")] {
            let Some(i) = text.find("\"bandwidth_gb") else { continue };
            let j = i + text[i..].find(':').unwrap() + 1;
            let k = j + text[j..].find([',', '}']).unwrap();
            let broken = format!("{} {v}{}", &text[..j], &text[k..]);
            out.push(case(
                format!("preset {} bandwidth {v}", p.file_name().unwrap().to_string_lossy()),
                vec![("topo.json", broken)],
                &["predict", "--trace", "../t.csv", "--topology", "topo.json", "--gpus", "1"],
                &["topo.json", msg],
            ));
        }
    }
}

fn calibration_cases(out: &mut Vec<Case>) {
    let cal = |lat: &str, gb: &str| {
        format!(
            "{{\"format\": \"dagsim-calibration/1\", \"provenance\": {{\"tool\": \"t\", \"inputs\": [], \"hardware\": \"h\", \"notes\": \"\"}}, \
             \"links\": [{{\"kind\": \"pcie\", \"latency_us\": {lat}, \"bandwidth\": [{{\"bytes\": 0, \"gb_s\": {gb}}}]}}]}}"
        )
    };
    for (v, msg) in [("-1", "negative"), ("1e300", "beyond the limit"), ("1e13", "beyond the limit")] {
        out.push(case(
            format!("calibration latency {v}"),
            vec![("c.json", cal(v, "12.0"))],
            &["predict", "--trace", "../t.csv", "--gpus", "2", "--calibration", "c.json"],
            &["c.json", "latency_us", msg],
        ));
    }
    for (v, msg) in BAD_RATES {
        out.push(case(
            format!("calibration gb_s {v}"),
            vec![("c.json", cal("5.0", v))],
            &["predict", "--trace", "../t.csv", "--gpus", "2", "--calibration", "c.json"],
            &["c.json", "gb_s", msg],
        ));
    }
    for (name, text, msg) in [
        ("not json", "hello".to_string(), "c.json:1"),
        ("wrong format", cal("5.0", "12.0").replace("dagsim-calibration/1", "v0"), "format"),
        ("unknown kind", cal("5.0", "12.0").replace("\"pcie\"", "\"warp-drive\""), "warp-drive"),
        ("empty curve", cal("5.0", "12.0").replace("[{\"bytes\": 0, \"gb_s\": 12.0}]", "[]"), "at least one point"),
        ("truncated", cal("5.0", "12.0")[..60].to_string(), "c.json:1"),
    ] {
        out.push(case(
            format!("calibration {name}"),
            vec![("c.json", text)],
            &["predict", "--trace", "../t.csv", "--gpus", "2", "--calibration", "c.json"],
            &["c.json", msg],
        ));
    }
}

fn profile_cases(out: &mut Vec<Case>) {
    let caffe = shipped("traces/profiles/caffe/output_alexnet.log");
    let lines: Vec<&str> = caffe.lines().collect();
    // Truncated anywhere inside the per-layer table: an error at the last line, not a lost layer.
    for cut in [412, 415, 420, 425, 430, 435, 440, 443] {
        let text = lines[..cut].join("\n") + "\n";
        out.push(case(
            format!("caffe truncated at line {cut}"),
            vec![("c.log", text)],
            &["predict", "--trace", "c.log", "--profile-format", "caffe", "--gpus", "2"],
            &[&format!("c.log:{cut}"), "truncated"],
        ));
    }
    for (v, msg) in [("-1", "non-negative"), ("NaN", "non-negative"), ("1e300", "beyond the limit"), ("x", "`x`")] {
        out.push(case(
            format!("caffe time {v}"),
            vec![("c.log", caffe.replace("conv1\tforward: 4.6583 ms.", &format!("conv1\tforward: {v} ms.")))],
            &["predict", "--trace", "c.log", "--profile-format", "caffe", "--gpus", "2"],
            &["c.log:411", msg],
        ));
    }
    out.push(case(
        "caffe not a log",
        vec![("c.log", "hello\n".into())],
        &["predict", "--trace", "c.log", "--profile-format", "caffe", "--gpus", "2"],
        &["c.log", "Caffe time log"],
    ));
    let pd = shipped("traces/profiles/pipedream/alexnet/graph.txt");
    for (name, text) in [
        ("empty", String::new()),
        ("garbage", "hello world\n".to_string()),
        ("truncated", pd[..pd.len() / 3].to_string()),
        ("negative time", pd.replacen("forward_compute_time=", "forward_compute_time=-", 1)),
        ("nan time", pd.replacen("forward_compute_time=", "forward_compute_time=NaN", 1)),
    ] {
        out.push(case(
            format!("pipedream {name}"),
            vec![("graph.txt", text)],
            &["predict", "--trace", "graph.txt", "--profile-format", "pipedream", "--gpus", "2", "--batch", "8"],
            &["graph.txt"],
        ));
    }
    let kineto = shipped("traces/profiles/kineto/tiny_cnn_handwritten.json");
    for (name, text) in [
        ("empty", String::new()),
        ("not json", "]]".to_string()),
        ("truncated", kineto[..kineto.len() / 2].to_string()),
        ("no events", "{\"traceEvents\": []}".to_string()),
        ("chakra-like", "{\"schema\": \"chakra\", \"nodes\": []}".to_string()),
    ] {
        out.push(case(
            format!("kineto {name}"),
            vec![("k.json", text)],
            &["predict", "--trace", "k.json", "--profile-format", "kineto", "--gpus", "2", "--batch", "8"],
            &["k.json"],
        ));
    }
    let bc = shipped("traces/profiles/bcaffe/googlenet_4workers_comm.log");
    for (name, text) in [("empty", String::new()), ("garbage", "x y z\n".into()), ("truncated", bc[..200].to_string())]
    {
        out.push(case(
            format!("bcaffe {name}"),
            vec![("b.log", text)],
            &["predict", "--trace", "b.log", "--profile-format", "bcaffe", "--gpus", "2", "--batch", "8"],
            &["b.log"],
        ));
    }
}

fn measurement_cases(out: &mut Vec<Case>) {
    let nccl = shipped("topologies/measured/abci/allreduce_intra_vnode_4gpu.nccl");
    for (name, text) in [
        ("empty", String::new()),
        ("garbage", "hello\n".to_string()),
        ("header only", nccl.lines().take(5).collect::<Vec<_>>().join("\n")),
    ] {
        out.push(case(
            format!("nccl-tests {name}"),
            vec![("m.nccl", text)],
            &["calibrate", "m.nccl", "--topology", "abci-v"],
            &["m.nccl"],
        ));
    }
    // `collective --check` reads the same tables: a bad time names the file and its line.
    let bad_time = nccl.replacen("    447.3   75.01", "      abc   75.01", 1);
    assert_ne!(bad_time, nccl, "the shipped table has the 32 MiB row this case breaks");
    let line = bad_time.lines().position(|l| l.contains("      abc   75.01")).map_or(0, |i| i + 1);
    out.push(case(
        "collective --check bad time",
        vec![("m.nccl", bad_time)],
        &["collective", "--check", "m.nccl", "--topology", "abci-v"],
        &[&format!("m.nccl:{line}"), "`abc`"],
    ));
    for (args, flag) in [
        (&["--gpus", "8", "--nodes", "3"][..], "--nodes"),
        (&["--gpus", "8", "-b", "1M", "-e", "1K"][..], "--max-bytes"),
        (&["--gpus", "8", "-e", "12Q"][..], "--max-bytes"),
        (&["--gpus", "8", "--op", "all-sum"][..], "--op"),
        (&["--gpus", "1"][..], "--gpus"),
    ] {
        let mut a = vec!["collective", "--topology", "abci-v"];
        a.extend_from_slice(args);
        out.push(case(format!("collective {}", args.join(" ")), vec![], &a, &[flag]));
    }
    let p2p = "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 700.0  18.5\n     1  18.5 700.0\n\
               P2P=Enabled Latency Matrix (us)\n   GPU     0      1\n     0   1.50   9.80\n     1   9.80   1.50\n";
    for (v, msg) in [("-1", "negative"), ("NaN", "NaN"), ("1e300", "beyond"), ("x", "not a number")] {
        out.push(case(
            format!("p2p latency {v}"),
            vec![("p2p.txt", p2p.replace("9.80   1.50", &format!("{v}   1.50")))],
            &["calibrate", "p2p.txt", "--topology", "scaledl-server-a"],
            &["p2p.txt", msg],
        ));
    }
    for (v, msg) in [("0", "positive"), ("-3", "positive"), ("1e-300", "outside"), ("1e300", "outside")] {
        out.push(case(
            format!("p2p bandwidth {v}"),
            vec![("p2p.txt", p2p.replace("18.5 700.0", &format!("{v} 700.0")))],
            &["calibrate", "p2p.txt", "--topology", "scaledl-server-a"],
            &["p2p.txt", msg],
        ));
    }
    let block = |bytes: u64, n: usize| {
        let mut s = format!(
            "===== {bytes} =====\nNVLink-Latency\n   D\\D {}\n",
            (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
        );
        for a in 0..n {
            s += &format!(
                "     {a} {}\n",
                (0..n).map(|b| if a == b { "1.0" } else { "12.0" }).collect::<Vec<_>>().join(" ")
            );
        }
        s
    };
    for (n1, n2) in [(8, 4), (4, 8), (8, 2), (2, 8)] {
        out.push(case(
            format!("p2p mismatched blocks {n1}x{n2}"),
            vec![("p2p.txt", block(1, n1) + &block(1 << 20, n2))],
            &["calibrate", "p2p.txt", "--topology", "dgx1-p100"],
            &["p2p.txt", "same GPUs"],
        ));
    }
}

fn scenario_cases(out: &mut Vec<Case>) {
    let base = "iterations = 3\n[workload]\ntrace = \"../t.csv\"\n";
    for (name, text, msg) in [
        ("iterations 0", base.replace("iterations = 3", "iterations = 0"), "iterations"),
        ("iterations 1", base.replace("iterations = 3", "iterations = 1"), "at least 2"),
        ("iterations huge", base.replace("iterations = 3", "iterations = 4294967295"), "--limit iterations="),
        ("iterations negative", base.replace("iterations = 3", "iterations = -1"), "s.toml"),
        ("iterations string", base.replace("iterations = 3", "iterations = \"x\""), "s.toml"),
        ("unknown key", base.replace("iterations = 3", "iterashuns = 3"), "iterashuns"),
        ("no workload", "iterations = 3\n".to_string(), "s.toml"),
        ("missing trace", base.replace("../t.csv", "nope.csv"), "nope.csv"),
        ("bad strategy", base.replace("iterations = 3\n", "iterations = 3\nstrategy = \"warp\"\n"), "warp"),
        (
            "bad topology",
            "iterations = 3\n[machine]\ntopology = \"nope-cluster\"\n[workload]\ntrace = \"../t.csv\"\n".into(),
            "nope-cluster",
        ),
        ("not toml", "[[[".to_string(), "s.toml:1"),
    ] {
        out.push(case(
            format!("scenario {name}"),
            vec![("s.toml", text)],
            &["predict", "--scenario", "s.toml", "--gpus", "2"],
            &[msg],
        ));
    }
}

fn cli_cases(out: &mut Vec<Case>) {
    let t = ["predict", "--trace", "../t.csv"];
    let with = |extra: &[&str]| t.iter().chain(extra).map(|s| s.to_string()).collect::<Vec<String>>();
    for (extra, msg) in [
        (vec!["--gpus", "0"], "at least 1"),
        (vec!["--gpus", "1000000000"], "--limit gpus="),
        (vec!["--gpus", "200000"], "--limit gpus=200000"),
        (vec!["--gpus", "65536", "--iterations", "10000"], "--limit"),
        (vec!["--iterations", "1"], "at least 2"),
        (vec!["--iterations", "0"], "iterations"),
        (vec!["--iterations", "4294967295"], "--limit iterations=4294967295"),
        (vec!["--limit", "gpu=3", "--gpus", "2"], "expected one of gpus"),
        (vec!["--limit", "gpus", "--gpus", "2"], "NAME=N"),
        (vec!["--limit", "gpus=-1", "--gpus", "2"], "whole number"),
        (vec!["--limit", "gpus=2", "--gpus", "4"], "--limit gpus="),
        (vec!["--limit", "tasks=10", "--gpus", "4"], "--limit tasks="),
        (vec!["--limit", "layers=1", "--gpus", "4"], "--limit layers="),
        (vec!["--strategy", "warp", "--gpus", "2"], "warp"),
        (vec!["--strategy", "fusion=-1", "--gpus", "2"], "fusion"),
        (vec!["--strategy", "mps=0", "--gpus", "2"], "mps"),
        (vec!["--strategy", "sparse=2", "--gpus", "2"], "sparse"),
        (vec!["--topology", "nope", "--gpus", "2"], "nope"),
        (vec!["--gpus", "x"], "invalid"),
        (
            vec!["--topology", "v100-pcie-10gbe", "--strategy", "runtime=ps+servers=2", "--gpus", "32"],
            "the one-GPU run that speedup is measured against failed",
        ),
        (vec!["--batch", "-1"], "error"),
        (vec!["--sample-bytes", "-5"], "error"),
    ] {
        let args = with(&extra);
        out.push(Case { name: format!("cli {}", extra.join(" ")), files: vec![], args, expect: vec![msg.to_string()] });
    }
    // Wraparound: a huge layer time and a tiny link rate give an error, never a faster iteration.
    out.push(case(
        "wrap huge layer",
        vec![(
            "w.csv",
            "# batch_per_gpu: 8\nname,forward_us,backward_us,grad_bytes\na,1e12,1e12,4096\nb,1e12,1e12,4096\n"
                .to_string(),
        )],
        &["predict", "--trace", "w.csv", "--gpus", "2", "--iterations", "10000", "--limit", "iterations=10000"],
        &["overflow: simulated time in task"],
    ));
}

fn validation_and_sweep_cases(out: &mut Vec<Case>) {
    let v = shipped("validation/tf2017_k80_alexnet.csv");
    let header = v.lines().find(|l| !l.starts_with('#')).unwrap().to_string();
    for (name, text, msg) in [
        ("empty", String::new(), "v.csv"),
        ("header only", header.clone() + "\n", "v.csv"),
        ("garbage", "a,b\n1,2\n".to_string(), "v.csv"),
        ("renamed header", v.replacen(&header, &header.replacen(',', ";", 1), 1), "v.csv"),
    ] {
        out.push(case(format!("validation {name}"), vec![("v.csv", text)], &["validate", "v.csv"], &[msg]));
    }
    for (name, text, msg) in [
        ("not toml", "[[".to_string(), "s.toml:1"),
        ("axis not array", "[grid]\ngpus = 4\n".to_string(), "grid.gpus"),
        ("gpus zero", "[grid]\ngpus = [0]\n".to_string(), "grid.gpus"),
        ("empty axis", "[grid]\nstrategy = []\n".to_string(), "at least one value"),
        ("unknown field", "[grid]\n'workload.nonsense' = [1]\n".to_string(), "nonsense"),
        ("unknown top key", "nmae = 'x'\n".to_string(), "nmae"),
        ("too many runs", "[grid]\ngpus = [1]\nbatch = [1,2,3,4,5,6,7,8,9,10]\n".to_string(), "--limit sweep_runs="),
    ] {
        let mut args = vec!["sweep", "s.toml"];
        if name == "too many runs" {
            args = vec!["--limit", "sweep_runs=5", "sweep", "s.toml"];
        }
        out.push(case(format!("sweep {name}"), vec![("s.toml", text)], &args, &[msg]));
    }
    for v in ["inf", "NaN", "1e300", "-1", "x"] {
        let table = format!("point,grid.strategy,gpus,speedup,compute_s,communication_s,io_s,idle_s\n0,none,1,1,1,0,0,0\n1,none,2,{v},1,0,0,0\n");
        out.push(case(
            format!("sweep plot speedup {v}"),
            vec![("r.csv", table)],
            &["sweep", "plot", "r.csv", "--dir", "plots"],
            &["row 3", "speedup", "cannot be plotted"],
        ));
    }
    // `plot scatter` reads validate's CSV or JSON report back.
    let head = "set,id,line,workload,topology,gpus,strategy,metric,unit,measured,spread,predicted,error,within_spread,status,group,known_miss,source\n";
    for (name, text, msg) in [
        ("text report", "set  id  gpus\n".to_string(), "validate ... --format csv"),
        ("zero measured", format!("{head}s,r1,2,w,t,2,io,throughput,samples/s,0,,10,,,ok,,,src\n"), "measured"),
        ("negative predicted", format!("{head}s,r1,2,w,t,2,io,throughput,samples/s,10,,-3,,,ok,,,src\n"), "predicted"),
        (
            "not a number",
            format!("{head}s,r1,2,w,t,2,io,throughput,samples/s,ten,,10,,,ok,,,src\n"),
            "report.csv:2 (field `measured`)",
        ),
        ("bad json", "{\"rows\": [{\"set\": 1}]}".to_string(), "report.csv:1"),
        (
            "no measured rows",
            format!("{head}s,r1,2,w,t,2,io,throughput,samples/s,,,10,,,reference,,,src\n"),
            "no row with a measured value",
        ),
    ] {
        out.push(case(
            format!("plot scatter {name}"),
            vec![("report.csv", text)],
            &["plot", "scatter", "report.csv", "-o", "s.png"],
            &["report.csv", msg],
        ));
    }
}

/// The LLM and MoE plans, Hugging Face configs, fat-tree fabrics, faults, NCCL and runtime
/// settings, and truncated Chakra traces added since the first cases.
fn plan_and_fabric_cases(out: &mut Vec<Case>) {
    let plan = |model: &str, spec: &str, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["predict", "--model", model, "--topology", "dgx-h100", "--parallel", spec]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let mut push = |name: String, files: Vec<(&str, String)>, args: Vec<String>, expect: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        out.push(case(name, files, &args, expect));
    };
    // --parallel specs: each bad key or value, and plans that do not fit the model or machine.
    for (spec, msg) in [
        ("tp=0", "tp=0"),
        ("tp=x", "tp=x"),
        ("tp=-2", "tp=-2"),
        ("tp=1.5", "tp=1.5"),
        ("tp", "not key=value"),
        ("zero=4", "zero=4"),
        ("fsdp=half", "fsdp=half"),
        ("fsdp-wrap=module", "fsdp-wrap=module"),
        ("sp=maybe", "sp=maybe"),
        ("recompute=some", "recompute=some"),
        ("schedule=zigzag", "schedule=zigzag"),
        ("pipeline=2", "unknown key `pipeline`"),
        ("tp=65536,pp=65536", "beyond the limit"),
        ("tp=4294967295", "beyond the limit"),
        ("dp=4294967295,pp=2", "beyond the limit"),
        ("pp=2,vp=4294967295", "vp=4294967295"),
        ("shard-group=99999999", "shard-group"),
        ("tp=3,dp=1", "tp"),
        ("pp=7", "pp x vp"),
        ("pp=2,vp=3", "pp x vp"),
        ("vp=2", "interleaved"),
        ("sp=on", "sp=on needs tp"),
        ("tp=2,tp-overlap=on", "tp-overlap"),
        ("tp=16", "tp=16"),
        ("pp=2,dp=2,zero=3", "pipeline"),
        ("moe-capacity=0", "moe-capacity=0"),
        ("moe-capacity=nan", "moe-capacity=nan"),
        ("moe-capacity=inf", "moe-capacity=inf"),
        ("moe-imbalance=-1", "moe-imbalance=-1"),
        ("moe-dispatcher=ring", "moe-dispatcher=ring"),
        ("ep=0", "ep=0"),
        ("cp=0", "cp=0"),
    ] {
        push(format!("parallel {spec}"), vec![], plan("llama2-7b", spec, &[]), &["--parallel", msg]);
    }
    for (extra, flag) in [
        (&["--gpus", "16"][..], "--gpus"),
        (&["--global-batch", "7"][..], "--global-batch"),
        (&["--micro-batch", "3", "--global-batch", "8"][..], "--micro-batch"),
        (&["--micro-batch", "0"][..], "--micro-batch"),
        (&["--micro-batch", "4294967295"][..], "--micro-batch"),
        // Laid out its 2^30-step schedule until memory ran out (found by the `parallel` fuzz target).
        (&["--global-batch", "2147483648"][..], "--limit tasks="),
        (&["--matmul-tflops", "0"][..], "--matmul-tflops"),
        (&["--matmul-tflops", "nan"][..], "--matmul-tflops"),
        (&["--seq-len", "0"][..], "seq"),
        (&["--layers", "0"][..], "--layers"),
        (&["--layers", "4294967295"][..], "--limit layers="),
    ] {
        push(format!("parallel dp=2 {}", extra.join(" ")), vec![], plan("llama2-7b", "dp=2", extra), &[flag]);
    }
    // Mixture of experts: expert parallelism, routing and context parallelism that cannot run.
    for (spec, msg) in [
        ("dp=8,ep=3", "ep"),
        ("tp=2,dp=4,ep=1,sp=on", "GiB per GPU"),
        ("dp=8,ep=16", "ep"),
        ("dp=8,ep=8,etp=2", "etp"),
        ("dp=8,ep=8,moe-pad=on", "moe-pad"),
        ("dp=8,ep=8,moe-imbalance=0.5", "moe-imbalance"),
        ("dp=8,ep=8,moe-capacity=1.5,moe-dispatcher=flex", "moe-capacity"),
        ("tp=2,dp=4,ep=4", "sp=on"),
    ] {
        push(format!("moe {spec}"), vec![], plan("mixtral-8x7b", spec, &[]), &["--parallel", msg]);
    }
    for (spec, msg) in [("dp=4,ep=2", "ep"), ("cp=2,dp=4,flash=off", "cp"), ("cp=3,dp=1", "cp")] {
        push(format!("plan {spec} on a dense model"), vec![], plan("llama2-7b", spec, &[]), &["--parallel", msg]);
    }
    // Hugging Face config.json: each field bad, missing or beyond its range.
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096}"#;
    let hf = |text: String| vec![("cfg.json", text)];
    let hf_args = |spec: &str| plan("cfg.json", spec, &[]);
    for (field, v, msg) in [
        ("hidden_size", "0", "positive integer"),
        ("hidden_size", "-4096", "positive integer"),
        ("hidden_size", "4096.5", "positive integer"),
        ("hidden_size", "\"4096\"", "positive integer"),
        ("hidden_size", "null", "missing"),
        ("hidden_size", "1e30", "positive integer"),
        ("hidden_size", "18446744073709551615", "beyond the supported maximum"),
        ("hidden_size", "4100", "do not divide"),
        ("num_attention_heads", "4294967296", "too large"),
        ("num_attention_heads", "0", "positive integer"),
        ("num_key_value_heads", "5", "do not divide"),
        ("num_hidden_layers", "4294967295", "beyond the"),
        ("num_hidden_layers", "0", "positive integer"),
        ("intermediate_size", "1000000000000", "beyond the supported maximum"),
        ("vocab_size", "1000000000000", "beyond the supported maximum"),
        ("vocab_size", "true", "positive integer"),
        ("max_position_embeddings", "-1", "positive integer"),
    ] {
        let text = llama.replacen(&format!("\"{field}\": "), &format!("\"{field}\": {v}, \"_old_{field}\": "), 1);
        push(format!("hf config {field}={v}"), hf(text), hf_args("dp=8"), &["cfg.json", msg]);
    }
    for (name, text, msg) in [
        ("no model_type", llama.replace("\"model_type\": \"llama\", ", ""), "model_type"),
        ("unsupported model_type", llama.replace("\"llama\"", "\"t5\""), "`t5` is not supported"),
        ("not an object", "[1, 2]".to_string(), "JSON object"),
        ("truncated", llama[..llama.len() / 2].to_string(), "cfg.json:"),
        ("empty", String::new(), "cfg.json"),
        ("bom", format!("\u{feff}{llama}"), "cfg.json"),
        (
            "too many parameters",
            llama.replace("\"num_hidden_layers\": 32", "\"num_hidden_layers\": 90000").replace("4096,", "1048576,"),
            "parameters",
        ),
        (
            "moe top-k beyond the experts",
            llama.replace("\"llama\"", "\"mixtral\"").replace("}", ", \"num_local_experts\": 4, \"num_experts_per_tok\": 8}"),
            "top_k",
        ),
        (
            "moe experts beyond the maximum",
            llama.replace("\"llama\"", "\"mixtral\"").replace("}", ", \"num_local_experts\": 100000000, \"num_experts_per_tok\": 2}"),
            "experts",
        ),
        (
            "moe missing top-k",
            llama.replace("\"llama\"", "\"mixtral\"").replace("}", ", \"num_local_experts\": 8}"),
            "num_experts_per_tok",
        ),
        ("mpt expansion_ratio 0", r#"{"model_type": "mpt", "d_model": 2048, "n_heads": 16, "n_layers": 24, "max_seq_len": 2048, "vocab_size": 50368, "expansion_ratio": 0}"#.to_string(), "expansion_ratio"),
        ("mpt expansion_ratio 1e300", r#"{"model_type": "mpt", "d_model": 2048, "n_heads": 16, "n_layers": 24, "max_seq_len": 2048, "vocab_size": 50368, "expansion_ratio": 1e300}"#.to_string(), "beyond the supported maximum"),
        ("gpt2 huge n_embd", r#"{"model_type": "gpt2", "n_embd": 9223372036854775807, "n_head": 1, "n_layer": 2, "n_positions": 1024, "vocab_size": 50257}"#.to_string(), "beyond the supported maximum"),
    ] {
        push(format!("hf config {name}"), hf(text), hf_args("dp=8"), &["cfg.json", msg]);
    }
    // Fat-tree fabrics: every tier's fields.
    let fabric = |leaf: &str, spine: &str, rest: &str| {
        format!(r#"{{"name": "ft", "base": "dgx-h100", "fabric": {{"leaf": {leaf}, "spine": {spine}{rest}}}}}"#)
    };
    let good_leaf = r#"{"nodes": 2}"#;
    let good_spine = r#"{"switches": 2}"#;
    for (name, text) in [
        ("leaf nodes 0", fabric(r#"{"nodes": 0}"#, good_spine, "")),
        ("leaf nodes -1", fabric(r#"{"nodes": -1}"#, good_spine, "")),
        ("leaf nodes huge", fabric(r#"{"nodes": 1000000000}"#, good_spine, "")),
        ("leaf oversubscription 0", fabric(r#"{"nodes": 2, "oversubscription": 0}"#, good_spine, "")),
        ("leaf oversubscription -2", fabric(r#"{"nodes": 2, "oversubscription": -2}"#, good_spine, "")),
        ("leaf oversubscription 1e300", fabric(r#"{"nodes": 2, "oversubscription": 1e300}"#, good_spine, "")),
        ("leaf unknown key", fabric(r#"{"nodes": 2, "ports": 64}"#, good_spine, "")),
        ("spine switches 0", fabric(good_leaf, r#"{"switches": 0}"#, "")),
        ("spine latency -1", fabric(good_leaf, r#"{"switches": 2, "latency_us": -1}"#, "")),
        ("spine latency 1e300", fabric(good_leaf, r#"{"switches": 2, "latency_us": 1e300}"#, "")),
        ("spine leaf_groups 0", fabric(good_leaf, r#"{"switches": 2, "leaf_groups": 0}"#, "")),
        ("spine switches text", fabric(good_leaf, r#"{"switches": "two"}"#, "")),
        ("core switches 0", fabric(good_leaf, good_spine, r#", "core": {"switches": 0}"#)),
        ("core latency nan", fabric(good_leaf, good_spine, r#", "core": {"switches": 2, "latency_us": "nan"}"#)),
        ("ecmp unknown", fabric(good_leaf, good_spine, r#", "ecmp": "random""#)),
        ("rails text", fabric(good_leaf, good_spine, r#", "rails": "yes""#)),
        ("no spine", format!(r#"{{"name": "ft", "base": "dgx-h100", "fabric": {{"leaf": {good_leaf}}}}}"#)),
        (
            "unknown base",
            r#"{"name": "ft", "base": "dgx-z900", "fabric": {"leaf": {"nodes": 2}, "spine": {"switches": 2}}}"#
                .to_string(),
        ),
    ] {
        push(
            format!("fabric {name}"),
            vec![("ft.json", text)],
            ["predict", "--trace", "../t.csv", "--topology", "ft.json", "--gpus", "32"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            &["ft.json"],
        );
    }
    // Faults.
    let predict = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["predict", "--trace", "../t.csv", "--topology", "dgx-h100", "--gpus", "16"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    for (flag, v, msg) in [
        ("--slow-gpu", "3", "INDEX=FACTOR"),
        ("--slow-gpu", "x=2", "not an index"),
        ("--slow-gpu", "3=x", "not a number"),
        ("--slow-gpu", "3=0.5", "from 1 to 1e6"),
        ("--slow-gpu", "3=nan", "from 1 to 1e6"),
        ("--slow-gpu", "3=1e300", "from 1 to 1e6"),
        ("--slow-gpu", "99=2", "does not exist"),
        ("--slow-gpu", "-1=2", "not an index"),
        ("--straggler-node", "9=2", "does not exist"),
        ("--straggler-node", "0=inf", "from 1 to 1e6"),
        ("--degrade-link", "n0.nic0=0.5", "DEVICE:DEVICE=FACTOR"),
        ("--degrade-link", "n0.nic0:switch", "DEVICE:DEVICE=FACTOR"),
        ("--degrade-link", "n0.nic0:switch=2", "from 0.001 to 1"),
        ("--degrade-link", "n0.nic0:switch=0", "from 0.001 to 1"),
        ("--degrade-link", "n0.nic0:switch=1e-300", "from 0.001 to 1"),
        ("--degrade-link", "n0.nic99:switch=0.5", "--degrade-link"),
        ("--degrade-link", "n0.gpu0:n1.gpu0=0.5", "--degrade-link"),
    ] {
        push(format!("fault {flag} {v}"), vec![], predict(&[&format!("{flag}={v}")]), &[flag, msg]);
    }
    // Collective model and NCCL settings.
    for (flag, v) in [
        ("--collective-model", "mpi"),
        ("--collective-model", ""),
        ("--nccl-version", "x"),
        ("--nccl-version", "2"),
        ("--nccl-version", "99.0.0"),
        ("--nccl-version", "2.-1.0"),
        ("--nccl-version", "1.0.0"),
        ("--nccl-algo", "butterfly"),
        ("--nccl-proto", "fast"),
        ("--nccl-algo", ""),
    ] {
        push(format!("nccl {flag} {v:?}"), vec![], predict(&[flag, v]), &[flag]);
    }
    for (flag, v) in [("--nccl-algo", "ring"), ("--nccl-proto", "ll"), ("--nccl-version", "2.18.3")] {
        push(
            format!("nccl {flag} under the ideal model"),
            vec![],
            predict(&["--collective-model", "ideal", flag, v]),
            &[flag],
        );
    }
    // Runtimes and their settings.
    for (spec, msg) in [
        ("io+wfbp+runtime=tensorflow-xla", "runtime"),
        ("io+wfbp+runtime=gloo+threads=0", "threads"),
        ("io+wfbp+runtime=gloo+speed=2", "speed"),
        ("io+wfbp+runtime=horovod+cycle_ms=-1", "cycle_ms"),
        ("io+wfbp+runtime=horovod+cycle_ms=nan", "cycle_ms"),
        ("io+wfbp+runtime=horovod+cycle_ms=1e300", "cycle_ms"),
        ("io+wfbp+runtime=horovod+call_us=1e300", "call_us"),
        ("io+wfbp+runtime=ddp+bucket_mb=0", "bucket_mb"),
        ("io+wfbp+runtime=ddp+bucket_mb=x", "bucket_mb"),
        ("io+wfbp+runtime=ddp+bucket_mb=1e300", "bucket_mb"),
        ("io+wfbp+runtime=gloo+sum_gbps=1e-300", "sum_gbps"),
        ("io+wfbp+runtime=gloo+sum_gbps=inf", "sum_gbps"),
        ("runtime=ps+servers=0", "servers"),
        ("runtime=ps+servers=99999999999", "servers"),
        ("io+wfbp+runtime=gloo+cycle_ms=1", "does not take `cycle_ms`"),
        ("io+wfbp+runtime=", "runtime"),
        ("io+wfbp+runtime=ddp+runtime=gloo", "two runtimes"),
    ] {
        push(format!("runtime {spec}"), vec![], predict(&["--strategy", spec]), &["strategy", msg]);
    }
    // Chakra traces cut short at several points: an error at the file, never a shorter workload.
    let mut real = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(
            &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/chakra/feeder_tests_chakra.0.et.gz"))
                .unwrap()[..],
        ),
        &mut real,
    )
    .unwrap();
    let mut chakra_files = Vec::new();
    for frac in [3, 10, 25, 50, 75, 90, 99] {
        let cut = real.len() * frac / 100 + 1;
        let args: Vec<String> = ["predict", "--trace", "cut.et", "--profile-format", "chakra", "--gpus", "2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        push(format!("chakra truncated at {frac}%"), vec![], args, &["cut.et", "truncated"]);
        chakra_files.push(real[..cut].to_vec());
    }
    let n = out.len();
    for (c, bytes) in out[n - chakra_files.len()..].iter_mut().zip(chakra_files) {
        c.files.push(("cut.et".into(), bytes));
    }
}

fn all_cases() -> Vec<Case> {
    let mut out = Vec::new();
    native_trace_cases(&mut out);
    table6_cases(&mut out);
    topology_cases(&mut out);
    calibration_cases(&mut out);
    profile_cases(&mut out);
    measurement_cases(&mut out);
    scenario_cases(&mut out);
    cli_cases(&mut out);
    validation_and_sweep_cases(&mut out);
    plan_and_fabric_cases(&mut out);
    out
}

#[test]
fn every_bad_input_exits_2_naming_its_source_without_panic_or_hang() {
    let cases = all_cases();
    assert!(cases.len() >= 300, "only {} cases", cases.len());
    let good = "# batch_per_gpu: 32\nlayer,name,forward_us,backward_us,comm_us,grad_bytes\n1,conv1,100,200,0,4096\n2,fc,50,60,0,8192\n";
    let mut failures = Vec::new();
    for c in &cases {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("t.csv"), good).unwrap();
        let dir = root.path().join("work");
        std::fs::create_dir(&dir).unwrap();
        for (name, content) in &c.files {
            std::fs::write(dir.join(name), content).unwrap();
        }
        let o = dagsim().current_dir(&dir).args(&c.args).timeout(Duration::from_secs(30)).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        let problem = if o.status.code() != Some(2) {
            Some(format!("exit {:?}", o.status.code()))
        } else if stderr.contains("panicked") {
            Some("panicked".into())
        } else {
            c.expect.iter().find(|e| !stderr.contains(e.as_str())).map(|e| format!("lacks `{e}`"))
        };
        if let Some(p) = problem {
            failures.push(format!("{}: {p}\n    stderr: {}", c.name, stderr.trim()));
        }
        // No temporary file is left behind by a failed run.
        let stray: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        if !stray.is_empty() {
            failures.push(format!("{}: left {} temporary files", c.name, stray.len()));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    println!("{} bad inputs, each refused with exit code 2 and its source named", cases.len());
}
