//! Which collective model lowers a machine's collectives: `ideal` (the default until the NCCL
//! model beats it on the shipped validation sets; see `validate --baseline ideal-ring`) or `nccl`
//! (NCCL's algorithms, protocols, channels and transports for a named version). `ideal` is the
//! idealised ring and the other textbook schedules of [`super::Plan`], where every transfer moves at its links' rates;
//! the DAG paper's closed forms hold there). [`Lowerer`] is what the engine calls for each
//! collective: it keeps one NCCL communicator per group and one plan per distinct call, and counts
//! what ran, for reports.

use super::nccl::tuner::Force;
use super::nccl::version::{NcclAlgo, NcclVersion, Proto};
use super::nccl::{Comm, NcclConfig};
use super::{Algorithm, CollectiveOp, Layout, Plan};
use crate::error::{Error, Result};
use crate::hw::Machine;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The model used when none is named.
const DEFAULT_NAME: &str = "ideal";

/// How collectives are lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "model", rename_all = "kebab-case")]
pub enum CollectiveModel {
    /// The idealised schedules: rings of 2(N-1) steps at link rates, no protocol or library costs.
    Ideal,
    /// NCCL's mechanics for a version, with optional forced algorithm and protocol.
    Nccl(NcclConfig),
}

impl Default for CollectiveModel {
    /// The ideal model until the NCCL model's presets and acceptance land (issue 14); then NCCL.
    fn default() -> Self {
        CollectiveModel::Ideal
    }
}

