import torch

from labops import ops

__all__ = ["BatchNorm2d"]


class BatchNorm2d(torch.nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` whose forward runs ``labops.batch_norm``.

    The same arguments, parameters (weight, bias), buffers (running_mean, running_var,
    num_batches_tracked), initialisation and state_dict as ``torch.nn.BatchNorm2d``, so either loads
    the other's checkpoints; ``momentum=None`` averages every batch seen so far (a cumulative mean).
    Input and output (N, C, H, W).

    Example:
        >>> bn = BatchNorm2d(3)
        >>> y = bn(torch.randn(4, 3, 5, 5))
        >>> y.shape, int(bn.num_batches_tracked)
        (torch.Size([4, 3, 5, 5]), 1)
        >>> sorted(bn.state_dict()) == sorted(torch.nn.BatchNorm2d(3).state_dict())
        True
    """

    def forward(self, x):
        # torch.nn.BatchNorm2d's rules (its _BatchNorm.forward), with labops's op at the end.
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average: batch k weighs 1/k
                factor = 1.0 / float(self.num_batches_tracked)
        # Batch statistics in training, and in evaluation when no running ones are kept.
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        # The running statistics are updated only when tracked, and read in evaluation.
        keep = not self.training or self.track_running_stats
        return ops.batch_norm(x, self.running_mean if keep else None, self.running_var if keep else None,
                              self.weight, self.bias, use_batch, factor, self.eps)
