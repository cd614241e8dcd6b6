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


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("servers", 0, "name"),
            "../../escaped",
            "servers[0].name: '../../escaped' is not a safe name",
        ),
        (("servers", 0, "name"), ".hidden", "is not a safe name"),
        (("sites", 0, "name"), "a/b", "sites[0].name: 'a/b' is not a safe name"),
        (("sites", 0, "rack"), "r\nfoo=bar", "sites[0].rack"),
        (("servers", 0, "address"), "h; rm -rf /", "servers[0].address: 'h; rm -rf /' is neither"),
        (
            ("topics", 0, "name"),
            "a topic; echo pwned",
            "topics[0].name: topic name 'a topic; echo pwned'",
        ),
        (("topics", 0, "name"), "..", "topic name '..' is not allowed by Kafka"),
        (("topics", 0, "name"), "t" * 250, "longer than Kafka's 249 characters"),
        (("cluster", "kafka_log_dirs"), "data; rm -rf /", "cluster.kafka_log_dirs"),
        (("cluster", "zookeeper_data_dir"), "relative/dir", "not an absolute path"),
    ],
)
def test_unsafe_names_are_refused(path: tuple[object, ...], value: str, message: str) -> None:
    doc = _doc()
    doc["cluster"] = {}
    target: object = doc
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    with pytest.raises(SiteMapError) as info:
        parse_sitemap(doc)
    assert message in str(info.value)


def test_safe_names_and_addresses_are_accepted() -> None:
    doc = _doc()
    doc["servers"][0]["address"] = "fd00::65"  # type: ignore[index]
    doc["servers"][1]["address"] = "md2.cluster1.example"  # type: ignore[index]
    doc["topics"][0]["name"] = "__consumer_offsets.v2-" + "x" * 200  # type: ignore[index]
    sitemap = parse_sitemap(doc)
    assert sitemap.servers[0].endpoint(9092) == "[fd00::65]:9092"
    assert sitemap.servers[1].endpoint(9092) == "md2.cluster1.example:9092"


def test_topic_names_colliding_in_metrics_are_refused() -> None:
    doc = _doc()
    doc["topics"] = [
        {"name": n, "workflow": "replication", "partitions": 1, "replication_factor": 2}
        for n in ("a.b", "a_b")
    ]
    with pytest.raises(SiteMapError, match="'a.b' and 'a_b' collide"):
        parse_sitemap(doc)


def test_empty_and_brokerless_sites_are_refused() -> None:
    doc = _doc()
    doc["sites"].insert(0, {"name": "empty", "role": "minority"})  # type: ignore[attr-defined]
    doc["sites"].append({"name": "c", "role": "minority"})  # type: ignore[attr-defined]
    doc["servers"].append({"name": "c1", "site": "c", "id": 3, "services": ["quorum-observer"]})  # type: ignore[attr-defined]
    with pytest.raises(SiteMapError) as info:
        parse_sitemap(doc)
    text = str(info.value)
    assert "sites[0] (empty): no server is on this site" in text
    assert "sites[3] (c): no server on this minority site runs 'broker'" in text


def test_a_witness_site_needs_no_broker(witness: SiteMap) -> None:
    assert witness.data_sites() == ["east", "west"] and witness.multi_site


def test_a_minority_site_holding_most_voters_is_refused() -> None:
    doc = _doc()
    doc["servers"].append({"name": "s3", "site": "b", "id": 3, "services": ["quorum"]})  # type: ignore[attr-defined]
    with pytest.raises(
        SiteMapError, match=r"sites\[1\] \(b\): this minority site holds 2 of the 3"
    ):
        parse_sitemap(doc)


def test_a_map_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(SiteMapError, match=f"site map {binary} is not UTF-8 text"):
        load_sitemap(binary)
    with pytest.raises(SiteMapError, match=f"cannot read site map {tmp_path}"):
        load_sitemap(tmp_path)  # a directory
