//! The measurements behind `dagsim calibrate --gpu`, taken with CUDA events on this machine:
//! cuBLAS GEMM time per dtype and size, host-device copies per direction (pinned and pageable
//! host memory), peer copies for every ordered GPU pair, and NCCL all-reduce over all chosen GPUs.
//! Each point is `warmup` untimed runs then `repetitions` timed ones, summarised by their median
//! and spread. Fills [`GpuMeasurements`]; fitting and writing happen in `calibration`.
//! A missing optional library (cuBLAS, NCCL) skips its part with a note rather than failing.

use super::calibration::{
    AllReduceSeries, Direction, Dtype, GemmPoint, GpuMeasurements, HostCopySeries, HostMemory, PeerCopySeries,
    Settings, SizePoint,
};
use super::device::{cuda, describe, enable_peer, ensure_driver, open, select_devices, time_repeated, PAGE_LOCKED};
use super::stats::Summary;
use crate::error::{Error, Result};
use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    result as cu, CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits,
};
use std::sync::Arc;

/// What to measure.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// CUDA ordinals to use; empty means all.
    pub devices: Vec<u32>,
    pub settings: Settings,
    /// Square GEMM sizes n (C = A B with n x n matrices).
    pub gemm_sizes: Vec<u32>,
    pub dtypes: Vec<Dtype>,
    /// Copy and all-reduce message sizes in bytes.
    pub message_sizes: Vec<u64>,
}

/// Message sizes from `min` to `max` bytes, each 4x the previous (and `max` itself).
pub fn geometric_sizes(min: u64, max: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s < max {
        out.push(s);
        s = s.saturating_mul(4);
    }
    out.push(max.max(1));
    out.dedup();
    out
}

fn summarise(times: &[f64], what: &str) -> Result<Summary> {
    Summary::of(times).ok_or_else(|| Error::Gpu(format!("{what}: no usable timing")))
}

/// Runs every measurement the options ask for on this machine's GPUs.
pub fn measure(opts: &MeasureOptions) -> Result<GpuMeasurements> {
    let present = ensure_driver()?;
    let devices = select_devices(&opts.devices, present)?;
    let ctxs = open(&devices)?;
    let mut m = GpuMeasurements {
        settings: opts.settings,
        devices: ctxs.iter().map(describe).collect::<Result<_>>()?,
        gemm: Vec::new(),
        host_copies: Vec::new(),
        peer_copies: Vec::new(),
        allreduce: None,
        notes: Vec::new(),
    };
    let max_bytes = opts.message_sizes.iter().copied().max().unwrap_or(0) as usize;
    // SAFETY: only tries to dlopen cuBLAS.
    if opts.gemm_sizes.is_empty() || opts.dtypes.is_empty() {
        m.notes.push("no GEMM sizes or dtypes asked for: GEMM throughput not measured".into());
    } else if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        m.notes.push("cuBLAS could not be loaded: GEMM throughput not measured".into());
    } else {
        for (ctx, &dev) in ctxs.iter().zip(&devices) {
            measure_gemm(ctx, dev, opts, &mut m)?;
        }
    }
    if max_bytes == 0 {
        m.notes.push("no message sizes asked for: copies and all-reduce not measured".into());
    } else {
        for (ctx, &dev) in ctxs.iter().zip(&devices) {
            measure_host_copies(ctx, dev, opts, max_bytes, &mut m.host_copies)?;
        }
        for (i, a) in ctxs.iter().enumerate() {
            for (j, b) in ctxs.iter().enumerate() {
                if i != j {
                    m.peer_copies.push(measure_peer(a, b, (devices[i], devices[j]), opts, max_bytes)?);
                }
            }
        }
        // SAFETY: only tries to dlopen NCCL.
        if ctxs.len() < 2 {
            m.notes.push("one GPU: all-reduce not measured".into());
        } else if !unsafe { cudarc::nccl::sys::is_culib_present() } {
            m.notes.push("NCCL could not be loaded: all-reduce not measured".into());
        } else {
            m.allreduce = Some(measure_allreduce(&ctxs, &devices, opts, max_bytes)?);
        }
    }
    Ok(m)
}

fn new_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    ctx.new_stream().map_err(cuda("cuStreamCreate"))
}

/// `len` values spread uniformly over [-1, 1) by a fixed linear congruential sequence (Knuth's
/// MMIX constants): reproducible operands with the bit patterns of real data.
fn uniform_values(len: usize) -> impl Iterator<Item = f32> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len).map(move |_| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    })
}

fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<T>> {
    stream.alloc_zeros::<T>(len).map_err(cuda("cuMemAlloc"))
}

fn measure_gemm(ctx: &Arc<CudaContext>, dev: u32, opts: &MeasureOptions, m: &mut GpuMeasurements) -> Result<()> {
    let stream = new_stream(ctx)?;
    let blas = CudaBlas::new(stream.clone()).map_err(cuda("cublasCreate"))?;
    for &dtype in &opts.dtypes {
        for &n in &opts.gemm_sizes {
            let elem = match dtype {
                Dtype::F32 => 4,
                Dtype::F16 | Dtype::Bf16 => 2,
            };
            let need = 3 * (n as usize).pow(2) * elem;
            let (free, _) = ctx.mem_get_info().map_err(cuda("cuMemGetInfo"))?;
            if need > free / 10 * 9 {
                m.notes.push(format!("device {dev}: {} GEMM n={n} skipped, needs {need} bytes", dtype.name()));
                continue;
            }
            let times = match dtype {
                Dtype::F32 => time_gemm::<f32>(&blas, &stream, n, 1.0, 0.0, |x| x, opts)?,
                Dtype::F16 => time_gemm(&blas, &stream, n, half::f16::ONE, half::f16::ZERO, half::f16::from_f32, opts)?,
                Dtype::Bf16 => {
                    time_gemm(&blas, &stream, n, half::bf16::ONE, half::bf16::ZERO, half::bf16::from_f32, opts)?
                }
            };
            let time_s = summarise(&times, "GEMM")?;
            m.gemm.push(GemmPoint { device: dev, dtype, n, time_s });
        }
    }
    Ok(())
}

fn time_gemm<T>(
    blas: &CudaBlas,
    stream: &Arc<CudaStream>,
    n: u32,
    one: T,
    zero: T,
    from_f32: fn(f32) -> T,
    opts: &MeasureOptions,
) -> Result<Vec<f64>>
where
    T: DeviceRepr + ValidAsZeroBits + Copy,
    CudaBlas: Gemm<T>,
{
    let len = (n as usize).pow(2);
    // Random operands, not zeros: a tensor core multiplying zeros draws less power and runs
    // faster than on real data (on an H200, cuBLAS BF16 n = 8192 ran at 861-885 TFLOP/s on zeros
    // and 658-785 on randn; docs/gpu.md), and training multiplies real data.
    let host: Vec<T> = uniform_values(len).map(from_f32).collect();
    let a = stream.clone_htod(&host).map_err(cuda("cuMemcpyHtoD"))?;
    let b = stream.clone_htod(&host[..]).map_err(cuda("cuMemcpyHtoD"))?;
    drop(host);
    let mut c = alloc_zeros::<T>(stream, len)?;
    let n = n as i32;
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: n,
        n,
        k: n,
        alpha: one,
        lda: n,
        ldb: n,
        beta: zero,
        ldc: n,
    };
    let s = opts.settings;
    time_repeated(std::slice::from_ref(stream), s.warmup, s.repetitions, || {
        // SAFETY: a, b, c hold n*n elements each, matching the configuration.
        unsafe { blas.gemm(cfg, &a, &b, &mut c) }.map_err(cuda("cublasGemmEx"))
    })
}

fn measure_host_copies(
    ctx: &Arc<CudaContext>,
    dev: u32,
    opts: &MeasureOptions,
    max_bytes: usize,
    out: &mut Vec<HostCopySeries>,
) -> Result<()> {
    let stream = new_stream(ctx)?;
    let mut device_buf = alloc_zeros::<u8>(&stream, max_bytes)?;
    // SAFETY: the pinned buffer is written (zeroed) before any copy reads it.
    let mut pinned =
        unsafe { ctx.alloc_pinned_with_flags::<u8>(max_bytes, PAGE_LOCKED) }.map_err(cuda("cuMemHostAlloc"))?;
    let pinned = pinned.as_mut_slice().map_err(cuda("cuEventSynchronize"))?;
    pinned.fill(0);
    let mut pageable = vec![0u8; max_bytes];
    let (dptr, _) = device_buf.device_ptr_mut(&stream);
    let s = opts.settings;
    for memory in [HostMemory::Pinned, HostMemory::Pageable] {
        for direction in [Direction::H2d, Direction::D2h] {
            let mut points = Vec::new();
            for &bytes in &opts.message_sizes {
                let host: &mut [u8] = match memory {
                    HostMemory::Pinned => &mut pinned[..bytes as usize],
                    HostMemory::Pageable => &mut pageable[..bytes as usize],
                };
                let times = time_repeated(std::slice::from_ref(&stream), s.warmup, s.repetitions, || {
                    // SAFETY: the device buffer holds max_bytes >= bytes; `host` is `bytes` long.
                    unsafe {
                        match direction {
                            Direction::H2d => cu::memcpy_htod_async(dptr, host, stream.cu_stream()),
                            Direction::D2h => cu::memcpy_dtoh_async(host, dptr, stream.cu_stream()),
                        }
                    }
                    .map_err(cuda("cuMemcpyAsync"))
                })?;
                points.push(SizePoint { bytes, time_s: summarise(&times, "host copy")? });
            }
            out.push(HostCopySeries { device: dev, direction, memory, points });
        }
    }
    Ok(())
}

