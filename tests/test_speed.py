"""labops.exercises.speed: on the CPU, the pure parts (the output check, the score arithmetic, the
argument rules, the side-stream flag's rule, the class leaderboard CSV, the tricks being real tricks); on a
GPU, a copy kernel written with labops.rtc scored against the copy bandwidth, and each trick caught."""

import math

import pytest
import torch

from labops import rtc, sgemm
from labops.exercises import speed

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA kernels")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")


def honest(inputs):
    return inputs * 2  # a stand-in submission for the CPU tests of the tricks


# ---- the output check ----

def test_close_accepts_equal_outputs_and_tuples():
    x = torch.randn(10, dtype=torch.float64)
    assert speed.close()(x.float(), x) is None
    assert speed.close()((x, x + 1), (x, x + 1)) is None


@pytest.mark.parametrize("outputs, expected, words", [
    (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.5]), "1 of 3 elements differ"),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), "first at flat index 1"),
    (torch.ones(2, 3), torch.ones(3, 2), "has shape (2, 3), expected (3, 2)"),
    ((torch.ones(2),), (torch.ones(2), torch.ones(2)), "1 outputs, expected 2"),
    ([1.0, 2.0], (torch.ones(1), torch.ones(1)), "output 0 is a float, not a tensor"),
])
def test_close_names_what_differs(outputs, expected, words):
    reason = speed.close()(outputs, expected)
    assert reason is not None and words in reason


def test_close_tolerances():
    x = torch.randn(100, dtype=torch.float64) + 3
    assert speed.close(rtol=1e-3, atol=0)(x * (1 + 1e-4), x) is None
    assert speed.close(rtol=1e-5, atol=0)(x * (1 + 1e-4), x) is not None
    with pytest.raises(ValueError, match="rtol must be a finite number >= 0"):
        speed.close(rtol=-1)


# ---- scores ----

def test_memory_score_is_roof_time_over_time():
    assert speed.memory_score(1e-3, 10**9, 2e12) == pytest.approx(50.0)
    assert speed.memory_score(2.5e-4, 10**9, 2e12) == pytest.approx(200.0)  # faster than the copy


def test_gemm_score_is_cublas_time_over_time():
    assert speed.gemm_score(4e-3, 1024, 1024, 1024, cublas_s=1e-3) == pytest.approx(25.0)
    assert speed.gemm_score(1e-3, 8, 16, 32, cublas_s=1e-3) == pytest.approx(100.0)


@pytest.mark.parametrize("call, error, words", [
    (lambda: speed.memory_score(0.0, 10, 1e9), ValueError, "seconds must be a finite number > 0"),
    (lambda: speed.memory_score(math.nan, 10, 1e9), ValueError, "seconds must be a finite number > 0"),
    (lambda: speed.memory_score(1.0, 0, 1e9), ValueError, "min_bytes must be >= 1"),
    (lambda: speed.memory_score(1.0, 10.0, 1e9), TypeError, "min_bytes must be an int"),
    (lambda: speed.memory_score(1.0, 10, -1e9), ValueError, "bandwidth must be a finite number > 0"),
    (lambda: speed.memory_score("1", 10, 1e9), TypeError, "seconds must be a number"),
    (lambda: speed.gemm_score(1.0, 0, 1, 1, cublas_s=1.0), ValueError, "m must be >= 1"),
    (lambda: speed.gemm_score(1.0, 1, True, 1, cublas_s=1.0), TypeError, "n must be an int"),
    (lambda: speed.gemm_score(1.0, 1, 1, 1, cublas_s=0.0), ValueError, "cublas_s must be a finite number > 0"),
])
def test_score_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ---- time_submission's arguments, and what needs CUDA ----

def _make(g):
    return torch.randn(8, generator=g, device=g.device)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(run=None), TypeError, "run must be callable"),
    (dict(make_inputs=3), TypeError, "make_inputs must be callable"),
    (dict(check="close"), TypeError, "check must be callable or None"),
    (dict(min_total_s=-0.1), ValueError, "min_total_s must be a finite number >= 0"),
    (dict(min_total_s=math.inf), ValueError, "min_total_s must be a finite number >= 0"),
    (dict(min_reps=0), ValueError, "min_reps must be >= 1"),
    (dict(min_reps=2.0), TypeError, "min_reps must be an int"),
    (dict(min_reps=20, max_reps=10), ValueError, "max_reps must be >= 20"),
    (dict(warmup=-1), ValueError, "warmup must be >= 0"),
    (dict(pool_size=1), ValueError, "pool_size must be >= 2"),
    (dict(device="cpu"), ValueError, "device must be a CUDA device"),
])
def test_time_submission_arguments(kwargs, error, words):
    args = dict(run=honest, make_inputs=_make, reference=honest)
    args.update(kwargs)
    run, make_inputs, reference = args.pop("run"), args.pop("make_inputs"), args.pop("reference")
    with pytest.raises(error, match=words):
        speed.time_submission(run, make_inputs, reference, **args)


