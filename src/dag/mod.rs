//! The task graph. Tasks are compute kernels, transfers and collectives; edges are precedence.
//! A [`DagBuilder`] collects tasks and edges; [`DagBuilder::build`] checks acyclicity once and
//! freezes the graph into compact successor lists that the engine walks. Strategies shape the graph
//! through the builder in [`build`]. Knows devices only as ids; never looks at links or time.

pub mod build;
pub(crate) mod exchange;
pub mod hybrid;
pub mod master;
pub mod mps;
pub mod plan;
pub mod schedule;

use crate::collective::{Algorithm, CollectiveOp};
use crate::error::{Error, Result};
use crate::hw::DeviceId;
use crate::units::Nanos;
use serde::Serialize;

pub type TaskId = u32;
pub type QueueId = u32;
pub type GroupId = u32;
pub type ResourceId = u32;

/// What a task does, as far as the engine is concerned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Work {
    /// Runs for a fixed time (a kernel, an update, a measured communication time).
    Fixed { ns: Nanos },
    /// Moves bytes between two devices over the machine's route, sharing links with other traffic.
    Transfer { src: DeviceId, dst: DeviceId, bytes: u64 },
    /// A collective among the GPUs of a group; lowered to steps of transfers when it starts.
    Collective { group: GroupId, op: CollectiveOp, algorithm: Algorithm, bytes: u64 },
    /// Compute on a processor-shared resource (a GPU whose clients run under MPS): needs `work_ns`
    /// of the whole resource, runs at the max-min fair share among the tasks on it, and never
    /// faster than `cap` (a fraction of the resource: the kernel's utilisation, the client's
    /// active-thread share).
    Shared { resource: ResourceId, work_ns: Nanos, cap: f64 },
}

/// Which part of training a task belongs to; decides its category in the time breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Reading a batch from storage into host memory.
    Io,
    /// Copying a batch from host memory to the GPU.
    HostToDevice,
    Forward,
    Backward,
    /// Gradient aggregation (all-reduce, or a measured communication time).
    GradientAggregation,
    Update,
    /// Master-GPU data parallelism: the master hands mini-batches to the other GPUs (PtoP).
    PeerToPeer,
    /// Master-GPU data parallelism: the master's weights copied to every GPU.
    WeightBroadcast,
    /// Activations or errors exchanged between model-parallel slices.
    ModelParallelExchange,
    /// Master-GPU data parallelism: outputs gathered to the master for the loss and loss
    /// gradients sent back.
    LossExchange,
    /// Compressing or decompressing a buffer on a GPU (FP16, 8-bit, lossy weights, sparsification).
    Codec,
    /// A framework's control work around communication: launching a collective, a scheduler's
    /// turn, waiting for Horovod's next cycle and negotiating it.
    Coordination,
    /// Parameter servers summing pushed gradients (and applying the optimizer) on their CPUs.
    ServerReduce,
    /// A tensor-parallel collective (all-reduce, or all-gather / reduce-scatter with sequence
    /// parallelism) inside a layer.
    TensorParallel,
    /// Activations or their gradients sent between pipeline stages.
    PipelineTransfer,
    /// Parameters all-gathered over the data-parallel group (ZeRO-1/2 after the update, ZeRO-3 and
    /// FSDP before each use) and tied-embedding gradients between the first and last stage.
    ParamGather,
    /// An MoE layer's token dispatch or combine all-to-all over its expert-parallel group.
    ExpertParallel,
    /// Keys and values of the whole sequence exchanged over a context-parallel group.
    ContextParallel,
    /// The host thread of a GPU's process launching its kernels (an eager framework); not GPU
    /// time: the breakdown leaves it out (a GPU waiting for its host is idle).
    Host,
}

/// The three kinds of busy time in the breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Compute,
    Communication,
    Io,
    /// The host CPU's own work (kernel launches): no GPU category.
    Host,
}