impl CollectiveModel {
    /// Model names accepted by `--collective-model`.
    pub const NAMES: [&'static str; 2] = ["nccl", "ideal"];

    /// Builds a model from the command-line flags; errors name the flag at fault.
    pub fn from_flags(
        model: Option<&str>,
        version: Option<&str>,
        algo: Option<&str>,
        proto: Option<&str>,
    ) -> Result<Self> {
        let nccl_asked = version.is_some() || algo.is_some() || proto.is_some();
        let model = model.unwrap_or(if nccl_asked { "nccl" } else { DEFAULT_NAME });
        match model {
            "ideal" => {
                for (flag, v) in [("--nccl-version", version), ("--nccl-algo", algo), ("--nccl-proto", proto)] {
                    if v.is_some() {
                        return Err(Error::invalid(
                            flag,
                            "applies to the NCCL collective model only; drop it or use --collective-model nccl",
                        ));
                    }
                }
                Ok(CollectiveModel::Ideal)
            }
            "nccl" => {
                let version = match version {
                    Some(v) => NcclVersion::parse(v).ok_or_else(|| {
                        Error::invalid(
                            "--nccl-version",
                            format!("unknown NCCL version `{v}` (known: {})", NcclVersion::names()),
                        )
                    })?,
                    None => NcclVersion::DEFAULT,
                };
                let algo = match algo {
                    Some(a) => Some(parse_algo(a)?),
                    None => None,
                };
                let proto = match proto {
                    Some(p) => Some(Proto::parse(p).ok_or_else(|| {
                        Error::invalid("--nccl-proto", format!("unknown protocol `{p}` (known: LL, LL128, Simple)"))
                    })?),
                    None => None,
                };
                Ok(CollectiveModel::Nccl(NcclConfig { version, force: Force { algo, proto } }))
            }
            other => Err(Error::invalid(
                "--collective-model",
                format!("unknown collective model `{other}` (known: {})", Self::NAMES.join(", ")),
            )),
        }
    }

    /// `nccl 2.21.5`, `nccl 2.18.3 (NCCL_ALGO=ring, NCCL_PROTO=Simple)` or `ideal`.
    pub fn name(&self) -> String {
        match self {
            CollectiveModel::Ideal => "ideal".into(),
            CollectiveModel::Nccl(c) => {
                let mut forced = Vec::new();
                if let Some(a) = c.force.algo {
                    forced.push(format!("NCCL_ALGO={}", a.name()));
                }
                if let Some(p) = c.force.proto {
                    forced.push(format!("NCCL_PROTO={}", p.name()));
                }
                if forced.is_empty() {
                    format!("nccl {}", c.version.name())
                } else {
                    format!("nccl {} ({})", c.version.name(), forced.join(", "))
                }
            }
        }
    }

    /// Checks the model can run on a machine with a strategy's all-reduce algorithm: a forced
    /// algorithm must be one dagsim lowers and agree with the strategy's, and a forced protocol
    /// must be enabled there. Errors name the flag.
    pub fn check(&self, machine: &Machine, gpus: u32, algorithm: Algorithm) -> Result<()> {
        let CollectiveModel::Nccl(c) = self else { return Ok(()) };
        if let Some(a) = c.force.algo {
            if !matches!(a, NcclAlgo::Ring | NcclAlgo::Tree) {
                let why = match a {
                    NcclAlgo::Nvls | NcclAlgo::NvlsTree => {
                        "NVLS needs NVSwitch multicast (Hopper and later); dagsim does not model it"
                    }
                    _ => "CollNet needs in-network reduction (SHARP); dagsim does not model it",
                };
                return Err(Error::invalid(
                    "--nccl-algo",
                    format!("`{}`: {why} (ring and tree are modelled)", a.name()),
                ));
            }
            let strategy = match algorithm {
                Algorithm::Ring => Some(NcclAlgo::Ring),
                Algorithm::Tree => Some(NcclAlgo::Tree),
                _ => None,
            };
            if let Some(s) = strategy {
                if s != a {
                    return Err(Error::invalid(
                        "--nccl-algo",
                        format!("`{}` contradicts the strategy's allreduce={}; give one of them", a.name(), s.name()),
                    ));
                }
            }
        }
        if gpus >= 2 && (c.force.proto.is_some() || c.force.algo.is_some()) {
            let ranks: Vec<u32> = (0..gpus.min(machine.gpus.len() as u32)).collect();
            let comm = Comm::new(machine, &ranks, self.config_for(algorithm));
            // A mid-sized all-reduce tells whether the forced choice can run at all here.
            if let Err(e) = comm.choose(CollectiveOp::AllReduce, 1 << 20) {
                let flag = if c.force.proto.is_some() { "--nccl-proto" } else { "--nccl-algo" };
                return Err(Error::invalid(flag, format!("on {} with {gpus} GPUs: {e}", machine.name)));
            }
        }
        Ok(())
    }

    /// The NCCL configuration for collectives of a strategy's algorithm: an explicit ring or tree
    /// in the strategy forces NCCL's algorithm as `NCCL_ALGO` would.
    fn config_for(&self, algorithm: Algorithm) -> NcclConfig {
        let CollectiveModel::Nccl(mut c) = *self else { return NcclConfig::default() };
        if c.force.algo.is_none() {
            c.force.algo = match algorithm {
                Algorithm::Ring => Some(NcclAlgo::Ring),
                Algorithm::Tree => Some(NcclAlgo::Tree),
                _ => None,
            };
        }
        c
    }

    /// True if every collective of `algorithm` this model lowers on `layout` is the same from every
    /// node's point of view (a node-by-node ring), so one node's GPUs may stand for all.
    pub fn node_symmetric(&self, algorithm: Algorithm, layout: Layout) -> bool {
        match self {
            CollectiveModel::Ideal => matches!(algorithm, Algorithm::Ring | Algorithm::Hierarchical | Algorithm::Auto),
            CollectiveModel::Nccl(c) => {
                let forced = c.force.algo.or(match algorithm {
                    Algorithm::Ring => Some(NcclAlgo::Ring),
                    Algorithm::Tree => Some(NcclAlgo::Tree),
                    _ => None,
                });
                match algorithm {
                    Algorithm::Hierarchical => true,
                    Algorithm::Ring | Algorithm::Tree | Algorithm::Auto => {
                        forced == Some(NcclAlgo::Ring) || layout.nodes() <= 1
                    }
                    _ => false,
                }
            }
        }
    }
}

impl CollectiveModel {
    /// True where node symmetry hinges on the tuner's choice per call: NCCL's own choice of
    /// all-reduce algorithm across nodes may be the ring (every node alike) or a tree (nodes
    /// unequal), by size. [`CollectiveModel::calls_node_symmetric`] then decides from the calls.
    pub fn node_symmetric_by_choice(&self, algorithm: Algorithm, layout: Layout) -> bool {
        matches!(self, CollectiveModel::Nccl(c) if c.force.algo.is_none())
            && algorithm == Algorithm::Auto
            && layout.nodes() > 1
    }

    /// True if a reduced DAG may stand for every node: the schedule is node-symmetric outright,
    /// or hinges on the tuner's choice per call (then [`CollectiveModel::calls_node_symmetric`]
    /// decides on the built DAG).
    pub fn may_reduce(&self, algorithm: Algorithm, layout: Layout) -> bool {
        self.node_symmetric(algorithm, layout) || self.node_symmetric_by_choice(algorithm, layout)
    }

