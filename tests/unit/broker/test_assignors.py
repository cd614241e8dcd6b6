"""The KIP-848 server-side assignors: complete, exclusive, balanced, sticky (uniform)."""

from __future__ import annotations

from crossbeat.broker.groups.assignors import Assignment, range_, uniform

TOPICS = {"a": 4, "b": 3}


def check_complete(out: dict[str, Assignment], subs: dict[str, frozenset[str]]) -> None:
    owned = [tp for tps in out.values() for tp in tps]
    assert len(owned) == len(set(owned)), "a partition given twice"
    wanted = {(t, p) for s in subs.values() for t in s for p in range(TOPICS.get(t, 0))}
    assert set(owned) == wanted
    for member, tps in out.items():
        assert all(t in subs[member] for t, _ in tps)


def test_uniform_balances_and_moves_only_what_it_must() -> None:
    subs = {m: frozenset({"a", "b"}) for m in ("m1", "m2", "m3")}
    first = uniform(subs, TOPICS, {})
    check_complete(first, subs)
    assert sorted(len(v) for v in first.values()) == [2, 2, 3]
    # m2 leaves: the others keep everything they had and share m2's partitions
    subs2 = {m: subs[m] for m in ("m1", "m3")}
    second = uniform(subs2, TOPICS, first)
    check_complete(second, subs2)
    assert first["m1"] <= second["m1"] and first["m3"] <= second["m3"]
    assert sorted(len(v) for v in second.values()) == [3, 4]
    # m4 joins: it takes partitions only from members above their share
    subs3 = {**subs2, "m4": frozenset({"a", "b"})}
    third = uniform(subs3, TOPICS, second)
    check_complete(third, subs3)
    assert sorted(len(v) for v in third.values()) == [2, 2, 3]
    moved = sum(len(second[m] - third[m]) for m in ("m1", "m3"))
    assert moved == len(third["m4"])


def test_uniform_respects_differing_subscriptions() -> None:
    subs = {"m1": frozenset({"a"}), "m2": frozenset({"a", "b"}), "m3": frozenset({"b"})}
    out = uniform(subs, TOPICS, {})
    check_complete(out, subs)
    assert max(len(v) for v in out.values()) - min(len(v) for v in out.values()) <= 1


def test_range_gives_contiguous_ranges_per_topic() -> None:
    subs = {m: frozenset({"a", "b"}) for m in ("m1", "m2")}
    out = range_(subs, TOPICS, {})
    check_complete(out, subs)
    assert out["m1"] == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    assert out["m2"] == {("a", 2), ("a", 3), ("b", 2)}


def test_no_members_no_topics() -> None:
    assert uniform({}, TOPICS, {}) == {}
    assert uniform({"m": frozenset({"gone"})}, TOPICS, {}) == {"m": frozenset()}
