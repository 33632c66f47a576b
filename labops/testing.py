"""Helpers for checking layers, in the style of CS231n.

``rel_error`` is the course's default error measure (relative to the
oracle's largest value; where an output has values near zero next to large
ones, notebook 02 explains why a max absolute error is printed instead);
``numerical_gradient`` is the central-difference check a learner writes by
hand before trusting ``torch.autograd.gradcheck``; ``onnx_resize`` runs ONNX's
Resize in onnxruntime, an oracle for upsampling that is not PyTorch.
"""

import numpy as np
import torch

# What rel_error should print for a correct implementation, by dtype.
EXPECTED_REL_ERROR = {
    torch.float64: 1e-12,
    torch.float32: 1e-6,
    torch.bfloat16: 1e-2,
    torch.float16: 1e-3,
}


def rel_error(x, y) -> float:
    """max |x - y| / max(1e-8, |x| + |y|), elementwise, as in CS231n.

    Args:
        x, y: tensors or arrays of the same shape (compared in float64).

    Returns:
        float; about 1e-12 or less for two float64 results that agree, 1e-6 for float32.

    Example:
        >>> f"{rel_error(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 4e-6])):.1e}"
        '1.0e-06'
    """
    x = np.asarray(x.detach().cpu().double() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    y = np.asarray(y.detach().cpu().double() if isinstance(y, torch.Tensor) else y, dtype=np.float64)
    if x.size == 0:
        return 0.0
    return float(np.max(np.abs(x - y) / np.maximum(1e-8, np.abs(x) + np.abs(y))))


def numerical_gradient(f, x, grad_output, h=1e-5):
    """Central-difference gradient of sum(f(x) * grad_output) w.r.t. x.

    Works on float64 NumPy arrays or tensors; perturbs one element at a time,
    so it costs 2 * x.size evaluations of f: use tiny inputs.

    Args:
        f: a function of one array/tensor, returning an array/tensor.
        x: the point (any shape).
        grad_output: dE/df(x), f(x)'s shape.
        h: the step.

    Returns:
        dE/dx, x's shape (a tensor if x is one).

    Example:
        >>> numerical_gradient(np.tanh, np.array([0.0, 1.0]), np.ones(2)).round(6)
        array([1.    , 0.419974])
    """
    is_tensor = isinstance(x, torch.Tensor)
    xs = x.detach().double().clone() if is_tensor else np.array(x, dtype=np.float64)
    g = grad_output.detach().double() if isinstance(grad_output, torch.Tensor) else np.asarray(grad_output, dtype=np.float64)
    grad = torch.zeros_like(xs) if is_tensor else np.zeros_like(xs)
    flat_x, flat_grad = xs.reshape(-1), grad.reshape(-1)
    for i in range(flat_x.shape[0]):
        old = float(flat_x[i])
        flat_x[i] = old + h
        plus = (f(xs) * g).sum()
        flat_x[i] = old - h
        minus = (f(xs) * g).sum()
        flat_x[i] = old
        flat_grad[i] = float(plus - minus) / (2 * h)
    return grad


def check_close(name, actual, expected, dtype=None) -> float:
    """Print and return rel_error next to the error expected for the dtype.

    Args:
        name: what is compared (printed first).
        actual, expected: tensors or arrays of the same shape.
        dtype: the dtype whose expected error is printed (default: actual's).

    Returns:
        the rel_error.

    Example:
        >>> err = check_close("tanh", torch.tanh(torch.ones(3)), torch.tanh(torch.ones(3, dtype=torch.float64)))
        tanh: rel_error ... (expected about 1e-06 or less)
    """
    err = rel_error(actual, expected)
    dtype = dtype or (actual.dtype if isinstance(actual, torch.Tensor) else torch.float64)
    print(f"{name}: rel_error {err:.1e} (expected about {EXPECTED_REL_ERROR.get(dtype, 1e-6):.0e} or less)")
    return err


def onnx_resize(x: torch.Tensor, size, coordinate_mode: str) -> torch.Tensor:
    """Bilinear resize of ``x`` (N, C, H, W) to ``size`` (H', W') by ONNX's Resize, run in onnxruntime.

    One Resize node (opset 13, ``mode="linear"``, N and C unchanged, so bilinear in H and W) with
    ``coordinate_transformation_mode=coordinate_mode``: ``"half_pixel"``, ``"align_corners"``, ``"asymmetric"``
    and the others ONNX names. Needs the ``onnx`` and ``onnxruntime`` packages (the ``test`` extra).

    Returns:
        a float32 tensor of shape (N, C, H', W').
    """
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    sizes = [int(x.shape[0]), int(x.shape[1]), *(int(s) for s in size)]
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode=coordinate_mode)
    graph = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, sizes)],
        initializer=[helper.make_tensor("sizes", TensorProto.INT64, [4], sizes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7  # the IR version that came with opset 13, so older onnxruntime releases load it too
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"x": x.detach().cpu().float().numpy()})[0])
