"""CUDA-style kernels written as Python strings, compiled at run time (in the spirit of MXNet's ``mx.rtc``).

A kernel is a name, the names of its input and output tensors, and a *body*: the statements inside the
braces of a CUDA ``__global__`` function. The body sees, for each tensor name ``x``:

* ``x``: a pointer to its first element (``const`` for inputs), of the tensor's element type;
* ``x_type``: that element type (``float``, ``double``, ``__half``, ``int``, ``long long``);
* ``x_ndim`` (``int``), ``x_dims[]`` (``long long``, ``x_dims[0]`` is ``x.shape[0]``) and ``x_numel``;

and ``blockIdx``, ``threadIdx``, ``blockDim``, ``gridDim`` with ``.x/.y/.z``, as in CUDA. Tensors must be
contiguous: the body indexes them as dense row-major arrays.

* **CUDA**: the body becomes an ``extern "C" __global__`` function, compiled by NVRTC through NVIDIA's
  ``cuda-core`` package (``pip install labops[gpu]``) for this GPU's architecture and launched on
  PyTorch's current stream.
* **CPU**: the same body becomes a plain C++ function compiled by the host compiler (``c++``, no torch
  headers: well under a second) into a small shared library called through ``ctypes``. ``blockIdx`` and
  ``threadIdx`` are loop variables: the grid loops are outside, the block loops inside, and each "thread"
  runs to its end before the next starts. So bodies that need threads to run *together*
  (``__syncthreads``, ``__shared__``, atomics, warp shuffles) are GPU-only and raise on the CPU.

Compiled code is cached per (source, dtypes, device): in this process, and for the CPU also on disk
under labops's cache directory. ``cache_info()`` counts compiles and cache hits.

The second half of this file uses the module on write-up 004's layers (course notebook 11): a softmax
(one row per thread, as the write-up; one block per row on a GPU), the softmax-cross-entropy backward
"softmax - onehot", and YOLOv2's reorg in darknet's order, each wrapped as an autograd-aware
``torch.library.custom_op`` in the ``labops_rtc`` namespace.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass

import torch

__all__ = [
    "CompileError", "GpuOnlyError", "Kernel", "MAX_DIMS", "cache_info", "clear_cache", "cpu_source", "cuda_source",
    "gpu_only_features", "kernel",
    # kernels and ops built with it (notebook 11)
    "softmax_rows", "softmax_block_per_row", "softmax_backward_rows", "cross_entropy_rows",
    "cross_entropy_backward_rows", "reorg_darknet", "reorg_darknet_backward", "reorg_writeup",
    "softmax", "cross_entropy", "reorg",
]

MAX_DIMS = 8  # x_dims has this many slots; tensors of higher rank are refused

# dtype -> (C type on CUDA, C type on the CPU, or None when the CPU cannot run it)
_DTYPES = {
    torch.float32: ("float", "float"),
    torch.float64: ("double", "double"),
    torch.float16: ("__half", None),
    torch.int32: ("int", "int"),
    torch.int64: ("long long", "long long"),
}
_SUPPORTED = ", ".join(str(d).replace("torch.", "") for d in _DTYPES)

# Features that need the threads of a block (or a warp) to run at the same time, or to race.
_GPU_ONLY = re.compile(r"\b(__syncthreads\w*|__syncwarp|__shared__|atomic[A-Z]\w*|__shfl\w*|__ballot_sync"
                       r"|__any_sync|__all_sync|__activemask|__match\w*_sync|__reduce\w*_sync|cooperative_groups)\b")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"blockIdx", "threadIdx", "blockDim", "gridDim", "warpSize", "dim3", "uint3", "INFINITY", "NAN",
             "min", "max", "abs", "exp", "log", "sqrt", "pow"}
# Launch limits of every CUDA GPU since compute capability 3.0; the CPU path enforces them too, so a
# launch that runs on the CPU also runs on a GPU.
_MAX_BLOCK = (1024, 1024, 64)
_MAX_THREADS_PER_BLOCK = 1024
_MAX_GRID = (2**31 - 1, 65535, 65535)


class CompileError(RuntimeError):
    """The compiler rejected a kernel. ``log`` is its message; line numbers are those of the body."""

    def __init__(self, message: str, log: str, source: str):
        super().__init__(message)
        self.log = log
        self.source = source


class GpuOnlyError(RuntimeError):
    """The body uses a feature that only a GPU can run (threads of a block running together)."""


_stats = {"compiles": 0, "disk_loads": 0, "memory_hits": 0}
_compiled: dict = {}  # (source hash, dtypes, device) -> a launcher
_lock = threading.Lock()


def cache_info() -> dict:
    """Counts since the process started: ``compiles`` (compiler runs), ``disk_loads`` (CPU libraries
    found on disk), ``memory_hits`` (launches that found their code in this process).

    Example::

        >>> sorted(cache_info())
        ['compiles', 'disk_loads', 'memory_hits']
    """
    return dict(_stats)


def clear_cache() -> None:
    """Forget the compiled code held in this process (the CPU libraries on disk stay).

    Example::

        >>> clear_cache()   # the next launch loads from disk (CPU) or recompiles (CUDA)
    """
    with _lock:
        _compiled.clear()


# ---------------------------------------------------------------------------------------------------------
# Source generation (pure Python: testable without a compiler or a GPU)
# ---------------------------------------------------------------------------------------------------------

def _strip_comments_and_strings(body: str) -> str:
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', " ", body, flags=re.S)


def gpu_only_features(body: str) -> list[str]:
    """The GPU-only names a body uses (comments and strings ignored), in order of first use.

    Example::

        >>> gpu_only_features("__shared__ float s[32]; s[threadIdx.x] = 0; __syncthreads();")
        ['__shared__', '__syncthreads']
    """
    found = []
    for m in _GPU_ONLY.finditer(_strip_comments_and_strings(body)):
        if m.group(1) not in found:
            found.append(m.group(1))
    return found


def _check_names(name, inputs, outputs, body):
    if not isinstance(name, str) or not _IDENTIFIER.match(name) or name.startswith("__") or \
            name.startswith("labops_rtc"):
        raise ValueError(f"labops.rtc.kernel: name must be a C identifier (letters, digits, _; not starting "
                         f"with a digit, '__' or 'labops_rtc'), got {name!r}")
    for arg, names in (("inputs", inputs), ("outputs", outputs)):
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise TypeError(f"labops.rtc.kernel: {arg} must be a list of tensor names, got {type(names).__name__}")
        for n in names:
            if not isinstance(n, str) or not _IDENTIFIER.match(n) or n.startswith("__") or n in _RESERVED:
                raise ValueError(f"labops.rtc.kernel: every name in {arg} must be a C identifier that is not "
                                 f"reserved ({', '.join(sorted(_RESERVED))}), got {n!r}")
    if len(outputs) == 0:
        raise ValueError("labops.rtc.kernel: outputs must name at least one tensor (the kernel's result)")
    generated = {}
    for n in list(inputs) + list(outputs):
        for g in (n, f"{n}_ndim", f"{n}_dims", f"{n}_numel", f"{n}_type", f"{n}_rank",
                  *(f"{n}_d{i}" for i in range(MAX_DIMS))):
            if g in generated:
                raise ValueError(f"labops.rtc.kernel: tensor names must be distinct, and a name must not equal "
                                 f"another's generated names ({n!r} clashes with {generated[g]!r} on {g!r})")
            generated[g] = n
    if not isinstance(body, str) or not body.strip():
        raise ValueError("labops.rtc.kernel: body must be a non-empty string of C++ statements")


_CPU_PRELUDE = r"""// Generated by labops.rtc for the CPU: the body runs once per (block, thread), one after another.
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <algorithm>
#include <type_traits>

