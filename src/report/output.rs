//! Writers for predictions: a text table for people, CSV for spreadsheets, JSON for scripts.

use super::Prediction;
use std::io::Write;

/// A table with one row per prediction, preceded by the setup they share.
pub fn write_text(out: &mut dyn Write, preds: &[Prediction]) -> std::io::Result<()> {
    let Some(p) = preds.first() else { return Ok(()) };
    writeln!(
        out,
        "workload {} (batch {}/GPU) | topology {} ({}) | strategy {} | all-reduce {} ({} times)",
        p.workload, p.batch_per_gpu, p.topology, p.gpu_model, p.strategy, p.allreduce, p.comm_source
    )?;
    writeln!(
        out,
        "{:>5} {:>5} {:>12} {:>12} {:>8} {:>6} | {:>10} {:>10} {:>10} {:>10}",
        "gpus", "nodes", "iter_time_s", "samples/s", "speedup", "eff", "compute_s", "comm_s", "io_s", "idle_s"
    )?;
    for p in preds {
        let b = &p.breakdown;
        writeln!(
            out,
            "{:>5} {:>5} {:>12.6} {:>12.1} {:>8.3} {:>5.1}% | {:>10.6} {:>10.6} {:>10.6} {:>10.6}",
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
    Ok(())
}

/// CSV with a header row; breakdown and utilisation flattened into columns.
pub fn write_csv(out: &mut dyn Write, preds: &[Prediction]) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let util_keys: Vec<String> = preds.first().map(|p| p.utilisation.keys().cloned().collect()).unwrap_or_default();
    let mut header: Vec<String> = [
        "workload",
        "batch_per_gpu",
        "gpus",
        "nodes",
        "topology",
        "gpu_model",
        "strategy",
        "allreduce",
        "comm_source",
        "iteration_time_s",
        "throughput_samples_per_s",
        "speedup",
        "scaling_efficiency",
        "compute_s",
        "communication_s",
        "io_s",
        "idle_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(util_keys.iter().map(|k| format!("util_{k}")));
    w.write_record(&header)?;
    for p in preds {
        let b = &p.breakdown;
        let mut row = vec![
            p.workload.clone(),
            p.batch_per_gpu.to_string(),
            p.gpus.to_string(),
            p.nodes.to_string(),
            p.topology.clone(),
            p.gpu_model.clone(),
            p.strategy.clone(),
            p.allreduce.clone(),
            p.comm_source.clone(),
            p.iteration_time_s.to_string(),
            p.throughput_samples_per_s.to_string(),
            p.speedup.to_string(),
            p.scaling_efficiency.to_string(),
            b.compute.to_string(),
            b.communication.to_string(),
            b.io.to_string(),
            b.idle.to_string(),
        ];
        row.extend(util_keys.iter().map(|k| p.utilisation.get(k).map(|v| v.to_string()).unwrap_or_default()));
        w.write_record(&row)?;
    }
    w.flush()
}

/// A JSON array of prediction objects (always an array, even for one GPU count).
pub fn write_json(out: &mut dyn Write, preds: &[Prediction]) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, preds)?;
    writeln!(out)
}
