"""Issue #34 on a GPU: labops.triton against labops's CUDA ops, native PyTorch, torch.compile and cuDNN.

    python tools/triton_bench.py out.json [--gelu-log2 26] [--no-backward]

Prints markdown tables and writes their rows to the JSON file. GPU time per call, the median of CUDA-graph
replays (labops.bench.graph_ms, as tools/conv_goals.py times): no host time, after a warm-up that also
compiles the Triton kernels and torch.compile's. Every implementation is first checked against native
PyTorch on the same input; a wrong result, a call that cannot be captured or no GPU stops the run with an
error instead of printing a figure.

  * GELU (none) on 2^26 elements, float32 and float16: milliseconds and % of a plain copy's bandwidth
    (bytes the pass must move / time, over the copy's read + write / its time), forward and fwd+bwd.
  * softmax over the last dim of 4096x4096 and 8192x1024, float32 and float16: the same.
  * conv2d 3x3, padding 1, batch 32, float16, on ResNet's 64x56x56, 128x28x28, 256x14x14: milliseconds,
    TFLOP/s, and cuDNN's time over each other's (above 1: faster than cuDNN), forward and fwd+bwd.
"""

import argparse
import datetime
import json


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="where to write the rows (JSON)")
    ap.add_argument("--gelu-log2", type=int, default=26, help="GELU on 2**N elements (default 26)")
    ap.add_argument("--no-backward", action="store_true", help="forward only")
    return ap.parse_args(argv)