@no_cuda
@pytest.mark.parametrize("call", [
    lambda: speed.time_submission(honest, _make, honest),
    lambda: speed.copy_bandwidth(),
    lambda: speed.cublas_sgemm_time(64, 64, 64),
    lambda: speed.gemm_score(1e-3, 64, 64, 64),
])
def test_needs_cuda(call):
    with pytest.raises(RuntimeError, match=r"needs a CUDA GPU \(torch.cuda.is_available\(\) is False\)"):
        call()


def test_copy_bandwidth_arguments():
    with pytest.raises(ValueError, match="nbytes must be a multiple of 4"):
        speed.copy_bandwidth(1022)
    with pytest.raises(ValueError, match="nbytes must be >= 4"):
        speed.copy_bandwidth(0)


# ---- the side-stream flag's rule (times in seconds, per rep) ----

def test_side_stream_flag():
    ran_on_own_stream = speed._timing([200e-6] * 5, [190e-6] * 5, passed=True, reasons=[])
    assert ran_on_own_stream.flags == () and ran_on_own_stream.median_s == pytest.approx(200e-6)
    left_running = speed._timing([200e-6] * 5, [20e-6] * 5, passed=True, reasons=[])
    assert left_running.flags == (speed.SIDE_STREAM,) and "180 us of each 200 us" in left_running.reasons[0]
    assert speed.verdict(ran_on_own_stream) == "ok" and speed.verdict(left_running) == "flagged"
    assert speed.verdict(speed._timing([], [], passed=False, reasons=["x"])) == "wrong"


# ---- the tricks work against a harness that repeats its inputs (so catching them means something) ----

def test_the_tricks_skip_work_on_repeated_inputs():
    x = torch.randn(64)
    by_pointer = speed.CachesByPointer(honest)
    first = by_pointer(x)
    x.copy_(torch.randn(64))  # new values, same address
    assert by_pointer(x) is first and by_pointer.hits == 1  # stale
    by_checksum = speed.SkipsRepeatedInput(honest)
    by_checksum(x)
    by_checksum(x.clone())  # same values elsewhere
    assert by_checksum.skips == 1
    by_checksum(torch.randn(64))
    assert by_checksum.skips == 1


# ---- the class leaderboard ----

ROWS = [
    {"student_id": "bo", "exercise_id": "gelu", "percent_of_roof": 71.25, "time_over_native": 1.125, "verdict": "ok"},
    {"student_id": "al", "exercise_id": "sgemm", "percent_of_roof": 12.5, "time_over_native": 8.0, "verdict": "ok"},
    {"student_id": "cy", "exercise_id": "gelu", "percent_of_roof": 88.5, "verdict": "flagged"},
    {"student_id": "al", "exercise_id": "gelu", "percent_of_roof": None, "time_over_native": None, "verdict": "wrong"},
    {"student_id": "di", "exercise_id": "gelu", "percent_of_roof": 71.25, "time_over_native": 1.0, "verdict": "ok"},
]


def test_leaderboard_round_trip_and_order(tmp_path):
    path = speed.write_leaderboard(ROWS, tmp_path / "speed.csv")
    rows = speed.read_leaderboard(path)
    assert [(r["exercise_id"], r["student_id"]) for r in rows] == [
        ("gelu", "cy"), ("gelu", "bo"), ("gelu", "di"), ("gelu", "al"), ("sgemm", "al")]  # ties: by student
    assert rows[0] == {"student_id": "cy", "exercise_id": "gelu", "percent_of_roof": 88.5, "time_over_native": None,
                       "verdict": "flagged"}
    assert rows[1]["percent_of_roof"] == 71.25 and rows[1]["time_over_native"] == 1.125
    assert rows[3]["percent_of_roof"] is None
    lines = path.read_text().splitlines()
    assert lines[0] == "student_id,exercise_id,percent_of_roof,time_over_native,verdict"
    assert lines[1] == "cy,gelu,88.50,,flagged"


def test_leaderboard_is_the_same_file_whatever_the_row_order(tmp_path):
    a = speed.write_leaderboard(ROWS, tmp_path / "a.csv").read_bytes()
    b = speed.write_leaderboard(list(reversed(ROWS)), tmp_path / "b.csv").read_bytes()
    assert a == b


@pytest.mark.parametrize("change, error, words", [
    ({"verdict": "great"}, ValueError, "verdict must be one of ok, flagged, wrong, error"),
    ({"percent_of_roof": -1.0}, ValueError, "percent_of_roof"),
    ({"time_over_native": 0.0}, ValueError, "time_over_native"),
    ({"student_id": ""}, ValueError, "student_id must be a non-empty one-line str"),
    ({"exercise_id": 7}, ValueError, "exercise_id must be a non-empty one-line str"),
    ({"score": 3}, ValueError, r"unknown \['score'\]"),
])
def test_leaderboard_row_rules(tmp_path, change, error, words):
    bad = dict(ROWS[0], **change)
    with pytest.raises(error, match=words):
        speed.write_leaderboard([ROWS[1], bad], tmp_path / "x.csv")


