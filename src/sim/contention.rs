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
//! wave quantisation); the HBM traffic of the collective is charged only under `sms+hbm` (below).
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
//! Memory bandwidth (`--compute-contention sms+hbm`, [`Contention::hbm_traffic`] and
//! [`Contention::rate`]): a collective also streams its bytes through the GPU's memory. Each
//! byte a rank receives is stored into NCCL's FIFO buffer and read back from it (in the FIFO's
//! line format: Simple 1 byte per byte, LL a 16-byte line per 8 data bytes, `union
//! ncclLLFifoLine` in `src/include/device.h` l.38-51 of NCCL v2.21.5-1, LL128 a 128-byte line
//! per 120, `NCCL_LL128_LINEELEMS`/`NCCL_LL128_DATAELEMS` l.70-72), and read from or written to
//! the user's buffer once (the reduction's own input, the gathered output): "300GB/s needs to be
//! multiplied by at least 2x for memory bandwidth, as we need to store to memory, then read back
//! from it. If you add reading from or writing to user data, it can be 3x" (NCCL's maintainer,
//! NVIDIA/nccl#1428). A call's received bytes per rank are nccl-tests' bus bytes (bus factor x
//! size) over the time NCCL's own tuner gives the call (`Choice::model_us`). A compute task's
//! memory-bound share ([`crate::dag::Dag::memory_share`], from the workload's roofline) streams
//! at the GPU's achievable bandwidth alone (peak x [`MEMORY_EFFICIENCY`], synthesis' own
//! STREAM-like figure); beside collectives it gets what their traffic leaves, and never less
//! than a max-min fair share (1/(k+1) with k collectives), while its math share keeps the SM
//! model. A task re-timed this way runs at 1 / ((1 - m) / sm_share + m / min(sm_share,
//! memory_share)) of its standalone rate, for memory-bound share m (the two parts interleaved).
//! Not charged: collectives whose tuner gives no time (point-to-point patterns), traffic that
//! NCCL does not run, and the collective's own slowdown from the shared memory.
//!
//! Exactness: remaining work is kept in integer units of standalone ns x SMs x [`WORK_SCALE`],
//! so a task re-timed any number of times ends at the same instant in every run (and on the SMs
//! alone exactly where whole SM-nanoseconds put it); end events carry a generation so a
//! superseded end is ignored. Speed: an end moved later posts no event; the one already posted
//! finds the task unfinished and posts its end then, so a long kernel beside many collectives
//! costs one event per time it is found unfinished, not two per collective.

use crate::collective::nccl::tuner::{Choice, Force};
use crate::collective::nccl::version::{NcclAlgo, Proto};
use crate::collective::nccl::{NcclConfig, TunerOnly};
use crate::collective::{Algorithm, CollectiveModel, CollectiveOp, Layout, Plan};
use crate::dag::{Category, Dag, TaskId, Work, MEMORY_SHARE_ONE};
use crate::hw::{ComputeContention, Machine};
use crate::units::Nanos;
use crate::workload::synth::MEMORY_EFFICIENCY;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// Work units per SM-nanosecond: room for a memory-bound rate between whole SMs.
const WORK_SCALE: u128 = 1 << 16;

/// A compute task running on a GPU.
#[derive(Debug, Clone, Copy)]
struct Running {
    task: TaskId,
    generation: u32,
    /// Start of the current stretch at a constant rate.
    since: Nanos,
    /// Work left at `since`, in units of SM-ns / [`WORK_SCALE`].
    left: u128,
    /// Work units it does per ns during the stretch.
    rate: u128,
    /// Its memory-bound share, in parts of [`MEMORY_SHARE_ONE`].
    memory: u32,
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
    /// Collective tasks in flight: the channels each holds on every member GPU, and its memory
    /// traffic there (bytes/us).
    held: HashMap<TaskId, (u64, u64)>,
    /// Per group, its members that have tasks here (local GPU indices).
    members: HashMap<u32, Arc<[u32]>>,
    tuners: HashMap<(u32, u32, Algorithm), Arc<TunerOnly>>,
    /// Per (group, algorithm, operation, bytes): the channels of one call and its memory
    /// traffic on each member, bytes/us.
    channels: HashMap<(u32, Algorithm, CollectiveOp, u64), (u64, u64)>,
    /// The memory bandwidth a streaming kernel reaches alone, bytes/us; 0: traffic not charged.
    hbm: u64,
    /// Per simulated GPU: the memory traffic of the collectives in flight (bytes/us), and how
    /// many of them charge any.
    traffic: Vec<u64>,
    streams: Vec<u64>,
}

