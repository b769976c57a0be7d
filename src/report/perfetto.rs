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

/// What went into a trace, for summaries and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceStats {
    pub spans: usize,
    pub transfers: usize,
    pub counter_samples: usize,
    pub arrows: usize,
    pub critical_tasks: usize,
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

/// Where a task's span is drawn: (pid, tid) per GPU it belongs to (all members for a group task).
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

struct EventWriter<'w> {
    out: &'w mut dyn Write,
    first: bool,
}

impl EventWriter<'_> {
    fn push(&mut self, v: &Value) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, v)?;
        Ok(())
    }

    fn name_process(&mut self, pid: u64, name: &str, sort: i64) -> std::io::Result<()> {
        self.push(&json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}))?;
        self.push(&json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}}))
    }

    fn name_thread(&mut self, pid: u64, tid: u64, name: &str) -> std::io::Result<()> {
        self.push(&json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}))?;
        self.push(&json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}))
    }
}

/// Writes the trace of `run` as one JSON object with a `traceEvents` array. `about` lands in
/// `otherData` (workload, topology, strategy, ...).
pub fn write_trace(
    out: &mut dyn Write,
    machine: &Machine,
    dag: &Dag,
    run: &Run,
    arrows: Arrows,
    about: &[(&str, String)],
) -> std::io::Result<TraceStats> {
    let mut stats = TraceStats::default();
    let other: serde_json::Map<String, Value> = about.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    writeln!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{},\"traceEvents\":[", Value::Object(other))?;
    let mut w = EventWriter { out, first: true };

    // Processes and tracks.
    let gpus = dag.meta.gpus;
    for g in 0..gpus {
        let dev = machine.device_name(machine.gpus[g as usize].device);
        w.name_process(gpu_pid(g), &format!("GPU {g} ({dev})"), g as i64)?;
    }
    let nodes = machine.devices.iter().filter_map(|d| d.node).max().map_or(0, |n| n + 1);
    for n in 0..nodes {
        w.name_process(HOST_PID_BASE + n as u64, &format!("Host {n}"), HOST_PID_BASE as i64 + n as i64)?;
    }
    w.name_process(FABRIC_PID, "Network and shared storage", FABRIC_PID as i64)?;
    w.name_process(CRITICAL_PID, "Critical path", -1)?;
    w.name_thread(CRITICAL_PID, 1, "critical path")?;
    let mut named = std::collections::BTreeSet::new();
    for t in 0..dag.len() as TaskId {
        let task = dag.task(t);
        for (pid, tid, _) in placements(dag, t) {
            if named.insert((pid, tid)) {
                let name = match task.queue {
                    Some(q) => {
                        let qn = &dag.queues()[q as usize].name;
                        qn.split_once('.').map_or(qn.as_str(), |(_, rest)| rest).to_string()
                    }
                    None => phase_track_name(task.phase),
                };
                w.name_thread(pid, tid, &name)?;
            }
        }
    }

    // Task spans, with the critical path marked and repeated on its own track.
    let critical = critical_path(dag, run);
    let mut on_path = vec![false; dag.len()];
    for &t in &critical {
        on_path[t as usize] = true;
    }
    let how: std::collections::HashMap<TaskId, &str> =
        run.collective_labels.iter().map(|(t, l)| (*t, l.as_str())).collect();
    let model = machine.collectives.name();
    for t in 0..dag.len() as TaskId {
        let task = dag.task(t);
        let (s, e) = (run.start[t as usize], run.end[t as usize]);
        let crit = on_path[t as usize];
        let mut args = json!({"task": t, "iteration": task.iteration, "layer": task.layer, "gpu": task.gpu,
                          "label": task.label(), "critical": crit});
        if let Some(l) = how.get(&t) {
            args["collective"] = json!(format!("{model} {l}"));
        }
        let cat = if crit { format!("{},critical", task.phase.name()) } else { task.phase.name().to_string() };
        for (pid, tid, _) in placements(dag, t) {
            w.push(&json!({"ph": "X", "name": span_name(dag, t), "cat": cat, "pid": pid, "tid": tid,
                           "ts": us(s), "dur": us(e - s), "args": args}))?;
            stats.spans += 1;
        }
    }
    for &t in &critical {
        let (s, e) = (run.start[t as usize], run.end[t as usize]);
        w.push(&json!({"ph": "X", "name": dag.task(t).label(), "cat": "critical", "pid": CRITICAL_PID, "tid": 1,
                       "ts": us(s), "dur": us(e - s), "cname": "terrible", "args": {"task": t}}))?;
    }
    stats.critical_tasks = critical.len();

    // Transfers as async spans on the host they leave, and link utilisation counters.
    let mut link_deltas: Vec<Vec<(Nanos, f64)>> = vec![Vec::new(); machine.links.len()];
    for (i, f) in run.flow_records.iter().enumerate() {
        let pid = match machine.devices[f.src as usize].node {
            Some(_) => device_pid(machine, f.src),
            None => device_pid(machine, f.dst),
        };
        let name = format!("{} -> {}", machine.device_name(f.src), machine.device_name(f.dst));
        let links = &run.routes[f.route as usize].links;
        let args = json!({"task": f.task, "step": f.step, "bytes": f.bytes,
                          "links": links.iter().map(|&l| link_name(machine, l)).collect::<Vec<_>>()});
        w.push(&json!({"ph": "b", "cat": "transfer", "name": name, "id": i, "pid": pid, "tid": 0, "ts": us(f.start), "args": args}))?;
        w.push(&json!({"ph": "e", "cat": "transfer", "name": name, "id": i, "pid": pid, "tid": 0, "ts": us(f.end)}))?;
        stats.transfers += 1;
        if f.end > f.start {
            let rate = f.bytes as f64 / (f.end - f.start) as f64;
            for &l in links {
                link_deltas[l as usize].push((f.start, rate));
                link_deltas[l as usize].push((f.end, -rate));
            }
        }
    }
    for (l, deltas) in link_deltas.iter_mut().enumerate() {
        if deltas.is_empty() {
            continue;
        }
        deltas.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let link = &machine.links[l];
        let pid = device_pid(machine, link.from);
        let name = format!("util {}", link_name(machine, l as u32));
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
            w.push(&json!({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": us(t), "args": {"util": util}}))?;
            stats.counter_samples += 1;
        }
    }

    // Dependency arrows: from near the end of the source span to the start of the target span.
    let pairs: Vec<(TaskId, TaskId)> = match arrows {
        Arrows::None => Vec::new(),
        Arrows::Critical => critical.windows(2).map(|p| (p[0], p[1])).collect(),
        Arrows::All => (0..dag.len() as TaskId).flat_map(|a| dag.successors(a).iter().map(move |&b| (a, b))).collect(),
    };
    for (k, (a, b)) in pairs.into_iter().enumerate() {
        let pa = placements(dag, a);
        let pb = placements(dag, b);
        // Keep the arrow inside one GPU's process when both ends have a span there.
        let (src, dst) =
            pa.iter().find_map(|x| pb.iter().find(|y| y.2 == x.2).map(|y| (*x, *y))).unwrap_or((pa[0], pb[0]));
        let (s, e) = (run.start[a as usize], run.end[a as usize]);
        let from_ts = if e > s { e - 1 } else { e };
        w.push(&json!({"ph": "s", "cat": "dependency", "name": "dep", "id": k, "pid": src.0, "tid": src.1, "ts": us(from_ts)}))?;
        w.push(&json!({"ph": "f", "bp": "e", "cat": "dependency", "name": "dep", "id": k, "pid": dst.0, "tid": dst.1,
                       "ts": us(run.start[b as usize])}))?;
        stats.arrows += 1;
    }
    w.out.write_all(b"\n]}\n")?;
    Ok(stats)
}

/// `cpu0 -> gpu1` style name of a link.
fn link_name(machine: &Machine, l: u32) -> String {
    let link = &machine.links[l as usize];
    format!("{} -> {} ({})", machine.device_name(link.from), machine.device_name(link.to), link.kind.name())
}
