"""Random numbers for drawing the training batches of a whole population at once, on the members' device.

`Streams` gives every member its own counter-based stream: member p's numbers at step s are lowbias32 hashes of (its
key, s, the draw's number within the step, the element's index), and of nothing else. So a member draws the same
batches whatever it is packed with and in whichever slot, alone included, and resuming at step s needs s alone. Every
operation is elementwise over tensors whose shapes the call fixes: a draw dispatches the same operations for 1 member
or 256, reads nothing back to the host, and a CUDA graph can capture it (the step counter is a device tensor).

lowbias32 is Chris Wellons's 32-bit integer hash (hash-prospector); the integers live in int64 tensors, and products
are formed from 16-bit halves so that none exceeds 2^63 (torch has no unsigned 32-bit multiply).
"""
from __future__ import annotations

import math

import torch

MASK32 = 0xFFFFFFFF
SCALE = 2.0**-32


def _mul32(x: torch.Tensor | int, c: int) -> torch.Tensor | int:
    """x * c mod 2^32 for x in [0, 2^32), exactly: x * c_low < 2^48, and only x * c_high's low 16 bits count."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK32


def mix32(x):
    """lowbias32 of each element of x in [0, 2^32): a bijection of 32-bit integers with strong avalanche. Takes a
    tensor or a Python int (the same arithmetic)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


class Draws:
    """Uniform bits for P members, and the distributions the tasks draw from them. Every result is (P, *shape)."""

    members: int

    def bits(self, *shape: int) -> torch.Tensor:
        """(P, *shape) int64, uniform on [0, 2^32), a fresh draw each call."""
        raise NotImplementedError

    def uniform(self, *shape: int) -> torch.Tensor:
        """(P, *shape) float64 uniform on the open interval (0, 1): logs and inverse CDFs never meet 0 or 1."""
        return (self.bits(*shape).double() + 0.5) * SCALE

    def randint(self, low, high, *shape: int) -> torch.Tensor:
        """(P, *shape) int64 uniform on [low, high); low and high are ints or (P,) per-member tensors."""
        # A (P,) tensor viewed (P, 1, ..., 1), so that it broadcasts against (P, *shape); an int as is.
        low, high = (v if isinstance(v, int) else v.reshape(-1, *(1,) * len(shape)) for v in (low, high))
        return low + (self.uniform(*shape) * (high - low)).long()  # u < 1: never reaches high

    def normal(self, *shape: int) -> torch.Tensor:
        """(P, *shape) float64 standard normal (Box-Muller)."""
        radius = torch.sqrt(-2.0 * torch.log(self.uniform(*shape)))
        return radius * torch.cos(2.0 * torch.pi * self.uniform(*shape))

    def categorical(self, cdf: torch.Tensor, *shape: int) -> torch.Tensor:
        """(P, *shape) indices drawn from per-member distributions given by their CDFs: cdf (P, K), non-decreasing,
        each row ending at its total (need not be 1). Inverse CDF: index k where cdf[k-1] <= u * total < cdf[k]."""
        cdf = cdf.double()  # u * total < total holds in float64 (u <= 1 - 2^-33), not after rounding to float32
        u = self.uniform(*shape).reshape(self.members, -1) * cdf[:, -1:]  # (P, prod(shape))
        index = torch.searchsorted(cdf, u, right=True)  # (P, prod(shape))
        return index.clamp(max=cdf.shape[1] - 1).reshape(self.members, *shape)  # rounding at the top end


class Streams(Draws):
    """Counter-based streams of P members, keyed by their seeds (any integers; two members with the same key draw the
    same numbers). A step's draws are a function of the step counter and the order of the calls within it."""

    def __init__(self, keys: list[int], device="cpu", step: int = 0):
        self.members = len(keys)
        # A key of up to 64 bits folded to 32 through the hash, so every bit of it reaches every output bit.
        folded = [mix32(mix32(k & MASK32) ^ ((k >> 32) & MASK32)) for k in keys]
        self.keys = torch.tensor(folded, dtype=torch.int64, device=device)  # (P,)
        self.step = torch.tensor(step, dtype=torch.int64, device=device)  # advanced in place: no host value per step
        self._salted: dict[tuple[int, int], torch.Tensor] = {}  # (draw, count) -> hashed element indices
        self._start_step()

    def _start_step(self) -> None:
        self._draw = 0  # the number of the next draw within this step: fixed by the sampler's code, not by data
        self._member_step = mix32(self.keys ^ mix32(self.step & MASK32))  # (P,)

    def advance(self) -> None:
        """Move every member to its next step."""
        self.step += 1
        self._start_step()

    def bits(self, *shape: int) -> torch.Tensor:
        self._draw += 1
        count = math.prod(shape)
        key = (self._draw, count)
        if key not in self._salted:  # the same every step: hashed once, so a step pays one hash per draw
            salt = mix32(self._draw * 0x9E3779B9 & MASK32)  # draws of one step apart
            self._salted[key] = mix32(torch.arange(count, device=self.keys.device) ^ salt)  # (count,), all members'
        return mix32(self._salted[key][None, :] ^ self._member_step[:, None]).reshape(self.members, *shape)


class GeneratorDraws(Draws):
    """One member's draws from a torch.Generator (P = 1): a task's sample() (the evaluation sets) runs the very code
    its population sampler runs."""

    members = 1

    def __init__(self, generator: torch.Generator):
        self.generator = generator

    def bits(self, *shape: int) -> torch.Tensor:
        return torch.randint(2**32, (1, *shape), generator=self.generator, device=self.generator.device)
