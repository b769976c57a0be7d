//! Writers for predictions: a text table for people, CSV for spreadsheets, JSON for scripts.

use super::Prediction;
use std::io::Write;

/// A table with one row per prediction, preceded by the setup they share.
pub fn write_text(out: &mut dyn Write, preds: &[Prediction]) -> std::io::Result<()> {
    let Some(p) = preds.first() else { return Ok(()) };
    if p.llm.is_some() {
        for (i, p) in preds.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            if let Some(r) = &p.llm {
                super::plan::write_plan_text(out, p, r)?;
            }
        }
        return Ok(());
    }
    writeln!(
        out,
        "workload {} (batch {}/GPU) | topology {} ({}) | strategy {} | all-reduce {} ({} times)",
        p.workload, p.batch_per_gpu, p.topology, p.gpu_model, p.strategy, p.allreduce, p.comm_source
    )?;
    writeln!(
        out,
        "{:>5} {:>5} {:>16} {:>24} {:>8} {:>18} | {:>10} {:>15} {:>10} {:>10}",
        "gpus",
        "nodes",
        "iteration_time_s",
        "throughput_samples_per_s",
        "speedup",
        "scaling_efficiency",
        "compute_s",
        "communication_s",
        "io_s",
        "idle_s"
    )?;
    for p in preds {
        let b = &p.breakdown;
        writeln!(
            out,
            "{:>5} {:>5} {:>16.6} {:>24.1} {:>8.3} {:>17.1}% | {:>10.6} {:>15.6} {:>10.6} {:>10.6}",
            p.gpus,
            p.nodes,
            p.iteration_time_s,
            p.throughput_samples_per_s,
            p.speedup,
            p.scaling_efficiency * 100.0,
            b.compute,
            b.communication,
            b.io,
            b.idle
        )?;
    }
    // Per-tensor runtimes act on tensors the workload does not list: say what they saw instead.
    if p.runtime != "none" && p.grad_tensors_source == crate::workload::TensorSource::PerLayer {
        writeln!(
            out,
            "note: `{}` lists no gradient tensors; runtime {} sees {} tensors, {}",
            p.workload,
            p.runtime,
            p.grad_tensors,
            p.grad_tensors_source.name()
        )?;
    }
    // How the collectives ran, under the table (tables are read by line), once per distinct
    // description: it can change with the GPU count. Nothing when no collective ran.
    let mut said: Vec<String> = Vec::new();
    for q in preds.iter().filter(|q| !q.collectives.is_empty()) {
        let line = q.collectives_line();
        if !said.contains(&line) {
            writeln!(out, "collectives ({} GPUs): {line}", q.gpus)?;
            said.push(line);
        }
    }
    Ok(())
}

/// A CSV cell of seconds: nine decimals, the engine's nanosecond resolution (no `0.30000000000000004`
/// from dividing integer nanoseconds).
pub fn seconds_cell(s: f64) -> String {
    format!("{s:.9}")
}

/// A CSV cell of samples per second: three decimals.
pub fn rate_cell(r: f64) -> String {
    format!("{r:.3}")
}

/// A CSV cell of a ratio (speedup, efficiency, utilisation): six decimals.
pub fn ratio_cell(r: f64) -> String {
    format!("{r:.6}")
}

/// The CSV columns of one prediction, in order, without utilisation (see [`write_csv`]).
pub fn csv_fields(p: &Prediction) -> Vec<(&'static str, String)> {
    let b = &p.breakdown;
    vec![
        ("workload", p.workload.clone()),
        ("batch_per_gpu", p.batch_per_gpu.to_string()),
        ("gpus", p.gpus.to_string()),
        ("nodes", p.nodes.to_string()),
        ("topology", p.topology.clone()),
        ("gpu_model", p.gpu_model.clone()),
        ("strategy", p.strategy.clone()),
        ("allreduce", p.allreduce.clone()),
        ("comm_source", p.comm_source.clone()),
        ("collective_model", p.collective_model.clone()),
        ("collectives", p.collectives_line()),
        ("runtime", p.runtime.clone()),
        ("grad_tensors", p.grad_tensors.to_string()),
        ("grad_tensors_source", p.grad_tensors_source.key().to_string()),
        ("iteration_time_s", seconds_cell(p.iteration_time_s)),
        ("throughput_samples_per_s", rate_cell(p.throughput_samples_per_s)),
        ("speedup", ratio_cell(p.speedup)),
        ("scaling_efficiency", ratio_cell(p.scaling_efficiency)),
        ("compute_s", seconds_cell(b.compute)),
        ("communication_s", seconds_cell(b.communication)),
        ("io_s", seconds_cell(b.io)),
        ("idle_s", seconds_cell(b.idle)),
    ]
}

/// CSV with a header row; breakdown and utilisation flattened into columns.
pub fn write_csv(out: &mut dyn Write, preds: &[Prediction]) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let util_keys: Vec<String> = preds.first().map(|p| p.utilisation.keys().cloned().collect()).unwrap_or_default();
    let Some(first) = preds.first() else { return w.flush() };
    let mut header: Vec<String> = csv_fields(first).into_iter().map(|(k, _)| k.to_string()).collect();
    let plan_keys: Vec<&str> = first
        .llm
        .as_ref()
        .map(|r| super::plan::plan_csv_fields(r).into_iter().map(|(k, _)| k).collect())
        .unwrap_or_default();
    header.extend(plan_keys.iter().map(|k| k.to_string()));
    header.extend(util_keys.iter().map(|k| format!("util_{k}")));
    w.write_record(&header)?;
    for p in preds {
        let mut row: Vec<String> = csv_fields(p).into_iter().map(|(_, v)| v).collect();
        if !plan_keys.is_empty() {
            match &p.llm {
                Some(r) => row.extend(super::plan::plan_csv_fields(r).into_iter().map(|(_, v)| v)),
                None => row.extend(plan_keys.iter().map(|_| String::new())),
            }
        }
        row.extend(util_keys.iter().map(|k| p.utilisation.get(k).map(|v| ratio_cell(*v)).unwrap_or_default()));
        w.write_record(&row)?;
    }
    w.flush()
}

/// A JSON array of prediction objects (always an array, even for one GPU count).
pub fn write_json(out: &mut dyn Write, preds: &[Prediction]) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, preds)?;
    writeln!(out)
}
