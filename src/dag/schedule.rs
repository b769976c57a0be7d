//! Pipeline schedules: the order in which one pipeline stage runs the forward and backward passes
//! of its micro-batches (and, interleaved, of its model chunks). GPipe runs every forward, then
//! every backward; 1F1B (PipeDream-Flush, Megatron's default) warms up with `pp - stage - 1`
//! forwards and then alternates; interleaved 1F1B (Narayanan et al. 2021) gives each stage `vp`
//! chunks of layers and orders chunk-micro-batches as Megatron's
//! `forward_backward_pipelining_with_interleaving` does. The DAG builder chains a stage's work in
//! this order; the memory model reads the peak number of forwards awaiting their backward.
//! Knows stages, chunks and micro-batches only.

use serde::Serialize;

/// Which schedule a pipeline follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// All forwards, then all backwards (Huang et al. 2019).
    Gpipe,
    /// One forward, one backward after a warm-up (Narayanan et al. 2021, PipeDream-Flush).
    #[default]
    OneFOneB,
    /// 1F1B over `vp` model chunks per stage (Narayanan et al. 2021, Sec. 2.2.2).
    Interleaved,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Gpipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
            Schedule::Interleaved => "interleaved",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "gpipe" => Some(Schedule::Gpipe),
            "1f1b" | "pipedream-flush" => Some(Schedule::OneFOneB),
            "interleaved" | "interleaved-1f1b" => Some(Schedule::Interleaved),
            _ => None,
        }
    }
}

/// Forward or backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    Forward,
    Backward,
}

/// One unit of a stage's work: a pass of one micro-batch through one of its model chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Step {
    pub micro_batch: u32,
    pub chunk: u32,
    pub pass: Pass,
}

/// The order of `stage`'s steps for `micro_batches` micro-batches on `pp` stages of `vp` chunks
/// each (`vp` is 1 unless the schedule is interleaved).
pub fn stage_order(schedule: Schedule, pp: u32, vp: u32, micro_batches: u32, stage: u32) -> Vec<Step> {
    let m = micro_batches;
    let step = |micro_batch, chunk, pass| Step { micro_batch, chunk, pass };
    match schedule {
        Schedule::Gpipe => {
            let mut v: Vec<Step> = (0..m).map(|j| step(j, 0, Pass::Forward)).collect();
            v.extend((0..m).map(|j| step(j, 0, Pass::Backward)));
            v
        }
        Schedule::OneFOneB => {
            let warmup = (pp - stage - 1).min(m);
            let mut v: Vec<Step> = (0..warmup).map(|j| step(j, 0, Pass::Forward)).collect();
            for k in 0..m - warmup {
                v.push(step(warmup + k, 0, Pass::Forward));
                v.push(step(k, 0, Pass::Backward));
            }
            v.extend((m - warmup..m).map(|j| step(j, 0, Pass::Backward)));
            v
        }
        Schedule::Interleaved => {
            let total = m * vp;
            // Megatron: k-th forward of a stage is micro-batch (k / (pp vp)) pp + k mod pp of
            // chunk (k / pp) mod vp; backwards walk the chunks in reverse.
            let at = |k: u32, pass| {
                let group = k / (pp * vp);
                let micro_batch = group * pp + k % pp;
                let c = (k / pp) % vp;
                let chunk = if pass == Pass::Forward { c } else { vp - 1 - c };
                step(micro_batch, chunk, pass)
            };
            let warmup = if m == pp { total } else { ((pp - stage - 1) * 2 + (vp - 1) * pp).min(total) };
            let mut v: Vec<Step> = (0..warmup).map(|k| at(k, Pass::Forward)).collect();
            for k in 0..total - warmup {
                v.push(at(warmup + k, Pass::Forward));
                v.push(at(k, Pass::Backward));
            }
            v.extend((total - warmup..total).map(|k| at(k, Pass::Backward)));
            v
        }
    }
}

/// The most forwards a stage holds whose backward has not run yet, over its order: how many
/// micro-batch-chunks of activations it keeps at its peak.
pub fn peak_in_flight(order: &[Step]) -> u32 {
    let (mut now, mut peak) = (0i64, 0i64);
    for s in order {
        now += if s.pass == Pass::Forward { 1 } else { -1 };
        peak = peak.max(now);
    }
    peak as u32
}

