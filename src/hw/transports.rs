//! How a communication library moves bytes on a machine, beyond what its links carry: the
//! effective rate of a P2P copy through a PCIe switch or through the CPU's root complex, of a copy
//! through host memory (NCCL's SHM transport between sockets), of one TCP stream (NCCL's socket
//! transport), whether the NIC reads GPU memory directly (GPUDirect RDMA), and the host CPU family
//! (NCCL's P2P and tuning rules depend on it). These are measured properties of a machine, so a
//! topology file carries them (`"transports": {...}`) with their sources; every field is optional
//! and a missing one means "the links decide". Owns the format and its checks only; the collective
//! model (`crate::collective::nccl`) decides what applies where.

use crate::collective::nccl::version::CpuVendor;
use crate::error::{Error, Location, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The network transport NCCL picks: IB verbs (InfiniBand, RoCE) or plain TCP sockets (Ethernet,
/// IPoIB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetTransport {
    Ib,
    Socket,
}

impl NetTransport {
    pub fn name(self) -> &'static str {
        match self {
            NetTransport::Ib => "ib",
            NetTransport::Socket => "socket",
        }
    }
}

/// Effective transport rates of one machine (all GB/s = 1e9 bytes/s, per direction).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transports {
    /// Host CPU family: `intel` (Skylake or later, the default), `intel-broadwell`, `amd`,
    /// `power`, `arm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// What one GPU pair reaches with P2P copies through PCIe switches only (NCCL path PIX/PXB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p_switch_gb_s: Option<f64>,
    /// ... through the CPU's PCIe root complex (PHB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p_host_bridge_gb_s: Option<f64>,
    /// ... through host memory (SHM: across CPU sockets, or wherever P2P is not allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_gb_s: Option<f64>,
    /// Network transport; default: `ib` for an RDMA network, `socket` for TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetTransport>,
    /// GPUDirect RDMA; default: on for `ib` when a NIC shares a PCIe switch with the GPU (NCCL's
    /// `NCCL_NET_GDR_LEVEL` default, PXB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdr: Option<bool>,
    /// Without GPUDirect, network data is staged in host memory; the rate of that bounce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_bounce_gb_s: Option<f64>,
    /// What one TCP stream carries (socket transport): NCCL sends each connection's data over
    /// `socket_threads x sockets_per_thread` streams, at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_stream_gb_s: Option<f64>,
    /// `NCCL_SOCKET_NTHREADS` (default 0: NCCL's own thread and one socket per connection, as NCCL
    /// chooses on hardware other than AWS and GCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_threads: Option<u32>,
    /// `NCCL_NSOCKS_PERTHREAD` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockets_per_thread: Option<u32>,
    /// Where the numbers come from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// Per NCCL transport, latency (ns) every hop it carries adds to NCCL's per-protocol hardware
    /// latency; only a calibration sets it (`Calibration::nccl`), never a topology file.
    #[serde(skip)]
    pub nccl_hop_extra_ns: Vec<(crate::collective::nccl::transport::Transport, u64)>,
    /// Per NCCL protocol, the start cost (ns) added to each call and the factor on its hops'
    /// rate; only a calibration sets it (`Calibration::nccl_protocols`).
    #[serde(skip)]
    pub nccl_protocol_costs: Vec<(crate::collective::nccl::version::Proto, u64, f64)>,
    /// Time (ns) each channel beyond the first adds to a call; only a calibration sets it
    /// (`Calibration::nccl_channel_us`).
    #[serde(skip)]
    pub nccl_channel_ns: u64,
}

impl Transports {
    /// Checks every rate is positive and the names are known; errors name the field.
    pub fn check(&self, path: &Path, prefix: &str) -> Result<()> {
        let at = |f: &str| Location::file(path).with_field(format!("{prefix}transports.{f}"));
        if let Some(c) = &self.cpu {
            if CpuVendor::parse(c).is_none() {
                let known: Vec<&str> = CpuVendor::ALL.iter().map(|c| c.name()).collect();
                return Err(Error::parse(at("cpu"), format!("unknown CPU family `{c}` (known: {})", known.join(", "))));
            }
        }
        for (name, v) in [
            ("p2p_switch_gb_s", self.p2p_switch_gb_s),
            ("p2p_host_bridge_gb_s", self.p2p_host_bridge_gb_s),
            ("shm_gb_s", self.shm_gb_s),
            ("host_bounce_gb_s", self.host_bounce_gb_s),
            ("socket_stream_gb_s", self.socket_stream_gb_s),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return Err(Error::parse(at(name), format!("must be a positive rate in GB/s, found {v}")));
                }
            }
        }
        if let Some(n) = self.sockets_per_thread {
            if n == 0 {
                return Err(Error::parse(at("sockets_per_thread"), "must be at least 1"));
            }
        }
        let socks = self.socket_threads.unwrap_or(0) * self.sockets_per_thread.unwrap_or(1);
        if socks > 64 {
            return Err(Error::parse(
                at("socket_threads"),
                format!("{socks} sockets per connection; NCCL allows at most 64 (MAX_SOCKETS in net_socket.cc)"),
            ));
        }
        Ok(())
    }

    /// The calibrated extra latency of one hop over `transport` (0 when not calibrated).
    pub fn hop_extra_ns(&self, transport: crate::collective::nccl::transport::Transport) -> u64 {
        self.nccl_hop_extra_ns.iter().find(|(t, _)| *t == transport).map_or(0, |e| e.1)
    }

    /// The calibrated start cost (ns) and rate factor of `proto` ((0, 1) when not calibrated).
    pub fn protocol_costs(&self, proto: crate::collective::nccl::version::Proto) -> (u64, f64) {
        self.nccl_protocol_costs.iter().find(|c| c.0 == proto).map_or((0, 1.0), |c| (c.1, c.2))
    }

    pub fn cpu_vendor(&self) -> CpuVendor {
        self.cpu.as_deref().and_then(CpuVendor::parse).unwrap_or_default()
    }

    /// TCP streams per NCCL connection: threads x sockets per thread, or one when NCCL uses no
    /// helper threads (net_socket.cc `ncclSocketGetNsockNthread`).
    pub fn socket_streams(&self) -> u32 {
        (self.socket_threads.unwrap_or(0) * self.sockets_per_thread.unwrap_or(1)).max(1)
    }
}

