"""Counter-based streams (trainables/streams.py): the hash itself, each member's numbers a function of its key and
step alone, resumption from a step number, and the distributions drawn from them."""
import math

import torch

from trainables.op_count import OpCounter
from trainables.streams import MASK32, GeneratorDraws, Streams, mix32

KEYS = [0, 1, 2**62 - 1, 12345678901234]


def test_the_tensor_hash_equals_the_integer_hash_and_is_a_bijection_on_a_sample():
    values = torch.randint(2**32, (20000,), generator=torch.Generator().manual_seed(0)).tolist() + [0, 1, MASK32]
    hashed = mix32(torch.tensor(values)).tolist()
    assert hashed == [mix32(v) for v in values]  # the 16-bit halves multiply exactly, nothing overflows int64
    assert all(0 <= h <= MASK32 for h in hashed)
    assert len(set(hashed)) == len(set(values))


def test_the_hash_is_pinned():
    """Changing the hash changes every training batch of every run: it must not change by accident."""
    assert [mix32(v) for v in (1, 2, 0xDEADBEEF)] == [0x688990C0, 0xD1132181, 0xE628C683]
    assert Streams([7]).bits(4).tolist() == [[2754781842, 3611031011, 2512332653, 2193124356]]


def test_a_member_draws_the_same_numbers_whatever_it_is_packed_with():
    together = Streams(KEYS, step=3)
    draws = [together.uniform(5, 7), together.randint(2, torch.tensor([5, 6, 7, 8]), 9), together.normal(4)]
    for p, key in enumerate(KEYS):
        alone = Streams([key], step=3)
        mine = [alone.uniform(5, 7), alone.randint(2, torch.tensor([5 + p]), 9), alone.normal(4)]
        for a, b in zip(draws, mine):
            assert torch.equal(a[p], b[0])


def test_a_stream_resumed_at_a_step_continues_exactly():
    running = Streams(KEYS)
    for _ in range(5):
        running.uniform(3)
        running.advance()
    assert torch.equal(running.uniform(3, 4), Streams(KEYS, step=5).uniform(3, 4))


def test_steps_draws_and_members_give_different_numbers():
    streams = Streams(KEYS)
    first, second = streams.bits(1000), streams.bits(1000)
    streams.advance()
    later = streams.bits(1000)
    for a, b in ((first, second), (first, later)):
        assert (a == b).float().mean() < 0.01
    assert (first[0] == first[1]).float().mean() < 0.01


def test_uniforms_are_uniform_on_the_open_interval():
    u = Streams(KEYS).uniform(200_000)  # (4, 200000)
    assert 0 < u.min() and u.max() < 1
    counts = torch.stack([torch.histc(row, bins=20, min=0, max=1) for row in u])  # (4, 20)
    expected = u.shape[1] / 20
    chi2 = ((counts - expected) ** 2 / expected).sum(1)
    assert (chi2 < 50).all(), chi2  # 19 degrees of freedom: p < 1e-4 above 50; the draws are fixed, not flaky
    assert abs(u.mean() - 0.5) < 0.002


def test_per_member_integer_bounds_and_categoricals():
    streams = Streams(KEYS[:3])
    low, high = torch.tensor([0, 5, 10]), torch.tensor([3, 6, 30])
    drawn = streams.randint(low, high, 30000)  # (3, 30000)
    for p in range(3):
        values = drawn[p]
        assert values.min() == low[p] and values.max() == high[p] - 1
    cdf = torch.tensor([[0.5, 0.5, 1.0], [0.0, 0.25, 1.0], [0.2, 0.6, 1.0]], dtype=torch.float64)
    picked = streams.categorical(cdf, 60000)
    for p in range(3):
        share = torch.bincount(picked[p], minlength=3).double() / picked.shape[1]
        expected = torch.diff(cdf[p], prepend=torch.zeros(1, dtype=torch.float64))
        assert torch.allclose(share, expected, atol=0.01)


def test_normals_have_the_moments_of_a_standard_normal():
    z = Streams([3]).normal(200_000)[0]
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs((z.abs() < 1).double().mean() - math.erf(1 / math.sqrt(2))) < 0.005


def test_generator_draws_follow_their_generator():
    a = GeneratorDraws(torch.Generator().manual_seed(4)).uniform(6)
    b = GeneratorDraws(torch.Generator().manual_seed(4)).uniform(6)
    assert a.shape == (1, 6) and torch.equal(a, b)


def test_a_draw_reads_nothing_back_and_its_work_does_not_grow_with_the_members():
    counts = []
    for members in (1, 64):
        streams = Streams(list(range(members)))
        with OpCounter() as counter:
            streams.uniform(8, 9)
            streams.categorical(torch.ones(members, 4, dtype=torch.float64).cumsum(1), 8)
            streams.advance()
        assert not counter.syncs
        counts.append(counter.total)
    assert counts[0] == counts[1]
