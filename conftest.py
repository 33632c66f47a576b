# Doctests (pytest --doctest-modules over labops/, see pyproject.toml): modules that must not be
# imported as a test: __main__ files run the CLI when imported, and docs/conf.py builds the site.
collect_ignore = ["labops/__main__.py", "labops/bench/__main__.py", "docs/conf.py"]
# labops/triton/ needs the `triton` extra (Linux only): where Triton is missing its modules cannot be imported,
# so their docstring examples are not collected (tests/test_triton.py skips itself there).
import importlib.util  # noqa: E402

if importlib.util.find_spec("triton") is None:
    collect_ignore.append("labops/triton")

# Inductor caches compiled graphs on disk (default /tmp/torchinductor_<user>) under a key made from the forward
# graph, so a backward cached before a labops rebuild outlives a changed C++ autograd formula: after
# conv2d_mm's backward became one op, notebook 10 still compiled the old one from a machine's cache. Every
# test run, and the notebooks nbval starts from it, get an empty cache of their own, removed when the run ends.
import atexit  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:  # unset: not the caller's choice, nor a parent run's
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _inductor_cache = tempfile.mkdtemp(prefix="labops-inductor-")
    atexit.register(shutil.rmtree, _inductor_cache, ignore_errors=True)
