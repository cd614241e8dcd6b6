"""Fixtures: a `crossbeat broker` subprocess per test (tmp data dir, port 0)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.broker.helpers import BrokerProcess, running_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data") as proc:
        yield proc


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return f"t-{request.node.name[:40]}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")


