//! Writes a [`Workload`] as a native CSV trace (the format `read_trace` reads, documented in
//! `traces/README.md`): `# key: value` metadata, then one row per layer with times in microseconds
//! to the nanosecond, so a written trace reads back to the same workload.

use super::Workload;
use std::fmt::Write;

/// The native CSV text of `w`. `comments` become `#` lines at the top (source, GPU, settings).
pub fn native_trace(w: &Workload, comments: &[String]) -> String {
    let us = |ns: u64| format!("{}.{:03}", ns / 1000, ns % 1000);
    let mut s = String::from("# dagsim trace v1 (times in microseconds, sizes in bytes)\n");
    for c in comments {
        for line in c.lines() {
            let _ = writeln!(s, "# {line}");
        }
    }
    let _ = writeln!(s, "# model: {}", w.name);
    let _ = writeln!(s, "# batch_per_gpu: {}", w.batch_per_gpu);
    let _ = writeln!(s, "# sample_bytes: {}", w.sample_bytes);
    let _ = writeln!(s, "# device_sample_bytes: {}", w.device_sample_bytes);
    let _ = writeln!(s, "# update_us: {}", us(w.update.mean_ns));
    if w.fp16 {
        let _ = writeln!(s, "# precision: fp16");
    }
    // Utilisation columns only for workloads that carry it (synthesised ones), so that MPS
    // sharing reads back the same.
    let util = w.layers.iter().all(|l| l.util.is_some());
    // Memory-bound shares likewise (synthesised workloads), for `--compute-contention sms+hbm`.
    let memory = w.layers.iter().all(|l| l.memory.is_some());
    // Tensor lists only when every learnable layer has one, so a per-layer trace stays per-layer.
    let tensors = w.tensor_source() == super::TensorSource::Listed;
    s.push_str("layer,name,forward_us,backward_us,comm_us,grad_bytes");
    s.push_str(if util { ",forward_util,backward_util" } else { "" });
    s.push_str(if memory { ",forward_memory,backward_memory" } else { "" });
    s.push_str(if tensors { ",grad_tensors\n" } else { "\n" });
    let mut id = 0;
    if let Some(d) = w.data_load {
        let _ = writeln!(
            s,
            "0,data,{},0,0,0{}{}{}",
            us(d.mean_ns),
            if util { ",1,1" } else { "" },
            if memory { ",0,0" } else { "" },
            if tensors { "," } else { "" }
        );
    }
    for l in &w.layers {
        id += 1;
        let comm = l.comm.map_or_else(|| "0".to_string(), |c| us(c.mean_ns));
        // Names with commas or quotes are quoted as CSV requires.
        let name =
            if l.name.contains([',', '"']) { format!("\"{}\"", l.name.replace('"', "\"\"")) } else { l.name.clone() };
        let _ = write!(s, "{id},{name},{},{},{comm},{}", us(l.forward.mean_ns), us(l.backward.mean_ns), l.grad_bytes);
        if let Some(u) = l.util.filter(|_| util) {
            let _ = write!(s, ",{},{}", u.forward, u.backward);
        }
        if let Some(m) = l.memory.filter(|_| memory) {
            let _ = write!(s, ",{},{}", m.forward, m.backward);
        }
        if tensors {
            let list: Vec<String> = l.grad_tensors.iter().map(u64::to_string).collect();
            let _ = write!(s, ",{}", list.join(";"));
        }
        s.push('\n');
    }
    s
}
