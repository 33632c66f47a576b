"""labops.rtc: kernels from strings, on the CPU (C++ in a process of its own) and on CUDA (NVRTC), against
float64 oracles; the rules a launch must obey; compile errors that point into the body; the cache; and, on
the CPU, a bad access, a crash, an endless loop and Ctrl-C, none of which may take Python down. The layers
written with it (labops.rtc_layers) are tested in test_rtc_layers.py."""

import inspect
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from labops import rtc

from conftest import tolerances


def poisoned(*shape, dtype=torch.float32, device="cpu"):
    """An output whose unwritten elements show: NaN for floats, a sentinel for ints."""
    fill = float("nan") if dtype.is_floating_point else -12345
    return torch.full(shape, fill, dtype=dtype, device=device)


AXPY = rtc.kernel("axpy", ["a", "x", "b"], ["y"], r"""
long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (i >= y_numel) return;
y[i] = a[0] * x[i] + b[i];
""")

GRID_STRIDE = rtc.kernel("grid_stride", ["x"], ["y", "who"], r"""
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < x_numel;
     i += (long long)blockDim.x * gridDim.x) {
  y[i] = x[i] * x[i];
  who[i] = blockIdx.x * blockDim.x + threadIdx.x;   // which thread wrote element i
}
""")

GRID_2D = rtc.kernel("grid_2d", ["x"], ["y"], r"""
const long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y;
const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (r < x_dims[0] && c < x_dims[1]) y[r * x_dims[1] + c] = x[r * x_dims[1] + c] + 1000 * x_ndim;
""")


