//! Chrome/Perfetto trace export (the JSON "Trace Event Format" that ui.perfetto.dev and
//! chrome://tracing open). One process per GPU with one track per serial queue (stream,
//! communicator) and per copy engine; one process per host with the network/PCIe transfers that
//! leave it and a utilisation counter per link; a process for the critical path; flow arrows along
//! DAG edges. Reads a finished run; never simulates. Times are written in microseconds with
//! nanosecond digits, so they convert back to the run's integer nanoseconds exactly.

use super::critical::critical_path;
use crate::dag::{Dag, Phase, TaskId, Work};
use crate::hw::{DeviceId, Machine};
use crate::sim::Run;
use crate::units::Nanos;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;

/// Process ids: GPU rank `g` is `g + 1`; these bases keep the other kinds apart.
pub const HOST_PID_BASE: u64 = 100_000;
pub const FABRIC_PID: u64 = 200_000;
pub const CRITICAL_PID: u64 = 300_000;
/// Track ids for tasks without a serial queue start here (plus the phase index).
const PHASE_TID_BASE: u64 = 1_000_000;

/// Which DAG edges get a flow arrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrows {
    /// Every dependency edge.
    #[default]
    All,
    /// Only edges between consecutive tasks of the critical path.
    Critical,
    None,
}

/// How much of the run a trace carries. Transfers dominate the size of large runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    /// Task spans, the critical path, every transfer and a utilisation counter per link.
    #[default]
    Full,
    /// Task spans, the critical path and the link utilisation counters, without the transfers.
    Links,
    /// Task spans and the critical path only (needs no flow records).
    Tasks,
}

impl Detail {
    /// Whether the run must record its flows for this detail.
    pub fn needs_flows(self) -> bool {
        self != Detail::Tasks
    }
}

/// What a trace shows: which dependencies get arrows, how much detail, which GPU ranks.
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    pub arrows: Arrows,
    pub detail: Detail,
    /// Per GPU rank, whether it is shown (its process, its spans, its node's host and links);
    /// `None` shows every GPU. The critical path is always shown whole.
    pub ranks: Option<Vec<bool>>,
}

/// What went into a trace, for summaries, size estimates and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceStats {
    pub spans: usize,
    pub transfers: usize,
    pub counter_samples: usize,
    pub arrows: usize,
    pub critical_tasks: usize,
    /// Metadata events (process and track names).
    pub metadata: usize,
}

impl TraceStats {
    /// Estimated file size in bytes: events times their mean size in this writer's output, rounded
    /// up (measured, separators included, on `dagsim timeline --trace traces/alexnet_k80.csv
    /// --gpus 16` and `--model resnet50 --gpu v100-sxm2 --batch 64 --topology v100-cluster
    /// --gpus 8`: spans 196-197 bytes, a transfer's begin and end 314-336, a counter sample
    /// 117-118, an arrow's start and finish 181-185, metadata 83).
    pub fn estimated_bytes(&self) -> u64 {
        (self.spans + self.critical_tasks) as u64 * 210
            + self.transfers as u64 * 350
            + self.counter_samples as u64 * 125
            + self.arrows as u64 * 190
            + self.metadata as u64 * 90
    }
}

fn us(ns: Nanos) -> f64 {
    ns as f64 / 1000.0
}

fn gpu_pid(g: u32) -> u64 {
    g as u64 + 1
}

/// The process a device's traffic and links belong to: its host, or the shared fabric.
fn device_pid(machine: &Machine, d: DeviceId) -> u64 {
    match machine.devices[d as usize].node {
        Some(n) => HOST_PID_BASE + n as u64,
        None => FABRIC_PID,
    }
}

fn phase_index(p: Phase) -> u64 {
    Phase::ALL.iter().position(|&x| x == p).expect("every phase is listed") as u64
}

fn phase_track_name(p: Phase) -> String {
    match p {
        Phase::Io => "storage read".into(),
        Phase::HostToDevice => "copy engine (H2D)".into(),
        other => other.name().into(),
    }
}

/// Where a task's span is drawn: (pid, tid, gpu) per GPU it belongs to (all members for a group task).
fn placements(dag: &Dag, t: TaskId) -> Vec<(u64, u64, u32)> {
    let task = dag.task(t);
    let tid = match task.queue {
        Some(q) => q as u64 + 1,
        None => PHASE_TID_BASE + phase_index(task.phase),
    };
    match (task.gpu, task.work) {
        (Some(g), _) => vec![(gpu_pid(g), tid, g)],
        (None, Work::Collective { group, .. }) => dag.group(group).iter().map(|&g| (gpu_pid(g), tid, g)).collect(),
        // A group-less task without a GPU (none are built today): draw it on GPU 0's process.
        (None, _) => vec![(gpu_pid(0), tid, 0)],
    }
}

