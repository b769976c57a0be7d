//! The flags that describe one setup (workload, machine, overrides), shared by every subcommand that
//! simulates (`predict`, `compare`, `timeline`, `replay`). Flags override scenario fields; paths
//! given on the command line are relative to the working directory. The strategy flag stays with
//! each subcommand (`compare` takes a list).

use dagsim::collective::CollectiveModel;
use dagsim::error::Result;
use dagsim::hw::builder::{build_parametric, Parametric};
use dagsim::hw::faults::Faults;
use dagsim::predict::Setup;
use dagsim::scenario::Scenario;
use dagsim::workload::gpu::GpuSpec;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// Layer-wise trace (native CSV or the DAG paper's table format).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Scenario file (TOML); flags given here override its fields.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Topology preset (`dagsim`'s topologies/README.md lists them) or file.
    #[arg(long, value_name = "NAME|FILE")]
    pub topology: Option<String>,
    /// Build the machine from parameters instead of --topology: nodes (default 1).
    #[arg(long, value_name = "N", conflicts_with = "topology")]
    pub nodes: Option<u32>,
    /// GPUs per node for the built machine (default 4).
    #[arg(long, value_name = "N", conflicts_with = "topology")]
    pub gpus_per_node: Option<u32>,
    /// Interconnect inside a node: pcie3, pcie4, nvlink, nvswitch (default pcie3).
    #[arg(long, value_name = "NAME", conflicts_with = "topology")]
    pub intra: Option<String>,
    /// Network between nodes: 10gbe, 25gbe, 100gbe, 100gbe-rdma, ib56, ib100, ib200 (default 10gbe).
    #[arg(long, value_name = "NAME", conflicts_with = "topology")]
    pub inter: Option<String>,
    /// Each built node's local storage read rate in GB/s (default 2: a datacentre NVMe SSD,
    /// docs/machines.md).
    #[arg(long, value_name = "GB_S", conflicts_with = "topology")]
    pub storage_gb_s: Option<f64>,
    /// Network adapters per built node (default 1, on the CPU; up to one per PCIe switch, each
    /// carrying the traffic of the GPUs beside it).
    #[arg(long, value_name = "N", conflicts_with = "topology")]
    pub nics_per_node: Option<u32>,
    /// Calibration file (from `dagsim calibrate`) applied to the topology's links.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Read --trace with an importer (pipedream, caffe, bcaffe, kineto) instead of the native reader.
    #[arg(long, value_name = "FORMAT")]
    pub profile_format: Option<dagsim::workload::import::ProfileFormat>,
    /// Synthesise the workload from the model zoo (see `dagsim trace gen --help`); needs --gpu, --batch.
    #[arg(long, value_name = "NAME", conflicts_with = "trace")]
    pub model: Option<String>,
    /// GPU for --model (v100-sxm2, v100-pcie, k80, a100, ...).
    #[arg(long, value_name = "NAME", requires = "model")]
    pub gpu: Option<String>,
    /// Training precision for --model: fp32, or fp16/bf16/fp8 for mixed precision (as `trace gen`).
    #[arg(long, value_name = "P", requires = "model")]
    pub precision: Option<dagsim::workload::Precision>,
    /// Optimizer for --model (sgd, momentum, adam; default adam for BERT and transformers,
    /// momentum otherwise), as `trace gen`.
    #[arg(long, value_name = "OPT", requires = "model")]
    pub optimizer: Option<dagsim::workload::memory::Optimizer>,
    /// Tokens per sequence for BERT and transformer --model (default: the config's), as `trace gen`.
    #[arg(long, value_name = "TOKENS", requires = "model")]
    pub seq_len: Option<u32>,
    /// Measured single-GPU samples/s at --batch: scales --model's layer times to match it.
    #[arg(long, value_name = "SAMPLES_PER_S", requires = "model")]
    pub calibrate_throughput: Option<f64>,
    /// Simulate --gpu's compute on a topology that names another GPU (results are labelled with
    /// --gpu; a note says so). Without it, such a contradiction is an error.
    #[arg(long, requires = "gpu")]
    pub force_gpu: bool,
    /// Samples per GPU per iteration. With --model the layers are synthesised at this batch; on a
    /// trace, forward, backward and data-layer times scale linearly from the trace's batch (a
    /// note says by how much; the update and gradients do not change).
    #[arg(long, value_name = "N")]
    pub batch: Option<u32>,
    /// Bytes of one input sample as stored (overrides the trace).
    #[arg(long, value_name = "BYTES")]
    pub sample_bytes: Option<u64>,
    /// Bytes of one input sample as copied to the GPU (overrides the trace).
    #[arg(long, value_name = "BYTES")]
    pub device_sample_bytes: Option<u64>,
    /// Iterations to simulate (the first is warm-up).
    #[arg(long, value_name = "N")]
    pub iterations: Option<u32>,
    #[command(flatten)]
    pub collectives: CollectiveArgs,
    /// A slow GPU: rank RANK's compute takes FACTOR times as long (repeatable).
    #[arg(long, value_name = "RANK=FACTOR")]
    pub slow_gpu: Vec<String>,
    /// A straggler node: every GPU of node NODE (0-based) computes FACTOR times slower (repeatable).
    #[arg(long, value_name = "NODE=FACTOR")]
    pub straggler_node: Vec<String>,
    /// A degraded link: both directions between two devices (names as in timelines, e.g.
    /// n0.nic0:switch) at FACTOR of their bandwidth (repeatable).
    #[arg(long, value_name = "DEV:DEV=FACTOR")]
    pub degrade_link: Vec<String>,
}

