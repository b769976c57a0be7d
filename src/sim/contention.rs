//! Compute slowed by the collectives in flight on its GPU (`--compute-contention sms`).
//!
//! An NCCL collective launches one CTA per channel: the kernel's grid is the plan's channel count
//! (NVIDIA/nccl v2.21.5-1 `src/enqueue.cc` l.1355, `grid = {plan->channelCount, 1, 1}`), each CTA
//! asks for the shared memory of NCCL's largest block (l.1357, `ncclShmemDynamicSize`, sized for
//! `NCCL_MAX_NTHREADS` = 640 threads, `src/include/device.h` l.55 and l.406), and those CTAs do not
//! share an SM with compute kernels (NCCL's maintainer, NVIDIA/nccl#689 and #181: NCCL "needs to
//! use all registers", is "optimized to use as little SMs as possible, but not to share SMs").
//! The CTAs stay resident until the collective ends, so a compute kernel that runs beside it has
//! the GPU's SMs less the channels in flight. Here a compute task runs at (SMs - channels) / SMs of
//! its standalone rate while those channels are held, and is re-timed whenever a collective on
//! its GPU starts or ends. Compute tasks carry no tile counts, so the share is proportional (no
//! wave quantisation); HBM traffic of the collective is not charged.
//!
//! Check outside the validation rows: an H100 GEMM of exactly 132 CTAs (one wave on 132 SMs) took
//! nearly twice as long beside an all-gather of 24 CTAs (NVIDIA developer forum, "Compute-
//! communication overlap causes severe GEMM performance degradation because of tail effect",
//! 2025): a second wave for the CTAs that no longer fit. The proportional share gives 132/108 =
//! 1.22x there; wave quantisation would give 2x, so this model is the milder of the two.
//!
//! Channels: the NCCL model's own choice for the call (`NcclPlan::choice`); under the ideal
//! model, the channel count NCCL's tuner picks for the same group, operation and size (default
//! NCCL version, the algorithm forced as the ideal model runs it). Collectives that NCCL does not
//! run (parameter servers, hierarchical, HybridEP, Transformer Engine's userbuffers under
//! `tp-overlap`, marked by the DAG builder) hold no SMs here.
//!
//! Exactness: remaining work is kept in integer SM-nanoseconds (standalone ns x SMs), so a task
//! re-timed any number of times ends at the same instant in every run; end events carry a
//! generation so a superseded end is ignored. Speed: an end moved later posts no event; the one
//! already posted finds the task unfinished and posts its end then, so a long kernel beside many
//! collectives costs one event per time it is found unfinished, not two per collective.

use crate::collective::nccl::tuner::Force;
use crate::collective::nccl::version::NcclAlgo;
use crate::collective::nccl::{NcclConfig, TunerOnly};
use crate::collective::{Algorithm, CollectiveModel, CollectiveOp, Layout, Plan};
use crate::dag::{Category, Dag, TaskId, Work};
use crate::hw::{ComputeContention, Machine};
use crate::units::Nanos;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// A compute task running on a GPU.
#[derive(Debug, Clone, Copy)]
struct Running {
    task: TaskId,
    generation: u32,
    /// Start of the current stretch at a constant SM count.
    since: Nanos,
    /// Work left at `since`, in SM-nanoseconds.
    left: u128,
    /// SMs it has during the stretch.
    sms: u64,
    end: Nanos,
    /// The instant of its live `ComputeDone` event: never after `end`. A re-time that moves the end
    /// later posts nothing; the event at `posted` then re-posts the end (one event, not one per
    /// collective that starts or ends beside the task).
    posted: Nanos,
}

/// A compute task's end (re-)scheduled: post `ComputeDone(task, generation)` at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retimed {
    pub at: Nanos,
    pub task: TaskId,
    pub generation: u32,
}

/// What a `ComputeDone` event found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// The task ends now.
    Done,
    /// The task ends later (it was slowed after the event was posted): post this end.
    Later(Retimed),
    /// A superseded event: nothing to do.
    Stale,
}