def test_leaderboard_rejects_missing_keys_duplicates_and_non_dicts(tmp_path):
    with pytest.raises(ValueError, match=r"missing \['verdict'\]"):
        speed.write_leaderboard([{k: v for k, v in ROWS[0].items() if k != "verdict"}], tmp_path / "x.csv")
    with pytest.raises(ValueError, match="two rows for student 'bo' and exercise 'gelu'"):
        speed.write_leaderboard([ROWS[0], dict(ROWS[0])], tmp_path / "x.csv")
    with pytest.raises(TypeError, match=r"rows\[0\] must be a dict"):
        speed.write_leaderboard([("bo", "gelu")], tmp_path / "x.csv")


def test_read_leaderboard_checks_the_header(tmp_path):
    path = tmp_path / "grades.csv"
    path.write_text("assignment,student_id,score\nhw1,bo,3\n")
    with pytest.raises(ValueError, match="must start with the header"):
        speed.read_leaderboard(path)


# ---- on a GPU ----

N = 2**26  # 256 MiB of float32: far larger than L2, as copy_bandwidth's default


COPY = rtc.kernel("copy", ["x"], ["y"],
                  "long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < x_numel) y[i] = x[i];")


def _copy_run(x):
    y = torch.empty_like(x)
    COPY(x, y, grid=(x.numel() + 255) // 256, block=256)
    return y


def _inputs(g):
    return torch.randn(N, generator=g, device=g.device)


def _same(x):
    return x


@needs_cuda
def test_copy_kernel_scores_near_the_copy_bandwidth():
    bandwidth = speed.copy_bandwidth()  # the roof's launch is hidden, and so is this kernel's (ours, too)
    timing = speed.time_submission(_copy_run, _inputs, _same, launch_is_ours=True)
    assert timing.passed and timing.flags == () and timing.reps >= 10, timing.reasons
    assert sum(timing.times_s) >= 0.1
    percent = speed.memory_score(timing.median_s, 2 * N * 4, bandwidth)
    assert 50 <= percent <= 120, (percent, bandwidth, timing.median_s)


@needs_cuda
def test_a_wrong_kernel_fails_with_a_reason():
    timing = speed.time_submission(lambda x: _copy_run(x) + 1e-3, _inputs, _same)
    assert not timing.passed and timing.reps == 0
    assert timing.reasons[0].startswith("warm-up rep 1: output 0: 67108864 of 67108864 elements differ")
    assert speed.verdict(timing) == "wrong"


@needs_cuda
def test_caught_cache_by_input_pointer():
    cheat = speed.CachesByPointer(_copy_run)
    timing = speed.time_submission(cheat, _inputs, _same, pool_size=3, warmup=2)
    assert cheat.hits >= 1  # the trick fired: an address came back ...
    assert not timing.passed and "differ from the reference" in timing.reasons[0]  # ... with new values
    assert timing.reasons[0].startswith("timed rep 2:")  # rep 4 overall: the first to reuse a slot


@needs_cuda
def test_caught_skip_when_input_looks_repeated():
    cheat = speed.SkipsRepeatedInput(_copy_run)
    timing = speed.time_submission(cheat, _inputs, _same)
    # Fresh values every rep: the trick never fires, or its stale answer fails the check.
    assert cheat.skips == 0 or not timing.passed
    assert timing.passed and timing.reps >= 10


@needs_cuda
def test_caught_work_left_on_a_side_stream():
    fair = speed.time_submission(_copy_run, _inputs, _same)
    cheat = speed.time_submission(speed.LeavesWorkOnSideStream(_copy_run), _inputs, _same)
    assert fair.passed and fair.flags == () and cheat.passed
    # The current stream's events alone are fooled: they see well under half of the cheat's own rep. (Compared
    # with the fair run's median instead, this failed 1 time in 6 on an H100: two runs' medians differ by 30 %.)
    assert cheat.stream_median_s < 0.5 * cheat.median_s
    assert cheat.median_s >= 0.8 * fair.median_s  # timed in full
    assert speed.SIDE_STREAM in cheat.flags and speed.verdict(cheat) == "flagged"


@needs_cuda
def test_naive_sgemm_against_cublas_and_tf32_left_as_it_was():
    m = n = k = 512

    def run(ab):
        return sgemm.multiply(ab[0], ab[1], "naive")

    def make(g):
        return torch.randn(m, k, generator=g, device=g.device), torch.randn(k, n, generator=g, device=g.device)

    before = torch.get_float32_matmul_precision()
    cublas_s = speed.cublas_sgemm_time(m, n, k)
    assert torch.get_float32_matmul_precision() == before
    timing = speed.time_submission(run, make, lambda ab: ab[0].double() @ ab[1].double(),
                                   check=speed.close(rtol=1e-4, atol=1e-5 * k))
    assert timing.passed, timing.reasons
    assert 0 < speed.gemm_score(timing.median_s, m, n, k, cublas_s=cublas_s) < 100
