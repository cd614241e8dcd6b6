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
