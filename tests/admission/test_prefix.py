"""Block hashing of prompts and the approximate prefix index.

Covered: hashes are chained (a shared prefix gives equal leading hashes, one differing block
changes every hash after it), only full blocks are hashed; the index answers the longest
believed-held leading chain per pod, forgets least recently recorded blocks beyond a pod's
capacity (tails before heads), shrinks and removes pods. Hypothesis checks that the index never
holds more than a pod's capacity and agrees with a brute-force model of per-pod LRU sets.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.admission.prefix import PrefixIndex, chain_hashes, prompt_block_hashes


def test_prompts_sharing_a_prefix_share_its_leading_hashes():
    system = "s" * 64
    one = prompt_block_hashes(text=system + "a" * 40, block_tokens=4, chars_per_token=4)
    two = prompt_block_hashes(text=system + "b" * 40, block_tokens=4, chars_per_token=4)
    # 104 characters are 6 full blocks of 16; the last 8 characters are left out.
    assert len(one) == len(two) == 6
    assert one[:4] == two[:4]
    assert one[4] != two[4]


def test_hashes_are_chained_through_every_earlier_block():
    first = chain_hashes([b"x", b"y", b"z"])
    changed = chain_hashes([b"w", b"y", b"z"])
    assert all(a != b for a, b in zip(first, changed, strict=True))
    assert all(0 <= h < 2**63 for h in first)
    assert chain_hashes([b"x", b"y", b"z"]) == first


def test_a_prompt_shorter_than_a_block_has_no_hashes():
    assert prompt_block_hashes(text="short", block_tokens=512, chars_per_token=4) == ()
    with pytest.raises(ValueError, match=">= 1"):
        prompt_block_hashes(text="x", block_tokens=0, chars_per_token=4)


def test_matches_give_each_pods_longest_leading_chain():
    index: PrefixIndex[str] = PrefixIndex()
    for pod in ("a", "b", "c"):
        index.set_capacity(pod=pod, blocks=100)
    index.record(pod="a", hashes=[1, 2, 3, 4])
    index.record(pod="b", hashes=[1, 2, 9])
    index.record(pod="c", hashes=[7, 2, 3])
    assert index.matches(hashes=[1, 2, 3, 4, 5]) == {"a": 4, "b": 2}
    assert index.matches(hashes=[8, 2]) == {}
    assert index.matches(hashes=[]) == {}


def test_a_full_pod_forgets_the_oldest_tail_first():
    index: PrefixIndex[str] = PrefixIndex()
    index.set_capacity(pod="a", blocks=5)
    index.record(pod="a", hashes=[1, 2, 3])
    index.record(pod="a", hashes=[7, 8, 9])
    # Six blocks for five places: the oldest chain loses its tail, keeps its head.
    assert index.held(pod="a") == 5
    assert index.matches(hashes=[1, 2, 3]) == {"a": 2}
    assert index.matches(hashes=[7, 8, 9]) == {"a": 3}
    index.record(pod="a", hashes=[1, 2])
    index.record(pod="a", hashes=[5, 6])
    # [1, 2] was refreshed, so [7, 8, 9] is now the oldest and loses 9 and 8.
    assert index.matches(hashes=[1, 2]) == {"a": 2}
    assert index.matches(hashes=[7, 8, 9]) == {"a": 1}


def test_shrinking_and_removing_pods():
    index: PrefixIndex[str] = PrefixIndex()
    index.set_capacity(pod="a", blocks=10)
    index.set_capacity(pod="b", blocks=10)
    index.record(pod="a", hashes=[1, 2, 3, 4])
    index.record(pod="b", hashes=[1, 2, 3, 4])
    index.set_capacity(pod="a", blocks=2)
    assert index.matches(hashes=[1, 2, 3, 4]) == {"a": 2, "b": 4}
    index.remove(pod="b")
    assert index.pods == ("a",)
    assert index.matches(hashes=[1, 2, 3, 4]) == {"a": 2}
    with pytest.raises(KeyError):
        index.record(pod="b", hashes=[1])


@settings(max_examples=150, deadline=None)
@given(
    capacities=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=3),
    routes=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2),
            st.lists(st.integers(min_value=0, max_value=8), max_size=5, unique=True),
        ),
        max_size=30,
    ),
    probe=st.lists(st.integers(min_value=0, max_value=8), max_size=5),
)
def test_index_agrees_with_per_pod_lru_sets(capacities, routes, probe):
    index: PrefixIndex[int] = PrefixIndex()
    model: dict[int, OrderedDict[int, None]] = {}
    for pod, blocks in enumerate(capacities):
        index.set_capacity(pod=pod, blocks=blocks)
        model[pod] = OrderedDict()
    for pod, hashes in routes:
        if pod >= len(capacities):
            continue
        index.record(pod=pod, hashes=hashes)
        held = model[pod]
        for block in reversed(hashes[: capacities[pod]]):
            held.pop(block, None)
            held[block] = None
        while len(held) > capacities[pod]:
            held.popitem(last=False)
        assert index.held(pod=pod) == len(held) <= capacities[pod]
    expected = {}
    for pod, held in model.items():
        depth = 0
        while depth < len(probe) and probe[depth] in held:
            depth += 1
        if depth:
            expected[pod] = depth
    assert index.matches(hashes=probe) == expected
