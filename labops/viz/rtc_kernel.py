"""labops.rtc: one kernel body, two generated sources (CPU and CUDA), drawn from ``Kernel.source``.

Everything the figure prints is read from the two sources ``rtc.kernel(...).source(dtype, device)``
generates (their length, where the body sits in each, the lines that wrap it) and from ``labops.rtc``
itself (the host compiler's flags); ``source`` needs no GPU and no compiler.
"""

from __future__ import annotations

from labops.viz._draw import _BLOCK_COLOURS, new_figure

_CPU, _GPU = _BLOCK_COLOURS[0], _BLOCK_COLOURS[2]
# The generated lines that show what wraps the body, by device (the first line starting with each).
_KEY_LINES = {
    "cpu": ("#define LABOPS_RTC_FIBERS", "static inline void labops_rtc_thread(", 'extern "C" void labops_rtc_launch(',
            "  labops_rtc::launch_grid("),
    "cuda": ('extern "C" __global__ void',),
}


def _body_lines(source, name, body):
    """(first, last) 1-based line numbers of the body's first and last non-blank lines inside ``source``:
    the lines after ``#line 1 "name"``, which the wrapper keeps in step with the body's own."""
    after = source.splitlines().index(f'#line 1 "{name}"') + 1  # 0-based index of body line 1
    lines = body.split("\n")
    filled = [k for k, line in enumerate(lines) if line.strip()]
    return after + filled[0] + 1, after + filled[-1] + 1


def _key_lines(source, device, width=58):
    found = []
    for prefix in _KEY_LINES[device]:
        for number, line in enumerate(source.splitlines(), 1):
            if line.startswith(prefix):
                text = line.strip()
                found.append(f"{number:4d}  " + (text if len(text) <= width else text[:width - 3] + "..."))
                break
    return found


def _box(ax, x, y, text, colour, gid, family="monospace", size=7.5, align="center"):
    t = ax.text(x, y, text, ha="center", va="center", fontsize=size, family=family, multialignment=align,
                bbox=dict(boxstyle="round,pad=0.45", facecolor=colour + "22", edgecolor=colour, linewidth=1.4))
    t.set_gid(gid)
    return t


def _arrow(ax, tail, head, colour, label=""):
    a = ax.annotate(label, xy=(0.5, 1.0), xycoords=head, xytext=(0.5, 0.0), textcoords=tail, fontsize=7.5,
                    ha="center", va="center", arrowprops=dict(arrowstyle="-|>", mutation_scale=12, color=colour,
                                                             linewidth=1.4, shrinkA=4, shrinkB=4))
    a.set_gid("arrow")
    return a


def rtc_two_paths(kernel, dtype=None):
    """The body of ``kernel`` (an ``rtc.kernel``) in the middle, and what becomes of it on each device.

    Top: the body as written (gid ``"body"``). Left, the CPU path: the generated C++ (gid ``"source"``:
    its line count, the lines where the body sits, the key wrapper lines with their numbers), then the
    host compiler with ``rtc``'s flags, then how it runs (gid ``"runs"``: blocks in loops, in a runner
    process; threads as fibers only when the body waits). Right, the CUDA path: the generated
    ``__global__`` source, NVRTC, the GPU. Arrows (gid ``"arrow"``) link the boxes. ``dtype``: of every
    tensor (default float32).
    """
    import torch

    from labops import rtc

    dtype = dtype or torch.float32
    name = kernel.name
    sources = {device: kernel.source(dtype, device) for device in ("cpu", "cuda")}
    fibers = "#define LABOPS_RTC_FIBERS 1" in sources["cpu"]
    fig, (ax,) = new_figure(width=11.0, height=6.2)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.axis("off")
    body = kernel.body.strip("\n")
    body_box = _box(ax, 5.0, 8.9, f"body of '{name}' ({len(body.splitlines())} lines, as written)\n\n{body}",
                    "#444444", "body", size=8, align="left")
    columns = {"cpu": (2.5, _CPU), "cuda": (7.5, _GPU)}
    texts = {
        "cpu": (f"{len(sources['cpu'].splitlines())} lines of C++",
                "host compiler: c++ " + " ".join(f for f in rtc._CPU_FLAGS if f.startswith(("-O", "-std", "-shared"))),
                "a runner process (its own, per launch): blocks in\nloops, threads "
                + ("as fibers (the body waits)" if fibers else "one after another\n(no fibers: the body never waits)")),
        "cuda": (f"{len(sources['cuda'].splitlines())} lines of CUDA C++",
                 "NVRTC (cuda-core), for this GPU's architecture",
                 "the GPU: blocks spread over its multiprocessors,\nthreads in warps of 32, on PyTorch's current stream"),
    }
    for device, (x, colour) in columns.items():
        headline, compiler, runs = texts[device]
        first, last = _body_lines(sources[device], name, kernel.body)
        detail = "\n".join([f"{headline} (source(dtype, \"{device}\"))",
                            f"the body: lines {first}-{last}, after #line 1 \"{name}\"", "key lines around it:"]
                           + _key_lines(sources[device], device))
        src = _box(ax, x, 5.25, detail, colour, "source", size=7, align="left")
        _arrow(ax, body_box, src, colour)
        comp = _box(ax, x, 2.55, compiler, colour, "compiler", family="sans-serif", size=8)
        _arrow(ax, src, comp, colour)
        run = _box(ax, x, 0.75, runs, colour, "runs", family="sans-serif", size=8)
        _arrow(ax, comp, run, colour)
        ax.text(x, 6.95 if device == "cpu" else 6.95, "CPU" if device == "cpu" else "GPU", ha="center",
                va="center", fontsize=11, fontweight="bold", color=colour)
    ax.set_title(f"one body, two kernels: rtc.kernel('{name}', ...).source({str(dtype).replace('torch.', '')}, "
                 f"device)", fontsize=10)
    return fig