    /// True if each call, `(ranks, op, algorithm, bytes)` as the engine will lower it, runs a
    /// schedule that is the same from every node: then the run is the one the same calls make
    /// with the ring forced, for which [`CollectiveModel::node_symmetric`] holds. Only NCCL's
    /// all-reduce depends on the tuner here (its tree); the other operations lower alike whatever
    /// it picks. Communicators are built once per distinct group.
    pub fn calls_node_symmetric<'a>(
        &self,
        machine: &Machine,
        calls: impl IntoIterator<Item = (&'a [u32], CollectiveOp, Algorithm, u64)>,
    ) -> bool {
        let mut comms: HashMap<&'a [u32], Comm> = HashMap::default();
        for (ranks, op, algorithm, bytes) in calls {
            let layout = Layout::from_nodes(ranks.iter().map(|&r| machine.gpus[r as usize].node));
            if self.node_symmetric(algorithm, layout) {
                continue;
            }
            if !self.node_symmetric_by_choice(algorithm, layout) {
                return false;
            }
            if op != CollectiveOp::AllReduce || bytes == 0 {
                continue;
            }
            let config = self.config_for(algorithm);
            let comm = comms.entry(ranks).or_insert_with(|| Comm::new(machine, ranks, config));
            // As `Lowerer::lower` scales the bytes before the tuner sees them.
            let scaled = (bytes as f64 / machine.efficiency(op, algorithm, *self)).round() as u64;
            match comm.choose(op, scaled.max(1)) {
                Ok(choice) if choice.algo == NcclAlgo::Ring => {}
                _ => return false,
            }
        }
        true
    }
}

fn parse_algo(a: &str) -> Result<NcclAlgo> {
    NcclAlgo::parse(a).ok_or_else(|| {
        let known: Vec<&str> = NcclAlgo::ALL.iter().map(|a| a.name()).collect();
        Error::invalid("--nccl-algo", format!("unknown algorithm `{a}` (known: {})", known.join(", ")))
    })
}

/// What ran, summed over a simulation: one entry per (operation, how it ran).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CollectiveUse {
    pub op: String,
    /// `ring/LL128 x12` (NCCL), or the ideal algorithm's name.
    pub ran: String,
    pub calls: u64,
    pub bytes: u64,
}

/// `model: op a (x% of bytes), b (y%); op ...`, the largest first; `model: none` when nothing ran.
pub fn describe(model: &str, uses: &[CollectiveUse]) -> String {
    let mut ops: Vec<&str> = uses.iter().map(|u| u.op.as_str()).collect();
    ops.dedup();
    ops.sort_unstable();
    ops.dedup();
    if ops.is_empty() {
        return format!("{model}: no collectives");
    }
    let parts: Vec<String> = ops
        .iter()
        .map(|op| {
            let mut mine: Vec<&CollectiveUse> = uses.iter().filter(|u| u.op == *op).collect();
            let total: u64 = mine.iter().map(|u| u.bytes).sum::<u64>().max(1);
            mine.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.ran.cmp(&b.ran)));
            let ran: Vec<String> = mine
                .iter()
                .map(|u| format!("{} ({:.0}% of bytes)", u.ran, 100.0 * u.bytes as f64 / total as f64))
                .collect();
            format!("{op} {}", ran.join(", "))
        })
        .collect();
    format!("{model}: {}", parts.join("; "))
}

/// The NCCL channels each transfer between nodes of `plan` (a call of `op` under `algorithm`)
/// uses on a host-staged network ([`crate::hw::HostStaged`]), where a transfer moves at most that
/// many times one channel's rate ([`Machine::net_channel_cap`]). The ideal model's plans run one NCCL ring (or tree) per ring they lower
/// (a striped ring: one per local rank), each of two channels
/// ([`crate::hw::transports::COLLECTIVE_CHANNELS_PER_RING`]); the send/recv patterns (send-recv,
/// all-to-all, gather, scatter) run as NCCL's point-to-point calls, one peer's channels a
/// transfer. None where nothing applies: no such network, a plan of the NCCL model (its hops
/// carry their own caps), or an algorithm that is not NCCL's (parameter server, hierarchical,
/// HybridEP).
pub fn net_channels(machine: &Machine, op: CollectiveOp, algorithm: Algorithm, plan: &Plan) -> Option<u32> {
    let hs = machine.network.and_then(|n| n.host_staged)?;
    if matches!(plan, Plan::Nccl(_)) || !matches!(algorithm, Algorithm::Ring | Algorithm::Tree | Algorithm::Auto) {
        return None;
    }
    match op {
        CollectiveOp::AllReduce
        | CollectiveOp::Broadcast
        | CollectiveOp::Reduce
        | CollectiveOp::AllGather
        | CollectiveOp::ReduceScatter => Some(crate::hw::transports::COLLECTIVE_CHANNELS_PER_RING),
        CollectiveOp::SendRecv | CollectiveOp::AllToAll | CollectiveOp::Gather | CollectiveOp::Scatter => {
            Some(hs.p2p_channels)
        }
        CollectiveOp::HybridAllToAll { .. } => None,
    }
}