/// How collectives are modelled: the flags every simulating command shares.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CollectiveArgs {
    /// Collective model: ideal (textbook schedules at link rates; the default) or nccl (NCCL's
    /// algorithms, protocols, channels and transports).
    #[arg(long, value_name = "MODEL")]
    pub collective_model: Option<String>,
    /// NCCL version whose tuner and constants to use: 2.8.4, 2.18.3, 2.21.5 (default 2.21.5).
    #[arg(long, value_name = "VERSION")]
    pub nccl_version: Option<String>,
    /// Force NCCL's algorithm, as NCCL_ALGO does: ring or tree.
    #[arg(long, value_name = "ALGO")]
    pub nccl_algo: Option<String>,
    /// Force NCCL's protocol, as NCCL_PROTO does: LL, LL128 or Simple.
    #[arg(long, value_name = "PROTO")]
    pub nccl_proto: Option<String>,
    /// How transfers between nodes pick their NICs under the ideal collective model: local
    /// (NCCL's: each GPU's own NIC, PXN), channels (local, and a ring across nodes runs as one
    /// ring per GPU of a node, NCCL's channels, so every GPU's NIC carries a share; the default)
    /// or cheapest (the cheapest route). The NCCL model always routes as NCCL does.
    #[arg(long, value_name = "ROUTE")]
    pub nic_route: Option<String>,
    /// Whether compute kernels slow down beside the collectives in flight on their GPU: off (a
    /// collective overlaps compute for free), sms (each NCCL channel holds one SM while the
    /// collective runs; compute runs on the SMs left; the default) or sms+hbm (sms, and the
    /// memory-bound part of a kernel streams at the memory bandwidth the collectives' traffic
    /// leaves; opt-in).
    #[arg(long, value_name = "MODEL")]
    pub compute_contention: Option<String>,
}

impl CollectiveArgs {
    /// The model the flags ask for, over a scenario's fields (flags win field by field).
    pub fn model_over(&self, scenario: &dagsim::scenario::MachineSection) -> Result<CollectiveModel> {
        let pick = |flag: &Option<String>, field: &Option<String>| flag.clone().or(field.clone());
        CollectiveModel::from_flags(
            pick(&self.collective_model, &scenario.collective_model).as_deref(),
            pick(&self.nccl_version, &scenario.nccl_version).as_deref(),
            pick(&self.nccl_algo, &scenario.nccl_algo).as_deref(),
            pick(&self.nccl_proto, &scenario.nccl_proto).as_deref(),
        )
    }

    /// The model the flags alone ask for.
    pub fn model(&self) -> Result<CollectiveModel> {
        self.model_over(&Default::default())
    }

    /// The NIC route `--nic-route` asks for, if given.
    pub fn nic_route(&self) -> Result<Option<dagsim::hw::NicRoute>> {
        self.nic_route.as_deref().map(dagsim::hw::NicRoute::parse).transpose()
    }

