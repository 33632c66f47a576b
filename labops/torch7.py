"""Torch7's layer contract: modules with an explicit backward pass, the contract the course is built on.

Torch7 (the Lua ancestor of PyTorch; ``nn``, and ``cunn`` on the GPU) defines a layer as a module with
three functions, and the write-ups the course follows write their layers for it (notebook 01 derives
the three). This module holds those modules over the compiled labops ops: ``Sequential``, ``Linear``,
``Tanh``, ``GELU``, ``SpatialConvolutionMM``, ``SpatialDepthWiseConvolution``,
``SpatialBatchNormalization``, ``SpatialGlobalAveragePooling``, ``SpatialUpSamplingBilinear``, ``SoftMax``, ``Reorg``, ``View`` and
``CrossEntropyCriterion``. Notebooks 04, 05, 06 and 08 run their layer through its module here and
compare it with autograd; notebook 10 trains the capstone network with them (``labops.capstone``).

Every module keeps ``output`` and ``gradInput`` and implements

* ``updateOutput(input)``: the forward pass, stores and returns ``output``;
* ``updateGradInput(input, gradOutput)``: dE/dinput, stores and returns ``gradInput``;
* ``accGradParameters(input, gradOutput, scale=1)``: ADDS ``scale * dE/dW`` to
  ``gradWeight`` / ``gradBias`` (so gradients of several mini-batches sum up
  until ``zeroGradParameters()``). ``scale`` weighs the gradient; it is not a
  learning rate.

``forward`` is ``updateOutput``; ``backward`` is ``updateGradInput`` followed by
``accGradParameters``. A learning rate enters in ``updateParameters(lr)``
(``W -= lr * gradWeight``) or in ``accUpdateGradParameters(input, gradOutput, lr)``,
which does ``W -= lr * dE/dW`` in place without touching ``gradWeight``
(``backwardUpdate`` is ``updateGradInput`` followed by it).

Nothing here uses autograd: each method calls the compiled labops op for that
function directly (``torch.ops.labops.*``), so a learner can train with a
hand-written backward pass and compare with autograd. Tensors are plain
(``requires_grad=False``).
"""

from __future__ import annotations

import math

import torch


class _CompiledOps:
    """``torch.ops.labops``, with the compiled library built and loaded when a layer first calls it: importing
    this module builds nothing, so Module, Sequential and Linear (plain GEMMs) work where the library is not
    built (the exercises' grading process, labops.exercises.training)."""

    def __getattr__(self, name):  # only for a name not looked up before: each op is kept on the instance
        from labops import ops  # noqa: F401  (builds and loads the compiled ops)

        op = getattr(torch.ops.labops, name)
        setattr(self, name, op)
        return op


L = _CompiledOps()

__all__ = [
    "Module",
    "Sequential",
    "Linear",
    "Tanh",
    "GELU",
    "SpatialConvolutionMM",
    "SpatialDepthWiseConvolution",
    "SpatialBatchNormalization",
    "SpatialGlobalAveragePooling",
    "SpatialUpSamplingBilinear",
    "SoftMax",
    "Reorg",
    "View",
    "CrossEntropyCriterion",
]


