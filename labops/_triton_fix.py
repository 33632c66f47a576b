"""The one Triton 3.6 interpreter fix that labops.triton and the Triton exercises both apply.

The interpreter turns a scalar kernel argument used as a loop bound (``for k in range(0, K, BLOCK_K)``) into an
int with ``int()`` of a one-element array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted
to Python scalars"; triton-lang/triton#9171, fixed upstream after 3.6). ``with_index_fix(patch)`` is the
interpreter's ``_patch_lang_tensor`` with the upstream fix: a tensor's ``__index__`` converts its one element.
"""

__all__ = ["with_index_fix"]


def with_index_fix(patch_lang_tensor):
    """``patch_lang_tensor`` (the interpreter's) that also gives each tensor the fixed ``__index__``."""

    def patch(tensor, scope):
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    return patch
