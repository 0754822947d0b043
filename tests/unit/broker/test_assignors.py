"""The KIP-848 server-side assignors: property tests."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.broker.groups.assignors import (
    AssignmentSpec,
    GroupAssignment,
    assignor,
    range_,
    uniform,
)
from headrace.protocol.errors import ErrorCode, KafkaProtocolError

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]

topic_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(min_value=0, max_value=12),
                               min_size=1)
member_ids = st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=7,
                      unique=True)


def _flatten(result: GroupAssignment) -> Counter[tuple[uuid.UUID, int]]:
    return Counter((t, p) for topics in result.values() for t, ps in topics.items() for p in ps)


def _size(result: GroupAssignment, member: str) -> int:
    return sum(len(ps) for ps in result.get(member, {}).values())


@st.composite
def specs(draw: st.DrawFn, homogeneous: bool = False) -> AssignmentSpec:
    counts = draw(topic_counts)
    members = draw(member_ids)
    if homogeneous:
        subs = {m: frozenset(counts) for m in members}
    else:
        subs = {m: frozenset(draw(st.sets(st.sampled_from(sorted(counts))))) for m in members}
    return AssignmentSpec(subs, counts)


def _check_complete(spec: AssignmentSpec, result: GroupAssignment) -> None:
    """Every partition of a subscribed topic exactly once, only to a subscriber."""
    subscribed = {t for subs in spec.subscriptions.values() for t in subs}
    expected = Counter((t, p) for t in subscribed for p in range(spec.partitions[t]))
    assert _flatten(result) == expected
    for m, topics in result.items():
        assert set(topics) <= spec.subscriptions[m]


@settings(max_examples=200, deadline=None)
@given(spec=specs())
def test_uniform_assigns_every_partition_once(spec: AssignmentSpec) -> None:
    _check_complete(spec, uniform(spec))


@settings(max_examples=200, deadline=None)
@given(spec=specs())
def test_range_assigns_every_partition_once(spec: AssignmentSpec) -> None:
    _check_complete(spec, range_(spec))


@settings(max_examples=200, deadline=None)
@given(spec=specs(homogeneous=True))
def test_uniform_is_balanced_within_one(spec: AssignmentSpec) -> None:
    result = uniform(spec)
    sizes = [_size(result, m) for m in spec.subscriptions]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(spec=specs())
def test_range_gives_contiguous_ranges_per_topic(spec: AssignmentSpec) -> None:
    result = range_(spec)
    for t, n in spec.partitions.items():
        members = sorted(m for m, subs in spec.subscriptions.items() if t in subs)
        start = 0
        for i, m in enumerate(members):
            size = n // len(members) + (1 if i < n % len(members) else 0)
            assert sorted(result[m].get(t, frozenset())) == list(range(start, start + size))
            start += size


@settings(max_examples=200, deadline=None)
@given(spec=specs(homogeneous=True), newcomer=st.text("xyz", min_size=1, max_size=3))
def test_uniform_is_sticky(spec: AssignmentSpec, newcomer: str) -> None:
    first = uniform(spec)
    # Same members again: nothing moves.
    again = uniform(AssignmentSpec(spec.subscriptions, spec.partitions, first))
    assert again == first
    # A member joins: the others only give partitions up, never swap.
    subs = dict(spec.subscriptions)
    subs[newcomer] = frozenset(spec.partitions)
    joined = uniform(AssignmentSpec(subs, spec.partitions, first))
    _check_complete(AssignmentSpec(subs, spec.partitions), joined)
    for m, topics in joined.items():
        if m == newcomer:
            continue
        for t, ps in topics.items():
            assert ps <= first.get(m, {}).get(t, frozenset())
    sizes = [_size(joined, m) for m in subs]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(spec=specs())
def test_range_is_stable(spec: AssignmentSpec) -> None:
    first = range_(spec)
    assert range_(AssignmentSpec(spec.subscriptions, spec.partitions, first)) == first


def test_unknown_assignor() -> None:
    with pytest.raises(KafkaProtocolError) as e:
        assignor("sticky")
    assert e.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