namespace labops_rtc {
struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
}  // namespace labops_rtc
using labops_rtc::uint3;
using labops_rtc::dim3;
using std::abs;

// The CUDA math names a body is likely to use (CUDA has them for device code).
template <class A, class B> inline typename std::common_type<A, B>::type min(A a, B b) { return b < a ? b : a; }
template <class A, class B> inline typename std::common_type<A, B>::type max(A a, B b) { return a < b ? b : a; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <class T> inline T __ldg(const T* p) { return *p; }
static const int warpSize = 32;
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
"""

_CUDA_PRELUDE = r"""// Generated by labops.rtc for NVRTC.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
"""


def _c_types(dtypes, device_type):
    column = 0 if device_type == "cuda" else 1
    return [_DTYPES[d][column] for d in dtypes]


def cpu_source(name, inputs, outputs, body, dtypes) -> str:
    """The C++ file the CPU path compiles for these dtypes (one per tensor, inputs first).

    Example::

        >>> source = cpu_source("copy", ["x"], ["y"], "y[0] = x[0];", [torch.float32] * 2)
        >>> '#line 1 "copy"' in source, "for (unsigned int bx = 0" in source
        (True, True)
    """
    names = list(inputs) + list(outputs)
    ctypes_ = _c_types(dtypes, "cpu")
    params, unpack, args = [], [], []
    for k, (n, t) in enumerate(zip(names, ctypes_)):
        const = "const " if k < len(inputs) else ""
        params.append(f"{const}{t}* {n}, const int {n}_ndim, const long long* {n}_dims, "
                      f"const long long {n}_numel")
        unpack.append(f"  {const}{t}* {n} = static_cast<{const}{t}*>(ptrs[{k}]);")
        args.append(f"{n}, ndims[{k}], dims + {k * MAX_DIMS}, numels[{k}]")
    typedefs = "".join(f"  typedef {t} {n}_type;\n" for n, t in zip(names, ctypes_))
    silence = "".join(f"  (void){n}; (void){n}_ndim; (void){n}_dims; (void){n}_numel;\n" for n in names)
    thread_params = ",\n    ".join(["const uint3 blockIdx, const uint3 threadIdx, const dim3 blockDim, "
                                    "const dim3 gridDim"] + params)
    launch_args = ", ".join(["block, thread, blockDim, gridDim"] + args)
    return (
        f"{_CPU_PRELUDE}\n"
        f"static inline void labops_rtc_thread(\n    {thread_params}) {{\n{typedefs}{silence}"
        f"  (void)blockIdx; (void)threadIdx; (void)blockDim; (void)gridDim;\n"
        f'#line 1 "{name}"\n{body}\n}}\n\n'
        f'extern "C" void labops_rtc_launch(void* const* ptrs, const int* ndims, const long long* dims,\n'
        f"                                  const long long* numels, const unsigned int* config) {{\n"
        + "\n".join(unpack) + "\n"
        f"  const dim3 gridDim = {{config[0], config[1], config[2]}};\n"
        f"  const dim3 blockDim = {{config[3], config[4], config[5]}};\n"
        f"  // grid loops outside, block loops inside: every thread of a block before the next block\n"
        f"  for (unsigned int bz = 0; bz < gridDim.z; ++bz)\n"
        f"    for (unsigned int by = 0; by < gridDim.y; ++by)\n"
        f"      for (unsigned int bx = 0; bx < gridDim.x; ++bx)\n"
        f"        for (unsigned int tz = 0; tz < blockDim.z; ++tz)\n"
        f"          for (unsigned int ty = 0; ty < blockDim.y; ++ty)\n"
        f"            for (unsigned int tx = 0; tx < blockDim.x; ++tx) {{\n"
        f"              const uint3 block = {{bx, by, bz}}, thread = {{tx, ty, tz}};\n"
        f"              labops_rtc_thread({launch_args});\n"
        f"            }}\n"
        f"}}\n"
    )


def cuda_source(name, inputs, outputs, body, dtypes) -> str:
    """The CUDA C++ source NVRTC compiles for these dtypes (one per tensor, inputs first).

    Each tensor ``x`` becomes the kernel parameters ``x`` (pointer), ``x_rank``, ``x_d0 ... x_d7`` and
    ``x_numel``, all 64-bit so that the launch passes plain Python ints (cuda.core's fastest argument);
    ``x_ndim`` and the array ``x_dims`` are locals made from them.

    Example::

        >>> source = cuda_source("copy", ["x"], ["y"], "y[0] = x[0];", [torch.float32] * 2)
        >>> '#line 1 "copy"' in source, "__global__" in source
        (True, True)
    """
    names = list(inputs) + list(outputs)
    ctypes_ = _c_types(dtypes, "cuda")
    params, locals_ = [], []
    for k, (n, t) in enumerate(zip(names, ctypes_)):
        const = "const " if k < len(inputs) else ""
        dims = ", ".join(f"long long {n}_d{i}" for i in range(MAX_DIMS))
        params.append(f"{const}{t}* {n}, long long {n}_rank, {dims}, long long {n}_numel")
        locals_.append(f"  const int {n}_ndim = (int){n}_rank;\n"
                       f"  const long long {n}_dims[{MAX_DIMS}] = {{"
                       + ", ".join(f"{n}_d{i}" for i in range(MAX_DIMS)) + "};\n"
                       f"  typedef {t} {n}_type;\n"
                       f"  (void){n}; (void){n}_ndim; (void){n}_dims; (void){n}_numel;\n")
    include = "#include <cuda_fp16.h>\n" if torch.float16 in dtypes else ""
    return (f"{_CUDA_PRELUDE}{include}\n"
            f'extern "C" __global__ void {name}(\n    ' + ",\n    ".join(params) + ") {\n"
            + "".join(locals_) + f'#line 1 "{name}"\n{body}\n}}\n')


# ---------------------------------------------------------------------------------------------------------
# Argument checks (before any compile or launch)
# ---------------------------------------------------------------------------------------------------------

def _dim3(value, arg):
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        raise TypeError(f"labops.rtc: {arg} must be an int or a tuple of 1 to 3 ints, got {type(value).__name__}")
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        raise TypeError(f"labops.rtc: {arg} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d < 1 for d in dims):
        raise ValueError(f"labops.rtc: every size in {arg} must be >= 1, got {value!r}")
    return tuple(dims + [1] * (3 - len(dims)))


def _check_launch(grid, block, shared_mem):
    grid, block = _dim3(grid, "grid"), _dim3(block, "block")
    for axis, (g, b, gmax, bmax) in enumerate(zip(grid, block, _MAX_GRID, _MAX_BLOCK)):
        xyz = "xyz"[axis]
        if b > bmax:
            raise ValueError(f"labops.rtc: block.{xyz} must be <= {bmax} (a CUDA limit), got {b}")
        if g > gmax:
            raise ValueError(f"labops.rtc: grid.{xyz} must be <= {gmax} (a CUDA limit), got {g}")
    threads = block[0] * block[1] * block[2]
    if threads > _MAX_THREADS_PER_BLOCK:
        raise ValueError(f"labops.rtc: a block holds at most {_MAX_THREADS_PER_BLOCK} threads (a CUDA limit), "
                         f"got block={block} = {threads}")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
        raise ValueError(f"labops.rtc: shared_mem must be an int >= 0 (bytes), got {shared_mem!r}")
    return grid, block


def _check_tensors(kernel_name, names, n_inputs, tensors):
    if len(tensors) != len(names):
        raise TypeError(f"labops.rtc: kernel '{kernel_name}' takes {len(names)} tensors "
                        f"({', '.join(names)}: inputs first, then outputs), got {len(tensors)}")
    for n, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"labops.rtc: {n} must be a torch.Tensor, got {type(t).__name__}")
    first = tensors[0].device
    for n, t in zip(names, tensors):
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"labops.rtc: {n} must be on a cpu or cuda device, got {t.device}")
        if t.device != first:
            raise ValueError(f"labops.rtc: all tensors must be on one device; {names[0]} is on {first}, "
                             f"{n} on {t.device}")
    for n, t in zip(names, tensors):
        if t.dtype not in _DTYPES:
            raise TypeError(f"labops.rtc: {n} has dtype {t.dtype}; supported: {_SUPPORTED}")
        if first.type == "cpu" and _DTYPES[t.dtype][1] is None:
            raise TypeError(f"labops.rtc: {n} is {t.dtype}, which runs on CUDA only (C++ on the CPU has no "
                            f"portable half type); use float32 on the CPU")
        if t.dim() > MAX_DIMS:
            raise ValueError(f"labops.rtc: {n} must have at most {MAX_DIMS} dims, got {t.dim()}")
        if not t.is_contiguous():
            raise ValueError(f"labops.rtc: {n} must be contiguous (the body indexes it as a dense row-major "
                             f"array); pass {n}.contiguous()")
    for k, (n, t) in enumerate(zip(names, tensors)):
        if k >= n_inputs and t.requires_grad and torch.is_grad_enabled() and t.is_leaf:
            raise ValueError(f"labops.rtc: output {n} is a leaf that requires grad; a kernel cannot write "
                             f"into it (allocate outputs with torch.empty)")
    return first


def _shape_args(t):
    dims = list(t.shape) + [1] * (MAX_DIMS - t.dim())
    return t.dim(), dims, t.numel()


# ---------------------------------------------------------------------------------------------------------
# CPU: the host compiler and ctypes
# ---------------------------------------------------------------------------------------------------------

_CPU_FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fno-math-errno", "-fdiagnostics-color=never"]
_compiler_id: dict = {}


def _compiler():
    name = os.environ.get("CXX", "c++")
    path = shutil.which(name)
    if path is None:
        raise CompileError(f"labops.rtc: no C++ compiler for the CPU path ('{name}' not found): install g++, "
                           f"e.g. `apt install g++`, or set CXX", "", "")
    if path not in _compiler_id:
        version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()
        _compiler_id[path] = version[0] if version else path
    return path, _compiler_id[path]


def _rtc_cache_dir():
    from labops import _build

    return _build.cache_root() / "rtc"


class _CpuLauncher:
    def __init__(self, library_path):
        self.library = ctypes.CDLL(str(library_path))
        self.function = self.library.labops_rtc_launch
        self.function.restype = None
        self.function.argtypes = [ctypes.c_void_p] * 5

    def __call__(self, tensors, grid, block, shared_mem):
        n = len(tensors)
        ptrs = (ctypes.c_void_p * n)(*[t.data_ptr() for t in tensors])
        ndims = (ctypes.c_int * n)()
        dims = (ctypes.c_longlong * (n * MAX_DIMS))()
        numels = (ctypes.c_longlong * n)()
        for k, t in enumerate(tensors):
            ndim, d, numel = _shape_args(t)
            ndims[k], numels[k] = ndim, numel
            dims[k * MAX_DIMS:(k + 1) * MAX_DIMS] = d
        config = (ctypes.c_uint * 6)(*grid, *block)
        self.function(ptrs, ndims, dims, numels, config)


def _build_cpu(name, source):
    compiler, compiler_id = _compiler()
    digest = hashlib.sha256("\0".join([source, compiler_id, " ".join(_CPU_FLAGS)]).encode()).hexdigest()[:20]
    directory = _rtc_cache_dir()
    library = directory / f"{name}-{digest}.so"
    if library.exists():
        _stats["disk_loads"] += 1
        return _CpuLauncher(library)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rtc-", dir=directory) as tmp:
        cpp = os.path.join(tmp, f"{name}.cpp")
        with open(cpp, "w") as f:
            f.write(source)
        out = os.path.join(tmp, f"{name}.so")
        done = subprocess.run([compiler, *_CPU_FLAGS, cpp, "-o", out], capture_output=True, text=True, cwd=tmp)
        _stats["compiles"] += 1
        if done.returncode != 0:
            # g++ opens with "In function 'void labops_rtc_thread(...)'": the wrapper, not the user's code
            log = "\n".join(line for line in done.stderr.replace(cpp, name).splitlines()
                            if not line.startswith(f"{name}: In function"))
            raise CompileError(f"labops.rtc: kernel '{name}' failed to compile for the CPU "
                               f"(line numbers are the body's):\n{log}", log, source)
        os.replace(out, library)  # atomic: a concurrent process sees the whole library or none
    return _CpuLauncher(library)


# ---------------------------------------------------------------------------------------------------------
# CUDA: NVRTC through cuda.core
# ---------------------------------------------------------------------------------------------------------

_cuda_core = None


def _import_cuda_core():
    """cuda.core's Program, ProgramOptions, LaunchConfig, launch, Device: top level (1.x) or experimental."""
    global _cuda_core
    if _cuda_core is None:
        module = None
        for path in ("cuda.core", "cuda.core.experimental"):
            try:
                candidate = __import__(path, fromlist=["Program"])
            except ImportError:
                continue
            if all(hasattr(candidate, a) for a in ("Program", "ProgramOptions", "LaunchConfig", "launch", "Device")):
                module = candidate
                break
        if module is None:
            raise ImportError("labops.rtc: CUDA kernels are compiled with NVIDIA's cuda-core package, which is not "
                              "installed: `pip install cuda-core` (or `pip install labops[gpu]`)")
        _cuda_core = module
    return _cuda_core


def _fp16_include_paths():
    """Folders holding cuda_fp16.h, for NVRTC builds that do not bundle it."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "include"))
    candidates.append("/usr/local/cuda/include")
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in sorted(os.listdir(root)):
                candidates.append(os.path.join(root, sub, "include"))
    except ImportError:
        pass
    return [c for c in dict.fromkeys(candidates) if os.path.isfile(os.path.join(c, "cuda_fp16.h"))]


_thread_state = threading.local()  # which device this thread made current through cuda.core


class _CudaLauncher:
    def __init__(self, kernel, device_index):
        self.kernel = kernel
        self.device_index = device_index
        self.device = _cuda_core.Device(device_index)
        self.streams = {}
        self.configs = {}

    def _stream(self):
        torch_stream = torch.cuda.current_stream(self.device_index)
        key = torch_stream.cuda_stream
        stream = self.streams.get(key)
        if stream is None:
            if len(self.streams) > 64:
                self.streams.clear()
            stream = self.streams[key] = self.device.create_stream(torch_stream)
        return stream

    def _config(self, grid, block, shared_mem):
        key = (grid, block, shared_mem)
        config = self.configs.get(key)
        if config is None:
            if len(self.configs) > 256:
                self.configs.clear()
            config = self.configs[key] = _cuda_core.LaunchConfig(grid=grid, block=block, shmem_size=shared_mem)
        return config

    def __call__(self, tensors, grid, block, shared_mem):
        args = []
        for t in tensors:  # Python ints: cuda.core passes them as 64-bit values (pointers and long longs)
            ndim, dims, numel = _shape_args(t)
            args += [t.data_ptr(), ndim, *dims, numel]
        config = self._config(grid, block, shared_mem)
        # The launch goes to the context current on this thread: make it this device's (primary) context,
        # the one PyTorch uses. Skipped when this thread already did so and torch still points at it.
        if torch.cuda.current_device() != self.device_index or \
                getattr(_thread_state, "device", None) != self.device_index:
            with torch.cuda.device(self.device_index):
                self.device.set_current()
                _thread_state.device = self.device_index
                _cuda_core.launch(self._stream(), config, self.kernel, *args)
        else:
            _cuda_core.launch(self._stream(), config, self.kernel, *args)


def _build_cuda(name, source, device_index):
    cc = _import_cuda_core()
    major, minor = torch.cuda.get_device_capability(device_index)
    with torch.cuda.device(device_index):
        cc.Device(device_index).set_current()
        _thread_state.device = device_index
        options = {"arch": f"sm_{major}{minor}", "std": "c++17", "name": f"{name}.cu"}
        if "cuda_fp16.h" in source:
            paths = _fp16_include_paths()
            if paths:
                options["include_path"] = paths
        program = cc.Program(source, code_type="c++", options=cc.ProgramOptions(**options))
        _stats["compiles"] += 1
        try:
            code = program.compile("cubin")
        except Exception as exc:  # cuda.core raises with NVRTC's log in the message
            log = str(exc).replace("\x00", "").strip()
            raise CompileError(f"labops.rtc: kernel '{name}' failed to compile with NVRTC for sm_{major}{minor} "
                               f"(line numbers are the body's):\n{log}", log, source) from None
        return _CudaLauncher(code.get_kernel(name), device_index)


# ---------------------------------------------------------------------------------------------------------
# The public object
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    """A runtime kernel: ``name``, the names of its ``inputs`` and ``outputs``, and its ``body``.

    Call it with the tensors (inputs, then outputs) and a launch shape::

        k(x, y, grid=(blocks,), block=(threads,))      # ints or tuples of 1-3 ints
        k(x, y, grid=(rows,), block=256, shared_mem=0)  # shared_mem: dynamic shared bytes (CUDA only)

    ``k.source(dtypes, device)`` returns the code that would be compiled.
    """

    name: str
    inputs: tuple
    outputs: tuple
    body: str

    @property
    def names(self) -> tuple:
        return self.inputs + self.outputs

    def source(self, dtypes, device="cpu") -> str:
        """The generated source for ``dtypes`` (one per tensor, or one for all) on ``"cpu"`` or ``"cuda"``.

        Example::

            >>> k = kernel("copy", ["x"], ["y"], "y[0] = x[0];")
            >>> "__global__" in k.source(torch.float32, "cuda")
            True
        """
        if isinstance(dtypes, torch.dtype):
            dtypes = [dtypes] * len(self.names)
        dtypes = list(dtypes)
        if len(dtypes) != len(self.names):
            raise ValueError(f"labops.rtc: dtypes must give one dtype per tensor ({len(self.names)}), "
                             f"got {len(dtypes)}")
        for n, d in zip(self.names, dtypes):
            if d not in _DTYPES:
                raise TypeError(f"labops.rtc: {n} has dtype {d}; supported: {_SUPPORTED}")
        device = torch.device(device).type
        if device == "cpu":
            for n, d in zip(self.names, dtypes):
                if _DTYPES[d][1] is None:
                    raise TypeError(f"labops.rtc: {n} is {d}, which runs on CUDA only")
            return cpu_source(self.name, self.inputs, self.outputs, self.body, dtypes)
        if device == "cuda":
            return cuda_source(self.name, self.inputs, self.outputs, self.body, dtypes)
        raise ValueError(f"labops.rtc: device must be cpu or cuda, got {device}")

    def _launcher(self, device, dtypes):
        key = (self.name, self.inputs, self.outputs, self.body, dtypes, str(device))
        launcher = _compiled.get(key)
        if launcher is not None:
            _stats["memory_hits"] += 1
            return launcher
        with _lock:
            launcher = _compiled.get(key)
            if launcher is None:
                if device.type == "cpu":
                    used = gpu_only_features(self.body)
                    if used:
                        raise GpuOnlyError(
                            f"labops.rtc: kernel '{self.name}' uses {', '.join(used)}, which only a GPU can run: "
                            f"the CPU path runs each thread to its end before the next starts, so threads can "
                            f"neither wait for each other nor share memory or race. Run it on a CUDA tensor, or "
                            f"write a version without them for the CPU")
                    launcher = _build_cpu(self.name, self.source(dtypes, "cpu"))
                else:
                    launcher = _build_cuda(self.name, self.source(dtypes, "cuda"), device.index)
                _compiled[key] = launcher
        return launcher

    def __call__(self, *tensors, grid, block, shared_mem: int = 0):
        grid, block = _check_launch(grid, block, shared_mem)
        device = _check_tensors(self.name, self.names, len(self.inputs), tensors)
        if device.type == "cpu" and shared_mem:
            raise GpuOnlyError(f"labops.rtc: shared_mem={shared_mem}: shared memory exists only on a GPU")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        dtypes = tuple(t.dtype for t in tensors)
        self._launcher(device, dtypes)(tensors, grid, block, shared_mem)


def kernel(name: str, inputs, outputs, body: str) -> Kernel:
    """Make a runtime kernel from a CUDA-style body (compiled on its first launch per dtypes and device).

    Args:
        name: the kernel's name, a C identifier; compiler messages name the body's file after it.
        inputs: names of the input tensors (``const`` pointers in the body).
        outputs: names of the output tensors (written by the body; allocate them before the launch).
        body: the statements of a CUDA ``__global__`` function body. For each tensor ``x`` it sees ``x``,
            ``x_type``, ``x_ndim``, ``x_dims[]``, ``x_numel``; and ``blockIdx``, ``threadIdx``, ``blockDim``,
            ``gridDim``.

    Returns:
        a ``Kernel``; call it as ``k(*inputs, *outputs, grid=..., block=...)``. Tensors: contiguous, one
        device, dtypes float32/float64/int32/int64 (and float16 on CUDA).

    Example::

        >>> scale = kernel("scale", ["x"], ["y"], '''
        ...     long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        ...     if (i < x_numel) y[i] = 2 * x[i];''')
        >>> x = torch.randn(1000); y = torch.empty_like(x)
        >>> scale(x, y, grid=(1000 + 255) // 256, block=256)
        >>> torch.equal(y, 2 * x)
        True
    """
    _check_names(name, inputs, outputs, body)
    return Kernel(name, tuple(inputs), tuple(outputs), body)


# =========================================================================================================
# Write-up 004's layers as runtime kernels (course notebook 11)
# =========================================================================================================

# Softmax over the last dim of a (rows, cols) matrix, the write-up's way: the row from the thread index,
# then three walks over the row (max, sum of exponentials, outputs). A grid-stride loop over rows, so any
# grid covers any number of rows. exp/fmax are overloaded for float and double.
softmax_rows = kernel("softmax_rows", ["x"], ["y"], r"""
const long long rows = x_dims[0], cols = x_dims[1];
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
     i += (long long)blockDim.x * gridDim.x) {
  const x_type* xr = x + i * cols;
  y_type* yr = y + i * cols;
  x_type m = xr[0];
  for (long long j = 1; j < cols; ++j) m = fmax(m, xr[j]);
  x_type sum = 0;
  for (long long j = 0; j < cols; ++j) sum += exp(xr[j] - m);
  for (long long j = 0; j < cols; ++j) yr[j] = exp(xr[j] - m) / sum;
}
""")

# The same softmax with one block per row (GPU only): the block's threads read the row together
# (neighbouring threads, neighbouring addresses), reduce the max and the sum through warp shuffles and a
# 32-slot shared array, then write together. blockDim.x must be a multiple of 32 (at most 1024).
softmax_block_per_row = kernel("softmax_block_per_row", ["x"], ["y"], r"""
const long long rows = x_dims[0], cols = x_dims[1];
__shared__ x_type partial[32];
const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
  const x_type* xr = x + r * cols;
  y_type* yr = y + r * cols;
  x_type m = -INFINITY;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, xr[j]);
  for (int o = 16; o > 0; o /= 2) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = partial[0];
  for (unsigned w = 1; w < warps; ++w) m = fmax(m, partial[w]);
  __syncthreads();                       // everyone has read partial[] before it is reused
  x_type sum = 0;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) sum += exp(xr[j] - m);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  sum = 0;
  for (unsigned w = 0; w < warps; ++w) sum += partial[w];
  __syncthreads();
  const x_type inv = 1 / sum;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = exp(xr[j] - m) * inv;
}
""")

# Softmax backward from the output: gx = y * (g - sum_j g_j y_j), one row per thread.
softmax_backward_rows = kernel("softmax_backward_rows", ["g", "y"], ["gx"], r"""
const long long rows = y_dims[0], cols = y_dims[1];
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
     i += (long long)blockDim.x * gridDim.x) {
  y_type dot = 0;
  for (long long j = 0; j < cols; ++j) dot += g[i * cols + j] * y[i * cols + j];
  for (long long j = 0; j < cols; ++j) gx[i * cols + j] = y[i * cols + j] * (g[i * cols + j] - dot);
}
""")

# Cross-entropy of each row: loss_i = m + log(sum_j exp(x_ij - m)) - x_i,t_i, one row per thread.
cross_entropy_rows = kernel("cross_entropy_rows", ["x", "t"], ["loss"], r"""
const long long rows = x_dims[0], cols = x_dims[1];
for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
     i += (long long)blockDim.x * gridDim.x) {
  const x_type* xr = x + i * cols;
  x_type m = xr[0];
  for (long long j = 1; j < cols; ++j) m = fmax(m, xr[j]);
  x_type sum = 0;
  for (long long j = 0; j < cols; ++j) sum += exp(xr[j] - m);
  loss[i] = m + log(sum) - xr[t[i]];
}
""")

# The write-up's "softmax with label" backward, one element per thread: softmax - onehot, here times the
# incoming gradient of the row's loss (the write-up leaves that factor out, so its kernel is right only
# for a loss that is the plain sum of the rows).
cross_entropy_backward_rows = kernel("cross_entropy_backward_rows", ["y", "t", "g"], ["gx"], r"""
const long long cols = y_dims[1];
for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < y_numel;
     k += (long long)blockDim.x * gridDim.x) {
  const long long i = k / cols, j = k % cols;
  gx[k] = (y[k] - (j == t[i] ? 1 : 0)) * g[i];
}
""")

# Reorg in darknet's order (labops.reference.reorg has darknet's own loop): output element o of image n reads input element
# src(o) of the same image. Stride s = H / H_out. One output element per thread, grid-stride.
_DARKNET_INDEX = r"""
const long long n_img = x_dims[0], c = x_dims[1], h = x_dims[2], w = x_dims[3];
const long long s = x_dims[2] / y_dims[2], c_low = c / (s * s), per_image = c * h * w;
for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n_img * per_image;
     k += (long long)blockDim.x * gridDim.x) {
  const long long n = k / per_image, o = k % per_image;
  // o read as an index of the (C, H, W) result of space-to-depth (dcr order) applied to the input's memory
  // viewed as (C/s^2, H*s, W*s):
  const long long zc = o / (h * w), zh = (o / w) % h, zw = o % w;
  const long long cl = zc % c_low, offset = zc / c_low, dy = offset / s, dx = offset % s;
  const long long src = ((cl * h * s) + zh * s + dy) * (w * s) + zw * s + dx;
  STORE
}
"""
reorg_darknet = kernel("reorg_darknet", ["x"], ["y"],
                       _DARKNET_INDEX.replace("STORE", "y[k] = x[n * per_image + src];"))
# Its backward: the same index, the copy reversed (a permutation: every input element written once).
reorg_darknet_backward = kernel("reorg_darknet_backward", ["gy"], ["gx"],
                                _DARKNET_INDEX.replace("x_dims", "gx_dims").replace("y_dims", "gy_dims")
                                .replace("STORE", "gx[n * per_image + src] = gy[k];"))

# The write-up's reorg forward, its index as written (stride 2 only): one thread per input plane (n, c),
# launched as one block of one thread per plane; output plane 4*plane + 2*dy + dx gets pixel (2h+dy, 2w+dx).
reorg_writeup = kernel("reorg_writeup", ["x"], ["y"], r"""
const long long plane = blockIdx.x;
const long long xh = x_dims[2], xw = x_dims[3], yh = y_dims[2], yw = y_dims[3];
const long long out_plane = yh * yw, in_plane = xh * xw;
for (long long r = 0; r < xh; r += 2)
  for (long long col = 0; col < xw; col += 2) {
    const long long at = plane * in_plane + (r / 2) * yw + col / 2;
    y[at]                 = x[plane * in_plane + r * xw + col];
    y[at + out_plane]     = x[plane * in_plane + r * xw + col + 1];
    y[at + 2 * out_plane] = x[plane * in_plane + (r + 1) * xw + col];
    y[at + 3 * out_plane] = x[plane * in_plane + (r + 1) * xw + col + 1];
  }
