"""The argument vocabulary of labops's Python side, written once.

Pure Python (it does not load the compiled library), so ``labops.viz`` and
the references can use it too. The Python faces in ``labops.ops`` turn what
the operator schema cannot take into what it can (``pair``: an int or an
(h, w) pair -> ``[h, w]``) and raise Python's ``TypeError`` for a value of
the wrong type. Every other rule is the C++ entry's (``csrc/<layer>/entry.h``),
which fake tensors run too, as the op's Meta kernel.

Messages are the C++ ones (``csrc/common/check.h``): dtypes by their C++
names (``Float``, ``Long``), shapes as ``[2, 3]``.

Example:
    >>> pair(3, "im2col", "stride")
    [3, 3]
    >>> pair((1, 0), "im2col", "stride", min=1)
    Traceback (most recent call last):
    ...
    ValueError: labops.im2col: stride must be >= 1, got [1, 0]
    >>> conv_output_size(8, kernel=3, stride=2, padding=1, dilation=1)
    4
"""

import torch

# c10::toString(ScalarType): how the C++ checks name a dtype.
_CPP_DTYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}


def dtype_name(dtype: torch.dtype) -> str:
    """The C++ name of a dtype, as the compiled ops' messages print it: ``torch.float32`` -> ``"Float"``."""
    return _CPP_DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def shape_str(sizes) -> str:
    """``[2, 3, 4]``: a shape as the C++ messages print it (``shape_str`` in csrc/common/check.h)."""
    return "[" + ", ".join(str(int(s)) for s in sizes) + "]"


def _is_int(v) -> bool:
    # torch.SymInt: a size under torch.compile's dynamic shapes. bool is an int to Python, not to us.
    return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)


def pair(value, op: str, arg: str, min: int | None = None) -> list:
    """An int or a pair of ints -> ``[a, b]`` (a list: what an ``int[2]`` schema argument takes).

    ``min``, when given, is the smallest allowed entry (1 for stride, dilation and kernel_size;
    0 for padding). TypeError for anything but ints (bool included); ValueError for a length
    other than 2 or an entry below ``min``.
    """
    if type(value) is int or _is_int(value):  # `type(...) is int` first: the common case, and the cheapest test
        items = [value, value]
    else:
        try:
            items = list(value)
        except TypeError:
            raise TypeError(f"labops.{op}: {arg} must be an int or a pair of ints, got {value!r}") from None
        if not all(_is_int(v) for v in items):
            raise TypeError(f"labops.{op}: {arg} must be an int or a pair of ints, got {value!r}")
        if len(items) != 2:
            raise ValueError(f"labops.{op}: {arg} must have 2 entries (h, w), got {len(items)}")
    if min is not None and (items[0] < min or items[1] < min):
        raise ValueError(f"labops.{op}: {arg} must be >= {min}, got {shape_str(items)}")
    return items


def conv_output_size(size, kernel, stride, padding, dilation):
    """Output positions of a window sliding along one axis; 0 when the dilated kernel does not fit.

    ``(size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1``, the rule of ``F.conv2d``
    (and ``output_size`` in csrc/common/conv_index.h).
    """
    room = size + 2 * padding - dilation * (kernel - 1) - 1
    return 0 if room < 0 else room // stride + 1


def check_tensor(t, op: str, arg: str) -> None:
    """TypeError unless ``t`` is a tensor (what a Python face checks before calling the op)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"labops.{op}: {arg} must be a torch.Tensor, got {type(t).__name__}")


def check_floating(t, op: str, arg: str) -> None:
    """``t`` is a floating-point tensor (``check_floating`` in csrc/common/check.h)."""
    check_tensor(t, op, arg)
    if not t.dtype.is_floating_point:
        raise ValueError(
            f"labops.{op}: {arg} must be a floating-point tensor (float32, float64, float16 or "
            f"bfloat16), got {dtype_name(t.dtype)}"
        )


def check_choice(value, choices, op: str, arg: str) -> None:
    """``value`` is one of ``choices``, checked by a Python face before the call.

    Example:
        >>> check_choice("erf", ("none", "tanh"), "gelu", "approximate")
        Traceback (most recent call last):
        ...
        ValueError: labops.gelu: approximate must be one of 'none', 'tanh', got 'erf'
    """
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"labops.{op}: {arg} must be one of {options}, got {value!r}")


def check_module_choice(value, choices, module: str, arg: str) -> None:
    """A ``labops.nn`` module's constructor argument is one of ``choices``: checked when the module is built,
    so a bad one fails there rather than at its first forward. The message names the module and prints
    the tuple, as the modules always have.

    Example:
        >>> check_module_choice("erf", ("none", "tanh"), "GELU", "approximate")
        Traceback (most recent call last):
        ...
        ValueError: GELU: approximate must be one of ('none', 'tanh'), got 'erf'
    """
    if value not in choices:
        raise ValueError(f"{module}: {arg} must be one of {choices}, got {value!r}")
