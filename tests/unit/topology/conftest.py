from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.topology.sitemap import SiteMap, load_sitemap

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "stretched-5-servers.toml"


@pytest.fixture
def example_path() -> Path:
    return EXAMPLE


@pytest.fixture
def example() -> SiteMap:
    return load_sitemap(EXAMPLE)


@pytest.fixture
def kraft_example(example: SiteMap) -> SiteMap:
    document = example.model_dump()
    document["cluster"]["quorum"] = "kraft"
    return SiteMap.model_validate(document)


def _server(name: str, site: str, id: int, *services: str) -> dict[str, object]:
    return {"name": name, "site": site, "id": id, "services": list(services)}


def witness_document(quorum: str = "zookeeper") -> dict[str, object]:
    """Two data sites of two servers each plus a tiebreaker voter on a third site."""
    return {
        "cluster": {"name": "w", "quorum": quorum},
        "sites": [
            {"name": "east", "role": "majority"},
            {"name": "west", "role": "minority"},
            {"name": "tie", "role": "witness"},
        ],
        "servers": [
            _server("e1", "east", 1, "broker", "quorum", "metadata", "gateway"),
            _server("e2", "east", 2, "broker", "quorum", "metadata", "gateway"),
            _server("w1", "west", 3, "broker", "quorum", "metadata", "gateway"),
            _server("w2", "west", 4, "broker", "quorum", "metadata-standby", "gateway"),
            _server("t1", "tie", 5, "quorum"),
        ],
        "topics": [
            {"name": "notif", "workflow": "notification", "partitions": 4},
            {"name": "repl", "workflow": "replication", "partitions": 4},
        ],
    }


@pytest.fixture
def witness() -> SiteMap:
    return SiteMap.model_validate(witness_document())


@pytest.fixture
def witness_kraft() -> SiteMap:
    return SiteMap.model_validate(witness_document("kraft"))


@pytest.fixture
def mono() -> SiteMap:
    """Seed 001's mono-site install: one site, no rack awareness."""
    return SiteMap.model_validate(
        {
            "sites": [{"name": "only", "role": "majority"}],
            "servers": [
                _server("s1", "only", 0, "broker", "quorum", "gateway"),
                _server("s2", "only", 1, "broker", "quorum"),
                _server("s3", "only", 2, "broker", "quorum"),
                _server("s4", "only", 3, "broker"),
            ],
            "topics": [{"name": "notif", "workflow": "notification", "partitions": 3}],
        }
    )
