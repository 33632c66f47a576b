"""The fake kernel (torch.compile's shapes-only run) that gelu.py's and softmax.py's ops share."""

import torch

__all__ = ["register_contiguous_fake"]


def register_contiguous_fake(op, check):
    """Register ``op``'s fake: ``check(*args)``, the same rules as the op, then what the op's launcher
    returns, a fresh contiguous tensor like its first argument (the checks make every other tensor argument
    match it in shape, dtype and device)."""

    @op.register_fake
    def _(*args):
        check(*args)
        return torch.empty_like(args[0], memory_format=torch.contiguous_format)
