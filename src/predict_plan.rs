//! A transformer trained under a parallel plan, end to end: the model's per-operation costs on the
//! GPU ([`crate::workload::llm`]), the plan's memory per GPU (refused when it does not fit), the
//! layout of stages, chunks and represented ranks, the one DAG builder ([`crate::dag::plan`]),
//! the engine, and the report ([`crate::report::plan`]). Holds no state of its own.

use crate::collective::{CollectiveModel, Layout};
use crate::dag::build::{build_dag, BuildInput};
use crate::dag::plan::{HostModel, PlanLayout};
use crate::dag::Dag;
use crate::error::{Error, Result};
use crate::hw::{Machine, Topology};
use crate::parallel::memory::{plan_memory, MemoryInput, PlanMemory};
use crate::parallel::{eager_launch_ns, Coords, HostLaunch, ModuleImpl, ParallelPlan, Sharding, BLOCKING_WAIT_NS};
use crate::predict::{prediction, Own, RunOf};
use crate::report::plan::{average, plan_breakdown_per_gpu, MemoryReport, PlanReport, ReplicaReport, StageBreakdown};
use crate::report::{steady_state, utilisation_of, Prediction};
use crate::scenario::Scenario;
use crate::sim::{simulate, Options, Run};
use crate::strategy::Strategy;
use crate::units::ns_to_s;
use crate::workload::gpu::GpuSpec;
use crate::workload::llm::{cost_moe, CostOptions, TransformerCost};
use crate::workload::moe::MoeOptions;
use crate::workload::transformer::TransformerConfig;
use crate::workload::{Precision, Workload};
use std::collections::HashMap;

/// Iterations simulated for a plan by default: one warm-up and one measured. Every step after the
/// first repeats it (GPT-3 175B tp8 pp8 dp2, Megatron 22B tp4 pp4 dp4 vp2 and Llama 2 7B ZeRO-3 on
/// 64 GPUs give the same step time to within 2 ns with 2, 3 and 4 iterations).
pub const PLAN_ITERATIONS: u32 = 2;

/// Everything a plan prediction depends on.
#[derive(Debug, Clone)]
pub struct PlanSetup {
    pub model: TransformerConfig,
    pub gpu: &'static GpuSpec,
    pub precision: Precision,
    pub seq_len: u32,
    pub plan: ParallelPlan,
    pub topology: Topology,
    pub strategy: Strategy,
    pub iterations: u32,
    /// Measured single-GPU samples/s of this model at this micro-batch (scales every time).
    pub calibrate_throughput: Option<f64>,
    /// Measured best matmul TFLOP/s of the GPU, replacing the shipped table's.
    pub matmul_tflops: Option<f64>,
    /// How DP replicas stand for each other on a machine that is not made of identical nodes
    /// meeting at one switch (a fat-tree): see [`ReplicaClasses`].
    pub replica_classes: ReplicaClasses,
    /// Times exact classes that failed their check are split and run again before every
    /// replica is simulated ([`CLASS_SPLITS`] by default).
    pub class_splits: u32,
}

/// On a fabric (a fat-tree), DP replicas whose stages sit at different places of the tree do not
/// all follow one timeline, so no block of replicas stands for the rest; replicas whose traffic
/// takes routes of the same shape (the same latencies and link rates, hop for hop) may. Such a
/// *timeline class* is simulated through its lowest replica; the others send their pipeline
/// transfers and expert-parallel collectives as images of it at the same instants (the network
/// carries the full load) and their DP collectives are driven by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplicaClasses {
    /// Classes by the route shapes of each replica's pipeline neighbours and DP ring
    /// neighbours; after the run every image must have ended at the very instant its original
    /// did (then the run is the full one, bit for bit), else every replica is simulated again.
    #[default]
    Exact,
    /// Classes by the route shapes of the pipeline transfers only, not checked: approximate. The
    /// largest gap seen between an image and its original is reported.
    Approximate,
    /// Every replica simulated.
    Off,
}

/// How the DP replicas of a simulated plan were represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaReduction {
    /// DP replicas that got tasks, of `dp`.
    pub simulated: u32,
    pub dp: u32,
    /// Timeline classes were used ([`ReplicaClasses`]), exactly or not.
    pub classes: Option<ReplicaClasses>,
    /// The exact classes' check failed and every replica was simulated.
    pub fell_back: bool,
    /// Largest gap between an image's end and its original's, ns (0 when exact).
    pub drift_ns: u64,
    /// Times the exact classes were split after a failed check (blocks whose images ended off
    /// made classes of their own) and run again.
    pub refinements: u32,
}

/// How many times the exact timeline classes are split and run again after a failed check before
/// every replica is simulated (each run costs about as much as the first; a split that still
/// fails is most often one whose cause is spread over many blocks).
pub const CLASS_SPLITS: u32 = 2;

impl ReplicaReduction {
    /// One line for reports: `12 of 893 DP replicas (timeline classes, exact)`.
    pub fn describe(&self) -> String {
        let how = match (self.classes, self.fell_back) {
            (Some(ReplicaClasses::Exact), false) if self.refinements > 0 => {
                format!("timeline classes, checked exact after {} split(s) of classes that failed", self.refinements)
            }
            (Some(ReplicaClasses::Exact), false) => "timeline classes, checked exact".to_string(),
            (Some(ReplicaClasses::Exact), true) => "timeline classes failed their check; all simulated".to_string(),
            (Some(_), _) => format!("timeline classes, APPROXIMATE: images ended up to {} ns off", self.drift_ns),
            (None, _) => "no timeline classes".to_string(),
        };
        format!("{} of {} DP replicas simulated ({how})", self.simulated, self.dp)
    }

