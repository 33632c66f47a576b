"""Print part of a C++/CUDA source file, read from disk, so a notebook never drifts from ``csrc/``.

The notebooks show kernels with ``show_source`` the way they show Python with
``inspect.getsource``: the lines printed are the lines compiled.
"""

from __future__ import annotations

__all__ = ["show_source"]


def show_source(relpath, start: str, end: str | None = None, after: int = 0, before: int = 0) -> None:
    """Print ``csrc/<relpath>`` from the line containing ``start`` to the next line containing ``end``.

    ``before`` lines above the ``start`` line and ``after`` lines below the
    ``end`` line are printed too; without ``end``, printing runs to the end of
    the file. The first line printed names the file and the line numbers
    (counted from 1), as a C++ comment. ``start`` and ``end`` are plain
    substrings, matched case-sensitively; the first line containing ``start``
    is used, and the first line at or after it containing ``end``.

    >>> show_source("common/loop.h", "#define LABOPS_KERNEL_LOOP", "i < (n)")  # doctest: +ELLIPSIS
    // csrc/common/loop.h, lines ...
    #define LABOPS_KERNEL_LOOP(i, n)                                                   \\
    ...
           i < (n); i += labops_loop_stride_##i)

    A text not in the file is an error that says which one:

    >>> show_source("common/loop.h", "no such line")
    Traceback (most recent call last):
    ...
    ValueError: show_source: start 'no such line' is in no line of csrc/common/loop.h
    """
    from labops import _build  # csrc/ is found the way the build finds it ($LABOPS_CSRC or the checkout)

    lines = (_build.csrc_dir() / relpath).read_text().splitlines()
    found = next((i for i, line in enumerate(lines) if start in line), None)
    if found is None:
        raise ValueError(f"show_source: start {start!r} is in no line of csrc/{relpath}")
    first = max(found - before, 0)
    if end is None:
        last = len(lines) - 1
    else:
        stop = next((i for i in range(found, len(lines)) if end in lines[i]), None)
        if stop is None:
            raise ValueError(f"show_source: end {end!r} is in no line of csrc/{relpath} at or after line {found + 1}")
        last = min(stop + after, len(lines) - 1)
    print(f"// csrc/{relpath}, lines {first + 1}-{last + 1}")
    print("\n".join(lines[first:last + 1]))