def main(argv=None):
    args = _args(argv)
    # Imported after the arguments are parsed: --help must work on a machine without a GPU, or Triton.
    import torch
    import torch.nn.functional as F
    import triton

    if not torch.cuda.is_available():
        raise SystemExit("tools/triton_bench.py needs a CUDA GPU: torch.cuda.is_available() is False")

    import labops
    import labops.triton as lt
    from labops.bench import compiled, fwd_bwd, graph_ms

    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm for each shape
    rows = []

    def ms(fn, what):
        t = graph_ms(fn)
        if t is None:
            raise RuntimeError(f"{what}: the call could not be captured in a CUDA graph, so it has no GPU time")
        return t

    def check(got, want, what, atol):
        if not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=atol):
            raise AssertionError(f"{what}: wrong result, largest error {(got.float() - want.float()).abs().max():.3g}")

    def randn(*shape, dtype, scale=1.0):
        gen = torch.Generator().manual_seed(0)
        return (torch.randn(*shape, generator=gen) * scale).to("cuda", dtype)

    def bandwidth_table(title, cases):
        """cases: (label, dtype, x, {impl: fn}, native fn, bytes fwd, bytes fwd+bwd); the copy of x is 100 %."""
        print(f"\n### {title}\n\n| case | pass | impl | ms | % copy |\n|---|---|---|---|---|")
        for label, dtype, x, impls, native, fwd_bytes, step_bytes in cases:
            y = torch.empty_like(x)
            copy_ms = ms(lambda: y.copy_(x), f"{label} copy")
            copy_bw = 2 * x.numel() * x.element_size() / copy_ms
            want = native(x)
            for impl, fn in impls.items():
                check(fn(x), want, f"{label} {impl}", atol=2e-2 if dtype == torch.float16 else 1e-4)
            passes = [("fwd", fwd_bytes, {impl: (lambda fn=fn: fn(x)) for impl, fn in impls.items()})]
            if not args.no_backward:
                xg, g = x.detach().requires_grad_(), torch.randn_like(x)
                passes.append(("fwd+bwd", step_bytes, {impl: fwd_bwd(fn, (xg,), g) for impl, fn in impls.items()}))
            for what, nbytes, fns in passes:
                for impl, fn in fns.items():
                    t = ms(fn, f"{label} {what} {impl}")
                    pct = 100 * nbytes / t / copy_bw
                    rows.append({"op": title, "case": label, "pass": what, "impl": impl, "ms": t, "pct_copy": pct})
                    print(f"| {label} | {what} | {impl} | {t:.3f} | {pct:.0f} |", flush=True)
            torch.cuda.empty_cache()

    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
          f"{datetime.date.today()}")

    # GELU: the forward reads x and writes y; fwd+bwd adds reading x and grad, writing grad_x.
    n = 2 ** args.gelu_log2
    gelu_impls = {"labops.triton": lt.gelu, "labops (CUDA)": labops.gelu, "native": F.gelu,
                  "torch.compile": compiled(F.gelu)}
    bandwidth_table("gelu", [
        (f"2^{args.gelu_log2} {str(dtype)[6:]}", dtype, randn(n, dtype=dtype, scale=3.0), gelu_impls, F.gelu,
         2 * n * size, 5 * n * size)
        for dtype, size in ((torch.float32, 4), (torch.float16, 2))])

    # softmax: the forward reads x and writes y; fwd+bwd adds reading y and grad, writing grad_x.
    native_softmax = lambda t: torch.softmax(t, -1)  # noqa: E731
    softmax_impls = {"labops.triton": lt.softmax, "labops (CUDA)": lambda t: labops.softmax(t, -1),
                     "native": native_softmax, "torch.compile": compiled(native_softmax)}
    bandwidth_table("softmax", [
        (f"{rows_}x{cols} {str(dtype)[6:]}", dtype, randn(rows_, cols, dtype=dtype, scale=4.0), softmax_impls,
         native_softmax, 2 * rows_ * cols * size, 5 * rows_ * cols * size)
        for rows_, cols in ((4096, 4096), (8192, 1024)) for dtype, size in ((torch.float32, 4), (torch.float16, 2))])

    # conv2d: float16, tl.dot and cuDNN both on tensor cores accumulating in float32.
    print("\n### conv2d 3x3 pad 1, float16\n\n| layer | pass | impl | ms | TFLOP/s | cuDNN ms / ms |\n"
          "|---|---|---|---|---|---|")
    for batch, channels, hw in ((32, 64, 56), (32, 128, 28), (32, 256, 14)):
        x = randn(batch, channels, hw, hw, dtype=torch.float16)
        w = randn(channels, channels, 3, 3, dtype=torch.float16, scale=(channels * 9) ** -0.5)
        b = randn(channels, dtype=torch.float16)
        impls = {"labops.triton": lambda *a: lt.conv2d(*a, padding=1),
                 "labops.conv2d_mm": lambda *a: labops.conv2d_mm(*a, 1, 1, 1),
                 "cuDNN": lambda *a: F.conv2d(*a, padding=1)}
        want = F.conv2d(x.float(), w.float(), b.float(), padding=1)
        for impl, fn in impls.items():
            check(fn(x, w, b), want, f"conv2d {impl}", atol=5e-2)
        flops = 2 * batch * channels * hw * hw * channels * 9
        passes = [("fwd", flops, {impl: (lambda fn=fn: fn(x, w, b)) for impl, fn in impls.items()})]
        if not args.no_backward:
            leaves, g = [t.detach().requires_grad_() for t in (x, w, b)], torch.randn_like(want).half()
            passes.append(("fwd+bwd", 3 * flops, {impl: fwd_bwd(fn, leaves, g) for impl, fn in impls.items()}))
        for what, work, fns in passes:
            times = {impl: ms(fn, f"conv2d {what} {impl}") for impl, fn in fns.items()}
            for impl, t in times.items():
                row = {"op": "conv2d", "case": f"{batch}x{channels}x{hw}x{hw}", "pass": what, "impl": impl, "ms": t,
                       "tflops": work / (t * 1e-3) / 1e12, "cudnn_speedup": times["cuDNN"] / t}
                rows.append(row)
                print(f"| {row['case']} | {what} | {impl} | {t:.3f} | {row['tflops']:.0f} | "
                      f"{row['cudnn_speedup']:.2f} |", flush=True)
        torch.cuda.empty_cache()

    with open(args.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "date": str(datetime.date.today()), "rows": rows}, f, indent=1)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