/// The step of the previous stage (or chunk) whose output a step needs, with its stage, or None
/// for the model's first forward. Forward (j, c) on stage s needs forward (j, c) on s - 1, or on
/// the last stage's chunk c - 1 when s = 0; backward (j, c) needs backward (j, c) on s + 1, or
/// on the first stage's chunk c + 1 when s is last; the last chunk's backward needs its own
/// forward (the loss).
pub fn upstream(step: Step, stage: u32, pp: u32, vp: u32) -> Option<(u32, Step)> {
    let Step { micro_batch, chunk, pass } = step;
    let at = |stage, chunk, pass| Some((stage, Step { micro_batch, chunk, pass }));
    match pass {
        Pass::Forward if stage > 0 => at(stage - 1, chunk, Pass::Forward),
        Pass::Forward if chunk > 0 => at(pp - 1, chunk - 1, Pass::Forward),
        Pass::Forward => None,
        Pass::Backward if stage + 1 < pp => at(stage + 1, chunk, Pass::Backward),
        Pass::Backward if chunk + 1 < vp => at(0, chunk + 1, Pass::Backward),
        Pass::Backward => at(stage, chunk, Pass::Forward),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(s: Schedule, pp: u32, vp: u32, m: u32, stage: u32) -> Vec<(u32, u32, char)> {
        stage_order(s, pp, vp, m, stage)
            .into_iter()
            .map(|x| (x.micro_batch, x.chunk, if x.pass == Pass::Forward { 'F' } else { 'B' }))
            .collect()
    }

    #[test]
    fn one_f_one_b_warms_up_with_the_stages_below() {
        // Narayanan et al. 2021, Fig. 4 (top): 4 stages, 8 micro-batches.
        let first = order(Schedule::OneFOneB, 4, 1, 8, 0);
        let head: Vec<_> = first.iter().take(6).map(|x| (x.0, x.2)).collect();
        assert_eq!(head, vec![(0, 'F'), (1, 'F'), (2, 'F'), (3, 'F'), (0, 'B'), (4, 'F')]);
        let last = order(Schedule::OneFOneB, 4, 1, 8, 3);
        assert_eq!(last[0], (0, 0, 'F'));
        assert_eq!(last[1], (0, 0, 'B'));
        for stage in 0..4 {
            let o = stage_order(Schedule::OneFOneB, 4, 1, 8, stage);
            assert_eq!(o.len(), 16);
            assert_eq!(peak_in_flight(&o), 4 - stage);
        }
        // Fewer micro-batches than stages: every forward first.
        assert_eq!(peak_in_flight(&stage_order(Schedule::OneFOneB, 8, 1, 3, 0)), 3);
        assert_eq!(peak_in_flight(&stage_order(Schedule::Gpipe, 4, 1, 8, 3)), 8);
    }

    #[test]
    fn interleaving_holds_what_korthikanti_counts() {
        // The first stage holds 1 + (p - 1) / (p v) model-sized sets of activations: with p = 8,
        // v = 3 that is 31 chunk-micro-batches of L / (p v) layers each.
        for (pp, vp, m) in [(8, 3, 64), (35, 3, 280), (4, 2, 8)] {
            let o = stage_order(Schedule::Interleaved, pp, vp, m, 0);
            assert_eq!(o.len() as u32, 2 * m * vp);
            assert_eq!(peak_in_flight(&o), 2 * (pp - 1) + (vp - 1) * pp + 1);
            // Each chunk-micro-batch appears once per pass.
            let mut seen = std::collections::HashSet::new();
            assert!(o.iter().all(|s| seen.insert(*s)));
        }
        // Narayanan et al. 2021, Fig. 4 (bottom): 4 stages, 2 chunks: micro-batches 0-3 of chunk 0,
        // then 0-3 of chunk 1.
        let o = order(Schedule::Interleaved, 4, 2, 8, 0);
        let fwd: Vec<_> = o.iter().filter(|x| x.2 == 'F').take(8).map(|x| (x.0, x.1)).collect();
        assert_eq!(fwd, vec![(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]);
    }

    #[test]
    fn every_step_has_its_input_before_it() {
        // Upstream steps form a chain through all stages and chunks, ending at the loss.
        let (pp, vp) = (4, 2);
        let mut at = (3, Step { micro_batch: 5, chunk: 1, pass: Pass::Forward });
        let mut hops = 0;
        while let Some(prev) = upstream(at.1, at.0, pp, vp) {
            at = prev;
            hops += 1;
        }
        assert_eq!((at.0, at.1.chunk, hops), (0, 0, 7));
        let loss = upstream(Step { micro_batch: 0, chunk: 1, pass: Pass::Backward }, 3, pp, vp);
        assert_eq!(loss, Some((3, Step { micro_batch: 0, chunk: 1, pass: Pass::Forward })));
        assert_eq!(Schedule::parse("1f1b"), Some(Schedule::OneFOneB));
    }
}
