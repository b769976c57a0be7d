//! The thin layer over cudarc that the measuring and replaying code share: checking that the CUDA
//! libraries are present before any call (cudarc panics otherwise), opening contexts for the
//! chosen devices, timing enqueued work with CUDA events (warm-up, repetitions), and a spin kernel
//! compiled with NVRTC that occupies a GPU for a given number of nanoseconds.

use super::calibration::DeviceInfo;
use crate::error::{Error, Result};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Maps a CUDA error into [`Error::Gpu`] naming the call that failed.
pub fn cuda<E: std::fmt::Debug>(call: &'static str) -> impl Fn(E) -> Error {
    move |e| Error::Gpu(format!("{call} failed: {e:?}"))
}

/// Checks that the CUDA driver library loads and sees at least one GPU; returns the GPU count.
/// Must run before any other cudarc call.
pub fn ensure_driver() -> Result<usize> {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Gpu(
            "no CUDA driver found (libcuda could not be loaded); GPU commands need an NVIDIA GPU with its driver \
             installed"
                .into(),
        ));
    }
    let n = CudaContext::device_count().map_err(cuda("cuInit/cuDeviceGetCount"))?;
    if n <= 0 {
        return Err(Error::Gpu("the CUDA driver is installed but sees no GPU".into()));
    }
    Ok(n as usize)
}

/// Fails with a clear message when an optional CUDA library (cuBLAS, NVRTC, NCCL) is missing.
pub fn ensure_library(present: bool, name: &str, needed_for: &str) -> Result<()> {
    match present {
        true => Ok(()),
        false => Err(Error::Gpu(format!("{name} could not be loaded; it is needed for {needed_for}"))),
    }
}

/// Checks a `--devices` list against the GPUs present (no duplicates, all in range); an empty list
/// means every GPU.
pub fn select_devices(asked: &[u32], present: usize) -> Result<Vec<u32>> {
    if asked.is_empty() {
        return Ok((0..present as u32).collect());
    }
    for (i, &d) in asked.iter().enumerate() {
        if d as usize >= present {
            return Err(Error::invalid("--devices", format!("device {d} does not exist ({present} GPUs present)")));
        }
        if asked[..i].contains(&d) {
            return Err(Error::invalid("--devices", format!("device {d} is listed twice")));
        }
    }
    Ok(asked.to_vec())
}

/// Opens one context per device. cudarc's automatic cross-stream event tracking is switched off:
/// the callers order their streams explicitly, and hidden waits would distort the timings.
pub fn open(devices: &[u32]) -> Result<Vec<Arc<CudaContext>>> {
    devices
        .iter()
        .map(|&d| {
            let ctx = CudaContext::new(d as usize).map_err(cuda("cuDevicePrimaryCtxRetain"))?;
            // SAFETY: every buffer we use lives until the streams using it are synchronized.
            unsafe { ctx.disable_event_tracking() };
            Ok(ctx)
        })
        .collect()
}

pub fn describe(ctx: &Arc<CudaContext>) -> Result<DeviceInfo> {
    let (major, minor) = ctx.compute_capability().map_err(cuda("cuDeviceGetAttribute"))?;
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(cuda("cuDeviceGetAttribute"))?;
    Ok(DeviceInfo {
        ordinal: ctx.ordinal() as u32,
        name: ctx.name().map_err(cuda("cuDeviceGetName"))?,
        compute_capability: format!("{major}.{minor}"),
        multiprocessors: sms.max(0) as u32,
        memory_bytes: ctx.total_mem().map_err(cuda("cuDeviceTotalMem"))? as u64,
    })
}

/// Enables direct access from `ctx` to `peer` if the hardware allows it; returns whether it is on.
pub fn enable_peer(ctx: &Arc<CudaContext>, peer: &Arc<CudaContext>) -> Result<bool> {
    let mut can = 0;
    // SAFETY: plain queries and a context flag on valid contexts.
    unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), peer.cu_device())
            .result()
            .map_err(cuda("cuDeviceCanAccessPeer"))?;
        if can == 0 {
            return Ok(false);
        }
        ctx.bind_to_thread().map_err(cuda("cuCtxSetCurrent"))?;
        match sys::cuCtxEnablePeerAccess(peer.cu_ctx(), 0) {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(true),
            // A context can map at most a few peers (8 on most systems); beyond that copies are staged.
            sys::CUresult::CUDA_ERROR_TOO_MANY_PEERS => Ok(false),
            e => Err(cuda("cuCtxEnablePeerAccess")(e)),
        }
    }
}

/// Flags for page-locked host memory as data loaders use it (`pin_memory`): plain page-locked,
/// not write-combined (cudarc's `alloc_pinned` default), which would make host reads slow.
pub const PAGE_LOCKED: u32 = 0;