/// The network between nodes as the collective model needs it: line rate and transport.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NetworkInfo {
    /// Line rate of one NIC, bytes/ns (= GB/s).
    pub line_rate: f64,
    pub transport: NetTransport,
    /// NCCL's rate per channel where it stages network data in host memory, when the topology
    /// gives one.
    pub host_staged: Option<HostStaged>,
}

/// `graph.network.host_staged` in a topology file: without GPUDirect RDMA, NCCL's proxy thread
/// moves each channel's network data through a bounce buffer in host memory, and what limits a
/// transfer is then that channel's rate, not the port (Jean Zay's Omni-Path: 2 channels moved
/// 5.07 GB/s through one port, 4 channels 10.57 GB/s; validation/topologies/jean-zay-a100.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostStagedSpec {
    /// What one NCCL channel moves between nodes, GB/s of data per direction (measured).
    pub channel_gb_s: f64,
    /// The NCCL release the rate was measured with: its rules give the channels a transfer uses.
    pub nccl: String,
}

/// NCCL releases whose channel rules [`HostStaged`] knows, with the network channels of one
/// point-to-point peer: up to 2.11, `ncclTopoGetNchannels` gives a peer across the network one
/// channel (NVIDIA/nccl v2.10.3-1 src/graph/paths.cc l.491, `*nChannels = 1`); later releases
/// read `NCCL_NCHANNELS_PER_NET_PEER` (default 2, then chosen by bandwidth), not modelled here.
const P2P_NET_CHANNELS: &[(&str, u32)] = &[("2.7", 1), ("2.8", 1), ("2.9", 1), ("2.10", 1), ("2.11", 1)];

/// Channels of each ring (and tree) a collective runs: NCCL duplicates every channel its graph
/// search found (`ncclTopoPostset`, NVIDIA/nccl v2.10.3-1 src/graph/connect.cc l.293), so each
/// ring between two nodes is two channels.
pub const COLLECTIVE_CHANNELS_PER_RING: u32 = 2;

/// [`HostStagedSpec`] resolved: the rate per channel and the channels a point-to-point peer uses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostStaged {
    /// Bytes/ns (= GB/s) per channel.
    pub channel_rate: f64,
    /// Channels NCCL gives a send/recv peer on another node.
    pub p2p_channels: u32,
}

impl HostStagedSpec {
    /// Checks the rate is positive and the release one whose rules are known; errors name the field.
    pub fn check(&self, at: &dyn Fn(&str) -> Location) -> Result<()> {
        let r = self.channel_gb_s;
        if !(r.is_finite() && r > 0.0) {
            return Err(Error::parse(at("channel_gb_s"), format!("must be a positive rate in GB/s, found {r}")));
        }
        crate::units::check_rate_gb_s(r).map_err(|m| Error::parse(at("channel_gb_s"), m))?;
        if self.p2p_channels().is_none() {
            let known: Vec<String> = P2P_NET_CHANNELS.iter().map(|(v, _)| format!("{v}.x")).collect();
            return Err(Error::parse(
                at("nccl"),
                format!("NCCL `{}`: its channel rules are not modelled (known: {})", self.nccl, known.join(", ")),
            ));
        }
        Ok(())
    }

    fn p2p_channels(&self) -> Option<u32> {
        let mut parts = self.nccl.trim().split('.');
        let minor = format!("{}.{}", parts.next()?, parts.next()?);
        if parts.next().is_some_and(|p| p.parse::<u32>().is_err()) {
            return None;
        }
        P2P_NET_CHANNELS.iter().find(|(v, _)| *v == minor).map(|e| e.1)
    }

    /// The checked spec as the engine uses it.
    pub fn resolve(&self) -> HostStaged {
        HostStaged {
            channel_rate: crate::units::gb_per_s_to_bytes_per_ns(self.channel_gb_s),
            p2p_channels: self.p2p_channels().unwrap_or(1),
        }
    }
}
