"""torch.nn.Module wrappers around the labops ops."""

from labops._layers import export_layers  # noqa: E402

__all__ = export_layers(__name__, globals())
