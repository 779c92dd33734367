"""BlockRefs (sim/core/kv/block_refs.py) against a plain block -> refcount dict, operation by operation."""

from __future__ import annotations

import random

import pytest

from sim.core.kv.block_refs import BlockRefs


def _release_ref(refs: dict[int, int], span: list[int]) -> list[bool]:
    """The reference: drop one user of each block; per block whether it is out of use now."""
    out = []
    for b in span:
        refs[b] -= 1
        if not refs[b]:
            del refs[b]
        out.append(b not in refs)
    return out


def _as_mask(got: int | list[bool], n: int) -> list[bool]:
    """release's answer as a per-block mask (an int k: the first k stay in use)."""
    return [i >= got for i in range(n)] if isinstance(got, int) else got


@pytest.mark.parametrize("seed", range(6))
def test_release_matches_refcounts(seed: int) -> None:
    rng = random.Random(seed)
    groups = 2
    refs = BlockRefs(groups)
    ref: dict[int, int] = {}
    holders: list[list[int]] = []  # spans some user holds (one reference each)
    parked: list[int] = []  # blocks out of use (cached free: a hit may take them back)
    leading = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.3 or not holders:
            g = rng.randrange(groups)
            span = refs.new(g, rng.randrange(1, 40))
            for b in span:
                ref[b] = 1
            holders.append(span)
        elif op < 0.4:  # a table as a request holds it: a hit (in use or parked), then runs of new blocks
            src = rng.choice(holders)
            hit = src[: rng.randrange(0, len(src) + 1)]
            back = [b for b in rng.sample(parked, min(len(parked), rng.randrange(0, 4))) if b not in ref]
            assert refs.count_in_use(hit + back) == len(hit)
            both = back + hit if rng.random() < 0.5 else hit + back
            assert refs.claim_many(list(both)) == back  # out of use: they come out of the free pool, the rest shared
            span = hit + back
            for b in span:
                ref[b] = ref.get(b, 0) + 1
            for _ in range(rng.randrange(1, 4)):
                span += refs.new(rng.randrange(groups), rng.randrange(1, 12))
            for b in span[len(hit) + len(back):]:
                ref[b] = 1
            holders.append(span)
        elif op < 0.6:  # a hit: another user of a leading run (the usual shape) or of scattered blocks
            src = rng.choice(holders)
            span = src[: rng.randrange(1, len(src) + 1)] if rng.random() < 0.8 else rng.sample(src, rng.randrange(1, len(src) + 1))
            assert refs.claim_many(list(span)) == []  # all in use: none comes out of the free pool
            for b in span:
                ref[b] += 1
            holders.append(list(span))
        else:
            span = holders.pop(rng.randrange(len(holders)))
            got = refs.release(list(span))
            want = _release_ref(ref, span)
            parked += [b for b, gone in zip(span, want, strict=True) if gone]
            assert _as_mask(got, len(span)) == want
            if isinstance(got, int):
                leading += got > 0
                assert want == [False] * got + [True] * (len(span) - got)
        assert refs.counts() == ref
    assert leading > 0  # the leading-run answer was exercised


def test_release_answers() -> None:
    refs = BlockRefs(1)
    a = refs.new(0, 20)
    assert refs.release(a[:5], maybe_shared=False) == 0  # none shared: all out of use
    b = a[5:]
    refs.claim_many(b[:4])  # the first 4 of b shared
    assert refs.release(b) == 4  # leading run: the count
    assert refs.counts() == {x: 1 for x in b[:4]}
    c = refs.new(0, 6)
    refs.claim_many([c[0], c[3]])  # not a leading run: a mask
    assert refs.release(c) == [False, True, True, False, True, True]