impl Contention {
    /// The model for a run, or None when it is off or the machine's GPU has no known SM count.
    pub(crate) fn new(dag: &Dag, machine: &Machine) -> Option<Box<Contention>> {
        if machine.compute_contention == ComputeContention::Off {
            return None;
        }
        let gpu = crate::workload::GpuSpec::by_name(&machine.gpu_model).ok()?;
        let hbm = match machine.compute_contention {
            ComputeContention::SmsHbm => (gpu.mem_bytes_per_ns() * MEMORY_EFFICIENCY * 1e3).round() as u64,
            _ => 0,
        };
        Some(Self::with_sms(dag, gpu.sms as u64, hbm))
    }

    fn with_sms(dag: &Dag, sms: u64, hbm: u64) -> Box<Contention> {
        let gpus = dag.tasks().iter().filter_map(|t| t.gpu).max().map_or(0, |g| g as usize + 1);
        Box::new(Contention {
            sms: sms.max(1),
            busy: vec![0; gpus],
            running: vec![Vec::new(); gpus],
            held: HashMap::default(),
            members: HashMap::default(),
            tuners: HashMap::default(),
            channels: HashMap::default(),
            hbm,
            traffic: vec![0; gpus],
            streams: vec![0; gpus],
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

    /// Compute task `t` of `ns` standalone nanoseconds starts on `gpu` at `now`: its end. Its
    /// memory-bound share is looked up only where it is read (`sms+hbm`): the lookup is a search.
    pub(crate) fn start_task(&mut self, dag: &Dag, t: TaskId, gpu: u32, now: Nanos, ns: Nanos) -> Retimed {
        let memory = if self.hbm > 0 { dag.memory_share(t) } else { 0 };
        self.start_compute(t, gpu, now, ns, memory)
    }

    /// A compute task of `ns` standalone nanoseconds, `memory` of it memory-bound (parts of
    /// [`MEMORY_SHARE_ONE`]), starts on `gpu` at `now`: its end.
    fn start_compute(&mut self, t: TaskId, gpu: u32, now: Nanos, ns: Nanos, memory: u32) -> Retimed {
        let g = gpu as usize;
        self.grow(g);
        let rate = self.rate(g, memory);
        let left = ns as u128 * self.sms as u128 * WORK_SCALE;
        let end = now.saturating_add(ceil_div(left, rate));
        self.running[g].push(Running { task: t, generation: 0, since: now, left, rate, memory, end, posted: end });
        Retimed { at: end, task: t, generation: 0 }
    }

    /// Work units per ns of a task on GPU `g` with `memory` parts memory-bound: the SMs left
    /// (x [`WORK_SCALE`]), or less where the memory the collectives leave is the smaller share.
    fn rate(&self, g: usize, memory: u32) -> u128 {
        let sms = self.available(g) as u128;
        let on_sms = sms * WORK_SCALE;
        if memory == 0 || self.hbm == 0 || self.traffic[g] == 0 {
            return on_sms;
        }
        let (total, hbm) = (self.sms as u128, self.hbm as u128);
        // Max-min fair between the kernel and each collective once their demand exceeds it.
        let left = hbm.saturating_sub(self.traffic[g] as u128).max(hbm / (self.streams[g] as u128 + 1)).max(1);
        // Memory share left / B >= SMs left / SMs: the SMs bound both parts.
        if left * total >= hbm * sms {
            return on_sms;
        }
        // 1 / ((1 - m) total / sms + m hbm / left) of the standalone rate, m = memory / ONE.
        let one = MEMORY_SHARE_ONE as u128;
        let m = memory.min(MEMORY_SHARE_ONE) as u128;
        let num = WORK_SCALE * total * one * sms * left;
        let den = (one - m) * total * left + m * hbm * sms;
        (num / den).clamp(1, on_sms)
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
        let (channels, traffic) =
            if dag.is_not_nccl(t) { (0, 0) } else { self.channels_of(dag, machine, group, plan, op, algorithm, bytes) };
        if channels == 0 {
            return;
        }
        self.held.insert(t, (channels, traffic));
        let members = self.members_of(dag, group);
        for &g in members.iter() {
            let g = g as usize;
            self.busy[g] += channels;
            if traffic > 0 {
                self.traffic[g] += traffic;
                self.streams[g] += 1;
            }
            self.retime(g, now, out);
        }
    }

    /// A task ended: if it was a collective holding channels, they are free again.
    pub(crate) fn task_finished(&mut self, dag: &Dag, t: TaskId, now: Nanos, out: &mut Vec<Retimed>) {
        if self.held.is_empty() {
            return;
        }
        let Work::Collective { group, .. } = dag.task(t).work else { return };
        let Some((channels, traffic)) = self.held.remove(&t) else { return };
        let members = self.members_of(dag, group);
        for &g in members.iter() {
            let g = g as usize;
            self.busy[g] -= channels;
            if traffic > 0 {
                self.traffic[g] -= traffic;
                self.streams[g] -= 1;
            }
            self.retime(g, now, out);
        }
    }

    /// The GPU's SMs or memory traffic changed at `now`: every compute task on it continues at
    /// its new rate.
    #[inline]
    fn retime(&mut self, g: usize, now: Nanos, out: &mut Vec<Retimed>) {
        if self.running[g].is_empty() {
            return;
        }
        let mut running = std::mem::take(&mut self.running[g]);
        for r in running.iter_mut() {
            let rate = self.rate(g, r.memory);
            if r.rate == rate {
                continue;
            }
            let done = (now - r.since) as u128 * r.rate;
            r.left = r.left.saturating_sub(done);
            r.since = now;
            r.rate = rate;
            r.end = now.saturating_add(ceil_div(r.left, rate));
            // Only an end before the posted event needs a new one (the old one goes stale).
            if r.end < r.posted {
                r.posted = r.end;
                r.generation = r.generation.wrapping_add(1);
                out.push(Retimed { at: r.end, task: r.task, generation: r.generation });
            }
        }
        self.running[g] = running;
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
            self.traffic.resize(g + 1, 0);
            self.streams.resize(g + 1, 0);
        }
    }

    /// The NCCL channels one call holds on each member GPU (0: not an NCCL collective), and its
    /// memory traffic there (bytes/us; 0 unless charged).
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
    ) -> (u64, u64) {
        let ranks = dag.group(group);
        if let Plan::Nccl(p) = plan {
            return (p.choice.channels as u64, self.hbm_traffic(&p.choice, op, ranks.len() as u32, bytes));
        }
        let nccl = matches!(algorithm, Algorithm::Ring | Algorithm::Tree | Algorithm::Auto)
            && !matches!(op, CollectiveOp::HybridAllToAll { .. });
        if !nccl || ranks.len() < 2 || bytes == 0 {
            return (0, 0);
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
        let c = tuner.choose(op, bytes).map_or((0, 0), |choice| {
            (choice.channels.max(1) as u64, self.hbm_traffic(&choice, op, ranks.len() as u32, bytes))
        });
        self.channels.insert(key, c);
        c
    }

    /// The memory traffic (bytes/us) on each of `n` members of a call of `op` on `bytes` that
    /// NCCL runs as `choice`: its bus bytes over the tuner's time for the call, times the
    /// passes each received byte makes through memory under the choice's protocol. 0 when
    /// traffic is not charged or the tuner gives no time.
    fn hbm_traffic(&self, choice: &Choice, op: CollectiveOp, n: u32, bytes: u64) -> u64 {
        if self.hbm == 0 || choice.model_us.is_nan() || choice.model_us <= 0.0 || n < 2 {
            return 0;
        }
        let bus_bytes = op.bus_factor(n) * bytes as f64;
        (bus_bytes * memory_passes(choice.proto) / choice.model_us).round() as u64
    }
}

/// Passes through memory per byte a rank receives under `proto`: into NCCL's FIFO buffer and
/// back out of it, in the FIFO's line format (bytes per data byte: Simple 1, LL 16/8, LL128
/// 128/120; NCCL v2.21.5-1 `src/include/device.h` l.38-51 and l.70-72), plus one read or write
/// of the user's buffer (NVIDIA/nccl#1428: "at least 2x ... it can be 3x").
fn memory_passes(proto: Proto) -> f64 {
    let line = match proto {
        Proto::Simple => 1.0,
        Proto::Ll => 16.0 / 8.0,
        Proto::Ll128 => 128.0 / 120.0,
    };
    2.0 * line + 1.0
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

fn ceil_div(work: u128, rate: u128) -> Nanos {
    // The work of a task shorter than about half an hour on 132 SMs fits 64 bits: the cheap division.
    match (u64::try_from(work), u64::try_from(rate)) {
        (Ok(w), Ok(r)) => w.div_ceil(r),
        _ => work.div_ceil(rate).min(Nanos::MAX as u128) as Nanos,
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
            hbm: 0,
            traffic: vec![0],
            streams: vec![0],
        }
    }

    /// One compute task of 1,000 ns on a 100-SM GPU; a collective of 20 channels runs from 200 to
    /// 600 ns. By hand: 200 ns at 100 SMs does 20,000 of 100,000 SM-ns; 400 ns at 80 SMs does
    /// 32,000; the last 48,000 at 100 SMs take 480 ns: the task ends at 1,080 ns (80 ns late,
    /// 400 x 20/100).
    #[test]
    fn one_collective_of_k_channels_on_n_sms_slows_compute_by_its_share() {
        let mut c = one_gpu(100, 0);
        let first = c.start_compute(7, 0, 0, 1_000, 0);
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
        assert_eq!(c.start_compute(8, 0, 700, 500, 0).at, 700 + 625);
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
        assert_eq!(c.start_compute(1, 0, 10, 3, 0).at, 17);
        let mut out = Vec::new();
        c.busy[0] = 0;
        c.retime(0, 17, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // More channels than SMs: the kernel keeps one SM.
        c.busy[0] = 50;
        assert_eq!(c.start_compute(2, 0, 0, 2, 0).at, 14);
    }

    /// Half of a 1,000 ns task is memory-bound; a 100-SM GPU streams 1,000 bytes/us alone. A
    /// collective of 20 channels and 400 bytes/us of memory traffic runs from 200 to 600 ns. By
    /// hand: the SMs left are 80% of the GPU and the memory left 60%, so the task runs at
    /// 1 / (0.5 / 0.8 + 0.5 / 0.6) = 24/35 of its rate while the collective runs: the 800 ns of
    /// work left at 200 would take 1,166.7 ns (end 1,367); at 600 it has done 400 x 24/35 =
    /// 274.3 ns of it, and the last 525.7 ns run alone: the task ends at 1,126 ns (the SM model
    /// alone: 1,080). A compute-bound task beside the same collective keeps the SM model.
    #[test]
    fn a_memory_bound_task_beside_a_collective_runs_on_the_memory_it_leaves() {
        let mut c = one_gpu(100, 0);
        c.hbm = 1_000;
        let half = MEMORY_SHARE_ONE / 2;
        assert_eq!(c.start_compute(7, 0, 0, 1_000, half).at, 1_000);
        assert_eq!(c.start_compute(8, 0, 0, 1_000, 0).at, 1_000);
        let mut out = Vec::new();
        c.busy[0] += 20;
        c.traffic[0] += 400;
        c.streams[0] += 1;
        c.retime(0, 200, &mut out);
        // Both ends move later (1,367 and 1,200): nothing is posted, the events at 1,000 stand.
        assert!(out.is_empty());
        assert_eq!((c.running[0][0].end, c.running[0][1].end), (1_367, 1_200));
        c.busy[0] -= 20;
        c.traffic[0] -= 400;
        c.streams[0] -= 1;
        c.retime(0, 600, &mut out);
        assert!(out.is_empty());
        // The events at 1,000 find both unfinished and post their ends.
        assert_eq!(c.due(0, 7, 0, 1_000), Due::Later(Retimed { at: 1_126, task: 7, generation: 0 }));
        assert_eq!(c.due(0, 8, 0, 1_000), Due::Later(Retimed { at: 1_080, task: 8, generation: 0 }));
        assert_eq!(c.due(0, 8, 0, 1_080), Due::Done);
        assert_eq!(c.due(0, 7, 0, 1_126), Due::Done);
    }

    /// Memory is shared max-min fairly once the collectives would take more than their share: 900
    /// bytes/us of 1,000 by one collective leaves the kernel 500 (half), so a wholly memory-bound
    /// task of 300 ns takes 600; with the SMs the scarcer share, the SM model holds (10 of 100
    /// SMs left: 3,000 ns); no traffic charged: the SM model.
    #[test]
    fn memory_is_shared_max_min_and_the_scarcer_share_rules() {
        let mut c = one_gpu(100, 0);
        c.hbm = 1_000;
        c.traffic[0] = 900;
        c.streams[0] = 1;
        assert_eq!(c.start_compute(1, 0, 0, 300, MEMORY_SHARE_ONE).at, 600);
        c.busy[0] = 90;
        assert_eq!(c.start_compute(2, 0, 0, 300, MEMORY_SHARE_ONE).at, 3_000);
        c.busy[0] = 0;
        c.hbm = 0;
        assert_eq!(c.start_compute(3, 0, 0, 300, MEMORY_SHARE_ONE).at, 300);
    }

    /// An all-reduce of 1 MB on 4 ranks that NCCL's tuner times at 100 us: each rank receives
    /// 2 x 3/4 x 1 MB = 1.5 MB, 15,000 bytes/us; through memory 3 passes under Simple (45,000),
    /// 2 x 2 + 1 = 5 under LL (75,000), 2 x 128/120 + 1 under LL128 (47,000).
    #[test]
    fn a_collective_s_memory_traffic_is_its_bus_bytes_times_the_protocol_s_passes() {
        let mut c = one_gpu(100, 0);
        c.hbm = 1_000;
        let choice = |proto, model_us| Choice { proto, model_us, ..Choice::point_to_point() };
        let traffic =
            |c: &Contention, proto| c.hbm_traffic(&choice(proto, 100.0), CollectiveOp::AllReduce, 4, 1_000_000);
        assert_eq!(traffic(&c, Proto::Simple), 45_000);
        assert_eq!(traffic(&c, Proto::Ll), 75_000);
        assert_eq!(traffic(&c, Proto::Ll128), 47_000);
        // No tuner time (point-to-point), one rank, or the charge off: none.
        assert_eq!(c.hbm_traffic(&Choice::point_to_point(), CollectiveOp::SendRecv, 2, 1_000), 0);
        assert_eq!(c.hbm_traffic(&choice(Proto::Simple, 100.0), CollectiveOp::AllReduce, 1, 1_000), 0);
        c.hbm = 0;
        assert_eq!(traffic(&c, Proto::Simple), 0);
    }
}