class Module:
    """Base class: the Torch7 nn.Module contract."""

    def __init__(self):
        self.output = torch.empty(0)
        self.gradInput = torch.empty(0)
        self.train = True  # training mode (Torch7's module.train); evaluate() turns it off

    def training(self):
        """Training mode: layers that behave differently (batch normalization) use the batch."""
        self.train = True
        return self

    def evaluate(self):
        """Evaluation mode: batch normalization uses its running statistics."""
        self.train = False
        return self

    # -- the three functions --
    def updateOutput(self, input):
        raise NotImplementedError

    def updateGradInput(self, input, gradOutput):
        raise NotImplementedError

    def accGradParameters(self, input, gradOutput, scale=1.0):
        """Parameter-free layers have nothing to accumulate."""

    # -- built from them --
    def forward(self, input):
        return self.updateOutput(input)

    def backward(self, input, gradOutput, scale=1.0):
        self.updateGradInput(input, gradOutput)
        self.accGradParameters(input, gradOutput, scale)
        return self.gradInput

    def parameters(self):
        """(list of weights, list of their gradients); empty lists if none."""
        weights, grads = [], []
        for name in ("weight", "bias"):
            w = getattr(self, name, None)
            if w is not None:
                weights.append(w)
                grads.append(getattr(self, "grad" + name.capitalize()))
        return weights, grads

    def zeroGradParameters(self):
        for g in self.parameters()[1]:
            g.zero_()

    def updateParameters(self, learningRate):
        for w, g in zip(*self.parameters()):
            w.add_(g, alpha=-learningRate)

    def accUpdateGradParameters(self, input, gradOutput, lr):
        """W -= lr * dE/dW in place; gradWeight / gradBias are left as they are.

        As torch/nn's Module.lua ``Module:accUpdateGradParameters``: point
        gradWeight / gradBias at the weight and bias themselves, and let
        accGradParameters add ``-lr`` times the gradient into them. No gradient
        buffer is written, so a layer can train without one.
        """
        kept = {name: getattr(self, name) for name in ("gradWeight", "gradBias") if hasattr(self, name)}
        try:
            for name in kept:
                setattr(self, name, getattr(self, name[4:].lower()))  # gradWeight -> weight
            self.accGradParameters(input, gradOutput, -lr)
        finally:
            for name, grad in kept.items():
                setattr(self, name, grad)

    def backwardUpdate(self, input, gradOutput, lr):
        """updateGradInput, then accUpdateGradParameters: gradInput uses the weights before the step."""
        self.updateGradInput(input, gradOutput)
        self.accUpdateGradParameters(input, gradOutput, lr)
        return self.gradInput

    def to(self, *args, **kwargs):
        for name, value in vars(self).items():
            if isinstance(value, torch.Tensor):
                setattr(self, name, value.to(*args, **kwargs))
        return self

    def __repr__(self):
        return f"nn.{type(self).__name__}"


class Sequential(Module):
    def __init__(self):
        super().__init__()
        self.modules = []

    def add(self, module):
        self.modules.append(module)
        return self

    def updateOutput(self, input):
        for m in self.modules:
            input = m.updateOutput(input)
        self.output = input
        return self.output

    def _inputs(self, input):
        # The input each module saw during the last forward.
        return [input] + [m.output for m in self.modules[:-1]]

    def updateGradInput(self, input, gradOutput):
        for m, x in zip(reversed(self.modules), reversed(self._inputs(input))):
            gradOutput = m.updateGradInput(x, gradOutput)
        self.gradInput = gradOutput
        return self.gradInput

    def accGradParameters(self, input, gradOutput, scale=1.0):
        inputs = self._inputs(input)
        for i in reversed(range(len(self.modules))):
            m = self.modules[i]
            m.accGradParameters(inputs[i], gradOutput, scale)
            gradOutput = m.gradInput

    def accUpdateGradParameters(self, input, gradOutput, lr):
        # As accGradParameters: each module's gradOutput is the gradInput of the one after it, which
        # updateGradInput computed with the weights before this update (torch/nn's Sequential.lua).
        inputs = self._inputs(input)
        for i in reversed(range(len(self.modules))):
            m = self.modules[i]
            m.accUpdateGradParameters(inputs[i], gradOutput, lr)
            gradOutput = m.gradInput

    def backward(self, input, gradOutput, scale=1.0):
        inputs = self._inputs(input)
        for i in reversed(range(len(self.modules))):
            gradOutput = self.modules[i].backward(inputs[i], gradOutput, scale)
        self.gradInput = gradOutput
        return self.gradInput

    def parameters(self):
        weights, grads = [], []
        for m in self.modules:
            w, g = m.parameters()
            weights += w
            grads += g
        return weights, grads

    def zeroGradParameters(self):
        for m in self.modules:
            m.zeroGradParameters()

    def updateParameters(self, learningRate):
        for m in self.modules:
            m.updateParameters(learningRate)

    def to(self, *args, **kwargs):
        for m in self.modules:
            m.to(*args, **kwargs)
        return self

    def training(self):
        self.train = True
        for m in self.modules:
            m.training()
        return self

    def evaluate(self):
        self.train = False
        for m in self.modules:
            m.evaluate()
        return self

    def __repr__(self):
        inner = "\n".join(f"  ({i + 1}): {m!r}" for i, m in enumerate(self.modules))
        return f"nn.Sequential {{\n{inner}\n}}"


def _uniform(shape, bound, dtype):
    return torch.empty(shape, dtype=dtype).uniform_(-bound, bound)