    /// The report's view of it.
    pub fn report(&self) -> ReplicaReport {
        let (classes, check) = match (self.classes, self.fell_back) {
            (Some(ReplicaClasses::Exact), false) => ("exact", "passed"),
            (Some(ReplicaClasses::Exact), true) => ("exact", "failed"),
            (Some(_), _) => ("approximate", "none"),
            (None, _) => ("none", "none"),
        };
        ReplicaReport {
            dp_replicas_simulated: self.simulated,
            replica_classes: classes.into(),
            class_check: check.into(),
            image_gap_ns: self.drift_ns,
            class_splits: self.refinements,
            describe: self.describe(),
        }
    }
}

/// A simulated plan with what is needed to inspect it further.
pub struct SimulatedPlan {
    pub machine: Machine,
    pub dag: Dag,
    pub run: Run,
    pub layout: PlanLayout,
    pub cost: TransformerCost,
    pub memory: PlanMemory,
    /// The workload of one TP rank for one micro-batch, as simulated.
    pub workload: Workload,
    /// How the DP replicas were represented.
    pub replicas: ReplicaReduction,
}

/// The default strategy of a plan: Megatron's overlapped gradient reduction in buckets of
/// max(40 M, 1 M x dp) parameters (Megatron-LM `--ddp-bucket-size` default), of the plan's
/// gradient bytes (FP32 unless `grad-reduce=bf16`). DeepSpeed's optimizers (`mp-optimizer=ds-*`)
/// reduce only once the whole backward pass is done, in buckets of 500 M elements: ZeRO-1/2
/// without `overlap_comm` (its default, False) in `reduce_gradients`, buckets of
/// `reduce_bucket_size` (default 500,000,000; DeepSpeed v0.5.10 `runtime/zero/constants.py`);
/// `BF16_Optimizer` in `buffered_allreduce_fallback` with `MEMORY_OPT_ALLREDUCE_SIZE` =
/// 500,000,000 (56c5223 `runtime/engine.py`); under the pipeline engine both are the
/// `ReduceGrads` instruction the `TrainSchedule` issues after a stage's last backward
/// (`runtime/pipe/schedule.py`). BigScience's configs set neither (tr11-176B-ml.slurm:
/// `"zero_optimization": {"stage": $ZERO_STAGE}`).
pub fn default_plan_strategy(plan: &ParallelPlan) -> Strategy {
    if plan.mp_optimizer.is_deepspeed() {
        return Strategy::parse(&format!("io+fusion={}", DEEPSPEED_BUCKET_ELEMENTS * plan.grad_bytes))
            .expect("a valid strategy");
    }
    let bucket_params = 40_000_000u64.max(1_000_000 * plan.dp as u64);
    Strategy::parse(&format!("io+wfbp+fusion={}", bucket_params * plan.grad_bytes)).expect("a valid strategy")
}

/// DeepSpeed's gradient bucket, elements (see [`default_plan_strategy`]).
const DEEPSPEED_BUCKET_ELEMENTS: u64 = 500_000_000;

/// A plan prediction as a user asks for it (flags, a validation row): the scenario's model, GPU,
/// precision, strategy, iterations and calibration, the machine, and the plan's own choices.
pub struct PlanRequest<'a> {
    pub scenario: &'a Scenario,
    pub topology: Topology,
    /// The `--parallel` spec.
    pub spec: &'a str,
    pub micro_batch: Option<u32>,
    pub global_batch: Option<u32>,
    pub seq_len: Option<u32>,
    /// Layers to build the model with instead of its config's (a proxy with fewer layers).
    pub layers: Option<u32>,
    pub matmul_tflops: Option<f64>,
    /// The GPU count asked for, which the plan's degrees must multiply to.
    pub gpus: Option<u32>,
}

impl PlanSetup {
    /// Resolves a request: the transformer config, the GPU (the scenario's, else the topology's),
    /// the plan with its batches (checked against the GPU count and the layers), the strategy
    /// (Megatron's default unless one is given) and the precision (bf16 where the GPU has it).
    pub fn from_request(r: PlanRequest) -> Result<PlanSetup> {
        let scenario = r.scenario;
        let name = scenario.workload.model.clone().ok_or_else(|| {
            Error::invalid("--parallel", "a plan needs a transformer --model (a named config or a config.json)")
        })?;
        let mut model = TransformerConfig::resolve(&name)?;
        if let Some(layers) = r.layers {
            if layers == 0 {
                return Err(Error::invalid("--layers", "a model needs at least 1 layer"));
            }
            crate::limits::check("layers", layers as u64)?;
            model.layers = layers;
            model.check(&format!("{name} with {layers} layers"))?;
        }
        let topology = r.topology;
        let gpu = match (&scenario.workload.gpu, topology.gpu_name()) {
            (Some(g), _) => GpuSpec::by_name(g)?,
            (None, Some(g)) => GpuSpec::by_name(g).map_err(|_| {
                Error::invalid(
                    "--gpu",
                    format!("topology `{}` names GPU `{g}`, which dagsim does not know; give --gpu", topology.name),
                )
            })?,
            (None, None) => return Err(Error::invalid("--gpu", "the topology does not name its GPU; give --gpu")),
        };
        let mut plan = ParallelPlan::parse(r.spec)?;
        plan.micro_batch = r.micro_batch.unwrap_or(1);
        plan.global_batch = match r.global_batch {
            Some(g) => g,
            None => plan.micro_batch.checked_mul(plan.dp).ok_or_else(|| {
                Error::invalid(
                    "--micro-batch",
                    format!("{} x dp={} sequences per step do not fit a 32-bit count", plan.micro_batch, plan.dp),
                )
            })?,
        };
        plan.check(r.gpus.unwrap_or(plan.gpus()), model.layers)?;
        let strategy = match &scenario.strategy {
            Some(s) => Strategy::parse(s)?,
            None => default_plan_strategy(&plan),
        };
        if strategy.fp32_grads {
            return Err(Error::invalid(
                "strategy",
                "grad-dtype= sets the gradient dtype of data-parallel (S-SGD) runs; a --parallel plan \
                 reduces FP32 gradients unless its `grad-reduce=bf16` says otherwise",
            ));
        }
        let precision = scenario.workload.precision.unwrap_or(if gpu.bf16 { Precision::Bf16 } else { Precision::Fp16 });
        if precision == Precision::Fp8 && plan.modules == Some(ModuleImpl::Torch) {
            return Err(Error::invalid(
                "--parallel",
                "modules=torch with FP8: Megatron-Core, NeMo and llm-foundry run FP8 only in Transformer \
                 Engine's modules; give modules=te or leave it out",
            ));
        }
        Ok(PlanSetup {
            seq_len: r.seq_len.or(scenario.workload.seq_len).unwrap_or(model.seq_len),
            model,
            gpu,
            precision,
            plan,
            topology,
            strategy,
            iterations: scenario.iterations.unwrap_or(PLAN_ITERATIONS),
            calibrate_throughput: scenario.workload.calibrate_throughput,
            matmul_tflops: r.matmul_tflops,
            replica_classes: ReplicaClasses::default(),
            class_splits: CLASS_SPLITS,
        })
    }