/// The state of the model during one run.
pub(crate) struct Contention {
    sms: u64,
    /// NCCL channels in flight per simulated GPU.
    busy: Vec<u64>,
    running: Vec<Vec<Running>>,
    /// Collective tasks in flight: the channels each holds on every member GPU.
    held: HashMap<TaskId, u64>,
    /// Per group, its members that have tasks here (local GPU indices).
    members: HashMap<u32, Arc<[u32]>>,
    tuners: HashMap<(u32, u32, Algorithm), Arc<TunerOnly>>,
    /// Per (group, algorithm, operation, bytes): the channels of one call.
    channels: HashMap<(u32, Algorithm, CollectiveOp, u64), u64>,
}

impl Contention {
    /// The model for a run, or None when it is off or the machine's GPU has no known SM count.
    pub(crate) fn new(dag: &Dag, machine: &Machine) -> Option<Box<Contention>> {
        if machine.compute_contention == ComputeContention::Off {
            return None;
        }
        let sms = crate::workload::GpuSpec::by_name(&machine.gpu_model).ok()?.sms as u64;
        Some(Self::with_sms(dag, sms))
    }

    fn with_sms(dag: &Dag, sms: u64) -> Box<Contention> {
        let gpus = dag.tasks().iter().filter_map(|t| t.gpu).max().map_or(0, |g| g as usize + 1);
        Box::new(Contention {
            sms: sms.max(1),
            busy: vec![0; gpus],
            running: vec![Vec::new(); gpus],
            held: HashMap::default(),
            members: HashMap::default(),
            tuners: HashMap::default(),
            channels: HashMap::default(),
        })
    }

    /// True for the tasks the model slows: kernels of a GPU's compute.
    pub(crate) fn is_compute(dag: &Dag, t: TaskId) -> bool {
        let task = dag.task(t);
        task.gpu.is_some() && task.phase.category() == Category::Compute && matches!(task.work, Work::Fixed { .. })
    }

    fn available(&self, gpu: usize) -> u64 {
        // A kernel always keeps one SM: NCCL never takes a whole GPU.
        self.sms - self.busy[gpu].min(self.sms - 1)
    }

    /// A compute task of `ns` standalone nanoseconds starts on `gpu` at `now`: its end.
    pub(crate) fn start_compute(&mut self, t: TaskId, gpu: u32, now: Nanos, ns: Nanos) -> Retimed {
        let g = gpu as usize;
        self.grow(g);
        let sms = self.available(g);
        let left = ns as u128 * self.sms as u128;
        let end = now.saturating_add(ceil_div(left, sms));
        self.running[g].push(Running { task: t, generation: 0, since: now, left, sms, end, posted: end });
        Retimed { at: end, task: t, generation: 0 }
    }

    /// `ComputeDone(t, generation)` at `now`: the task is done, ends later, or the event is stale.
    pub(crate) fn compute_done(&mut self, dag: &Dag, t: TaskId, generation: u32, now: Nanos) -> Due {
        match dag.task(t).gpu {
            Some(g) => self.due(g as usize, t, generation, now),
            None => Due::Stale,
        }
    }

    fn due(&mut self, g: usize, t: TaskId, generation: u32, now: Nanos) -> Due {
        let list = &mut self.running[g];
        let Some(i) = list.iter().position(|r| r.task == t && r.generation == generation) else { return Due::Stale };
        let r = &mut list[i];
        if r.end > now {
            r.posted = r.end;
            return Due::Later(Retimed { at: r.end, task: t, generation });
        }
        list.swap_remove(i);
        Due::Done
    }