class Linear(Module):
    """y = x Wᵀ + b, W (outputSize, inputSize). Pure GEMMs: no custom kernel needed."""

    def __init__(self, inputSize, outputSize, bias=True, dtype=torch.float32):
        super().__init__()
        bound = 1.0 / math.sqrt(inputSize)
        self.weight = _uniform((outputSize, inputSize), bound, dtype)
        self.gradWeight = torch.zeros_like(self.weight)
        self.bias = _uniform((outputSize,), bound, dtype) if bias else None
        self.gradBias = torch.zeros_like(self.bias) if bias else None

    def updateOutput(self, input):
        self.output = input @ self.weight.t()
        if self.bias is not None:
            self.output += self.bias
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = gradOutput @ self.weight
        return self.gradInput

    def accGradParameters(self, input, gradOutput, scale=1.0):
        self.gradWeight.addmm_(gradOutput.t(), input, alpha=scale)
        if self.bias is not None:
            self.gradBias.add_(gradOutput.sum(0), alpha=scale)


class Tanh(Module):
    def updateOutput(self, input):
        self.output = L.tanh(input)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.tanh_backward(gradOutput, self.output)  # from the output, as THNN does
        return self.gradInput


class GELU(Module):
    def __init__(self, approximate="sigmoid"):
        super().__init__()
        self.approximate = approximate

    def updateOutput(self, input):
        self.output = L.gelu(input, self.approximate)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.gelu_backward(gradOutput, input, self.approximate)
        return self.gradInput


def _conv_init(weight_shape, bias_shape, fan_in, dtype):
    bound = 1.0 / math.sqrt(fan_in)
    return _uniform(weight_shape, bound, dtype), _uniform(bias_shape, bound, dtype)


class SpatialConvolutionMM(Module):
    """THNN's im2col + GEMM convolution. Weight in PyTorch's (nOut, nIn, kH, kW) layout."""

    def __init__(self, nInputPlane, nOutputPlane, kW, kH, dW=1, dH=1, padW=0, padH=None, dtype=torch.float32):
        super().__init__()
        padH = padW if padH is None else padH
        self.stride, self.padding, self.dilation = [dH, dW], [padH, padW], [1, 1]
        self.weight, self.bias = _conv_init((nOutputPlane, nInputPlane, kH, kW), (nOutputPlane,),
                                            nInputPlane * kH * kW, dtype)
        self.gradWeight, self.gradBias = torch.zeros_like(self.weight), torch.zeros_like(self.bias)

    def updateOutput(self, input):
        self.output = L.conv2d_mm(input, self.weight, self.bias, self.stride, self.padding, self.dilation)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.conv2d_mm_backward_input(gradOutput, self.weight, list(input.shape), self.stride,
                                                    self.padding, self.dilation)
        return self.gradInput

    def accGradParameters(self, input, gradOutput, scale=1.0):
        L.conv2d_mm_acc_grad_parameters(gradOutput, input, self.gradWeight, self.gradBias, self.stride,
                                        self.padding, self.dilation, scale)


class SpatialDepthWiseConvolution(Module):
    """Depthwise convolution; weight in PyTorch's (nIn*multiplier, 1, kH, kW) layout."""

    def __init__(self, nInputPlane, multiplier, kW, kH, dW=1, dH=1, padW=0, padH=None, dtype=torch.float32):
        super().__init__()
        padH = padW if padH is None else padH
        self.stride, self.padding, self.dilation = [dH, dW], [padH, padW], [1, 1]
        self.weight, self.bias = _conv_init((nInputPlane * multiplier, 1, kH, kW), (nInputPlane * multiplier,),
                                            kH * kW, dtype)
        self.gradWeight, self.gradBias = torch.zeros_like(self.weight), torch.zeros_like(self.bias)

    def updateOutput(self, input):
        self.output = L.depthwise_conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.depthwise_conv2d_backward_input(gradOutput, self.weight, list(input.shape),
                                                           self.stride, self.padding, self.dilation)
        return self.gradInput

    def accGradParameters(self, input, gradOutput, scale=1.0):
        L.depthwise_conv2d_acc_grad_parameters(gradOutput, input, self.gradWeight, self.gradBias, self.stride,
                                               self.padding, self.dilation, scale)