fn span_name(dag: &Dag, t: TaskId) -> String {
    let task = dag.task(t);
    match task.layer {
        Some(l) => format!("{} L{l}", task.phase.name()),
        None => task.phase.name().to_string(),
    }
}

// The events, as the Trace Event Format names their fields; serialised without building a
// `serde_json::Value` per event.

#[derive(Serialize)]
struct Meta<A: Serialize> {
    ph: &'static str,
    name: &'static str,
    pid: u64,
    tid: u64,
    args: A,
}

#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct SortArg {
    sort_index: i64,
}

#[derive(Serialize)]
struct SpanArgs<'a> {
    task: TaskId,
    iteration: u32,
    layer: Option<u32>,
    gpu: Option<u32>,
    label: &'a str,
    critical: bool,
}

#[derive(Serialize)]
struct Span<'a, A: Serialize> {
    ph: &'static str,
    name: &'a str,
    cat: &'a str,
    pid: u64,
    tid: u64,
    ts: f64,
    dur: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cname: Option<&'static str>,
    args: A,
}

#[derive(Serialize)]
struct TaskArg {
    task: TaskId,
}

#[derive(Serialize)]
struct TransferArgs<'a> {
    task: TaskId,
    step: u32,
    bytes: u64,
    links: &'a [&'a str],
}

#[derive(Serialize)]
struct Async<'a, A: Serialize> {
    ph: &'static str,
    cat: &'static str,
    name: &'a str,
    id: usize,
    pid: u64,
    tid: u64,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<A>,
}

#[derive(Serialize)]
struct UtilArg {
    util: f64,
}

#[derive(Serialize)]
struct Counter<'a> {
    ph: &'static str,
    name: &'a str,
    pid: u64,
    tid: u64,
    ts: f64,
    args: UtilArg,
}

#[derive(Serialize)]
struct Flow {
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    cat: &'static str,
    name: &'static str,
    id: usize,
    pid: u64,
    tid: u64,
    ts: f64,
}

/// Writes events one per line, comma-separated; with no output, only counts (for estimates).
struct EventWriter<'w> {
    out: Option<&'w mut dyn Write>,
    first: bool,
}

impl EventWriter<'_> {
    fn push(&mut self, v: &impl Serialize) -> std::io::Result<()> {
        let Some(out) = self.out.as_deref_mut() else { return Ok(()) };
        if !self.first {
            out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *out, v)?;
        Ok(())
    }

    fn name_process(&mut self, pid: u64, name: &str, sort: i64) -> std::io::Result<()> {
        self.push(&Meta { ph: "M", name: "process_name", pid, tid: 0, args: NameArg { name } })?;
        self.push(&Meta { ph: "M", name: "process_sort_index", pid, tid: 0, args: SortArg { sort_index: sort } })
    }

    fn name_thread(&mut self, pid: u64, tid: u64, name: &str) -> std::io::Result<()> {
        self.push(&Meta { ph: "M", name: "thread_name", pid, tid, args: NameArg { name } })?;
        self.push(&Meta { ph: "M", name: "thread_sort_index", pid, tid, args: SortArg { sort_index: tid as i64 } })
    }
}

/// Counts what [`write_trace`] would write with these options, without writing (for a size
/// estimate before a large file is written).
pub fn trace_stats(machine: &Machine, dag: &Dag, run: &Run, options: &TraceOptions) -> TraceStats {
    let mut w = EventWriter { out: None, first: true };
    traverse(&mut w, machine, dag, run, options).expect("counting does no I/O")
}

/// Writes the trace of `run` as one JSON object with a `traceEvents` array. `about` lands in
/// `otherData` (workload, topology, strategy, ...). Buffer `out`: events are many small writes.
pub fn write_trace(
    out: &mut dyn Write,
    machine: &Machine,
    dag: &Dag,
    run: &Run,
    options: &TraceOptions,
    about: &[(&str, String)],
) -> std::io::Result<TraceStats> {
    let other: serde_json::Map<String, Value> = about.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    writeln!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{},\"traceEvents\":[", Value::Object(other))?;
    let mut w = EventWriter { out: Some(&mut *out), first: true };
    let stats = traverse(&mut w, machine, dag, run, options)?;
    out.write_all(b"\n]}\n")?;
    Ok(stats)
}