    /// The compute contention `--compute-contention` asks for, if given.
    pub fn compute_contention(&self) -> Result<Option<dagsim::hw::ComputeContention>> {
        self.compute_contention.as_deref().map(dagsim::hw::ComputeContention::parse).transpose()
    }

    /// Sets a topology's collective model and NIC route from the flags (over a scenario's fields).
    pub fn apply(
        &self,
        topology: &mut dagsim::hw::Topology,
        scenario: &dagsim::scenario::MachineSection,
    ) -> Result<()> {
        topology.collectives = self.model_over(scenario)?;
        if let Some(r) = self.nic_route()? {
            topology.nic_route = r;
        }
        if let Some(c) = self.compute_contention()? {
            topology.compute_contention = c;
        }
        Ok(())
    }
}

impl SetupArgs {
    /// The faults the flags inject (`--slow-gpu`, `--straggler-node`, `--degrade-link`).
    fn faults(&self) -> Result<Faults> {
        let slow = |flag: &str, v: &[String]| v.iter().map(|s| Faults::parse_slow(flag, s)).collect::<Result<Vec<_>>>();
        Ok(Faults {
            slow_gpus: slow("--slow-gpu", &self.slow_gpu)?,
            slow_nodes: slow("--straggler-node", &self.straggler_node)?,
            degraded_links: self.degrade_link.iter().map(|s| Faults::parse_link(s)).collect::<Result<_>>()?,
        })
    }

    /// The scenario after applying the flags (and `strategy`, when given).
    pub fn scenario(&self, strategy: Option<&str>) -> Result<Scenario> {
        let mut scenario = match &self.scenario {
            Some(p) => Scenario::load(p)?,
            None => Scenario::default(),
        };
        let w = &mut scenario.workload;
        if let Some(t) = &self.trace {
            // A trace on the command line replaces a scenario's model and its synthesis settings.
            (w.model, w.gpu, w.precision, w.optimizer, w.seq_len, w.calibrate_throughput) =
                (None, None, None, None, None, None);
            w.trace = Some(std::path::absolute(t).unwrap_or(t.clone()));
        }
        if self.model.is_some() {
            (w.model, w.trace) = (self.model.clone(), None);
        }
        w.gpu = self.gpu.clone().or(w.gpu.take());
        w.precision = self.precision.or(w.precision);
        w.optimizer = self.optimizer.or(w.optimizer);
        w.seq_len = self.seq_len.or(w.seq_len);
        w.calibrate_throughput = self.calibrate_throughput.or(w.calibrate_throughput);
        w.profile_format = self.profile_format.or(w.profile_format);
        w.batch_per_gpu = self.batch.or(w.batch_per_gpu);
        w.sample_bytes = self.sample_bytes.or(w.sample_bytes);
        w.device_sample_bytes = self.device_sample_bytes.or(w.device_sample_bytes);
        if let Some(t) = &self.topology {
            scenario.machine.topology = Some(match Path::new(t).exists() {
                true => std::path::absolute(t).map(|p| p.to_string_lossy().into_owned()).unwrap_or(t.clone()),
                false => t.clone(),
            });
        }
        if let Some(s) = strategy {
            scenario.strategy = Some(s.to_string());
        }
        scenario.iterations = self.iterations.or(scenario.iterations);
        Ok(scenario)
    }

    /// The machine the parametric flags ask for, or None when none is given.
    fn parametric(&self, gpu: Option<&GpuSpec>) -> Option<Parametric> {
        let any = self.nodes.is_some()
            || self.gpus_per_node.is_some()
            || self.intra.is_some()
            || self.inter.is_some()
            || self.storage_gb_s.is_some()
            || self.nics_per_node.is_some();
        let d = Parametric::default();
        any.then(|| Parametric {
            nodes: self.nodes.unwrap_or(d.nodes),
            gpus_per_node: self.gpus_per_node.unwrap_or(d.gpus_per_node),
            intra: self.intra.clone().unwrap_or(d.intra),
            inter: self.inter.clone().unwrap_or(d.inter),
            gpu: gpu.map_or(d.gpu, |g| g.full_name.to_string()),
            storage_gb_s: self.storage_gb_s.unwrap_or(d.storage_gb_s),
            nics_per_node: self.nics_per_node.unwrap_or(d.nics_per_node),
        })
    }

