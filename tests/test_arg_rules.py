"""Every argument rule of every op, fed to the eager op and to its fake: the same exception, word for word.

The rules are written once, in C++: csrc/<layer>/entry.h's rule functions run first in every eager call
and are the op's Meta kernel, which fake tensors run under torch.compile (registered in
csrc/<layer>/register.cpp). This file shows the two paths agree: each bad case goes to
``torch.ops.labops.<op>`` with real CPU tensors and with fake ones (``FakeTensorMode``), and both must
raise the same type with the same message. Layers that still have a Python fake are held to it the same way.
"""

import re
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import labops.ops  # noqa: F401  (builds the ops the first time, and loads them)

L = torch.ops.labops
ROOT = Path(__file__).resolve().parents[1]

# The pair messages of depthwise ("positive", "non-negative") and conv2d_mm ("2 values (h, w)")
# become the canonical ones on the conv branch; the fakes already say the canonical words.
def t(*shape, dtype=torch.float32):
    """A CPU tensor of `shape` (t(()) is 0-d); integer dtypes hold zeros."""
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
    return torch.randn(shape).to(dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype)


def long(*shape, high=3):
    return torch.randint(0, high, shape)


ONE, ZERO = [1, 1], [0, 0]
X, W, G = t(2, 3, 8, 8), t(6, 1, 3, 3), t(2, 6, 8, 8)  # depthwise: multiplier 2, padding 1
CX, CW, CG = t(2, 3, 6, 6), t(4, 3, 3, 3), t(2, 4, 4, 4)  # conv2d_mm: 3x3, no padding
LOGITS, TARGET = t(4, 3), long(4)
BX, BC = t(2, 3, 4, 4), t(3)  # batch_norm: 3 channels, and a per-channel vector
BG, BS = t(2, 3, 4, 4), t(3).abs()  # its grad_output, and a saved statistic (float32 for a float32 x)

