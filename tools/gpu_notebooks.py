"""Run every notebook's code cells as a plain script (the GPU machine has no Jupyter).

Usage: python3 tools/gpu_notebooks.py [notebooks/NN_*.ipynb ...]
Magics (%...) and shell lines (!...) are dropped; IPython.display.display is
stubbed to print the object's repr. Prints one line per notebook: seconds,
number of cells, and the first failing cell with its traceback.
"""
import json
import linecache
import os
import sys
import time
import traceback
import types
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

try:
    import IPython.display  # noqa: F401
except ImportError:  # the GPU machine: a stub that prints what a cell displays
    display_module = types.ModuleType("IPython.display")
    display_module.display = lambda *objects, **_: print(*map(repr, objects))
    display_module.Image = lambda data=None, **_: f"<PNG image, {len(data or b'')} bytes>"  # viz.explore
    ipython = types.ModuleType("IPython")
    ipython.display, ipython.version_info = display_module, (9, 0)
    ipython.get_ipython = lambda: None  # matplotlib asks whether it runs inside IPython
    sys.modules["IPython"], sys.modules["IPython.display"] = ipython, display_module

root = Path(__file__).resolve().parent.parent
# labops is not pip-installed on the GPU machine; the notebooks import it from this checkout.
sys.path.insert(0, str(root))
paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((root / "notebooks").glob("*.ipynb"))
failures = 0
for path in paths:
    notebook = json.loads(path.read_text())  # nbformat 4; no nbformat package there
    os.chdir(path.parent)
    namespace = {"__name__": "__main__"}
    start = time.perf_counter()
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    status = "ok"
    for number, cell in enumerate(cells, 1):
        source = "\n".join(
            line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        print(f"--- {path.name} cell {number}", flush=True)
        filename = f"<{path.name}[{number}]>"
        # As IPython does: the cell's source in linecache, so that inspect.getsource (which @triton.jit calls
        # on a kernel defined in a cell) finds it.
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        try:
            exec(compile(source, filename, "exec"), namespace)
        except Exception:
            status = f"FAILED at code cell {number}:\n{traceback.format_exc()}"
            failures += 1
            break
        finally:
            plt.close("all")
    print(f"=== {path.name}: {time.perf_counter() - start:.1f} s, {len(cells)} code cells, {status}", flush=True)
sys.exit(1 if failures else 0)