    /// A collective task starts: its channels are held on every member GPU with tasks here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_collective(
        &mut self,
        dag: &Dag,
        machine: &Machine,
        t: TaskId,
        group: u32,
        plan: &Plan,
        op: CollectiveOp,
        algorithm: Algorithm,
        bytes: u64,
        now: Nanos,
        out: &mut Vec<Retimed>,
    ) {
        let channels =
            if dag.is_not_nccl(t) { 0 } else { self.channels_of(dag, machine, group, plan, op, algorithm, bytes) };
        if channels == 0 {
            return;
        }
        self.held.insert(t, channels);
        let members = self.members_of(dag, group);
        for &g in members.iter() {
            self.busy[g as usize] += channels;
            self.retime(g as usize, now, out);
        }
    }

    /// A task ended: if it was a collective holding channels, they are free again.
    pub(crate) fn task_finished(&mut self, dag: &Dag, t: TaskId, now: Nanos, out: &mut Vec<Retimed>) {
        if self.held.is_empty() {
            return;
        }
        let Work::Collective { group, .. } = dag.task(t).work else { return };
        let Some(channels) = self.held.remove(&t) else { return };
        let members = self.members_of(dag, group);
        for &g in members.iter() {
            self.busy[g as usize] -= channels;
            self.retime(g as usize, now, out);
        }
    }

    /// The GPU's SM count changed at `now`: every compute task on it continues at the new share.
    #[inline]
    fn retime(&mut self, g: usize, now: Nanos, out: &mut Vec<Retimed>) {
        if self.running[g].is_empty() {
            return;
        }
        let sms = self.available(g);
        for r in self.running[g].iter_mut() {
            if r.sms == sms {
                continue;
            }
            let done = (now - r.since) as u128 * r.sms as u128;
            r.left = r.left.saturating_sub(done);
            r.since = now;
            r.sms = sms;
            r.end = now.saturating_add(ceil_div(r.left, sms));
            // Only an end before the posted event needs a new one (the old one goes stale).
            if r.end < r.posted {
                r.posted = r.end;
                r.generation = r.generation.wrapping_add(1);
                out.push(Retimed { at: r.end, task: r.task, generation: r.generation });
            }
        }
    }

    fn members_of(&mut self, dag: &Dag, group: u32) -> Arc<[u32]> {
        let members: Arc<[u32]> = self
            .members
            .entry(group)
            .or_insert_with(|| dag.group(group).iter().filter_map(|&r| dag.local_of(r)).collect())
            .clone();
        if let Some(&top) = members.iter().max() {
            self.grow(top as usize);
        }
        members
    }

    /// Makes room for GPU `g` (GPUs of a group may have no compute task of their own).
    fn grow(&mut self, g: usize) {
        if g >= self.busy.len() {
            self.busy.resize(g + 1, 0);
            self.running.resize(g + 1, Vec::new());
        }
    }

    /// The NCCL channels one call holds on each member GPU (0: not an NCCL collective).
    #[allow(clippy::too_many_arguments)]
    fn channels_of(
        &mut self,
        dag: &Dag,
        machine: &Machine,
        group: u32,
        plan: &Plan,
        op: CollectiveOp,
        algorithm: Algorithm,
        bytes: u64,
    ) -> u64 {
        if let Plan::Nccl(p) = plan {
            return p.choice.channels as u64;
        }
        let nccl = matches!(algorithm, Algorithm::Ring | Algorithm::Tree | Algorithm::Auto)
            && !matches!(op, CollectiveOp::HybridAllToAll { .. });
        let ranks = dag.group(group);
        if !nccl || ranks.len() < 2 || bytes == 0 {
            return 0;
        }
        let key = (group, algorithm, op, bytes);
        if let Some(&c) = self.channels.get(&key) {
            return c;
        }
        let layout = Layout::from_nodes(ranks.iter().map(|&r| machine.gpus[r as usize].node));
        let tuner = self
            .tuners
            .entry((layout.ranks, layout.per_node, algorithm))
            .or_insert_with(|| Arc::new(TunerOnly::new(machine, ranks, nccl_config(machine.collectives, algorithm))))
            .clone();
        let c = tuner.choose(op, bytes).map_or(0, |choice| choice.channels.max(1) as u64);
        self.channels.insert(key, c);
        c
    }
}

/// The NCCL configuration whose tuner names a call's channels: the NCCL model's own, else NCCL's
/// default version with the algorithm the ideal model runs (a ring unless a tree is asked for).
fn nccl_config(model: CollectiveModel, algorithm: Algorithm) -> NcclConfig {
    let mut config = match model {
        CollectiveModel::Nccl(c) => c,
        CollectiveModel::Ideal => NcclConfig::default(),
    };
    if config.force.algo.is_none() {
        let algo = match (model, algorithm) {
            (_, Algorithm::Tree) => Some(NcclAlgo::Tree),
            (CollectiveModel::Ideal, _) | (_, Algorithm::Ring) => Some(NcclAlgo::Ring),
            _ => None,
        };
        config.force = Force { algo, ..config.force };
    }
    config
}