# ---- elementwise kernels ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64], ids=str)
def test_elementwise_matches_float64_oracle(device, dtype):
    g = torch.Generator().manual_seed(1)
    n = 1001  # not a multiple of the block
    if dtype.is_floating_point:
        a, x, b = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((1,), (n,), (n,)))
    else:
        a, x, b = (torch.randint(-1000, 1000, s, generator=g, dtype=torch.float64) for s in ((1,), (n,), (n,)))
    y = poisoned(n, dtype=dtype, device=device)
    AXPY(a.to(device, dtype), x.to(device, dtype), b.to(device, dtype), y, grid=(n + 127) // 128, block=128)
    expected = a.to(dtype).double() * x.to(dtype).double() + b.to(dtype).double()
    if dtype.is_floating_point:
        rtol, atol = tolerances(dtype)
        torch.testing.assert_close(y.cpu().double(), expected, rtol=rtol, atol=atol)
    else:
        assert torch.equal(y.cpu().double(), expected)


def test_grid_smaller_than_data_needs_the_grid_stride_loop(device):
    n, blocks, threads = 10007, 3, 32
    x = torch.randn(n, device=device)
    y = poisoned(n, device=device)
    who = poisoned(n, dtype=torch.int64, device=device)
    GRID_STRIDE(x, y, who, grid=blocks, block=threads)
    torch.testing.assert_close(y.cpu().double(), x.cpu().double() ** 2, rtol=1e-6, atol=1e-7)
    # element i is handled by thread i mod (threads in the grid): each thread takes about n/96 elements
    assert torch.equal(who.cpu(), torch.arange(n) % (blocks * threads))


def test_two_dimensional_grid_and_dims(device):
    x = torch.randn(37, 53, dtype=torch.float64, device=device)
    y = poisoned(37, 53, dtype=torch.float64, device=device)
    GRID_2D(x, y, grid=((53 + 15) // 16, (37 + 7) // 8), block=(16, 8))
    assert torch.equal(y, x + 2000)


def test_cpu_runs_blocks_outside_threads_inside():
    # An atomic counter: on the CPU the threads run one at a time in a fixed order, so each sees its rank.
    order = rtc.kernel("order", [], ["counter", "seen"], r"""
    const long long me = ((long long)(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.y + threadIdx.y)
                         * blockDim.x + threadIdx.x;
    seen[me] = atomicAdd(&counter[0], 1LL);
    """)
    counter = torch.zeros(1, dtype=torch.int64)
    seen = poisoned(2 * 3 * 4 * 5, dtype=torch.int64)
    order(counter, seen, grid=(2, 3), block=(4, 5))
    assert counter.item() == 120 and torch.equal(seen, torch.arange(120))


# ---- compile errors point into the body ----

def test_compile_error_reports_the_body_line(device):
    bad = rtc.kernel(f"broken_{uuid.uuid4().hex[:8]}", ["x"], ["y"],
                     "long long i = threadIdx.x;\n"
                     "y[i] = x[i];\n"
                     "y[i] += not_declared_anywhere;\n")
    x = torch.randn(4, device=device)
    with pytest.raises(rtc.CompileError) as info:
        bad(x, torch.empty_like(x), grid=1, block=4)
    message = str(info.value)
    assert "not_declared_anywhere" in message
    # g++ writes name:3:col, NVRTC name(3): the third line of the body, not of the generated file
    assert re.search(rf"{bad.name}(:3:|\(3\))", message), message
    assert info.value.log and "labops_rtc_launch" not in info.value.log


# ---- launch rules, checked before anything runs ----

def test_wrong_number_of_tensors():
    x = torch.randn(4)
    with pytest.raises(TypeError, match=r"takes 4 tensors \(a, x, b, y: inputs first"):
        AXPY(x, x, x, grid=1, block=4)


def test_wrong_dtype_names_the_argument():
    x = torch.randn(4)
    with pytest.raises(TypeError, match="b has dtype torch.bool; supported: float32, float64, float16"):
        AXPY(x, x, torch.ones(4, dtype=torch.bool), x, grid=1, block=4)
    with pytest.raises(TypeError, match="y must be a torch.Tensor, got list"):
        AXPY(x, x, x, [0.0] * 4, grid=1, block=4)


def test_wrong_device():
    x = torch.randn(4)
    with pytest.raises(ValueError, match="y must be on a cpu or cuda device, got meta"):
        AXPY(x, x, x, torch.empty(4, device="meta"), grid=1, block=4)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="all tensors must be on one device; a is on cpu, x on cuda"):
            AXPY(x, x.cuda(), x, x, grid=1, block=4)


def test_non_contiguous_input():
    x = torch.randn(6, 4)
    with pytest.raises(ValueError, match=r"x must be contiguous .* pass x.contiguous\(\)"):
        GRID_2D(x.t(), torch.empty(4, 6), grid=1, block=(8, 8))


def test_launch_shape_rules():
    x = torch.randn(4)
    with pytest.raises(ValueError, match="a block holds at most 1024 threads"):
        AXPY(x, x, x, x, grid=1, block=(64, 32))
    with pytest.raises(ValueError, match="every size in grid must be >= 1"):
        AXPY(x, x, x, x, grid=0, block=4)
    with pytest.raises(TypeError, match="block must be an int or a tuple of 1 to 3 ints"):
        AXPY(x, x, x, x, grid=1, block=(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"grid.y must be <= 65535"):
        AXPY(x, x, x, x, grid=(1, 70000), block=4)


def test_bad_kernel_definitions():
    with pytest.raises(ValueError, match="name must be a C identifier"):
        rtc.kernel("2fast", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(ValueError, match="tensor names must be distinct"):
        rtc.kernel("dup", ["x"], ["x"], "x[0] = 1;")
    with pytest.raises(ValueError, match="clashes with 'x' on 'x_dims'"):
        rtc.kernel("clash", ["x", "x_dims"], ["y"], "y[0] = 1;")
    with pytest.raises(ValueError, match="reserved"):
        rtc.kernel("res", ["threadIdx"], ["y"], "y[0] = 1;")
    with pytest.raises(TypeError, match="inputs must be a list of tensor names"):
        rtc.kernel("str_inputs", "x", ["y"], "y[0] = 1;")
    with pytest.raises(ValueError, match="body must be a non-empty string"):
        rtc.kernel("empty", ["x"], ["y"], "   ")


def test_gpu_only_features_are_refused_on_the_cpu():
    groups = rtc.kernel("groups", ["x"], ["y"], "namespace cg = cooperative_groups; y[0] = x[0];")
    with pytest.raises(rtc.GpuOnlyError, match=r"uses cooperative_groups, which the CPU path does not run"):
        groups(torch.randn(4), torch.empty(1), grid=1, block=1)
    # a name in a comment is not a use
    assert rtc.gpu_only_features("// no cooperative_groups here\ny[0] = 1; /* __nanosleep */") == []


# ---- generated source (pure Python) ----

def test_generated_sources():
    k = rtc.kernel("copy_half", ["x"], ["y"], "y[threadIdx.x] = x[threadIdx.x];")
    cuda = k.source([torch.float16, torch.float32], "cuda")
    assert '#include <cuda_fp16.h>' in cuda and 'extern "C" __global__ void copy_half(' in cuda
    assert "const __half* x, long long x_rank, long long x_d0" in cuda and "float* y, long long y_rank" in cuda
    assert cuda.rstrip().endswith('#line 1 "copy_half"\ny[threadIdx.x] = x[threadIdx.x];\n}')
    cpu = k.source(torch.float64, "cpu")
    assert "labops_rtc::checked_ptr<const double> x" in cpu and "#include <cuda_fp16.h>" not in cpu
    # a body that never waits runs without fibers
    assert "#define LABOPS_RTC_FIBERS 0" in cpu and "labops_rtc::launch_grid(gridDim, blockDim, config[6], body)" in cpu
    assert "labops_rtc::checked_ptr<const __half> x" in k.source([torch.float16, torch.float32], "cpu")


# ---- the cache ----

def test_a_second_kernel_with_the_same_body_does_not_recompile(device):
    body = f"// unique body {uuid.uuid4().hex}\nif (threadIdx.x < x_numel) y[threadIdx.x] = x[threadIdx.x] + 1;"
    x = torch.randn(16, device=device)
    y = torch.empty_like(x)
    before = rtc.cache_info()
    rtc.kernel("cached_inc", ["x"], ["y"], body)(x, y, grid=1, block=16)
    first = rtc.cache_info()
    assert first["compiles"] == before["compiles"] + 1
    rtc.kernel("cached_inc", ["x"], ["y"], body)(x, y, grid=1, block=16)  # a new Kernel object, same code
    second = rtc.cache_info()
    assert second["compiles"] == first["compiles"] and second["memory_hits"] == first["memory_hits"] + 1
    torch.testing.assert_close(y, x + 1)
    rtc.kernel("cached_inc", ["x"], ["y"], body)(x.double(), y.double(), grid=1, block=16)
    assert rtc.cache_info()["compiles"] == second["compiles"] + 1  # dtypes are part of the key
    if device == "cpu":
        rtc.clear_cache()  # this process forgets; the library on disk remains
        rtc.kernel("cached_inc", ["x"], ["y"], body)(x, y, grid=1, block=16)
        third = rtc.cache_info()
        assert third["compiles"] == second["compiles"] + 1 and third["disk_loads"] == second["disk_loads"] + 1


# ---- on the CPU, a kernel's mistakes end its own process, never Python's ----

SCALE = rtc.kernel("scale", ["x"], ["y"], r"""
long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_numel) y[i] = 2 * x[i];
""")


def assert_a_correct_kernel_still_works():
    x = torch.randn(1000, dtype=torch.float64)
    y = poisoned(1000, dtype=torch.float64)
    SCALE(x, y, grid=4, block=256)
    assert torch.equal(y, 2 * x)  # exact: doubling a float64 rounds nothing


# name: (body, the message's "<access> <tensor>[<index>]"); x and y have 50 elements, 64 threads run.
OUT_OF_BOUNDS = {
    "write_just_past_the_end": ("long long i = threadIdx.x; if (i <= y_numel) y[i] = 1;", "wrote y[50]"),
    "write_far_past_the_end": ("long long i = threadIdx.x; if (i < y_numel) y[i * 1000000] = 1;", "wrote y[1000000]"),
    "read_just_past_the_end": ("long long i = threadIdx.x; if (i < y_numel) y[i] = x[i + 1];", "read x[50]"),
    "read_far_past_the_end": ("long long i = threadIdx.x; if (i < y_numel) y[i] = x[i + 100000000];",
                              "read x[100000000]"),
    "negative_index": ("long long i = threadIdx.x; if (i < y_numel) y[i] = x[i - 1];", "read x[-1]"),
    "negative_write": ("long long i = threadIdx.x; if (i < y_numel) y[i - 1] = x[i];", "wrote y[-1]"),
    "read_of_an_output": ("if (threadIdx.x == 0) y[0] = y[y_numel];", "read y[50]"),
    # x + 40 keeps checking, and names the index in x
    "past_the_end_of_x_plus_40": ("auto tail = x + 40; if (threadIdx.x < 16) y[threadIdx.x] = tail[threadIdx.x];",
                                  "read x[50]"),
}


@pytest.mark.parametrize("case", OUT_OF_BOUNDS)
def test_an_out_of_bounds_access_raises_and_writes_nothing(case):
    body, access = OUT_OF_BOUNDS[case]
    x, y = torch.randn(50), poisoned(50)
    with pytest.raises(rtc.OutOfBoundsError) as info:
        rtc.kernel(case, ["x"], ["y"], body)(x, y, grid=1, block=64)
    tensor = access.split()[1][0]
    assert str(info.value).startswith(f"labops.rtc: kernel '{case}' {access}, but {tensor} has 50 elements "
                                      f"(valid 0..49) (thread (")
    assert isinstance(info.value, IndexError) and info.value.tensor == tensor and info.value.numel == 50
    assert info.value.index == int(access.split("[")[1][:-1])
    assert y.isnan().all(), "a launch that failed must not write its outputs"
    assert_a_correct_kernel_still_works()


@pytest.mark.parametrize("access", ["write", "read"])
def test_a_plain_pointer_just_past_the_end_stops_at_the_guard_page(access):
    # A plain pointer is not checked, but each tensor's copy ends where a guard page starts.
    body = ("float* row = y; long long i = threadIdx.x; if (i <= y_numel) row[i] = 1;" if access == "write" else
            "const float* row = x; long long i = threadIdx.x; if (i < y_numel) y[i] = row[i + 1];")
    name = f"plain_pointer_{access}"
    verb, tensor = ("wrote", "y") if access == "write" else ("read", "x")
    # the CPU's fault tells a read from a write on x86-64 only
    with pytest.raises(rtc.OutOfBoundsError, match=rf"kernel '{name}' ({verb}|read or wrote) {tensor}\[50\] through "
                                                   rf"a plain pointer, but {tensor} has 50 elements \(valid 0\.\.49\)"):
        rtc.kernel(name, ["x"], ["y"], body)(torch.randn(50), torch.empty(50), grid=1, block=64)
    assert_a_correct_kernel_still_works()


@pytest.mark.parametrize("case,body,signal_name", [
    ("null_pointer", "float* nowhere = nullptr; nowhere[threadIdx.x] = 1;", "SIGSEGV"),
    ("abort", "if (threadIdx.x == 3) abort(); y[threadIdx.x] = 1;", "SIGABRT"),
    ("exit", "if (threadIdx.x == 3) exit(3); y[threadIdx.x] = 1;", None),
])
def test_a_crash_names_the_kernel_and_the_signal(case, body, signal_name):
    y = poisoned(8)
    ending = (f"crashed on the CPU with {signal_name} " if signal_name else
              "ended the process that ran it with exit status 3")
    with pytest.raises(rtc.KernelCrashError, match=rf"kernel '{case}' {ending}") as info:
        rtc.kernel(case, [], ["y"], body)(y, grid=1, block=8)
    assert info.value.signal == (getattr(signal, signal_name) if signal_name else None)
    assert y.isnan().all()
    assert_a_correct_kernel_still_works()


def test_in_place_launch_reads_and_writes_one_tensor():
    # the same tensor as input and output: one copy in the shared memory, as on a GPU
    inc = rtc.kernel("increment", ["x"], ["y"], "if (threadIdx.x < x_numel) y[threadIdx.x] = x[threadIdx.x] + 1;")
    x = torch.randn(32, dtype=torch.float64)
    expected = x + 1
    inc(x, x, grid=1, block=32)
    assert torch.equal(x, expected)


def children_of(pid):
    """Pids of the processes (running or not yet reaped) whose parent is ``pid`` and whose name says they are
    rtc's runner, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if entry.isdigit() and int(fields[1]) == pid and name.startswith("rtc-runner"):
            found.append(int(entry))
    return found


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="finds processes through /proc")

ENDLESS = {
    "while_true": "while (true) {}",
    "index_never_moves": "for (long long i = threadIdx.x; i < x_numel; i += 0 * blockDim.x) y[i] = x[i];",
}


@needs_proc
@pytest.mark.parametrize("case", ENDLESS)
def test_an_endless_kernel_is_stopped_at_the_time_limit(case):
    kernel = rtc.kernel(f"endless_{case}", ["x"], ["y"], ENDLESS[case])
    seen, launching = set(), threading.Event()

    def watch():  # the runner's pid, while the launch runs
        while launching.is_set():
            seen.update(children_of(os.getpid()))
            time.sleep(0.05)

    launching.set()
    watcher = threading.Thread(target=watch)
    watcher.start()
    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=rf"kernel 'endless_{case}' ran longer than the CPU time limit of "
                                               rf"0.5 s and was stopped"):
            kernel(torch.randn(8), torch.empty(8), grid=1, block=8, time_limit_s=0.5)
    finally:
        launching.clear()
        watcher.join()
    assert time.monotonic() - start < 5  # the compile, the limit, the kill
    assert seen and not any(os.path.exists(f"/proc/{pid}") for pid in seen), "the runner must be killed and reaped"
    assert_a_correct_kernel_still_works()


def test_the_time_limit_comes_from_the_call_the_module_or_the_environment(monkeypatch):
    spin = rtc.kernel("endless_while_true", ["x"], ["y"], ENDLESS["while_true"])
    monkeypatch.setattr(rtc, "CPU_TIME_LIMIT_S", 0.3)
    with pytest.raises(TimeoutError, match="time limit of 0.3 s"):
        spin(torch.randn(8), torch.empty(8), grid=1, block=8)
    for bad in (0, -1.0, True, "1"):
        with pytest.raises(ValueError, match="time_limit_s must be a number of seconds > 0"):
            spin(torch.randn(8), torch.empty(8), grid=1, block=8, time_limit_s=bad)
    monkeypatch.setenv("LABOPS_RTC_CPU_TIME_LIMIT_S", "2.5")
    assert rtc._time_limit_from_environment(30.0) == 2.5
    monkeypatch.setenv("LABOPS_RTC_CPU_TIME_LIMIT_S", "soon")
    with pytest.raises(ValueError, match=r"\$LABOPS_RTC_CPU_TIME_LIMIT_S must be a number of seconds > 0"):
        rtc._time_limit_from_environment(30.0)


# The script prints its runner's fate after Ctrl-C before Python's own exit, where the runner's
# parent-death signal would kill it anyway.
CTRL_C_SCRIPT = "import os\nimport sys\n\n" + inspect.getsource(children_of) + textwrap.dedent("""
    import torch
    from labops import rtc

    assert rtc.CPU_TIME_LIMIT_S == 60.0  # from $LABOPS_RTC_CPU_TIME_LIMIT_S
    spin = rtc.kernel("endless_while_true", ["x"], ["y"], "while (true) {}")
    print("launching", flush=True)
    try:
        spin(torch.randn(8), torch.empty(8), grid=1, block=8)
    except KeyboardInterrupt:
        print("runners left:", children_of(os.getpid()), file=sys.stderr, flush=True)
        raise
""")


@needs_proc
def test_ctrl_c_stops_an_endless_kernel():
    env = dict(os.environ, LABOPS_RTC_CPU_TIME_LIMIT_S="60")
    script = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT], env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent)
    try:
        assert script.stdout.readline() == "launching\n"
        deadline = time.monotonic() + 30  # the first launch may compile
        while not (runners := children_of(script.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runners, "the kernel never started"
        time.sleep(1.0)
        interrupted = time.monotonic()
        os.kill(script.pid, signal.SIGINT)
        _, err = script.communicate(timeout=10)
        took = time.monotonic() - interrupted
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
    assert "KeyboardInterrupt" in err and script.returncode != 0, err
    assert "runners left: []" in err, err
    assert took < 5, f"Python took {took:.1f} s to stop after Ctrl-C"
    assert not any(os.path.exists(f"/proc/{pid}") for pid in runners)