/// Walks every event the options select, in file order, pushing each to `w` and counting it.
fn traverse(
    w: &mut EventWriter,
    machine: &Machine,
    dag: &Dag,
    run: &Run,
    options: &TraceOptions,
) -> std::io::Result<TraceStats> {
    let mut stats = TraceStats::default();
    let gpus = dag.meta.gpus;
    let shown = |g: u32| options.ranks.as_ref().is_none_or(|r| r.get(g as usize).copied().unwrap_or(false));
    let nodes = machine.devices.iter().filter_map(|d| d.node).max().map_or(0, |n| n + 1);
    // A node is shown when one of its GPUs is; its host process, transfers and links come along.
    let mut node_shown = vec![options.ranks.is_none(); nodes as usize];
    for g in (0..gpus).filter(|&g| shown(g)) {
        if let Some(n) = machine.devices[machine.gpus[g as usize].device as usize].node {
            node_shown[n as usize] = true;
        }
    }
    let device_shown = |d: DeviceId| match machine.devices[d as usize].node {
        Some(n) => node_shown[n as usize],
        None => false,
    };

    // Processes and tracks.
    for g in (0..gpus).filter(|&g| shown(g)) {
        let dev = machine.device_name(machine.gpus[g as usize].device);
        w.name_process(gpu_pid(g), &format!("GPU {g} ({dev})"), g as i64)?;
        stats.metadata += 2;
    }
    for n in (0..nodes).filter(|&n| node_shown[n as usize]) {
        w.name_process(HOST_PID_BASE + n as u64, &format!("Host {n}"), HOST_PID_BASE as i64 + n as i64)?;
        stats.metadata += 2;
    }
    w.name_process(FABRIC_PID, "Network and shared storage", FABRIC_PID as i64)?;
    w.name_process(CRITICAL_PID, "Critical path", -1)?;
    w.name_thread(CRITICAL_PID, 1, "critical path")?;
    stats.metadata += 6;
    let mut named = std::collections::BTreeSet::new();
    for t in 0..dag.len() as TaskId {
        let task = dag.task(t);
        for (pid, tid, _) in placements(dag, t).into_iter().filter(|p| shown(p.2)) {
            if named.insert((pid, tid)) {
                let name = match task.queue {
                    Some(q) => {
                        let qn = &dag.queues()[q as usize].name;
                        qn.split_once('.').map_or(qn.as_str(), |(_, rest)| rest).to_string()
                    }
                    None => phase_track_name(task.phase),
                };
                w.name_thread(pid, tid, &name)?;
                stats.metadata += 2;
            }
        }
    }

    // Task spans, with the critical path marked and repeated on its own track.
    let critical = critical_path(dag, run);
    let mut on_path = vec![false; dag.len()];
    for &t in &critical {
        on_path[t as usize] = true;
    }
    let counting = w.out.is_none();
    for t in 0..dag.len() as TaskId {
        let places: Vec<_> = placements(dag, t).into_iter().filter(|p| shown(p.2)).collect();
        if counting {
            stats.spans += places.len();
            continue;
        }
        if places.is_empty() {
            continue;
        }
        let task = dag.task(t);
        let (s, e) = (run.start[t as usize], run.end[t as usize]);
        let crit = on_path[t as usize];
        let label = task.label();
        let name = span_name(dag, t);
        let cat = if crit { format!("{},critical", task.phase.name()) } else { task.phase.name().to_string() };
        for (pid, tid, _) in places {
            let args = SpanArgs {
                task: t,
                iteration: task.iteration,
                layer: task.layer,
                gpu: task.gpu,
                label: &label,
                critical: crit,
            };
            w.push(&Span { ph: "X", name: &name, cat: &cat, pid, tid, ts: us(s), dur: us(e - s), cname: None, args })?;
            stats.spans += 1;
        }
    }
    for &t in &critical {
        let (s, e) = (run.start[t as usize], run.end[t as usize]);
        let label = dag.task(t).label();
        w.push(&Span {
            ph: "X",
            name: &label,
            cat: "critical",
            pid: CRITICAL_PID,
            tid: 1,
            ts: us(s),
            dur: us(e - s),
            cname: Some("terrible"),
            args: TaskArg { task: t },
        })?;
    }
    stats.critical_tasks = critical.len();

    // Transfers as async spans on the host they leave, and link utilisation counters.
    if options.detail.needs_flows() {
        let mut link_deltas: Vec<Vec<(Nanos, f64)>> = vec![Vec::new(); machine.links.len()];
        let link_names: Vec<String> = match counting {
            true => Vec::new(),
            false => (0..machine.links.len() as u32).map(|l| link_name(machine, l)).collect(),
        };
        for (i, f) in run.flow_records.iter().enumerate() {
            if !(device_shown(f.src) || device_shown(f.dst)) {
                continue;
            }
            let links = &run.routes[f.route as usize].links;
            if options.detail == Detail::Full {
                stats.transfers += 1;
                if !counting {
                    let pid = match machine.devices[f.src as usize].node {
                        Some(_) => device_pid(machine, f.src),
                        None => device_pid(machine, f.dst),
                    };
                    let name = format!("{} -> {}", machine.device_name(f.src), machine.device_name(f.dst));
                    let names: Vec<&str> = links.iter().map(|&l| link_names[l as usize].as_str()).collect();
                    let args = TransferArgs { task: f.task, step: f.step, bytes: f.bytes, links: &names };
                    let (cat, tid) = ("transfer", 0);
                    w.push(&Async { ph: "b", cat, name: &name, id: i, pid, tid, ts: us(f.start), args: Some(args) })?;
                    w.push(&Async::<TaskArg> {
                        ph: "e",
                        cat,
                        name: &name,
                        id: i,
                        pid,
                        tid,
                        ts: us(f.end),
                        args: None,
                    })?;
                }
            }
            if f.end > f.start {
                let rate = f.bytes as f64 / (f.end - f.start) as f64;
                for &l in links {
                    link_deltas[l as usize].push((f.start, rate));
                    link_deltas[l as usize].push((f.end, -rate));
                }
            }
        }
        for (l, deltas) in link_deltas.iter_mut().enumerate() {
            let link = &machine.links[l];
            if deltas.is_empty() || !(device_shown(link.from) || device_shown(link.to)) {
                continue;
            }
            deltas.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            let pid = device_pid(machine, link.from);
            let name = match counting {
                true => String::new(),
                false => format!("util {}", link_names[l]),
            };
            let cap = link.capacity();
            let mut level = 0.0;
            let mut i = 0;
            while i < deltas.len() {
                let t = deltas[i].0;
                while i < deltas.len() && deltas[i].0 == t {
                    level += deltas[i].1;
                    i += 1;
                }
                // Rounding residue of adding and removing the same rates.
                let util = if level.abs() < 1e-12 { 0.0 } else { level / cap };
                w.push(&Counter { ph: "C", name: &name, pid, tid: 0, ts: us(t), args: UtilArg { util } })?;
                stats.counter_samples += 1;
            }
        }
    }

    // Dependency arrows: from near the end of the source span to the start of the target span.
    let pairs: Box<dyn Iterator<Item = (TaskId, TaskId)>> = match options.arrows {
        Arrows::None => Box::new(std::iter::empty()),
        Arrows::Critical => Box::new(critical.windows(2).map(|p| (p[0], p[1])).collect::<Vec<_>>().into_iter()),
        Arrows::All => Box::new((0..dag.len() as TaskId).flat_map(|a| dag.successors(a).iter().map(move |&b| (a, b)))),
    };
    for (a, b) in pairs {
        let pa: Vec<_> = placements(dag, a).into_iter().filter(|p| shown(p.2)).collect();
        let pb: Vec<_> = placements(dag, b).into_iter().filter(|p| shown(p.2)).collect();
        if pa.is_empty() || pb.is_empty() {
            continue;
        }
        let k = stats.arrows;
        stats.arrows += 1;
        if counting {
            continue;
        }
        // Keep the arrow inside one GPU's process when both ends have a span there.
        let (src, dst) =
            pa.iter().find_map(|x| pb.iter().find(|y| y.2 == x.2).map(|y| (*x, *y))).unwrap_or((pa[0], pb[0]));
        let (s, e) = (run.start[a as usize], run.end[a as usize]);
        let from_ts = if e > s { e - 1 } else { e };
        let cat = "dependency";
        w.push(&Flow { ph: "s", bp: None, cat, name: "dep", id: k, pid: src.0, tid: src.1, ts: us(from_ts) })?;
        let to_ts = us(run.start[b as usize]);
        w.push(&Flow { ph: "f", bp: Some("e"), cat, name: "dep", id: k, pid: dst.0, tid: dst.1, ts: to_ts })?;
    }
    Ok(stats)
}

/// `cpu0 -> gpu1` style name of a link.
fn link_name(machine: &Machine, l: u32) -> String {
    let link = &machine.links[l as usize];
    format!("{} -> {} ({})", machine.device_name(link.from), machine.device_name(link.to), link.kind.name())
}