fn ceil_div(work: u128, sms: u64) -> Nanos {
    // The work of a task shorter than about four years on 132 SMs fits 64 bits: the cheap division.
    match u64::try_from(work) {
        Ok(w) => w.div_ceil(sms),
        Err(_) => work.div_ceil(sms as u128).min(Nanos::MAX as u128) as Nanos,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(c: &Contention, g: usize) -> Vec<(TaskId, Nanos)> {
        c.running[g].iter().map(|r| (r.task, r.end)).collect()
    }

    /// A contention state of one GPU with `sms` SMs, `busy` of them held, nothing running.
    fn one_gpu(sms: u64, busy: u64) -> Contention {
        Contention {
            sms,
            busy: vec![busy],
            running: vec![Vec::new()],
            held: HashMap::default(),
            members: HashMap::default(),
            tuners: HashMap::default(),
            channels: HashMap::default(),
        }
    }

    /// One compute task of 1,000 ns on a 100-SM GPU; a collective of 20 channels runs from 200 to
    /// 600 ns. By hand: 200 ns at 100 SMs does 20,000 of 100,000 SM-ns; 400 ns at 80 SMs does
    /// 32,000; the last 48,000 at 100 SMs take 480 ns: the task ends at 1,080 ns (80 ns late,
    /// 400 x 20/100).
    #[test]
    fn one_collective_of_k_channels_on_n_sms_slows_compute_by_its_share() {
        let mut c = one_gpu(100, 0);
        let first = c.start_compute(7, 0, 0, 1_000);
        assert_eq!(first, Retimed { at: 1_000, task: 7, generation: 0 });
        let mut out = Vec::new();
        c.busy[0] += 20;
        c.retime(0, 200, &mut out);
        // 80,000 SM-ns left at 80 SMs: 1,000 ns more. Later than the event posted at 1,000, which
        // stays: nothing new is posted.
        assert_eq!(running(&c, 0), vec![(7, 1_200)]);
        c.busy[0] -= 20;
        c.retime(0, 600, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(running(&c, 0), vec![(7, 1_080)]);
        // The event at 1,000 finds 80 ns left and posts the end; that one finishes the task.
        let later = Retimed { at: 1_080, task: 7, generation: 0 };
        assert_eq!(c.due(0, 7, 0, 1_000), Due::Later(later));
        assert_eq!(c.due(0, 7, 0, 1_080), Due::Done);
        assert!(running(&c, 0).is_empty());
        // A compute task that starts while the channels are held gets the 80 SMs from its start:
        // 500 ns of work take 625 ns.
        c.busy[0] += 20;
        assert_eq!(c.start_compute(8, 0, 700, 500).at, 700 + 625);
        // The channels free at 900: 16,000 SM-ns done, 34,000 left at 100 SMs end it at 1,240,
        // before the event posted at 1,325, so a new one is posted and the old one goes stale.
        c.busy[0] -= 20;
        c.retime(0, 900, &mut out);
        assert_eq!(out, vec![Retimed { at: 1_240, task: 8, generation: 1 }]);
        assert_eq!(c.due(0, 8, 1, 1_240), Due::Done);
        assert_eq!(c.due(0, 8, 0, 1_325), Due::Stale);
    }

    /// Rounding: 3 ns of work on 7 SMs with 4 held take ceil(21 / 3) = 7 ns; a re-time at the very
    /// instant the task ends leaves nothing and keeps its end.
    #[test]
    fn remaining_work_is_whole_and_a_retime_at_the_end_keeps_it() {
        let mut c = one_gpu(7, 4);
        assert_eq!(c.start_compute(1, 0, 10, 3).at, 17);
        let mut out = Vec::new();
        c.busy[0] = 0;
        c.retime(0, 17, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // More channels than SMs: the kernel keeps one SM.
        c.busy[0] = 50;
        assert_eq!(c.start_compute(2, 0, 0, 2).at, 14);
    }
}