# (op, id, args): each breaks one rule of the op's C++ checks.
CASES = [
    # ---- activation ----
    ("tanh", "integer x", (t(4, dtype=torch.int64),)),
    ("tanh_backward", "integer output", (t(4), t(4, dtype=torch.int32))),
    ("tanh_backward", "grad shape", (t(5), t(4))),
    ("tanh_backward", "grad dtype", (t(4, dtype=torch.float64), t(4))),
    ("gelu", "integer x", (t(4, dtype=torch.bool), "none")),
    ("gelu", "approximate", (t(4), "erf")),
    ("gelu_backward", "integer x", (t(4), t(4, dtype=torch.int64), "none")),
    ("gelu_backward", "grad shape", (t(3), t(4), "tanh")),
    ("gelu_backward", "grad dtype", (t(4, dtype=torch.float64), t(4), "tanh")),
    ("gelu_backward", "approximate", (t(4), t(4), "Tanh")),
    # ---- pooling ----
    ("global_avg_pool2d", "integer x", (t(2, 3, 4, 4, dtype=torch.int64),)),
    ("global_avg_pool2d", "2-D x", (t(4, 4),)),
    ("global_avg_pool2d", "5-D x", (t(1, 2, 3, 4, 5),)),
    ("global_avg_pool2d_backward", "integer grad", (t(2, 3, 1, 1, dtype=torch.int32), [2, 3, 5, 5])),
    ("global_avg_pool2d_backward", "input_size rank", (t(2, 3, 1, 1), [2, 3])),
    ("global_avg_pool2d_backward", "negative input_size", (t(3, 1, 1), [3, -1, 2])),
    ("global_avg_pool2d_backward", "grad shape", (t(2, 3, 2, 1), [2, 3, 5, 5])),
    # ---- depthwise ----
    ("depthwise_conv2d", "integer x", (t(2, 3, 8, 8, dtype=torch.int64), W, None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "weight dtype", (X, t(6, 1, 3, 3, dtype=torch.float64), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "3-D x", (t(3, 8, 8), W, None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "3-D weight", (X, t(6, 3, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "stride 3 entries", (X, W, None, [1, 1, 1], ONE, ONE)),
    ("depthwise_conv2d", "padding 1 entry", (X, W, None, ONE, [1], ONE)),
    ("depthwise_conv2d", "no channels", (t(2, 0, 8, 8), W, None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "weight.size(1)", (X, t(6, 2, 3, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "C_out not a multiple", (X, t(5, 1, 3, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "empty kernel", (X, t(6, 1, 0, 3), None, ONE, ONE, ONE)),
    ("depthwise_conv2d", "stride 0", (X, W, None, [0, 1], ONE, ONE)),
    ("depthwise_conv2d", "padding -1", (X, W, None, ONE, [1, -1], ONE)),
    ("depthwise_conv2d", "dilation 0", (X, W, None, ONE, ONE, [0, 1])),
    ("depthwise_conv2d", "kernel too big", (t(2, 3, 2, 8), W, None, ONE, ZERO, ONE)),
    ("depthwise_conv2d", "dilated kernel too big", (t(2, 3, 4, 8), W, None, ONE, ZERO, [3, 3])),
    ("depthwise_conv2d", "bias dtype", (X, W, t(6, dtype=torch.float16), ONE, ONE, ONE)),
    ("depthwise_conv2d", "bias shape", (X, W, t(3), ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "integer grad", (G.long(), W, [2, 3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "weight dtype", (G, W.double(), [2, 3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "3-D input_size", (G, W, [3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "negative input_size", (G, W, [2, 3, -8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_input", "grad shape", (G[:, :, 1:], W, [2, 3, 8, 8], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_weight", "x dtype", (G, X.double(), [6, 1, 3, 3], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_weight", "weight_size", (G, X, [5, 1, 3, 3], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_weight", "grad shape", (G[:1], X, [6, 1, 3, 3], ONE, ONE, ONE)),
    ("depthwise_conv2d_backward_bias", "integer grad", (G.int(),)),
    ("depthwise_conv2d_backward_bias", "3-D grad", (G[0],)),
    ("depthwise_conv2d_acc_grad_parameters", "grad_weight dtype", (G, X, W.double(), None, ONE, ONE, ONE, 1.0)),
    ("depthwise_conv2d_acc_grad_parameters", "grad_weight shape", (G, X, W[:5], None, ONE, ONE, ONE, 1.0)),
    ("depthwise_conv2d_acc_grad_parameters", "grad shape", (G[:1], X, W, None, ONE, ONE, ONE, 1.0)),
    ("depthwise_conv2d_acc_grad_parameters", "grad_bias shape", (G, X, W, torch.zeros(5), ONE, ONE, ONE, 1.0)),
    # ---- im2col / col2im / conv2d_mm ----
    ("im2col", "integer x", (CX.long(), [3, 3], ONE, ZERO, ONE)),
    ("im2col", "2-D x", (CX[0, 0], [3, 3], ONE, ZERO, ONE)),
    ("im2col", "kernel_size 3 entries", (CX, [3, 3, 3], ONE, ZERO, ONE)),
    ("im2col", "kernel_size 0", (CX, [0, 3], ONE, ZERO, ONE)),
    ("im2col", "stride 0", (CX, [3, 3], [1, 0], ZERO, ONE)),
    ("im2col", "dilation 0", (CX, [3, 3], ONE, ZERO, [0, 1])),
    ("im2col", "padding -1", (CX, [3, 3], ONE, [-1, 0], ONE)),
    ("im2col", "kernel too big", (CX, [7, 1], ONE, ZERO, ONE)),
    ("col2im", "integer cols", (t(2, 27, 16).long(), [6, 6], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "4-D cols", (t(1, 2, 27, 16), [6, 6], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "stride 0", (t(2, 27, 16), [6, 6], [3, 3], [0, 0], ZERO, ONE)),
    ("col2im", "output_size 3 entries", (t(2, 27, 16), [6, 6, 1], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "output_size 0", (t(2, 27, 16), [0, 6], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "rows not divisible", (t(2, 27, 16), [6, 6], [2, 2], ONE, ZERO, ONE)),
    ("col2im", "kernel too big", (t(2, 27, 16), [2, 2], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "block count", (t(2, 27, 16), [7, 7], [3, 3], ONE, ZERO, ONE)),
    ("col2im", "block count 2-D", (t(27, 16), [7, 7], [3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm", "integer x", (CX.long(), CW, None, ONE, ZERO, ONE)),
    ("conv2d_mm", "2-D x", (CX[0, 0], CW, None, ONE, ZERO, ONE)),
    ("conv2d_mm", "integer weight", (CX, CW.long(), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "2-D weight", (CX, t(4, 27), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "in_channels", (CX, t(4, 2, 3, 3), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "empty kernel", (CX, t(4, 3, 0, 3), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "stride 0", (CX, CW, None, [0, 1], ZERO, ONE)),
    ("conv2d_mm", "stride 1 entry", (CX, CW, None, [1], ZERO, ONE)),
    ("conv2d_mm", "padding -1", (CX, CW, None, ONE, [0, -1], ONE)),
    ("conv2d_mm", "dilation 0", (CX, CW, None, ONE, ZERO, [1, 0])),
    ("conv2d_mm", "kernel too big", (CX, t(4, 3, 7, 3), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "dilated kernel too big", (CX, CW, None, ONE, ONE, [4, 4])),
    ("conv2d_mm", "weight dtype", (CX, CW.double(), None, ONE, ZERO, ONE)),
    ("conv2d_mm", "bias dtype", (CX, CW, t(4, dtype=torch.int64), ONE, ZERO, ONE)),
    ("conv2d_mm", "bias shape", (CX, CW, t(4, 1), ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "integer grad", (CG.long(), CW, [2, 3, 6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "input_size rank", (CG, CW, [3, 6, 6, 1, 1], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "negative input_size", (CG, CW, [2, 3, -6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "weight dtype", (CG, CW.double(), [2, 3, 6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "in_channels", (CG, t(4, 2, 3, 3), [2, 3, 6, 6], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_input", "grad shape", (CG, CW, [2, 3, 6, 6], ONE, ONE, ONE)),
    ("conv2d_mm_acc_grad_parameters", "2-D x", (CG, CX[0, 0], torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "integer grad",
     (CG.long(), CX, torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad dtype",
     (CG.double(), CX, torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_weight dtype",
     (CG, CX, torch.zeros(4, 3, 3, 3, dtype=torch.float64), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_weight in_channels",
     (CG, CX, torch.zeros(4, 2, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad shape",
     (CG[:, :, :3], CX, torch.zeros(4, 3, 3, 3), None, ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_bias dtype",
     (CG, CX, torch.zeros(4, 3, 3, 3), torch.zeros(4, dtype=torch.float64), ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_acc_grad_parameters", "grad_bias shape",
     (CG, CX, torch.zeros(4, 3, 3, 3), torch.zeros(5), ONE, ZERO, ONE, 1.0)),
    ("conv2d_mm_backward_weight", "2-D x", (CG, CX[0, 0], [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "integer grad", (CG.long(), CX, [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "grad dtype", (CG.double(), CX, [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "weight_size rank", (CG, CX, [4, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "negative weight_size", (CG, CX, [-4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "weight_size in_channels", (CG, CX, [4, 2, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "grad shape", (CG[:, :, :3], CX, [4, 3, 3, 3], ONE, ZERO, ONE)),
    ("conv2d_mm_backward_weight", "stride", (CG, CX, [4, 3, 3, 3], [0, 1], ZERO, ONE)),
    # ---- upsample ----
    ("upsample_bilinear2d", "integer x", (t(1, 2, 4, 4, dtype=torch.uint8), [8, 8], "half_pixel", None, None)),
    ("upsample_bilinear2d", "3-D x", (t(2, 4, 4), [8, 8], "half_pixel", None, None)),
    ("upsample_bilinear2d", "output_size 0", (t(1, 2, 4, 4), [0, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "output_size 3 entries", (t(1, 2, 4, 4), [3, 3, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "empty height", (t(1, 2, 0, 4), [3, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "output too big", (t(1, 2, 4, 4), [2**24 + 1, 3], "half_pixel", None, None)),
    ("upsample_bilinear2d", "negative scale", (t(1, 2, 4, 4), [8, 8], "half_pixel", -2.0, None)),
    ("upsample_bilinear2d", "infinite scale", (t(1, 2, 4, 4), [8, 8], "half_pixel", None, float("inf"))),
    ("upsample_bilinear2d", "coordinate_mode", (t(1, 2, 4, 4), [8, 8], "Half_Pixel", None, None)),
    ("upsample_bilinear2d_backward", "integer grad", (t(1, 2, 8, 8).long(), [1, 2, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "3-D grad", (t(2, 8, 8), [1, 2, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "input_size rank", (t(1, 2, 8, 8), [4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "negative input_size", (t(1, 2, 8, 8), [-1, 2, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "N and C", (t(1, 2, 8, 8), [1, 3, 4, 4], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "input width 0", (t(1, 2, 8, 8), [1, 2, 4, 0], "half_pixel", None, None)),
    ("upsample_bilinear2d_backward", "scale 0", (t(1, 2, 8, 8), [1, 2, 4, 4], "half_pixel", 0.0, None)),
    ("upsample_bilinear2d_backward", "coordinate_mode", (t(1, 2, 8, 8), [1, 2, 4, 4], "pytorch", None, None)),
    # ---- softmax / cross_entropy ----
    ("softmax", "integer x", (t(3, 4, dtype=torch.int64), 1)),
    ("softmax", "dim too big", (t(3, 4), 2)),
    ("softmax", "dim too small", (t(3, 4), -3)),
    ("softmax_backward", "integer output", (t(3, 4), t(3, 4, dtype=torch.int32), 1)),
    ("softmax_backward", "grad shape", (t(3, 5), t(3, 4), 1)),
    ("softmax_backward", "grad dtype", (t(3, 4, dtype=torch.float64), t(3, 4), 1)),
    ("softmax_backward", "dim", (t(3, 4), t(3, 4), 5)),
    ("cross_entropy", "integer logits", (LOGITS.long(), TARGET, "mean")),
    ("cross_entropy", "1-D logits", (LOGITS[0], TARGET[:1], "mean")),
    ("cross_entropy", "3-D logits", (LOGITS[None], TARGET, "mean")),
    ("cross_entropy", "target dtype", (LOGITS, TARGET.int(), "mean")),
    ("cross_entropy", "float target", (LOGITS, TARGET.float(), "mean")),
    ("cross_entropy", "target shape", (LOGITS, TARGET[:, None], "mean")),
    ("cross_entropy", "target length", (LOGITS, TARGET[:3], "sum")),
    ("cross_entropy", "reduction", (LOGITS, TARGET, "avg")),
    ("cross_entropy_backward", "integer logits", (t(()), LOGITS.long(), TARGET, "mean")),
    ("cross_entropy_backward", "target dtype", (t(()), LOGITS, TARGET.int(), "mean")),
    ("cross_entropy_backward", "reduction", (t(()), LOGITS, TARGET, "avg")),
    ("cross_entropy_backward", "integer grad_loss", (t((), dtype=torch.int64), LOGITS, TARGET, "mean")),
    ("cross_entropy_backward", "grad_loss dtype", (t((), dtype=torch.float64), LOGITS, TARGET, "mean")),
    ("cross_entropy_backward", "grad_loss for none", (t(3), LOGITS, TARGET, "none")),
    ("cross_entropy_backward", "grad_loss for mean", (t(4), LOGITS, TARGET, "mean")),
    # ---- batch_norm ----
    ("batch_norm", "integer x", (BX.long(), None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "1-D x", (BC, None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "weight shape", (BX, t(4), None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "running_var shape", (BX, None, None, BC, t(3, 1), True, 0.1, 1e-5)),
    ("batch_norm", "weight dtype", (BX, BC.double(), None, None, None, True, 0.1, 1e-5)),
    ("batch_norm", "float16 x, float64 bias", (BX.half(), None, BC.double(), None, None, True, 0.1, 1e-5)),
    ("batch_norm", "parameters of two dtypes", (BX.half(), BC, BC.half(), None, None, True, 0.1, 1e-5)),
    ("batch_norm", "running_mean alone", (BX, None, None, BC, None, True, 0.1, 1e-5)),
    ("batch_norm", "running_var alone", (BX, None, None, None, BC, True, 0.1, 1e-5)),
    ("batch_norm", "eval without running stats", (BX, BC, BC, None, None, False, 0.1, 1e-5)),
    ("batch_norm", "momentum 1.5", (BX, None, None, BC, BC, True, 1.5, 1e-5)),
    ("batch_norm", "momentum -0.1", (BX, None, None, None, None, True, -0.1, 1e-5)),
    ("batch_norm", "eps 0", (BX, None, None, None, None, True, 0.1, 0.0)),
    ("batch_norm", "eps inf", (BX, None, None, BC, BC, False, 0.1, float("inf"))),
    ("batch_norm", "one value per channel", (t(1, 3, 1, 1), None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm_backward_input", "integer x", (BG, BX.int(), None, BS, BS, True)),
    ("batch_norm_backward_input", "integer grad", (BG.long(), BX, None, BS, BS, True)),
    ("batch_norm_backward_input", "grad shape", (BG[:1], BX, None, BS, BS, True)),
    ("batch_norm_backward_input", "grad dtype", (BG.double(), BX, None, BS, BS, True)),
    ("batch_norm_backward_input", "save_mean shape", (BG, BX, None, t(4), BS, True)),
    ("batch_norm_backward_input", "save_invstd dtype", (BG, BX, None, BS, BS.double(), True)),
    ("batch_norm_backward_input", "float32 statistics of float16 x",
     (BG.half(), BX.half(), None, BS.half(), BS, False)),
    ("batch_norm_backward_input", "weight dtype", (BG, BX, BC.double(), BS, BS, True)),
    ("batch_norm_backward_input", "sums alone", (BG, BX, None, BS, BS, True, BC, None)),
    ("batch_norm_backward_input", "sum_grad shape", (BG, BX, None, BS, BS, True, BC, t(2))),
    ("batch_norm_acc_grad_parameters", "2-D grad", (BG[0, 0], BX, BS, BS, torch.zeros(3), None, 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_weight shape", (BG, BX, BS, BS, torch.zeros(2), None, 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_weight dtype", (BG, BX, BS, BS, torch.zeros(3).double(), None, 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_bias dtype",
     (BG.half(), BX.half(), BS, BS, torch.zeros(3), torch.zeros(3).half(), 1.0)),
    ("batch_norm_acc_grad_parameters", "grad_bias shape", (BG, BX, BS, BS, torch.zeros(3), torch.zeros(3, 1), 1.0)),
    ("batch_norm_backward_parameters", "1-D x", (BC, BC, BS, BS)),
    ("batch_norm_backward_parameters", "grad shape", (BG[:, :2], BX, BS, BS)),
    ("batch_norm_backward_parameters", "save_mean dtype", (BG, BX, BS.half(), BS)),
    # ---- reorg ----
    ("reorg", "integer x", (t(2, 8, 4, 4, dtype=torch.int32), 2, "crd")),
    ("reorg", "order", (t(2, 8, 4, 4), 2, "tf")),
    ("reorg", "3-D x", (t(8, 4, 4), 2, "darknet")),
    ("reorg", "stride 0", (t(2, 8, 4, 4), 0, "crd")),
    ("reorg", "stride too large", (t(2, 8, 4, 4), 2**32, "crd")),
    ("reorg", "height not divisible", (t(2, 8, 5, 4), 2, "crd")),
    ("reorg", "width not divisible", (t(2, 8, 4, 6), 4, "dcr")),
    ("reorg", "darknet channels", (t(2, 6, 4, 4), 2, "darknet")),
    ("reorg_backward", "integer grad", (t(2, 8, 2, 2, dtype=torch.int64), 2, "crd")),
    ("reorg_backward", "order", (t(2, 8, 2, 2), 2, "DCR")),
    ("reorg_backward", "3-D grad", (t(6, 2, 2), 2, "crd")),
    ("reorg_backward", "stride -1", (t(2, 8, 2, 2), -1, "crd")),
    ("reorg_backward", "channels", (t(2, 6, 2, 2), 2, "crd")),
    ("reorg_backward", "darknet channels", (t(2, 8, 2, 2), 2, "darknet")),
]


def _op_of(case):
    return case.values[0] if hasattr(case, "values") else case[0]


def _id(case):
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}: {values[1]}"


def _raised(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - which exception is what the test compares
        return type(e), str(e)
    return None, "no exception"


def _fake_args(mode, args):
    return tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("op,name,args", CASES, ids=[_id(c) for c in CASES])
def test_eager_and_fake_raise_the_same(op, name, args):
    eager = _raised(lambda: getattr(L, op)(*args))
    assert eager[0] is ValueError, f"the eager op accepted a bad case: {eager}"
    assert eager[1].startswith(f"labops.{op.removesuffix('_backward')}") or eager[1].startswith(f"labops.{op}")
    with FakeTensorMode() as mode:
        fake = _raised(lambda: getattr(L, op)(*_fake_args(mode, args)))
    assert fake == eager


def test_a_value_rule_is_eager_only():
    # cross_entropy's targets must lie in [0, C): a rule on values, which a fake tensor does not have.
    bad = torch.tensor([0, 1, 2, 3])
    with pytest.raises(ValueError, match=re.escape("target must hold class indices in [0, C) = [0, 3)")):
        L.cross_entropy(LOGITS, bad, "mean")
    with FakeTensorMode() as mode:
        assert L.cross_entropy(*_fake_args(mode, (LOGITS, bad)), "mean").shape == ()


def test_every_op_has_bad_cases():
    schemas = [name for path in sorted((ROOT / "csrc").glob("*/register.cpp"))
               for name in re.findall(r'm\.def\(\s*"(\w+)\(', path.read_text())]
    public = {s for s in schemas if not s.startswith("_")}
    assert public - {_op_of(c) for c in CASES} == set()