class SpatialBatchNormalization(Module):
    """Batch normalization over the channels of (N, C, H, W) (Torch7's nn.SpatialBatchNormalization).

    Keeps running_mean / running_var (updated by updateOutput in training mode) and, with affine, a
    weight and bias initialised as Torch7 does (weight uniform in [0, 1), bias 0). updateOutput saves
    save_mean and save_std (Torch7's name; it holds 1/sqrt(var + eps)) for the two backward functions.
    """

    def __init__(self, nOutput, eps=1e-5, momentum=0.1, affine=True, dtype=torch.float32):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.running_mean = torch.zeros(nOutput, dtype=dtype)
        self.running_var = torch.ones(nOutput, dtype=dtype)
        self.weight = torch.empty(nOutput, dtype=dtype).uniform_() if affine else None
        self.bias = torch.zeros(nOutput, dtype=dtype) if affine else None
        self.gradWeight = torch.zeros(nOutput, dtype=dtype) if affine else None
        self.gradBias = torch.zeros(nOutput, dtype=dtype) if affine else None
        self.save_mean = self.save_std = None

    def updateOutput(self, input):
        self.output, self.save_mean, self.save_std = L.batch_norm(
            input, self.weight, self.bias, self.running_mean, self.running_var, self.train, self.momentum, self.eps)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.batch_norm_backward_input(gradOutput, input, self.weight, self.save_mean, self.save_std,
                                                     self.train)
        return self.gradInput

    def accGradParameters(self, input, gradOutput, scale=1.0):
        if self.weight is not None:
            L.batch_norm_acc_grad_parameters(gradOutput, input, self.save_mean, self.save_std, self.gradWeight,
                                             self.gradBias, scale)


class SpatialUpSamplingBilinear(Module):
    """Bilinear resize; same arguments as labops.upsample_bilinear2d."""

    def __init__(self, size=None, scale_factor=None, align_corners=False, coordinate_mode=None):
        super().__init__()
        self.args = (size, scale_factor, align_corners, coordinate_mode)

    def _resolved(self, input):
        from labops.ops.upsample import resolve_arguments

        return resolve_arguments(input, *self.args)

    def updateOutput(self, input):
        size, mode, sh, sw = self._resolved(input)
        self.output = L.upsample_bilinear2d(input, list(size), mode, sh, sw)
        return self.output

    def updateGradInput(self, input, gradOutput):
        _, mode, sh, sw = self._resolved(input)
        self.gradInput = L.upsample_bilinear2d_backward(gradOutput, list(input.shape), mode, sh, sw, True)
        return self.gradInput


class View(Module):
    """Reshape each sample to `size` (Torch7's nn.View): (N, ...) -> (N, *size)."""

    def __init__(self, *size):
        super().__init__()
        self.size = size

    def updateOutput(self, input):
        self.output = input.reshape(input.shape[0], *self.size)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = gradOutput.reshape(input.shape)
        return self.gradInput


class SpatialGlobalAveragePooling(Module):
    """(N, C, H, W) -> (N, C, 1, 1): the layer of write-up 000."""

    def updateOutput(self, input):
        self.output = L.global_avg_pool2d(input)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.global_avg_pool2d_backward(gradOutput, list(input.shape))
        return self.gradInput


class SoftMax(Module):
    """Softmax over `dim` (Torch7's SoftMax normalises the last dimension)."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def updateOutput(self, input):
        self.output = L.softmax(input, self.dim)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.softmax_backward(gradOutput, self.output, self.dim)  # from the output y
        return self.gradInput


class Reorg(Module):
    """YOLOv2's passthrough layer; order 'darknet', 'dcr' or 'crd'."""

    def __init__(self, stride=2, order="darknet"):
        super().__init__()
        self.stride, self.order = stride, order

    def updateOutput(self, input):
        self.output = L.reorg(input, self.stride, self.order)
        return self.output

    def updateGradInput(self, input, gradOutput):
        self.gradInput = L.reorg_backward(gradOutput, self.stride, self.order)
        return self.gradInput


class CrossEntropyCriterion:
    """Fused log-softmax + negative log-likelihood over (N, C) logits and int64 targets.

    A criterion, as in Torch7: ``forward(input, target)`` returns the loss,
    ``backward(input, target)`` its gradient w.r.t. the input,
    ``(softmax - onehot) / N`` for the default 'mean' reduction.
    """

    def __init__(self, reduction="mean"):
        self.reduction = reduction
        self.output = None
        self.gradInput = torch.empty(0)

    def updateOutput(self, input, target):
        from labops.ops.softmax import cross_entropy  # checks the targets before the kernel runs

        self.output = cross_entropy(input, target, self.reduction)
        return self.output

    def updateGradInput(self, input, target):
        # dE/dloss = 1 for the loss this criterion returns (one per row for 'none').
        shape = (input.shape[0],) if self.reduction == "none" else ()
        grad_loss = torch.ones(shape, dtype=input.dtype, device=input.device)
        self.gradInput = L.cross_entropy_backward(grad_loss, input, target, self.reduction)
        return self.gradInput

    forward = updateOutput
    backward = updateGradInput

    def __repr__(self):
        return f"nn.CrossEntropyCriterion({self.reduction!r})"