impl Phase {
    /// Every phase, in a fixed order (for reports that lay out one track or colour per phase).
    pub const ALL: [Phase; 19] = [
        Phase::Io,
        Phase::HostToDevice,
        Phase::Forward,
        Phase::Backward,
        Phase::GradientAggregation,
        Phase::Update,
        Phase::PeerToPeer,
        Phase::WeightBroadcast,
        Phase::ModelParallelExchange,
        Phase::LossExchange,
        Phase::Codec,
        Phase::Coordination,
        Phase::ServerReduce,
        Phase::TensorParallel,
        Phase::PipelineTransfer,
        Phase::ParamGather,
        Phase::ExpertParallel,
        Phase::ContextParallel,
        Phase::Host,
    ];

    pub fn category(self) -> Category {
        match self {
            Phase::Io | Phase::HostToDevice => Category::Io,
            Phase::Forward | Phase::Backward | Phase::Update => Category::Compute,
            Phase::GradientAggregation
            | Phase::Coordination
            | Phase::ServerReduce
            | Phase::WeightBroadcast
            | Phase::ModelParallelExchange
            | Phase::LossExchange
            | Phase::TensorParallel
            | Phase::PipelineTransfer
            | Phase::ParamGather
            | Phase::ExpertParallel
            | Phase::ContextParallel => Category::Communication,
            Phase::PeerToPeer => Category::Io,
            Phase::Codec => Category::Compute,
            Phase::Host => Category::Host,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::Io => "io",
            Phase::HostToDevice => "h2d",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::GradientAggregation => "allreduce",
            Phase::Update => "update",
            Phase::PeerToPeer => "p2p",
            Phase::WeightBroadcast => "broadcast",
            Phase::ModelParallelExchange => "mp-exchange",
            Phase::LossExchange => "loss",
            Phase::Codec => "codec",
            Phase::Coordination => "coordination",
            Phase::ServerReduce => "server-reduce",
            Phase::TensorParallel => "tp",
            Phase::PipelineTransfer => "pp",
            Phase::ParamGather => "param-gather",
            Phase::ExpertParallel => "ep",
            Phase::ContextParallel => "cp",
            Phase::Host => "host",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Task {
    pub work: Work,
    /// The serial queue (GPU stream, communicator, loader thread) the task holds while it runs.
    pub queue: Option<QueueId>,
    pub phase: Phase,
    /// GPU rank the task belongs to; `None` for tasks of a whole group (collectives).
    pub gpu: Option<u32>,
    pub iteration: u32,
    pub layer: Option<u32>,
    /// Order within a priority queue: lower runs first.
    pub priority: i32,
}

impl Task {
    /// A short human-readable label, e.g. `it2 gpu3 backward L5`.
    pub fn label(&self) -> String {
        let mut s = format!("it{} ", self.iteration);
        if let Some(g) = self.gpu {
            s += &format!("gpu{g} ");
        }
        s += self.phase.name();
        if let Some(l) = self.layer {
            s += &format!(" L{l}");
        }
        s
    }
}

/// How a queue picks the next ready task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// In the order tasks became ready (CUDA stream / NCCL communicator semantics).
    Fifo,
    /// Lowest `priority` first, then readiness order.
    Priority,
}

/// A serial resource: at most one of its tasks runs at a time.
#[derive(Debug, Clone)]
pub struct Queue {
    pub name: String,
    pub discipline: Discipline,
    /// GPU rank whose stream this is, if any (the breakdown counts compute per GPU from it).
    pub gpu: Option<u32>,
}

/// Facts about how the graph was built that reports need.
#[derive(Debug, Clone, Default)]
pub struct DagMeta {
    pub gpus: u32,
    pub iterations: u32,
    /// The task that ends iteration `i` on GPU `g` is `iteration_end[i * gpus + g]`.
    pub iteration_end: Vec<TaskId>,
}

/// A frozen, acyclic task graph.
#[derive(Debug, Clone)]
pub struct Dag {
    tasks: Vec<Task>,
    succ_start: Vec<u32>,
    succ: Vec<TaskId>,
    pred_count: Vec<u32>,
    queues: Vec<Queue>,
    /// Each group lists GPU ranks in collective rank order.
    groups: Vec<Vec<u32>>,
    /// Names of processor-shared resources ([`Work::Shared`]).
    resources: Vec<String>,
    /// The global rank of each GPU index tasks use, ascending (empty: the same numbers).
    ranks: Vec<u32>,
    /// Transfers that repeat another one on a symmetric copy of the machine (see
    /// [`DagBuilder::add_images`]): per original, its images as (task, copy) in `images`.
    image_groups: Vec<(TaskId, std::ops::Range<u32>)>,
    images: Vec<(TaskId, u32)>,
    /// Collectives that repeat another one on a left-out DP replica's GPUs: (original, image).
    collective_images: Vec<(TaskId, TaskId)>,
    /// Collectives run by a library other than NCCL (Transformer Engine's userbuffers), sorted.
    not_nccl: Vec<TaskId>,
    /// Compute tasks with memory-bound kernels: (task, share of its time in [`MEMORY_SHARE_ONE`]
    /// parts), sorted by task.
    memory_share: Vec<(TaskId, u32)>,
    pub meta: DagMeta,
}

impl Dag {
    /// The global rank (as groups list it) of the GPU tasks call `local`.
    pub fn rank_of(&self, local: u32) -> u32 {
        if self.ranks.is_empty() {
            local
        } else {
            self.ranks[local as usize]
        }
    }

    /// The GPU index tasks use for global rank `rank`, if that rank has tasks of its own (ranks a
    /// symmetric reduction leaves out have none).
    pub fn local_of(&self, rank: u32) -> Option<u32> {
        if self.ranks.is_empty() {
            Some(rank)
        } else {
            self.ranks.binary_search(&rank).ok().map(|i| i as u32)
        }
    }

    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }
    pub fn task(&self, t: TaskId) -> &Task {
        &self.tasks[t as usize]
    }
    pub fn len(&self) -> usize {
        self.tasks.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
    pub fn successors(&self, t: TaskId) -> &[TaskId] {
        &self.succ[self.succ_start[t as usize] as usize..self.succ_start[t as usize + 1] as usize]
    }
    pub fn pred_count(&self, t: TaskId) -> u32 {
        self.pred_count[t as usize]
    }
    pub fn edge_count(&self) -> usize {
        self.succ.len()
    }
    pub fn queues(&self) -> &[Queue] {
        &self.queues
    }
    pub fn group(&self, g: GroupId) -> &[u32] {
        &self.groups[g as usize]
    }
    /// Names of the processor-shared resources, indexed by [`ResourceId`].
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// Each transfer that has images, with its images as (task, copy): see [`DagBuilder::add_images`].
    pub fn image_groups(&self) -> impl Iterator<Item = (TaskId, &[(TaskId, u32)])> + '_ {
        self.image_groups.iter().map(|(t, r)| (*t, &self.images[r.start as usize..r.end as usize]))
    }

    /// Each collective that has an image, as (original, image): see
    /// [`DagBuilder::add_collective_image`].
    pub fn collective_images(&self) -> &[(TaskId, TaskId)] {
        &self.collective_images
    }

    /// Whether collective `t` is run by a library other than NCCL (see
    /// [`DagBuilder::mark_not_nccl`]).
    pub fn is_not_nccl(&self, t: TaskId) -> bool {
        self.not_nccl.binary_search(&t).is_ok()
    }

    /// The share of compute task `t`'s time its memory-bound kernels take, in parts of
    /// [`MEMORY_SHARE_ONE`] (0: none known; see [`DagBuilder::set_memory_share`]).
    pub fn memory_share(&self, t: TaskId) -> u32 {
        self.memory_share.binary_search_by_key(&t, |&(x, _)| x).map_or(0, |i| self.memory_share[i].1)
    }

    /// Graphviz DOT of the graph (for small DAGs; labels say iteration, GPU, phase, layer).
    pub fn to_dot(&self) -> String {
        let mut g = petgraph::graph::DiGraph::<String, ()>::with_capacity(self.len(), self.edge_count());
        let nodes: Vec<_> =
            self.tasks.iter().enumerate().map(|(i, t)| g.add_node(format!("T{i} {}", t.label()))).collect();
        for (i, &n) in nodes.iter().enumerate() {
            for &s in self.successors(i as TaskId) {
                g.add_edge(n, nodes[s as usize], ());
            }
        }
        format!("{:?}", petgraph::dot::Dot::with_config(&g, &[petgraph::dot::Config::EdgeNoLabel]))
    }
}

/// Collects tasks and edges; [`DagBuilder::build`] freezes them.
#[derive(Debug, Default)]
pub struct DagBuilder {
    tasks: Vec<Task>,
    edges: Vec<(TaskId, TaskId)>,
    queues: Vec<Queue>,
    groups: Vec<Vec<u32>>,
    resources: Vec<String>,
    ranks: Vec<u32>,
    image_groups: Vec<(TaskId, std::ops::Range<u32>)>,
    images: Vec<(TaskId, u32)>,
    collective_images: Vec<(TaskId, TaskId)>,
    not_nccl: Vec<TaskId>,
    memory_share: Vec<(TaskId, u32)>,
}

/// The whole of a compute task's time in [`Dag::memory_share`]'s parts.
pub const MEMORY_SHARE_ONE: u32 = 1 << 16;

impl DagBuilder {
    /// Tasks' GPU indices stand for these global ranks (ascending), when not all ranks have tasks
    /// and the ones that do are not the first ones.
    pub fn set_ranks(&mut self, ranks: Vec<u32>) {
        debug_assert!(ranks.windows(2).all(|w| w[0] < w[1]));
        self.ranks = ranks;
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// Tasks added so far.
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    pub fn add_task(&mut self, task: Task) -> TaskId {
        self.tasks.push(task);
        (self.tasks.len() - 1) as TaskId
    }

    /// `to` may start only after `from` has finished.
    pub fn add_edge(&mut self, from: TaskId, to: TaskId) {
        self.edges.push((from, to));
    }

    pub fn add_queue(&mut self, name: impl Into<String>, discipline: Discipline, gpu: Option<u32>) -> QueueId {
        self.queues.push(Queue { name: name.into(), discipline, gpu });
        (self.queues.len() - 1) as QueueId
    }

    pub fn add_group(&mut self, gpu_ranks: Vec<u32>) -> GroupId {
        self.groups.push(gpu_ranks);
        (self.groups.len() - 1) as GroupId
    }

    /// A processor-shared resource of capacity one (see [`Work::Shared`]).
    pub fn add_resource(&mut self, name: impl Into<String>) -> ResourceId {
        self.resources.push(name.into());
        (self.resources.len() - 1) as ResourceId
    }

    pub fn task(&self, t: TaskId) -> &Task {
        &self.tasks[t as usize]
    }

    /// Declares `images` (task, copy) as images of transfer `original`: each moves the same bytes
    /// at the same instants on copy `copy` of the machine (copies numbered from 1; copy c of every
    /// original is the same translation of the machine), as a DP replica left out of a reduced
    /// simulation sends its pipeline transfers. Only a hint: the engine checks the symmetry and
    /// runs an image as its own flow whenever it could move differently from its original.
    pub fn add_images(&mut self, original: TaskId, images: &[(TaskId, u32)]) {
        let start = self.images.len() as u32;
        self.images.extend_from_slice(images);
        self.image_groups.push((original, start..self.images.len() as u32));
    }

    /// Declares collective `image` the repeat of `original` over a left-out DP replica's group:
    /// started with it, and assumed to end with it (the engine runs both; a reduced run checks
    /// afterwards that they did end together).
    pub fn add_collective_image(&mut self, original: TaskId, image: TaskId) {
        self.collective_images.push((original, image));
    }

    /// Declares collective `t` run by a library other than NCCL (Transformer Engine's userbuffers
    /// under Megatron's --tp-comm-overlap): it holds none of NCCL's channels on its GPUs.
    pub fn mark_not_nccl(&mut self, t: TaskId) {
        self.not_nccl.push(t);
    }

    /// Declares `share` (in [0, 1]) of compute task `t`'s time memory-bound: the part that slows
    /// when a collective beside it takes some of the GPU's memory bandwidth. Last call wins.
    pub fn set_memory_share(&mut self, t: TaskId, share: f64) {
        let parts = (share.clamp(0.0, 1.0) * MEMORY_SHARE_ONE as f64).round() as u32;
        self.memory_share.push((t, parts));
    }

    /// Freezes the graph: removes duplicate edges, builds successor lists, rejects cycles
    /// (naming a task on one) and dangling ids.
    pub fn build(mut self, meta: DagMeta) -> Result<Dag> {
        let n = self.tasks.len();
        if let Some(&(a, b)) = self.edges.iter().find(|&&(a, b)| a as usize >= n || b as usize >= n || a == b) {
            return Err(Error::invalid("task graph", format!("bad edge {a} -> {b} ({n} tasks)")));
        }
        for t in &self.tasks {
            if let Some(q) = t.queue {
                if q as usize >= self.queues.len() {
                    return Err(Error::invalid("task graph", format!("task `{}` uses unknown queue {q}", t.label())));
                }
            }
            if let Work::Shared { resource, cap, .. } = t.work {
                if resource as usize >= self.resources.len() || !(cap > 0.0 && cap.is_finite()) {
                    return Err(Error::invalid(
                        "task graph",
                        format!("task `{}` uses unknown resource {resource} or cap {cap}", t.label()),
                    ));
                }
            }
            if let Work::Collective { group, .. } = t.work {
                if group as usize >= self.groups.len() {
                    return Err(Error::invalid(
                        "task graph",
                        format!("task `{}` uses unknown group {group}", t.label()),
                    ));
                }
            }
        }
        let transfer = |t: TaskId| self.tasks.get(t as usize).is_some_and(|x| matches!(x.work, Work::Transfer { .. }));
        if let Some((o, _)) = self.image_groups.iter().find(|(o, r)| {
            !transfer(*o) || self.images[r.start as usize..r.end as usize].iter().any(|&(i, _)| !transfer(i))
        }) {
            return Err(Error::invalid("task graph", format!("transfer {o} has images that are not transfers")));
        }
        // Successor lists by counting sort on the source, then each (short) list sorted and
        // deduplicated in place: O(E) rather than sorting all edges.
        let mut succ_start = vec![0u32; n + 1];
        for &(a, _) in &self.edges {
            succ_start[a as usize + 1] += 1;
        }
        for i in 0..n {
            succ_start[i + 1] += succ_start[i];
        }
        let mut fill = succ_start.clone();
        let mut succ = vec![0 as TaskId; self.edges.len()];
        for &(a, b) in &self.edges {
            succ[fill[a as usize] as usize] = b;
            fill[a as usize] += 1;
        }
        drop(fill);
        self.edges = Vec::new();
        let mut pred_count = vec![0u32; n];
        let mut write = 0usize;
        let mut read = 0usize;
        for i in 0..n {
            let end = succ_start[i + 1] as usize;
            succ[read..end].sort_unstable();
            succ_start[i] = write as u32;
            let mut last = None;
            for k in read..end {
                let b = succ[k];
                if last != Some(b) {
                    succ[write] = b;
                    write += 1;
                    pred_count[b as usize] += 1;
                    last = Some(b);
                }
            }
            read = end;
        }
        succ_start[n] = write as u32;
        succ.truncate(write);
        let dag = Dag {
            tasks: self.tasks,
            succ_start,
            succ,
            pred_count,
            queues: self.queues,
            groups: self.groups,
            resources: self.resources,
            ranks: self.ranks,
            image_groups: self.image_groups,
            images: self.images,
            collective_images: self.collective_images,
            not_nccl: {
                let mut v = self.not_nccl;
                v.sort_unstable();
                v.dedup();
                v
            },
            memory_share: {
                let mut v = self.memory_share;
                // Stable: of two calls for one task the later one stays, after dedup keeps the last.
                v.sort_by_key(|&(t, _)| t);
                v.reverse();
                v.dedup_by_key(|&mut (t, _)| t);
                v.reverse();
                v.retain(|&(_, parts)| parts > 0);
                v
            },
            meta,
        };
        dag.check_acyclic()?;
        Ok(dag)
    }
}

impl Dag {
    /// Kahn's algorithm; on a cycle, names a task that lies on it.
    fn check_acyclic(&self) -> Result<()> {
        let n = self.len();
        let mut indeg = self.pred_count.clone();
        let mut stack: Vec<TaskId> = (0..n as TaskId).filter(|&t| indeg[t as usize] == 0).collect();
        let mut seen = 0;
        while let Some(t) = stack.pop() {
            seen += 1;
            for &s in self.successors(t) {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    stack.push(s);
                }
            }
        }
        if seen == n {
            return Ok(());
        }
        // Walk successors among the unfinished tasks until one repeats: it is on a cycle.
        let mut at = (0..n).find(|&t| indeg[t] > 0).expect("a task is left") as TaskId;
        let mut visited = vec![false; n];
        while !visited[at as usize] {
            visited[at as usize] = true;
            at = *self
                .successors(at)
                .iter()
                .find(|&&s| indeg[s as usize] > 0)
                .expect("a stuck task has a stuck successor");
        }
        Err(Error::Cycle { task: at, label: self.task(at).label() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(ns: Nanos) -> Task {
        Task {
            work: Work::Fixed { ns },
            queue: None,
            phase: Phase::Forward,
            gpu: Some(0),
            iteration: 0,
            layer: None,
            priority: 0,
        }
    }

    #[test]
    fn builds_successor_lists_and_dedups_edges() {
        let mut b = DagBuilder::new();
        let a = b.add_task(fixed(1));
        let c = b.add_task(fixed(1));
        let d = b.add_task(fixed(1));
        b.add_edge(a, c);
        b.add_edge(a, c);
        b.add_edge(a, d);
        b.add_edge(c, d);
        let dag = b.build(DagMeta::default()).unwrap();
        assert_eq!(dag.successors(a), &[c, d]);
        assert_eq!(dag.pred_count(d), 2);
        assert_eq!(dag.edge_count(), 3);
        assert!(dag.to_dot().contains("T2 it0 gpu0 forward"));
    }

    /// Shares in [0, 1] kept in parts of 2^16 (rounded, clamped), looked up by task; the last
    /// call for a task wins; none or zero: 0.
    #[test]
    fn memory_shares_are_kept_per_task() {
        let mut b = DagBuilder::new();
        let t: Vec<TaskId> = (0..4).map(|_| b.add_task(fixed(1))).collect();
        b.set_memory_share(t[2], 0.25);
        b.set_memory_share(t[0], 0.5);
        b.set_memory_share(t[2], 0.75);
        b.set_memory_share(t[1], 2.0);
        b.set_memory_share(t[3], 0.5);
        b.set_memory_share(t[3], 0.0);
        let dag = b.build(DagMeta::default()).unwrap();
        let shares: Vec<u32> = t.iter().map(|&x| dag.memory_share(x)).collect();
        assert_eq!(shares, vec![MEMORY_SHARE_ONE / 2, MEMORY_SHARE_ONE, 3 * MEMORY_SHARE_ONE / 4, 0]);
    }

    #[test]
    fn cycles_are_rejected_with_a_task_named() {
        let mut b = DagBuilder::new();
        let a = b.add_task(fixed(1));
        let c = b.add_task(fixed(1));
        let d = b.add_task(fixed(1));
        b.add_edge(a, c);
        b.add_edge(c, d);
        b.add_edge(d, c);
        let e = b.build(DagMeta::default()).unwrap_err();
        assert!(matches!(e, Error::Cycle { task, .. } if task == c || task == d), "{e}");
    }
}
