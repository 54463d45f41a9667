"""The bytes of tensors alive while torch code runs, and their peak, on any device: what
torch.cuda.max_memory_allocated measures on a GPU, measured where there is none (trainables/memory.py's estimate).

Every tensor storage an operation inside the block creates counts from its creation until it is freed: autograd's
saved tensors, a backward's gradients and an optimizer's state are made by operations too. What was alive before the
block does not count, nor memory that torch.from_numpy wraps. `round_to=CUDA_BLOCK` rounds each storage up as CUDA's
caching allocator rounds its blocks.
"""
from __future__ import annotations

import math
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

CUDA_BLOCK = 512  # bytes: the caching allocator rounds every block up to a multiple of this


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as live:` ... then `live.now` and `live.peak`: bytes alive now and at most since the block
    began, above what was alive before it; `live.timeline`: the bytes alive after each operation, in order."""

    def __init__(self, round_to: int = 1):
        super().__init__()
        self.now = self.peak = 0
        self.timeline: list[int] = []
        self.round_to = round_to
        self._sizes: dict[int, tuple[weakref.ref, int]] = {}  # storage -> (a reference that sees it freed, bytes)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no torch._dynamo around each operation: importing it takes a second or two, and nothing compiles

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                self._count(tensor.untyped_storage())
        self.timeline.append(self.now)
        return out

    def _count(self, storage: torch.UntypedStorage) -> None:
        size = math.ceil(storage.nbytes() / self.round_to) * self.round_to
        key = storage._cdata
        if key in self._sizes:  # an input returned, or a view of one: counted again only if resized (out=)
            ref, counted = self._sizes[key]
        else:  # a new storage (a freed one's reference took it out of _sizes when it was freed)
            ref, counted = weakref.ref(storage, lambda _, key=key: self._free(key)), 0
        self._sizes[key] = ref, size
        self.now += size - counted
        self.peak = max(self.peak, self.now)

    def _free(self, key: int) -> None:
        self.now -= self._sizes.pop(key)[1]