    /// Flash attention unless the plan says otherwise and where the GPU runs it (Ampere on).
    pub fn flash(&self) -> bool {
        self.plan.flash.unwrap_or(self.gpu.bf16)
    }

    /// The per-operation cost of one micro-batch on one TP rank, calibrated if asked.
    pub fn cost(&self) -> Result<TransformerCost> {
        let opts = CostOptions {
            micro_batch: self.plan.micro_batch,
            seq_len: self.seq_len,
            precision: self.precision,
            tp: self.plan.tp,
            sequence_parallel: self.plan.sp,
            recompute: self.plan.recompute,
            flash_attention: self.flash(),
            attention: self.plan.attn,
            matmul_tflops: self.matmul_tflops,
            loss: self.plan.loss,
            softmax: self.plan.softmax,
            fp8_recipe: self.plan.fp8_recipe,
        };
        let moe = MoeOptions {
            ep: self.plan.ep,
            etp: self.plan.etp,
            routing: self.plan.moe,
            cp: self.plan.cp_folded,
            cp_comm: self.plan.cp_comm,
        };
        let mut c = cost_moe(&self.model, self.gpu, &opts, &moe)?;
        if let Some(x) = self.calibrate_throughput {
            // The single-GPU number is for the whole model without TP or EP: calibrate on that
            // cost and carry the factor over.
            let one_gpu = MoeOptions { ep: 1, etp: 1, cp: 1, ..moe };
            let mut one =
                cost_moe(&self.model, self.gpu, &CostOptions { tp: 1, sequence_parallel: false, ..opts }, &one_gpu)?;
            one.calibrate_throughput(x)?;
            c.scale(one.calibration_factor);
        }
        let micro_batches = self.plan.global_batch / (self.plan.dp * self.plan.micro_batch).max(1);
        let grad_bytes = self.plan.grad_bytes;
        if let Some(acc) = self.plan.mp_optimizer.grad_accumulation(micro_batches, self.precision.bytes(), grad_bytes) {
            c.add_grad_accumulation(self.gpu, acc);
        }
        Ok(c)
    }

    /// Memory per GPU of every stage (under context parallelism, of the folded plan: seq / cp
    /// tokens of each sequence per GPU, the optimizer sharded over DP x CP as Megatron does).
    pub fn memory(&self, gpus_per_node: u32) -> PlanMemory {
        let cp = self.plan.cp.max(1);
        let folded;
        let plan = if cp > 1 {
            folded = self.plan.folded();
            &folded
        } else {
            &self.plan
        };
        plan_memory(&MemoryInput {
            model: &self.model,
            plan,
            precision: self.precision,
            seq_len: self.seq_len / cp,
            flash: self.flash(),
            gpus_per_node,
            capacity: self.gpu.mem_bytes(),
        })
    }

    /// Checks the plan against the model, the GPU count and the machine: degrees, divisibility,
    /// TP inside a node, memory.
    pub fn check(&self, machine: &Machine) -> Result<PlanMemory> {
        let gpus = self.plan.gpus();
        self.plan.check(gpus, self.model.layers)?;
        if self.iterations < 2 {
            return Err(Error::invalid("iterations", "at least 2 are needed (one warm-up)"));
        }
        let per_node = gpus_per_node(machine);
        if self.plan.tp > 1 && per_node % self.plan.tp != 0 && !self.plan.tp_across_nodes {
            return Err(Error::invalid(
                "--parallel",
                format!(
                    "tp={} does not fit the {per_node} GPUs of a node of `{}`: its collectives would cross the \
                     network; use a tp dividing {per_node}, or tp-across-nodes=on",
                    self.plan.tp, machine.name
                ),
            ));
        }
        let memory = self.memory(per_node);
        memory.check_fits(&self.plan.name(), self.gpu.name)?;
        Ok(memory)
    }

    /// Ranks that get tasks: all of them, or, with `symmetric`, the first rank of each TP group
    /// (the group runs in lockstep: every block ends with a collective over it; the others' pipeline
    /// transfers, gathers and gradient exchanges are still simulated) and, when the machine is made
    /// of identical nodes meeting at one switch and the collectives are symmetric, only those with
    /// DP index below k (whole nodes of the first block of DP replicas), k = GPUs per node /
    /// gcd(GPUs per node, tp).
    pub fn represented(&self, machine: &Machine, symmetric: bool) -> Vec<u32> {
        self.reduction(machine, symmetric).0
    }

