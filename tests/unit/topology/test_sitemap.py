from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.topology.durability import WORKFLOWS, resolve
from crossbeat.topology.errors import SiteMapError, TopologyError
from crossbeat.topology.sitemap import SiteMap, load_sitemap, parse_sitemap


def test_example_map_is_the_seed_layout(example: SiteMap) -> None:
    assert [s.name for s in example.servers_on("site1")] == ["md1", "md2", "md3"]
    assert [s.name for s in example.servers_on("site2")] == ["md4", "md5", "wsb1"]
    assert [b.id for b in example.brokers()] == [0, 1, 2, 3, 4]
    wsb1 = example.server("wsb1")
    assert wsb1.runs("quorum-observer") and not wsb1.runs("broker")
    assert example.majority_site().name == "site1"
    assert example.rack_of(example.server("md4")) == "site2"


def _doc() -> dict[str, object]:
    return {
        "sites": [{"name": "a", "role": "majority"}, {"name": "b", "role": "minority"}],
        "servers": [
            {"name": "s1", "site": "a", "id": 1, "services": ["broker", "quorum"]},
            {"name": "s2", "site": "b", "id": 2, "services": ["broker", "quorum"]},
        ],
        "topics": [
            {"name": "t", "workflow": "replication", "partitions": 2, "replication_factor": 2}
        ],
    }


def test_minimal_document_is_valid() -> None:
    assert parse_sitemap(_doc()).cluster.min_insync_replicas == 2


def test_every_problem_is_listed_with_its_path() -> None:
    doc = _doc()
    doc["sites"] = [{"name": "a", "role": "majority"}, {"name": "a", "role": "majority"}]
    doc["servers"] = [
        {"name": "s1", "site": "zz", "id": 1, "services": ["broker"]},
        {"name": "s1", "site": "a", "id": 1, "services": ["broker"]},
    ]
    doc["topics"] = [{"name": "t", "workflow": "nope", "partitions": 1}]
    with pytest.raises(SiteMapError) as info:
        parse_sitemap(doc, "map.toml")
    text = str(info.value)
    for expected in (
        "map.toml is invalid",
        "duplicate site names: a",
        "duplicate server names: s1",
        "duplicate server ids: 1",
        "exactly one site must have role 'majority' (found 2)",
        "servers[0].site: unknown site 'zz'",
        "no server runs 'quorum'",
        "unknown workflow 'nope'",
    ):
        assert expected in text


def test_field_errors_name_the_field() -> None:
    doc = _doc()
    doc["servers"][0]["services"] = ["brokr"]  # type: ignore[index]
    doc["cluster"] = {"quorum": "raft"}
    with pytest.raises(SiteMapError) as info:
        parse_sitemap(doc)
    assert "servers[0].services[0]: Input should be 'broker'" in str(info.value)
    assert "cluster.quorum" in str(info.value)


def test_replication_factor_above_brokers_is_refused() -> None:
    doc = _doc()
    doc["topics"] = [{"name": "n", "workflow": "notification", "partitions": 1}]
    with pytest.raises(
        SiteMapError, match=r"topics\[0\] \(n\): replication factor 4 exceeds the 2 brokers"
    ):
        parse_sitemap(doc)


def test_witness_site_may_not_run_a_broker() -> None:
    doc = _doc()
    doc["sites"].append({"name": "w", "role": "witness"})  # type: ignore[attr-defined]
    doc["servers"].append({"name": "w1", "site": "w", "id": 3, "services": ["broker"]})  # type: ignore[attr-defined]
    with pytest.raises(SiteMapError, match="witness site 'w' may not run a broker"):
        parse_sitemap(doc)


def test_unknown_keys_are_refused() -> None:
    doc = _doc()
    doc["sitez"] = []
    with pytest.raises(SiteMapError, match="sitez: Extra inputs are not permitted"):
        parse_sitemap(doc)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SiteMapError, match="not found"):
        load_sitemap(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sites\n")
    with pytest.raises(SiteMapError, match="not valid TOML"):
        load_sitemap(bad)


def test_workflow_durability_defaults() -> None:
    notif = resolve("notification", cluster_min_insync_replicas=2)
    assert (notif.acks, notif.replication_factor, notif.copy_on_each_site) == ("all", 4, True)
    assert notif.producer_properties == {"acks": "all", "enable.idempotence": "true"}
    repl = resolve("replication", cluster_min_insync_replicas=2)
    assert (repl.acks, repl.replication_factor, repl.replayable) == ("1", 3, True)
    assert "anti-entropy" in repl.safeguard
    assert repl.producer_properties["enable.idempotence"] == "false"
    assert set(WORKFLOWS) >= {"notification", "replication"}


def test_durability_overrides_and_refusals() -> None:
    custom = resolve("audit", cluster_min_insync_replicas=2, acks="all", replication_factor=3)
    assert custom.min_insync_replicas == 2 and not custom.replayable
    with pytest.raises(TopologyError, match="exceeds replication factor"):
        resolve("notification", cluster_min_insync_replicas=2, replication_factor=1)