/// An event that records time (cudarc's default event does not).
pub fn timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda("cuEventCreate"))
}

/// Runs `op` (which enqueues work on `streams`) `warmup` times untimed, then `repetitions` times
/// between CUDA events recorded on every stream. One repetition's time is the longest
/// start-to-end span over the streams (a collective ends when its slowest rank does). Each
/// repetition is synchronized before the next, so they do not overlap. Returns seconds.
pub fn time_repeated(
    streams: &[Arc<CudaStream>],
    warmup: u32,
    repetitions: u32,
    mut op: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let sync_all = || streams.iter().try_for_each(|s| s.synchronize().map_err(cuda("cuStreamSynchronize")));
    for _ in 0..warmup {
        op()?;
        sync_all()?;
    }
    let pairs: Vec<(CudaEvent, CudaEvent)> =
        streams.iter().map(|s| Ok((timing_event(s.context())?, timing_event(s.context())?))).collect::<Result<_>>()?;
    let mut times = Vec::with_capacity(repetitions as usize);
    for _ in 0..repetitions {
        for (s, (start, _)) in streams.iter().zip(&pairs) {
            start.record(s).map_err(cuda("cuEventRecord"))?;
        }
        op()?;
        for (s, (_, end)) in streams.iter().zip(&pairs) {
            end.record(s).map_err(cuda("cuEventRecord"))?;
        }
        let mut longest = 0.0f64;
        for (start, end) in &pairs {
            end.synchronize().map_err(cuda("cuEventSynchronize"))?;
            let ms = start.elapsed_ms(end).map_err(cuda("cuEventElapsedTime"))?;
            longest = longest.max(ms as f64 * 1e-3);
        }
        times.push(longest);
    }
    Ok(times)
}

// Spins on the GPU's global nanosecond timer, not on SM cycles converted at a clock measured once
// at start: the SM clock moves with load and power (an H200 ran GEMMs at 1425-1545 MHz and idled
// near 345 MHz; docs/gpu_runs/h200-2026-11-28), so a cycle count stands for a different time from
// one task to the next.
const SPIN_SOURCE: &str = r#"
__device__ __forceinline__ unsigned long long dagsim_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void dagsim_spin(long long ns) {
    unsigned long long start = dagsim_now();
    while ((long long)(dagsim_now() - start) < ns) { }
}
"#;

/// Compiles the spin kernel once (NVRTC); the PTX is then loaded into each context.
pub fn compile_spin() -> Result<cudarc::nvrtc::Ptx> {
    // SAFETY: only tries to dlopen the NVRTC library.
    ensure_library(unsafe { cudarc::nvrtc::sys::is_culib_present() }, "NVRTC", "the replay's proxy kernels")?;
    cudarc::nvrtc::compile_ptx(SPIN_SOURCE).map_err(cuda("nvrtcCompileProgram"))
}

/// A kernel that keeps a GPU busy for a requested time: every thread spins on the GPU's global
/// timer. It is launched with one block per multiprocessor, so like a real layer's kernel it
/// occupies the whole GPU (a light variant with one block stands in for work that is not the
/// GPU's own).
pub struct Spinner {
    _module: Arc<CudaModule>,
    func: CudaFunction,
    multiprocessors: u32,
}

impl Spinner {
    pub fn load(ctx: &Arc<CudaContext>, ptx: &cudarc::nvrtc::Ptx) -> Result<Spinner> {
        let module = ctx.load_module(ptx.clone()).map_err(cuda("cuModuleLoadData"))?;
        let func = module.load_function("dagsim_spin").map_err(cuda("cuModuleGetFunction"))?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda("cuDeviceGetAttribute"))?;
        Ok(Spinner { _module: module, func, multiprocessors: sms.max(1) as u32 })
    }

    /// Enqueues a spin of `ns` nanoseconds on `stream`; `full` occupies every multiprocessor.
    pub fn launch(&self, stream: &Arc<CudaStream>, ns: u64, full: bool) -> Result<()> {
        if ns == 0 {
            return Ok(());
        }
        let blocks = if full { self.multiprocessors } else { 1 };
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        let ns = ns.min(i64::MAX as u64) as i64;
        let mut launch = stream.launch_builder(&self.func);
        launch.arg(&ns);
        // SAFETY: the kernel takes one `long long` and touches no memory.
        unsafe { launch.launch(cfg) }.map_err(cuda("cuLaunchKernel"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lists_are_checked() {
        assert_eq!(select_devices(&[], 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(select_devices(&[2, 0], 3).unwrap(), vec![2, 0]);
        assert!(select_devices(&[3], 3).unwrap_err().to_string().contains("device 3 does not exist"));
        assert!(select_devices(&[1, 1], 3).unwrap_err().to_string().contains("listed twice"));
    }
}