    /// The replica map of [`ReplicaClasses`] (per DP replica, the lowest of its class) for a
    /// machine with a fabric, or None where classes do not apply or would not reduce: blocks of
    /// k replicas (k as in [`Self::dp_block`]: whole nodes, whole EP and CP groups) filling whole
    /// stages of whole nodes, TP traffic apart from the network, no hybrid shard groups.
    fn replica_classes(&self, machine: &Machine) -> Option<Vec<u32>> {
        let p = &self.plan;
        if self.replica_classes == ReplicaClasses::Off || !machine.has_fabric() || p.dp < 2 {
            return None;
        }
        // Nodes identical inside, hanging at different places of the fabric; none with a slow GPU
        // (`identical_nodes` refuses `compute_factor` faults: a faulted node's replicas would
        // need classes of their own and every TP rank simulated, so every rank runs instead).
        // FSDP hybrid shard groups are not driven through representatives.
        let k = self.class_block(machine)?;
        if p.dp / k < 2 || p.sharding == Sharding::FsdpHybrid {
            return None;
        }
        let exact = self.replica_classes == ReplicaClasses::Exact;
        let dev = |r: u32| machine.gpus[r as usize].device;
        // A route's shape: its latency and each hop's latency and peak rate.
        let shape = |a: u32, b: u32, out: &mut Vec<u64>| {
            let Some(route) = machine.railless_route(dev(a), dev(b)) else {
                out.push(u64::MAX);
                return;
            };
            out.push(route.latency_ns);
            out.push(route.links.len() as u64);
            for &l in &route.links {
                let link = &machine.links[l as usize];
                out.push(link.latency_ns);
                out.push(link.bandwidth.peak().to_bits());
            }
        };
        let width = p.tp * p.dp;
        let span = p.ep.max(1) * p.etp.max(1);
        let mut firsts: HashMap<Vec<u64>, u32> = HashMap::new();
        let mut replica_of = vec![0u32; p.dp as usize];
        for block in 0..p.dp / k {
            let mut sig = Vec::new();
            for d in block * k..(block + 1) * k {
                for stage in 0..p.pp {
                    let r = p.rank(Coords { tp: 0, dp: d, stage });
                    for next in [stage.wrapping_sub(1), stage + 1] {
                        if next < p.pp {
                            shape(r, p.rank(Coords { tp: 0, dp: d, stage: next }), &mut sig);
                            shape(p.rank(Coords { tp: 0, dp: d, stage: next }), r, &mut sig);
                        }
                    }
                    if exact {
                        // DP ring neighbours, and expert-DP ring neighbours (span ranks apart): a
                        // ring sends to the next rank only (`Plan::Ring`: r to r + 1), so what a
                        // replica's ring steps meet is the route from it to the next and the one
                        // from the previous to it. Other algorithms are left to the check.
                        let (prev, next) = (
                            p.rank(Coords { tp: 0, dp: (d + p.dp - 1) % p.dp, stage }),
                            p.rank(Coords { tp: 0, dp: (d + 1) % p.dp, stage }),
                        );
                        shape(r, next, &mut sig);
                        shape(prev, r, &mut sig);
                        if span > 1 {
                            let base = stage * width;
                            let o = r - base;
                            shape(r, base + (o + span) % width, &mut sig);
                            shape(base + (o + width - span) % width, r, &mut sig);
                        }
                    }
                }
            }
            let first = *firsts.entry(sig).or_insert(block);
            for i in 0..k {
                replica_of[(block * k + i) as usize] = first * k + i;
            }
        }
        (firsts.len() < (p.dp / k) as usize).then_some(replica_of)
    }

    /// The represented ranks and the DP block they stand for, decided together: replicas at or
    /// past the block are driven as images of those below it, so the block is the DP degree
    /// whenever every replica has ranks of its own.
    fn reduction(&self, machine: &Machine, symmetric: bool) -> (Vec<u32>, u32) {
        let (represented, block, _) = self.reduction_with_classes(machine, symmetric);
        (represented, block)
    }

    /// [`Self::reduction`] with the map of timeline classes where they apply (else empty): on a
    /// fabric, the first ranks of the TP groups of each class's lowest replica.
    fn reduction_with_classes(&self, machine: &Machine, symmetric: bool) -> (Vec<u32>, u32, Vec<u32>) {
        let p = &self.plan;
        let gpus = p.gpus();
        let all: Vec<u32> = (0..gpus).collect();
        let s = &self.strategy;
        let servers = s.runtime.as_ref().is_some_and(|r| r.uses_servers());
        // The collective model says whether its all-reduce is the same from every node (`auto` is the
        // ring under the ideal model, but may be NCCL's tree across nodes).
        let layout = Layout::from_nodes(machine.gpus[..gpus as usize].iter().map(|g| g.node));
        let model = &machine.collectives;
        // A slow GPU breaks every symmetry: each rank is simulated.
        let faulty = !machine.compute_factor.is_empty();
        if !symmetric || servers || faulty || !model.may_reduce(s.allreduce, layout) {
            return (all, p.dp, Vec::new());
        }
        // NCCL's channels may carry a group's traffic through NICs and NVSwitch ports next to the
        // other TP ranks' GPUs, where those ranks' own groups run: under NCCL every TP rank is
        // kept (whole nodes), and only the rotation of nodes reduces.
        let first_of_tp: Vec<u32> = match model {
            CollectiveModel::Nccl(_) => all,
            CollectiveModel::Ideal => all.iter().copied().filter(|&r| p.coords(r).tp == 0).collect(),
        };
        if machine.uniform_nodes(gpus).is_none() {
            let classes = match model {
                CollectiveModel::Ideal => self.replica_classes(machine),
                CollectiveModel::Nccl(_) => None,
            };
            return match classes {
                Some(map) => {
                    let rep = first_of_tp.into_iter().filter(|&r| map[p.coords(r).dp as usize] == p.coords(r).dp);
                    (rep.collect(), p.dp, map)
                }
                None => (first_of_tp, p.dp, Vec::new()),
            };
        }
        let k = self.dp_block(machine);
        (first_of_tp.into_iter().filter(|&r| p.coords(r).dp < k).collect(), k, Vec::new())
    }

