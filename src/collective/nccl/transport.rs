//! Which NCCL transport carries a hop and how fast it can go, as a property of the route: P2P over
//! NVLink (the links decide), P2P through PCIe switches or through the CPU's root complex (the
//! machine's measured P2P rates), SHM through host memory where NCCL does not allow P2P (across
//! sockets on Intel, paths.cc `ncclTopoCheckP2p`), and the network: IB verbs with or without
//! GPUDirect RDMA (without it, data bounces through host memory), or sockets (each connection's
//! data spread over `threads x sockets` TCP streams of a measured rate).

use super::version::{PathType, Tables};
use crate::hw::{NetTransport, Transports};
use serde::{Deserialize, Serialize};

/// An NCCL transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    P2pNvlink,
    P2pPcie,
    Shm,
    NetIb,
    NetIbGdr,
    NetSocket,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::P2pNvlink => "P2P/NVLink",
            Transport::P2pPcie => "P2P/PCIe",
            Transport::Shm => "SHM",
            Transport::NetIb => "NET/IB",
            Transport::NetIbGdr => "NET/IB/GDRDMA",
            Transport::NetSocket => "NET/Socket",
        }
    }

    /// The name calibration files use (`p2p-nvlink`, `net-ib-gdr`, ...).
    pub fn key(self) -> &'static str {
        match self {
            Transport::P2pNvlink => "p2p-nvlink",
            Transport::P2pPcie => "p2p-pcie",
            Transport::Shm => "shm",
            Transport::NetIb => "net-ib",
            Transport::NetIbGdr => "net-ib-gdr",
            Transport::NetSocket => "net-socket",
        }
    }
}

/// The transport of a hop between two GPUs of one node, by NCCL path type.
pub fn intra(t: &Tables, cpu: super::version::CpuVendor, path: PathType) -> Transport {
    match path {
        PathType::Nvl | PathType::Nvb | PathType::Loc => Transport::P2pNvlink,
        p if p <= t.p2p_level(cpu) => Transport::P2pPcie,
        _ => Transport::Shm,
    }
}

/// The transport of a hop between nodes: GPUDirect when the NIC is at most a PCIe switch from the
/// GPU (NCCL's default `NCCL_NET_GDR_LEVEL`, PXB) unless the topology says otherwise.
pub fn inter(tr: &Transports, net: NetTransport, gpu_to_nic: PathType) -> Transport {
    match net {
        NetTransport::Socket => Transport::NetSocket,
        NetTransport::Ib => {
            let gdr = tr.gdr.unwrap_or(gpu_to_nic <= PathType::Pxb);
            if gdr {
                Transport::NetIbGdr
            } else {
                Transport::NetIb
            }
        }
    }
}

/// The most one GPU pair (or, for sockets, one channel) moves over this transport, GB/s of data;
/// infinite where only the links limit. `path` is the hop's NCCL path type (for P2P over PCIe).
pub fn pair_cap_gb_s(tr: &Transports, transport: Transport, path: PathType) -> f64 {
    let inf = f64::INFINITY;
    match transport {
        Transport::P2pNvlink => inf,
        Transport::P2pPcie if path == PathType::Phb => tr.p2p_host_bridge_gb_s.unwrap_or(inf),
        Transport::P2pPcie => tr.p2p_switch_gb_s.unwrap_or(inf),
        Transport::Shm => tr.shm_gb_s.unwrap_or(inf),
        Transport::NetIb => tr.host_bounce_gb_s.unwrap_or(inf),
        Transport::NetIbGdr => inf,
        Transport::NetSocket => inf,
    }
}

/// What one channel's connection moves over sockets: its streams times one stream's rate.
pub fn socket_channel_cap_gb_s(tr: &Transports) -> f64 {
    tr.socket_stream_gb_s.map_or(f64::INFINITY, |r| r * tr.socket_streams() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::nccl::version::{CpuVendor, NcclVersion};

    /// paths.cc: P2P through the root complex on Skylake-or-later Intel, not across sockets (SHM);
    /// only below the root complex on Broadwell; everywhere on AMD.
    #[test]
    fn p2p_levels_by_cpu() {
        let t = NcclVersion::V2_18_3.tables();
        assert_eq!(intra(t, CpuVendor::Intel, PathType::Phb), Transport::P2pPcie);
        assert_eq!(intra(t, CpuVendor::Intel, PathType::Sys), Transport::Shm);
        assert_eq!(intra(t, CpuVendor::IntelBroadwell, PathType::Phb), Transport::Shm);
        assert_eq!(intra(t, CpuVendor::Amd, PathType::Sys), Transport::P2pPcie);
        assert_eq!(intra(t, CpuVendor::Intel, PathType::Nvl), Transport::P2pNvlink);
        let tr = Transports::default();
        assert_eq!(inter(&tr, NetTransport::Ib, PathType::Pix), Transport::NetIbGdr);
        assert_eq!(inter(&tr, NetTransport::Ib, PathType::Sys), Transport::NetIb);
        assert_eq!(inter(&tr, NetTransport::Socket, PathType::Pix), Transport::NetSocket);
        let tr = Transports {
            socket_stream_gb_s: Some(1.5),
            socket_threads: Some(2),
            sockets_per_thread: Some(4),
            ..Default::default()
        };
        assert_eq!(socket_channel_cap_gb_s(&tr), 12.0);
        assert_eq!(socket_channel_cap_gb_s(&Transports { socket_stream_gb_s: Some(1.5), ..Default::default() }), 1.5);
    }
}