""")


# ---- launch helpers: a grid for a grid-stride loop over n items ----

def _grid_for(n: int, threads: int, cap: int = 4096) -> int:
    return max(1, min(cap, (n + threads - 1) // threads))


def _check_matrix(x, op, arg="x"):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"labops_rtc.{op}: {arg} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"labops_rtc.{op}: {arg} must be float32 or float64, got {x.dtype}")
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"labops_rtc.{op}: {arg} must be a 2-D (rows, cols) tensor with cols >= 1, "
                         f"got shape {list(x.shape)}")


def _run_softmax(x):
    y = torch.empty_like(x)
    if x.shape[0] == 0:
        return y
    if x.is_cuda:
        softmax_block_per_row(x, y, grid=min(x.shape[0], 65535), block=256 if x.shape[1] > 128 else 128)
    else:
        softmax_rows(x, y, grid=_grid_for(x.shape[0], 64), block=64)
    return y


# ---- autograd-aware ops: a forward kernel, a backward kernel, a few lines of torch.library ----
# Defined once, at import: a notebook cell that re-runs `import labops.rtc` does not register them again.

@torch.library.custom_op("labops_rtc::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D float32/float64 tensor, by runtime kernels.

    CPU: one row per thread (the write-up's kernel); CUDA: one block per row. Backward: ``y * (g - sum g y)``.
    Shapes: x (rows, cols) -> (rows, cols).

    Example::

        >>> y = softmax(torch.randn(4, 10))
        >>> y.shape, torch.allclose(y.sum(1), torch.ones(4))
        (torch.Size([4, 10]), True)
    """
    _check_matrix(x, "softmax")
    return _run_softmax(x.contiguous())