    /// How many DP replicas a symmetric simulation keeps: k = lcm(GPUs per node / gcd(GPUs per
    /// node, tp), cp), the replicas filling whole nodes and whole CP groups, when rotating the nodes by k replicas maps the
    /// machine and the plan onto themselves (identical nodes meeting at one switch, whole stages
    /// of whole nodes, FSDP shard groups made of whole blocks) and traffic inside a TP group never
    /// shares a link with traffic between nodes (then the TP collectives of the replicas left out
    /// cannot change what the simulated ones see); the DP degree otherwise.
    pub fn dp_block(&self, machine: &Machine) -> u32 {
        let p = &self.plan;
        machine.uniform_nodes(p.gpus()).and_then(|g| self.replica_block(machine, g)).unwrap_or(p.dp)
    }

    /// The block of replicas a timeline class is made of: [`Self::replica_block`] on nodes that
    /// are identical inside (`identical_nodes` refuses `compute_factor` faults).
    fn class_block(&self, machine: &Machine) -> Option<u32> {
        machine.identical_nodes(self.plan.gpus(), false).and_then(|g| self.replica_block(machine, g))
    }

    /// The block of replicas that stand together on nodes of `g` GPUs (for [`Self::dp_block`] and
    /// [`Self::replica_classes`]): k = lcm(g / gcd(g, tp), cp), when blocks of k fill whole stages
    /// of whole nodes, FSDP shard groups are made of whole blocks, expert-parallel groups lie
    /// inside a block and TP traffic never shares a link with the network's; None otherwise.
    fn replica_block(&self, machine: &Machine, g: u32) -> Option<u32> {
        let p = &self.plan;
        // Replicas filling whole nodes, and whole context-parallel groups (a CP group is cp
        // consecutive replicas of the folded plan): lcm(g / gcd(g, tp), cp) replicas.
        let k = g / gcd(g, p.tp);
        let cp = p.cp_folded.max(1);
        let k = k / gcd(k, cp) * cp;
        let shard_ok = p.sharding != Sharding::FsdpHybrid || self.shard_group(g) % k == 0;
        // Expert-parallel groups must lie inside a block, so that the left-out blocks' groups are
        // images of simulated ones.
        let ep_ok = p.ep <= 1 || (k * p.tp) % (p.ep * p.etp.max(1)) == 0;
        let fits = (p.tp * p.dp) % g == 0 && p.dp % k == 0 && shard_ok && ep_ok;
        (fits && tp_apart_from_network(machine, p.tp, g)).then_some(k)
    }

    fn shard_group(&self, gpus_per_node: u32) -> u32 {
        match self.plan.sharding {
            Sharding::FsdpHybrid if self.plan.shard_group > 0 => self.plan.shard_group.min(self.plan.dp),
            Sharding::FsdpHybrid => (gpus_per_node / self.plan.tp).max(1).min(self.plan.dp),
            _ => self.plan.dp,
        }
    }

    /// Each transformer layer's first workload layer and block count: the embedding is workload
    /// layer 0, then each layer's blocks (2 per dense layer, 4 per MoE layer, four compute-free
    /// blocks more per MoE layer under expert tensor parallelism (`workload::moe::EtpBlocks`),
    /// and the key-value exchange block after the attention under context parallelism), the
    /// head last.
    fn layer_blocks(&self) -> Vec<(usize, usize)> {
        let p = &self.plan;
        let etp_blocks = |i: u32| if p.etp > 1 && self.model.is_moe_layer(i) { 4 } else { 0 };
        let blocks = |i: u32| self.model.blocks_of_layer(i) + etp_blocks(i) + usize::from(p.cp_folded > 1);
        let mut out = Vec::with_capacity(self.model.layers as usize);
        let mut next = 1;
        for i in 0..self.model.layers {
            out.push((next, blocks(i)));
            next += blocks(i);
        }
        out
    }

    /// Per stage, per model chunk: the workload layers it runs, in forward order, over a workload
    /// of `layers` layers (from [`Self::cost`]).
    pub fn chunks(&self, layers: usize) -> Vec<Vec<Vec<usize>>> {
        let p = &self.plan;
        let last = layers - 1;
        let starts = self.layer_blocks();
        (0..p.pp)
            .map(|stage| {
                p.stage_layers(self.model.layers, stage)
                    .into_iter()
                    .enumerate()
                    .map(|(c, r)| {
                        let mut v: Vec<usize> = Vec::new();
                        if stage == 0 && c == 0 {
                            v.push(0);
                        }
                        for i in r {
                            let (first, blocks) = starts[i as usize];
                            v.extend(first..first + blocks);
                        }
                        if stage == p.pp - 1 && c as u32 == p.vp - 1 {
                            v.push(last);
                        }
                        v
                    })
                    .collect()
            })
            .collect()
    }

    /// The gradient bytes of the tied output layer's own copy of the embedding, which it keeps
    /// when it sits on another stage than the embedding (0 otherwise).
    pub(crate) fn tied_copy_bytes(&self) -> u64 {
        let p = &self.plan;
        if self.model.tied_embeddings && p.pp > 1 {
            self.model.vocab * self.model.hidden / p.tp as u64 * p.grad_bytes
        } else {
            0
        }
    }

    /// The plan's workload: the cost's layers with the tied head's own copy of the embedding
    /// added to its gradients ([`PlanSetup::tied_copy_bytes`]).
    pub(crate) fn plan_workload(&self, cost: &TransformerCost) -> Workload {
        let mut workload = cost.to_workload_with(self.plan.grad_bytes);
        let extra = self.tied_copy_bytes();
        if let (true, Some(head)) = (extra > 0, workload.layers.last_mut()) {
            head.grad_bytes += extra;
            head.grad_tensors.insert(0, extra);
        }
        workload
    }

