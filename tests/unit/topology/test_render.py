from __future__ import annotations

import json
import shlex
from pathlib import Path

from crossbeat.topology import render
from crossbeat.topology.bundle import render_plan, write_plan
from crossbeat.topology.plan import plan_topics
from crossbeat.topology.sitemap import SiteMap


def _props(text: str) -> dict[str, str]:
    lines = [x for x in text.splitlines() if x and not x.startswith("#")]
    return dict(x.split("=", 1) for x in lines)


def test_broker_properties_carry_rack_and_durability(example: SiteMap) -> None:
    props = _props(render.broker_properties(example, example.server("md1")))
    assert props["broker.id"] == "2"
    assert props["broker.rack"] == "site1"
    assert props["min.insync.replicas"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["replica.selector.class"] == render.RACK_AWARE_SELECTOR
    assert props["advertised.listeners"] == "PLAINTEXT://10.100.7.65:9092"
    assert "10.100.8.67:2181" in props["zookeeper.connect"]


def test_client_properties_name_the_local_rack_first(example: SiteMap) -> None:
    props = _props(render.client_properties(example, example.server("md4")))
    assert props["client.rack"] == "site2"
    assert props["bootstrap.servers"].startswith("10.100.8.65:9092,10.100.8.66:9092,")


def test_zookeeper_observer_on_the_witness(example: SiteMap) -> None:
    wsb1 = render.planned_zookeeper_config(example, example.server("wsb1"))
    md1 = render.planned_zookeeper_config(example, example.server("md1"))
    assert "peerType=observer" in wsb1 and "peerType=observer" not in md1
    assert "server.6=10.100.8.67:2888:3888:observer" in md1
    assert "server.3=10.100.7.65:2888:3888\n" in md1  # md1 is id 2: myid 3


def test_kraft_rendering(kraft_example: SiteMap) -> None:
    props = _props(render.broker_properties(kraft_example, kraft_example.server("md1")))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert "10.100.8.67:9093" in props["controller.quorum.bootstrap.servers"]
    ctrl = _props(render.kraft_controller_properties(kraft_example, kraft_example.server("wsb1")))
    assert ctrl["process.roles"] == "controller"
    voter = render.kraft_format_command(kraft_example, kraft_example.server("md1"), "/c")
    observer = render.kraft_format_command(kraft_example, kraft_example.server("wsb1"), "/c")
    assert "--initial-controllers 2@10.100.7.65:9093:" in voter
    assert observer.endswith("--no-initial-controllers")


def test_kafka_uuids_are_stable_and_valid() -> None:
    a = render.kafka_uuid("cluster1", "md1")
    assert a == render.kafka_uuid("cluster1", "md1") != render.kafka_uuid("cluster1", "md2")
    assert len(a) == 22 and not a.startswith("-")


def test_mirror_maker_config(example: SiteMap) -> None:
    props = _props(render.mirror_maker_properties(example, plan_topics(example), "site1", "site2"))
    assert props["site1->site2.enabled"] == "true"
    assert props["site2->site1.enabled"] == "false"
    assert props["sync.group.offsets.enabled"] == "true"
    assert "crossbeat-bucket-notification" in props["site1->site2.topics"]


def test_plan_bundle(example: SiteMap, tmp_path: Path) -> None:
    files = render_plan(example, plan_topics(example))
    assert "brokers/md1/server.properties" in files
    assert "zookeeper/wsb1/zoo.cfg" in files and "brokers/wsb1/server.properties" not in files
    assert files["zookeeper/md4/myid"] == "1\n"
    doc = json.loads(files["plan.json"])
    notif = doc["topics"]["crossbeat-bucket-notification"]
    assert notif["assignment"]["0"] == [2, 1, 4, 0] and notif["acks"] == "all"
    assert "--replica-assignment 2:1:4:0,0:4:2:1,3:0:1:4,1:3:4:0,4:1:2:0" in files["topics.sh"]
    reassign = json.loads(files["reassignment.json"])
    assert reassign["partitions"][0] == {
        "topic": "crossbeat-bucket-notification",
        "partition": 0,
        "replicas": [2, 1, 4, 0],
    }
    written = write_plan(files, tmp_path / "out")
    assert len(written) == len(files)
    assert (tmp_path / "out" / "topics.sh").stat().st_mode & 0o111


def _v6(example: SiteMap) -> SiteMap:
    document = example.model_dump(mode="json")
    document["servers"][0]["address"] = "fd00::65"  # md1
    return SiteMap.model_validate(document)


def test_ipv6_addresses_are_bracketed(example: SiteMap) -> None:
    sitemap = _v6(example)
    md1 = sitemap.server("md1")
    zoo = render.planned_zookeeper_config(sitemap, md1)
    assert "server.3=[fd00::65]:2888:3888\n" in zoo
    props = _props(render.broker_properties(sitemap, md1))
    assert props["advertised.listeners"] == "PLAINTEXT://[fd00::65]:9092"
    assert props["zookeeper.connect"].startswith("[fd00::65]:2181,")
    client = _props(render.client_properties(sitemap, md1))
    assert client["bootstrap.servers"].startswith("[fd00::65]:9092,")
    mm2 = _props(render.mirror_maker_properties(sitemap, plan_topics(sitemap), "site1", "site2"))
    assert mm2["site1.bootstrap.servers"].startswith("[fd00::65]:9092,")
    files = render_plan(sitemap, plan_topics(sitemap))
    create = files["topics.sh"].splitlines()[3]
    assert "--bootstrap-server '[fd00::65]:9092'" in create  # quoted: [] is a shell glob


def test_ipv6_kraft_voters_are_bracketed(kraft_example: SiteMap) -> None:
    sitemap = _v6(kraft_example)
    voter = render.kraft_format_command(sitemap, sitemap.server("md1"), "/c")
    assert "2@[fd00::65]:9093:" in voter
    props = _props(render.broker_properties(sitemap, sitemap.server("md1")))
    assert "[fd00::65]:9093" in props["controller.quorum.bootstrap.servers"]


def test_topics_script_quotes_what_it_interpolates(example: SiteMap) -> None:
    files = render_plan(example, plan_topics(example))
    creates = [shlex.split(x) for x in files["topics.sh"].splitlines() if x.startswith("kafka")]
    assert [c[c.index("--topic") + 1] for c in creates] == [t.name for t in example.topics]
    for create in creates:
        assert create[create.index("--config") + 1] == "min.insync.replicas=2"