@torch.library.custom_op("labops_rtc::softmax_backward", mutates_args=())
def _softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    g, y = g.contiguous(), y.contiguous()
    gx = torch.empty_like(y)
    if y.shape[0]:
        softmax_backward_rows(g, y, gx, grid=_grid_for(y.shape[0], 64), block=64)
    return gx


@softmax.register_fake
def _(x):
    _check_matrix(x, "softmax")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@_softmax_backward.register_fake
def _(g, y):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, g):
    (y,) = ctx.saved_tensors
    return _softmax_backward(g, y)


softmax.register_autograd(_softmax_grad, setup_context=_softmax_setup)


def _check_target(x, t):
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.shape != (x.shape[0],):
        raise ValueError(f"labops_rtc.cross_entropy: target must be an int64 tensor of shape ({x.shape[0]},), "
                         f"got {getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))}")
    if t.device != x.device:
        raise ValueError(f"labops_rtc.cross_entropy: target must be on the device of logits ({x.device}), "
                         f"got {t.device}")


@torch.library.custom_op("labops_rtc::cross_entropy", mutates_args=())
def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each row (``reduction="none"``) by runtime kernels; take ``.mean()`` yourself.

    Shapes: logits (N, C) float32/float64, target (N,) int64 in [0, C) -> loss (N,). The backward is the
    write-up's "softmax - onehot", times each row's incoming gradient (which carries the 1/N of a mean).

    Example::

        >>> cross_entropy(torch.randn(8, 5), torch.randint(0, 5, (8,))).shape
        torch.Size([8])
    """
    _check_matrix(logits, "cross_entropy", "logits")
    _check_target(logits, target)
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= logits.shape[1]):
        raise ValueError(f"labops_rtc.cross_entropy: target must hold class indices in [0, {logits.shape[1]}), "
                         f"got values in [{int(target.min())}, {int(target.max())}]")
    logits, target = logits.contiguous(), target.contiguous()
    loss = logits.new_empty(logits.shape[0])
    if logits.shape[0]:
        cross_entropy_rows(logits, target, loss, grid=_grid_for(logits.shape[0], 64), block=64)
    return loss


@torch.library.custom_op("labops_rtc::cross_entropy_backward", mutates_args=())
def _cross_entropy_backward(g: torch.Tensor, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    y = _run_softmax(logits.contiguous())
    gx = torch.empty_like(y)
    if y.numel():
        cross_entropy_backward_rows(y, target.contiguous(), g.contiguous(), gx,
                                    grid=_grid_for(y.numel(), 256), block=256)
    return gx


@cross_entropy.register_fake
def _(logits, target):
    return logits.new_empty(logits.shape[0])


@_cross_entropy_backward.register_fake
def _(g, logits, target):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _cross_entropy_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _cross_entropy_grad(ctx, g):
    logits, target = ctx.saved_tensors
    return _cross_entropy_backward(g, logits, target), None


cross_entropy.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_setup)


def _check_reorg(x, stride, op, arg):
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float64) or x.dim() != 4:
        raise ValueError(f"labops_rtc.{op}: {arg} must be a 4-D (N, C, H, W) float32/float64 tensor")
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"labops_rtc.{op}: stride must be an int >= 1, got {stride!r}")


@torch.library.custom_op("labops_rtc::reorg", mutates_args=())
def reorg(x: torch.Tensor, stride: int = 2) -> torch.Tensor:
    """YOLOv2's reorg in darknet's order, by a runtime kernel: ``labops.reorg(x, stride, "darknet")``.

    Shapes: x (N, C, H, W), C divisible by stride^2, H and W by stride -> (N, C*s^2, H/s, W/s).

    Example::

        >>> reorg(torch.randn(1, 8, 4, 6), 2).shape
        torch.Size([1, 32, 2, 3])
    """
    _check_reorg(x, stride, "reorg", "x")
    n, c, h, w = x.shape
    if h % stride or w % stride or c % (stride * stride):
        raise ValueError(f"labops_rtc.reorg: x must have C divisible by stride^2 = {stride * stride} and H, W "
                         f"divisible by stride {stride}, got {list(x.shape)}")
    y = x.new_empty(n, c * stride * stride, h // stride, w // stride)
    if y.numel():
        reorg_darknet(x.contiguous(), y, grid=_grid_for(y.numel(), 256), block=256)
    return y


@torch.library.custom_op("labops_rtc::reorg_backward", mutates_args=())
def _reorg_backward(gy: torch.Tensor, stride: int) -> torch.Tensor:
    n, c, h, w = gy.shape
    gx = gy.new_empty(n, c // (stride * stride), h * stride, w * stride)
    if gx.numel():
        reorg_darknet_backward(gy.contiguous(), gx, grid=_grid_for(gx.numel(), 256), block=256)
    return gx


@reorg.register_fake
def _(x, stride=2):
    n, c, h, w = x.shape
    return x.new_empty(n, c * stride * stride, h // stride, w // stride)


@_reorg_backward.register_fake
def _(gy, stride):
    n, c, h, w = gy.shape
    return gy.new_empty(n, c // (stride * stride), h * stride, w * stride)


def _reorg_setup(ctx, inputs, output):
    ctx.stride = inputs[1]


def _reorg_grad(ctx, gy):
    return _reorg_backward(gy, ctx.stride), None


reorg.register_autograd(_reorg_grad, setup_context=_reorg_setup)