    /// Stages, chunks and represented ranks of the plan over `workload` (from [`Self::cost`]).
    pub fn layout(&self, machine: &Machine, workload: &Workload, symmetric: bool) -> PlanLayout {
        let p = &self.plan;
        let chunks = self.chunks(workload.layers.len());
        let starts = self.layer_blocks();
        // ZeRO-3/FSDP modules: each transformer layer's blocks together (llm-foundry wraps every
        // MPTBlock: `fsdp_wrap_fn`, llmfoundry/models/mpt/modeling_mpt.py @ 5e85bd6), the embedding
        // and the output layer each alone (the root module's few parameters).
        // (`fsdp-wrap=layer`; otherwise every block is a module of its own.)
        let mut fsdp_units: Vec<u32> = Vec::new();
        if p.fsdp_wrap_layer {
            fsdp_units = (0..workload.layers.len() as u32).map(|l| l + self.model.layers).collect();
            for (i, &(first, blocks)) in starts.iter().enumerate() {
                for unit in &mut fsdp_units[first..first + blocks] {
                    *unit = i as u32;
                }
            }
        }
        let elem = self.precision.bytes();
        let tokens = p.micro_batch as u64 * self.seq_len as u64;
        let (represented, dp_block, replica_of) = self.reduction_with_classes(machine, symmetric);
        PlanLayout {
            plan: p.clone(),
            chunks,
            represented,
            // Each TP rank sends its 1/tp of the activations (sequence parallelism, or Megatron's
            // scatter-gather of the replicated tensor).
            pp_bytes: (tokens * self.model.hidden * elem).div_ceil(p.tp as u64),
            pp_gathered_bytes: tokens * self.model.hidden * elem,
            param_per_grad_byte: elem as f64 / p.grad_bytes as f64,
            tied_bytes: self.tied_copy_bytes(),
            shard_group: self.shard_group(gpus_per_node(machine)),
            dp_block,
            replica_of,
            expert_grads: Vec::new(),
            fsdp_units,
            host: None,
        }
    }

    /// The host model of the plan's framework over `cost`'s layers (see [`HostModel`]): eager
    /// PyTorch launches every kernel the cost model times; CUDA graphs one graph per block and
    /// pass; none with `host=off`.
    pub fn host_model(&self, cost: &TransformerCost) -> Option<HostModel> {
        let te = ModuleImpl::resolve(self.plan.modules, self.precision) == ModuleImpl::Te;
        let mut layers = cost.launches(self.plan.recompute, te);
        match self.plan.host {
            HostLaunch::Off => return None,
            HostLaunch::Eager | HostLaunch::Blocking => {}
            // One graph per block and pass; the graph replays the modules without their Python.
            HostLaunch::Graphs => {
                for x in &mut layers {
                    x.forward = x.forward.min(1);
                    x.backward = x.backward.min(1);
                    x.modules = 0;
                }
            }
        }
        let launch_ns = self.plan.host_launch_ns.unwrap_or_else(|| eager_launch_ns(self.gpu));
        Some(HostModel {
            launch_ns,
            module_ns: crate::parallel::te_module_host_ns(launch_ns),
            layers,
            blocking: self.plan.host == HostLaunch::Blocking,
            blocking_wait_ns: BLOCKING_WAIT_NS,
        })
    }

    /// The setup as the DAG builder sees it under context parallelism: CP folded into DP
    /// ([`ParallelPlan::folded`]), each GPU holding seq / cp tokens of every sequence. Megatron
    /// splits each sequence in 2 cp chunks (each GPU takes two, for causal balance), so cp x 2
    /// must divide the sequence length.
    pub fn folded(&self) -> Result<PlanSetup> {
        let cp = self.plan.cp;
        if self.seq_len % (2 * cp) != 0 {
            return Err(Error::invalid(
                "--parallel cp",
                format!(
                    "cp={cp} needs the sequence length ({}) to be a multiple of 2 x cp = {} (Megatron's load-balanced \
                     split); use --seq-len a multiple of {}",
                    self.seq_len,
                    2 * cp,
                    2 * cp
                ),
            ));
        }
        Ok(PlanSetup { plan: self.plan.folded(), seq_len: self.seq_len / cp, ..self.clone() })
    }