fn measure_peer(
    src: &Arc<CudaContext>,
    dst: &Arc<CudaContext>,
    (src_dev, dst_dev): (u32, u32),
    opts: &MeasureOptions,
    max_bytes: usize,
) -> Result<PeerCopySeries> {
    let peer_access = enable_peer(src, dst)? && enable_peer(dst, src)?;
    let stream = new_stream(src)?;
    let dst_stream = new_stream(dst)?;
    let src_buf = alloc_zeros::<u8>(&stream, max_bytes)?;
    let mut dst_buf = alloc_zeros::<u8>(&dst_stream, max_bytes)?;
    dst_stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
    let (sptr, _) = src_buf.device_ptr(&stream);
    let (dptr, _) = dst_buf.device_ptr_mut(&dst_stream);
    let s = opts.settings;
    // A 4-byte copy pins down the latency end of the fit.
    let mut sizes: Vec<u64> = if max_bytes >= 4 { vec![4] } else { Vec::new() };
    sizes.extend(opts.message_sizes.iter().copied().filter(|&b| b > 4));
    let mut points = Vec::new();
    for bytes in sizes {
        let times = time_repeated(std::slice::from_ref(&stream), s.warmup, s.repetitions, || {
            // SAFETY: both buffers hold max_bytes >= bytes.
            unsafe { cu::memcpy_peer_async(dst.cu_ctx(), dptr, src.cu_ctx(), sptr, bytes as usize, stream.cu_stream()) }
                .map_err(cuda("cuMemcpyPeerAsync"))
        })?;
        points.push(SizePoint { bytes, time_s: summarise(&times, "peer copy")? });
    }
    Ok(PeerCopySeries { src: src_dev, dst: dst_dev, peer_access, points })
}

fn measure_allreduce(
    ctxs: &[Arc<CudaContext>],
    devices: &[u32],
    opts: &MeasureOptions,
    max_bytes: usize,
) -> Result<AllReduceSeries> {
    use cudarc::nccl::{group_end, group_start, Comm, ReduceOp};
    let streams: Vec<Arc<CudaStream>> = ctxs.iter().map(new_stream).collect::<Result<_>>()?;
    let comms = Comm::from_devices(streams.clone()).map_err(cuda("ncclCommInitAll"))?;
    let count = (max_bytes / 4).max(1);
    let mut bufs: Vec<CudaSlice<f32>> = streams.iter().map(|s| alloc_zeros::<f32>(s, count)).collect::<Result<_>>()?;
    let s = opts.settings;
    let mut points = Vec::new();
    for &bytes in &opts.message_sizes {
        let n = (bytes as usize / 4).clamp(1, count);
        let times = time_repeated(&streams, s.warmup, s.repetitions, || {
            group_start().map_err(cuda("ncclGroupStart"))?;
            for (comm, buf) in comms.iter().zip(bufs.iter_mut()) {
                comm.all_reduce_in_place(&mut buf.slice_mut(..n), &ReduceOp::Sum).map_err(cuda("ncclAllReduce"))?;
            }
            group_end().map_err(cuda("ncclGroupEnd"))?;
            Ok(())
        })?;
        points.push(SizePoint { bytes: n as u64 * 4, time_s: summarise(&times, "all-reduce")? });
    }
    Ok(AllReduceSeries { devices: devices.to_vec(), points })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_grow_by_four_up_to_the_maximum() {
        assert_eq!(geometric_sizes(1024, 65536), vec![1024, 4096, 16384, 65536]);
        assert_eq!(geometric_sizes(1024, 50000), vec![1024, 4096, 16384, 50000]);
        assert_eq!(geometric_sizes(4096, 4096), vec![4096]);
    }
}
