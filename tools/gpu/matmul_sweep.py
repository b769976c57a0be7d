#!/usr/bin/env python3
"""GEMM and attention rates on this machine's first GPU, as a training step sees them.

Every case runs back to back for --seconds of wall time after the GPU has been loaded for
--preheat seconds, so the SM clock is the one the card holds at its power limit (not the boost
clock of a short benchmark). Each case reports the median per-call time over its window, the
TFLOP/s that gives, and the SM clock and board power read through NVML at the window's end.
Writes CSV to stdout. Inputs are randn (not zeros: zeros draw less power and run faster).

Usage: python3 tools/gpu/matmul_sweep.py [--seconds 1.5] [--preheat 8] > rates.csv
"""
import argparse
import statistics
import sys
import time

import torch

try:
    import pynvml

    pynvml.nvmlInit()
    NVML = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception:  # NVML is optional: clocks and power are then left empty
    NVML = None


def clock_and_power():
    if NVML is None:
        return "", ""
    sm = pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM)
    watts = pynvml.nvmlDeviceGetPowerUsage(NVML) / 1000.0
    return str(sm), f"{watts:.0f}"


def timed_window(fn, seconds):
    """Median seconds per call of fn over a window of about `seconds`, timed with CUDA events
    in batches of calls (one event pair per batch)."""
    fn()
    torch.cuda.synchronize()
    # size a batch to ~20 ms so event overhead does not count
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per = max((time.perf_counter() - t0) / 3, 1e-6)
    batch = max(1, int(0.02 / per))
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) / 1e3 / batch)
    return statistics.median(samples), min(samples), len(samples) * batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--preheat", type=float, default=8.0)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuBLAS via torch.matmul; randn inputs; window {args.seconds} s after {args.preheat} s preheat")
    print("kind,dtype,m,n,k,extra,median_s,min_s,calls,tflops_median,tflops_best,sm_mhz,power_w")
    sys.stdout.flush()

    def mm_case(dtype, m, n, k):
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16).to(dtype)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16).to(dtype)
        return lambda: torch.matmul(a, b)

    def fp8_case(m, n, k):
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major as _scaled_mm needs
        one = torch.tensor(1.0, device=dev)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def report(kind, dtype, m, n, k, extra, flops, fn):
        med, best, calls = timed_window(fn, args.seconds)
        sm, w = clock_and_power()
        print(f"{kind},{dtype},{m},{n},{k},{extra},{med:.9f},{best:.9f},{calls},"
              f"{flops / med / 1e12:.1f},{flops / best / 1e12:.1f},{sm},{w}")
        sys.stdout.flush()

    # 1. the short-benchmark rate (cold card, first seconds) and the sustained one
    big = mm_case(torch.bfloat16, 8192, 8192, 8192)
    f = 2 * 8192**3
    report("matmul_cold", "bf16", 8192, 8192, 8192, "first window", f, big)
    end = time.perf_counter() + args.preheat
    while time.perf_counter() < end:
        for _ in range(50):
            big()
        torch.cuda.synchronize()
    report("matmul", "bf16", 8192, 8192, 8192, "sustained", f, big)

    # 2. transformer GEMM shapes, tokens x out x in, incl. the short K of tensor-parallel splits
    shapes = []
    for tokens in (4096, 16384):
        for hidden, ffn in ((4096, 14336), (8192, 28672), (12288, 49152)):
            for tp in (1, 2, 4, 8):
                shapes.append((tokens, 3 * hidden // tp, hidden))  # QKV (no GQA)
                shapes.append((tokens, hidden, hidden // tp))  # attention out-proj: short K
                shapes.append((tokens, ffn // tp, hidden))  # FC1
                shapes.append((tokens, hidden, ffn // tp))  # FC2
    seen = set()
    for m, n, k in shapes:
        if (m, n, k) in seen:
            continue
        seen.add((m, n, k))
        report("matmul", "bf16", m, n, k, "", 2 * m * n * k, mm_case(torch.bfloat16, m, n, k))

    # 3. FP8 e4m3 (torch._scaled_mm, per-tensor scales), a few shapes
    for m, n, k in ((8192, 8192, 8192), (16384, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336),
                    (16384, 4096, 1024), (16384, 1024, 4096)):
        try:
            report("matmul", "fp8_e4m3", m, n, k, "_scaled_mm", 2 * m * n * k, fp8_case(m, n, k))
        except Exception as e:  # report, do not stop the sweep
            print(f"# fp8 {m}x{n}x{k} failed: {e}")

    # 4. causal attention forward and forward+backward through SDPA, per backend
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        for seq, heads, kv in ((4096, 32, 8), (8192, 32, 8), (2048, 64, 8), (16384, 32, 8)):
            b, d = max(1, 16384 // seq), 128
            q = torch.randn(b, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            kk = torch.randn(b, kv, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, kv, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            fwd_flops = 4 * b * heads * seq * seq * d / 2  # causal: half the score matrix
            try:
                with sdpa_kernel([backend]):
                    fw = lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
                    report("attention_fwd", "bf16", b, heads, seq, f"{backend.name};kv={kv};d={d}", fwd_flops, fw)
                    g = torch.randn(b, heads, seq, d, device=dev, dtype=torch.bfloat16)

                    def fb():
                        o = F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
                        o.backward(g)

                    report("attention_fwd_bwd", "bf16", b, heads, seq, f"{backend.name};kv={kv};d={d}",
                           3.5 * fwd_flops, fb)
            except Exception as e:
                print(f"# attention {backend.name} seq {seq} failed: {e}")


if __name__ == "__main__":
    main()