    /// Builds and runs the plan's DAG; `symmetric` lets identical DP replicas be simulated once.
    pub fn simulate(&self, symmetric: bool, options: Options) -> Result<SimulatedPlan> {
        if self.plan.cp > 1 {
            self.plan.check(self.plan.gpus(), self.model.layers)?;
            return self.folded()?.simulate(symmetric, options);
        }
        let gpus = self.plan.gpus();
        // The model's own checks (tp dividing the heads) before the machine's and memory's.
        let cost = self.cost()?;
        let machine = self.topology.instantiate(gpus)?;
        let memory = self.check(&machine)?;
        let workload = self.plan_workload(&cost);
        let build = |layout: &PlanLayout| {
            build_dag(&BuildInput {
                workload: &workload,
                machine: &machine,
                gpus,
                strategy: &self.strategy,
                iterations: self.iterations,
                represented: layout.represented.len() as u32,
                plan: Some(layout),
            })
        };
        // The routed experts' gradients, which an EP plan reduces over the expert-DP group.
        let layout_by = |setup: &PlanSetup, symmetric| PlanLayout {
            expert_grads: cost.expert_grad_tensors(self.plan.grad_bytes),
            host: self.host_model(&cost),
            ..setup.layout(&machine, &workload, symmetric)
        };
        let layout_of = |symmetric| layout_by(self, symmetric);
        let mut layout = layout_of(symmetric);
        let mut dag = build(&layout)?;
        // Reduced on the condition that the tuner picks node-symmetric schedules: checked on the
        // calls themselves, else every rank is simulated.
        if layout.represented.len() < gpus as usize && !crate::predict::calls_node_symmetric(&machine, &dag) {
            layout = layout_of(false);
            dag = build(&layout)?;
        }
        let mut run = simulate(&dag, &machine, options)?;
        let mut replicas = ReplicaReduction {
            simulated: replicas_simulated(&layout),
            dp: self.plan.dp,
            classes: (!layout.replica_of.is_empty()).then_some(self.replica_classes),
            fell_back: false,
            drift_ns: 0,
            refinements: 0,
        };
        if replicas.classes.is_some() {
            replicas.drift_ns = image_drift(&dag, &run);
            let exact = self.replica_classes == ReplicaClasses::Exact;
            let every_replica = PlanSetup { replica_classes: ReplicaClasses::Off, ..self.clone() };
            // A refusal of a run after a failed check (a size limit, most often) says why it ran.
            let why = |doing: &'static str, drift: u64| {
                move |e: Error| match e {
                    Error::Invalid { what, msg } => Error::Invalid {
                        what,
                        msg: format!(
                            "{msg} ({doing}, because the timeline classes failed their check: images ended up \
                             to {drift} ns off their originals)"
                        ),
                    },
                    other => other,
                }
            };
            // Drops the previous DAG before building the next (memory at scale), then simulates.
            let rerun = |old: Dag, layout: &PlanLayout, why: &dyn Fn(Error) -> Error| -> Result<(Dag, Run)> {
                drop(old);
                let dag = build(layout).map_err(why)?;
                let run = simulate(&dag, &machine, options).map_err(why)?;
                Ok((dag, run))
            };
            // The classes held only if every image ended with its original: else the run is not
            // the full one. The exact mode gives the blocks of replicas whose images ended off a
            // class of their own each and runs again, checked again, a few times (a split only
            // adds representatives: a split run that passes is exact as any run that passes).
            let block = self.class_block(&machine).unwrap_or(1);
            while exact && replicas.drift_ns > 0 && replicas.refinements < self.class_splits {
                let mut map = layout.replica_of.clone();
                for d in drifted_replicas(&dag, &run, &machine, &self.plan) {
                    let first = d / block * block;
                    for i in first..first + block {
                        map[i as usize] = i;
                    }
                }
                if map.iter().enumerate().all(|(d, &r)| r == d as u32) {
                    break; // nothing left to split off: every replica runs below
                }
                let mut split = layout_by(&every_replica, symmetric);
                split.represented.retain(|&r| {
                    let d = self.plan.coords(r).dp;
                    map[d as usize] == d
                });
                split.replica_of = map;
                // The previous run goes before the next is built (memory at scale).
                drop(run);
                layout = split;
                (dag, run) = rerun(dag, &layout, &why("splitting the classes", replicas.drift_ns))?;
                replicas.refinements += 1;
                replicas.simulated = replicas_simulated(&layout);
                replicas.drift_ns = image_drift(&dag, &run);
            }
            if exact && replicas.drift_ns > 0 {
                drop(run);
                layout = layout_by(&every_replica, symmetric);
                (dag, run) = rerun(dag, &layout, &why("simulating every DP replica", replicas.drift_ns))?;
                replicas.fell_back = true;
                replicas.simulated = replicas_simulated(&layout);
            }
        }
        Ok(SimulatedPlan { machine, dag, run, layout, cost, memory, workload, replicas })
    }

    /// Simulates and summarises the plan.
    pub fn predict(&self) -> Result<Prediction> {
        self.predict_with(true)
    }

    /// [`PlanSetup::predict`], choosing whether identical DP replicas may be simulated once.
    pub fn predict_with(&self, symmetric: bool) -> Result<Prediction> {
        if self.plan.cp > 1 {
            // The folded setup predicts the same step, tokens and FLOPs; name the plan as given.
            self.plan.check(self.plan.gpus(), self.model.layers)?;
            let mut p = self.folded()?.predict_with(symmetric)?;
            let step = p.iteration_time_s;
            p.throughput_samples_per_s = self.plan.global_batch as f64 / step;
            if let Some(r) = p.llm.as_mut() {
                r.plan = self.plan.name();
                r.seq_len = self.seq_len;
                r.dp = self.plan.dp;
                r.global_batch = self.plan.global_batch;
            }
            return Ok(p);
        }
        let sim = self.simulate(symmetric, Options::default())?;
        let p = &self.plan;
        let gpus = p.gpus();
        let steady = steady_state(&sim.dag, &sim.run);
        let step_ns = steady.iteration_ns;
        let step_s = ns_to_s(step_ns);
        let periods = (self.iterations - 1) as f64;
        let per_gpu = plan_breakdown_per_gpu(&sim.dag, &sim.run, steady.window, p.pp > 1);
        // Under timeline classes each simulated GPU counts once for every DP replica its class
        // stands for (classes differ in size), so the averages are the full run's: sums of
        // integer nanoseconds, exact in f64, repeated instead of scaled.
        let mut weight = vec![1usize; p.dp as usize];
        if !sim.layout.replica_of.is_empty() {
            weight.iter_mut().for_each(|w| *w = 0);
            for &r in &sim.layout.replica_of {
                weight[r as usize] += 1;
            }
        }
        let weighted = |keep: &dyn Fn(u32) -> bool| -> (Vec<&[u64; 7]>, u32) {
            let mut rows = Vec::new();
            let mut gpus = 0;
            for (g, row) in per_gpu.iter().enumerate() {
                let c = p.coords(sim.dag.rank_of(g as u32));
                if keep(c.stage) {
                    gpus += 1;
                    rows.extend(std::iter::repeat_n(row, weight[c.dp as usize]));
                }
            }
            (rows, gpus)
        };
        let breakdown = average(&weighted(&|_| true).0, periods);
        let stages = (0..p.pp)
            .map(|stage| {
                let (rows, gpus) = weighted(&|s| s == stage);
                StageBreakdown { stage, gpus_simulated: gpus, breakdown: average(&rows, periods) }
            })
            .collect();
        let tokens = p.global_batch as f64 * self.seq_len as f64;
        let micro_batches = p.micro_batches() as f64;
        let model_flops = sim.cost.model_flops * micro_batches * p.dp as f64;
        let hardware_flops = sim.cost.hardware_flops * micro_batches * p.dp as f64;
        let peak = self.gpu.peak_flops_per_ns(self.precision) * 1e9; // FLOP/s
        let mfu = model_flops / (step_s * gpus as f64 * peak);
        let m = sim.memory.peak();
        let report = PlanReport {
            plan: p.name(),
            model: self.model.name.clone(),
            parameters: self.model.params().total(),
            precision: self.precision.name().into(),
            seq_len: self.seq_len,
            tp: p.tp,
            pp: p.pp,
            dp: p.dp,
            vp: p.vp,
            micro_batch: p.micro_batch,
            global_batch: p.global_batch,
            micro_batches: p.micro_batches(),
            schedule: p.schedule.name().into(),
            step_time_s: step_s,
            tokens_per_s: tokens / step_s,
            tokens_per_s_per_gpu: tokens / step_s / gpus as f64,
            model_tflops_per_gpu: model_flops / step_s / gpus as f64 / 1e12,
            mfu,
            hfu: hardware_flops / (step_s * gpus as f64 * peak),
            memory: MemoryReport {
                stage: m.stage,
                weights: m.weights,
                gradients: m.gradients,
                optimizer: m.optimizer,
                gathered_parameters: m.gathered,
                activations: m.activations,
                total: m.total,
                capacity: sim.memory.capacity,
                micro_batches_in_flight: m.in_flight,
            },
            bubble_fraction: if step_s > 0.0 { breakdown.bubble / step_s } else { 0.0 },
            breakdown,
            stages,
            gpus_simulated: sim.dag.meta.gpus,
            replicas: sim.replicas.report(),
        };
        let ranks: Vec<u32> = (0..sim.dag.meta.gpus).map(|g| sim.dag.rank_of(g)).collect();
        let own = Own {
            workload: self.model.name.clone(),
            batch_per_gpu: p.micro_batch,
            gpu_model: self.gpu.name.to_string(),
            iteration_time_s: step_s,
            throughput_samples_per_s: p.global_batch as f64 / step_s,
            utilisation: utilisation_of(&sim.machine, &sim.run, &steady, ranks.into_iter()),
            llm: Some(report),
        };
        let run = RunOf { machine: &sim.machine, run: &sim.run, steady: &steady, gpus, iterations: self.iterations };
        Ok(prediction(&self.topology, &self.strategy, &sim.workload, run, own))
    }
}