/// Lowers collectives for the engine, with caches.
#[derive(Default)]
pub struct Lowerer {
    comms: HashMap<(u32, Algorithm), Arc<Comm>>,
    /// Each plan with its entry in `tally`.
    plans: HashMap<(u32, CollectiveOp, Algorithm, u64), (Plan, u32)>,
    /// Calls and bytes per (operation, label), entries found through `tally_index`.
    tally: Vec<(u64, u64)>,
    tally_index: BTreeMap<(String, String), u32>,
}

impl Lowerer {
    pub fn new() -> Self {
        Self::default()
    }

    /// The plan for `op` on `bytes` (per rank) over group `group` (GPU indices `ranks`).
    pub fn lower(
        &mut self,
        machine: &Machine,
        group: u32,
        ranks: &[u32],
        op: CollectiveOp,
        algorithm: Algorithm,
        bytes: u64,
    ) -> Result<Plan> {
        let key = (group, op, algorithm, bytes);
        if let Some((p, i)) = self.plans.get(&key) {
            let e = &mut self.tally[*i as usize];
            e.0 += 1;
            e.1 += bytes;
            return Ok(p.clone());
        }
        let layout = Layout::from_nodes(ranks.iter().map(|&r| machine.gpus[r as usize].node));
        // HybridEP is a library of its own, not NCCL: its exchange lowers as written here.
        let nccl_algorithm = matches!(algorithm, Algorithm::Ring | Algorithm::Tree | Algorithm::Auto)
            && !matches!(op, CollectiveOp::HybridAllToAll { .. });
        let plan = match machine.collectives {
            CollectiveModel::Nccl(_) if nccl_algorithm && layout.ranks >= 2 && bytes > 0 => {
                let config = machine.collectives.config_for(algorithm);
                let comm = self
                    .comms
                    .entry((group, algorithm))
                    .or_insert_with(|| Arc::new(Comm::new(machine, ranks, config)))
                    .clone();
                let scaled = (bytes as f64 / machine.efficiency(op, algorithm, machine.collectives)).round() as u64;
                let p = comm.lower(op, scaled.max(1)).map_err(|e| Error::invalid("collective", e))?;
                Plan::Nccl(Arc::new(p))
            }
            model => {
                let efficiency = machine.efficiency(op, algorithm, model) * super::in_training_efficiency(op, layout);
                let bytes = (bytes as f64 / efficiency).round() as u64;
                let algorithm = if algorithm == Algorithm::Auto && model == CollectiveModel::Ideal {
                    Algorithm::Ring
                } else {
                    algorithm
                };
                let plan = Plan::lower_on(op, algorithm, layout, bytes);
                if machine.nic_route == crate::hw::NicRoute::Channels {
                    plan.over_channels(op, layout)
                } else {
                    plan
                }
            }
        };
        let next = self.tally.len() as u32;
        let i = *self.tally_index.entry((op.name().to_string(), plan.label())).or_insert(next);
        if i == next {
            self.tally.push((0, 0));
        }
        let e = &mut self.tally[i as usize];
        e.0 += 1;
        e.1 += bytes;
        self.plans.insert(key, (plan.clone(), i));
        Ok(plan)
    }

    /// What ran, by operation and label.
    pub fn uses(&self) -> Vec<CollectiveUse> {
        self.tally_index
            .iter()
            .map(|((op, ran), &i)| {
                let (calls, bytes) = self.tally[i as usize];
                CollectiveUse { op: op.clone(), ran: ran.clone(), calls, bytes }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_name_the_flag_at_fault() {
        assert_eq!(CollectiveModel::from_flags(None, None, None, None).unwrap(), CollectiveModel::default());
        assert!(matches!(
            CollectiveModel::from_flags(None, Some("2.18.3"), None, None).unwrap(),
            CollectiveModel::Nccl(_)
        ));
        let m = CollectiveModel::from_flags(Some("nccl"), Some("2.8.4"), Some("Tree"), Some("ll128")).unwrap();
        assert_eq!(m.name(), "nccl 2.8.4 (NCCL_ALGO=tree, NCCL_PROTO=LL128)");
        assert_eq!(CollectiveModel::from_flags(Some("ideal"), None, None, None).unwrap().name(), "ideal");
        for (args, flag) in [
            ((Some("magic"), None, None, None), "--collective-model"),
            ((None, Some("2.99.1"), None, None), "--nccl-version"),
            ((None, None, Some("butterfly"), None), "--nccl-algo"),
            ((None, None, None, Some("LL256")), "--nccl-proto"),
            ((Some("ideal"), Some("2.8.4"), None, None), "--nccl-version"),
        ] {
            let e = CollectiveModel::from_flags(args.0, args.1, args.2, args.3).unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
    }
}
