"""What a piece of torch code asks of the device (issue gpu-ready): the operations it dispatches and the host
synchronisations among them. On a GPU a tiny model's step is bound by these, not by FLOPs: each operation is at least
one kernel launch, and each synchronisation stalls the host until the device has caught up. Both are counted the same
way on the CPU, so the tests and bench/packed_step.py measure them where there is no GPU.

A synchronisation is a value read back to the host: `aten._local_scalar_dense` (.item(), float(t), int(t), bool(t),
`if t:`), a copy from another device to the CPU, and Tensor.tolist() and Tensor.numpy() (which on the CPU dispatch
nothing, so they are caught by name).
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}
_READS = ("tolist", "numpy")


class OpCounter(TorchDispatchMode):
    """with OpCounter() as counter: ... then counter.ops (Counter of aten operation names) and counter.syncs (the
    synchronisations among them, by name, plus `Tensor.tolist` and `Tensor.numpy` calls)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.syncs: Counter = Counter()
        self._saved = {}

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[str(func)] += 1
        if func is torch.ops.aten._local_scalar_dense.default or (func in _COPIES and _to_host(args, out)):
            self.syncs[str(func)] += 1
        return out

    def __enter__(self):
        for name in _READS:
            self._saved[name] = original = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counted(name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)

    def _counted(self, name: str, original):
        def read(tensor, *args, **kwargs):
            self.syncs[f"Tensor.{name}"] += 1
            return original(tensor, *args, **kwargs)
        return read


def _to_host(args, out) -> bool:
    """Whether a copy brings a tensor from another device to the CPU."""
    source = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else args[0]
    return isinstance(out, torch.Tensor) and out.device.type == "cpu" and source.device.type != "cpu"