/// DP replicas with ranks of their own in `layout`.
fn replicas_simulated(layout: &PlanLayout) -> u32 {
    let mut d: Vec<u32> = layout.represented.iter().map(|&r| layout.plan.coords(r).dp).collect();
    d.sort_unstable();
    d.dedup();
    d.len() as u32
}

/// DP replicas whose images (transfers into them, collectives over them) ended off their
/// originals, ascending.
fn drifted_replicas(dag: &Dag, run: &Run, machine: &Machine, plan: &ParallelPlan) -> Vec<u32> {
    let rank_of: HashMap<u32, u32> = machine.gpus.iter().enumerate().map(|(r, g)| (g.device, r as u32)).collect();
    let off = |o: u32, i: u32| run.end[o as usize] != run.end[i as usize];
    let mut out = Vec::new();
    for (o, imgs) in dag.image_groups() {
        for &(i, _) in imgs.iter().filter(|&&(i, _)| off(o, i)) {
            if let crate::dag::Work::Transfer { dst, .. } = dag.task(i).work {
                out.extend(rank_of.get(&dst).map(|&r| plan.coords(r).dp));
            }
        }
    }
    for &(_, i) in dag.collective_images().iter().filter(|&&(o, i)| off(o, i)) {
        if let crate::dag::Work::Collective { group, .. } = dag.task(i).work {
            out.extend(dag.group(group).iter().map(|&r| plan.coords(r).dp));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The largest gap between the end of an image (a transfer or collective repeated for a DP
/// replica left out) and its original's, ns.
fn image_drift(dag: &Dag, run: &Run) -> u64 {
    let end = |t: u32| run.end[t as usize];
    let transfers = dag.image_groups().flat_map(|(o, imgs)| imgs.iter().map(move |&(i, _)| (o, i)));
    transfers.chain(dag.collective_images().iter().copied()).map(|(o, i)| end(o).abs_diff(end(i))).max().unwrap_or(0)
}

/// True when no link carries both traffic between two GPUs of a TP group (`tp` consecutive GPUs
/// of the first node) and traffic from a GPU of the first node to the second node.
fn tp_apart_from_network(machine: &Machine, tp: u32, per_node: u32) -> bool {
    if tp < 2 || machine.gpus.len() <= per_node as usize {
        return true;
    }
    let dev = |r: u32| machine.gpus[r as usize].device;
    let mut inside = std::collections::HashSet::new();
    for a in 0..tp.min(per_node) {
        for b in 0..tp.min(per_node) {
            if a != b {
                if let Some(route) = machine.shortest_path(dev(a), dev(b)) {
                    inside.extend(route.links);
                }
            }
        }
    }
    (0..per_node).all(|a| {
        let out = machine.railless_route(dev(a), dev(per_node + a)).map(|r| r.links).unwrap_or_default();
        let back = machine.railless_route(dev(per_node + a), dev(a)).map(|r| r.links).unwrap_or_default();
        out.iter().chain(&back).all(|l| !inside.contains(l))
    })
}

/// GPUs in the machine's first node.
pub fn gpus_per_node(machine: &Machine) -> u32 {
    machine.gpus.iter().filter(|g| g.node == machine.gpus[0].node).count() as u32
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