    /// The setup a scenario (from [`SetupArgs::scenario`]) describes, with the machine built from
    /// parameters and the calibration applied when the flags ask for them.
    pub fn setup_of(&self, scenario: &Scenario) -> Result<Setup> {
        let mut setup = scenario.setup()?;
        let gpu = scenario.workload.gpu.as_deref().map(GpuSpec::by_name).transpose()?;
        if let Some(p) = self.parametric(gpu) {
            setup.topology = build_parametric(&p)?;
        } else if let Some(g) = gpu {
            self.check_gpu(&mut setup.topology, g)?;
        }
        if let (Some(b), None) = (self.batch, &scenario.workload.model) {
            // The trace's layer times were measured at its own batch (0: unknown, nothing to scale).
            let from = scenario.workload_source().load()?.batch_per_gpu;
            setup.workload.batch_per_gpu = from;
            let f = setup.workload.scale_batch(b);
            if f != 1.0 {
                eprintln!(
                    "note: --batch {b} on `{}`, measured at batch {from}: forward, backward and data-layer times \
                     scaled by {b}/{from} = {f:.3} (linear in batch; update and gradients unchanged)",
                    setup.workload.name
                );
            }
        }
        if let Some(c) = &self.calibration {
            setup.topology.calibrated = Some(dagsim::hw::Calibration::load(c)?);
        }
        self.collectives.apply(&mut setup.topology, &scenario.machine)?;
        setup.topology.faults = self.faults()?;
        Ok(setup)
    }

    /// The machine a scenario (from [`SetupArgs::scenario`]) names, built from parameters and
    /// calibrated when the flags ask, without loading its workload; its GPU checked against the
    /// scenario's as [`SetupArgs::setup_of`] does.
    pub fn topology_of(&self, scenario: &Scenario) -> Result<dagsim::hw::Topology> {
        let gpu = scenario.workload.gpu.as_deref().map(GpuSpec::by_name).transpose()?;
        let mut topology = if let Some(p) = self.parametric(gpu) {
            build_parametric(&p)?
        } else {
            let name = scenario.topology_arg();
            let mut t = dagsim::hw::load_topology(name.as_deref().unwrap_or(dagsim::hw::topology::DEFAULT_TOPOLOGY))?;
            if let Some(g) = gpu {
                self.check_gpu(&mut t, g)?;
            }
            t
        };
        if let Some(c) = &self.calibration {
            topology.calibrated = Some(dagsim::hw::Calibration::load(c)?);
        }
        self.collectives.apply(&mut topology, &scenario.machine)?;
        Ok(topology)
    }

    /// A `--gpu` (or a scenario's `workload.gpu`) that contradicts the topology's GPU is an error,
    /// unless `--force-gpu` makes it an override that relabels the machine, with a note.
    fn check_gpu(&self, topology: &mut dagsim::hw::Topology, gpu: &GpuSpec) -> Result<()> {
        let Some(named) = topology.gpu_name() else { return Ok(()) };
        // A topology GPU outside the spec table cannot be compared; it stays as it is.
        let Ok(theirs) = GpuSpec::by_name(named) else { return Ok(()) };
        if theirs.name == gpu.name {
            return Ok(());
        }
        let name = topology.name.clone();
        if !self.force_gpu {
            return Err(dagsim::error::Error::invalid(
                "--gpu",
                format!(
                    "`{}` contradicts topology `{name}`, whose GPUs are {named} ({}); pick a topology with \
                     {} GPUs, or add --force-gpu to simulate {} compute on {name}'s links",
                    gpu.name, theirs.name, gpu.name, gpu.name
                ),
            ));
        }
        eprintln!("note: --force-gpu: {} compute on topology `{name}` (built for {named})", gpu.name);
        topology.set_gpu_name(gpu.full_name);
        Ok(())
    }

    /// The scenario and setup in one step.
    pub fn setup(&self, strategy: Option<&str>) -> Result<(Scenario, Setup)> {
        let scenario = self.scenario(strategy)?;
        let setup = self.setup_of(&scenario)?;
        Ok((scenario, setup))
    }
}
