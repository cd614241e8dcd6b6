"""Fixtures: a `crossbeat broker` subprocess per test (tmp data dir, port 0)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.broker.helpers import BrokerProcess, running_broker
from tests.support.smallfs import small_filesystem


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data") as proc:
        yield proc


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB filesystem of the test's own, for filling (see tests.support.smallfs)."""
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 16) as mnt:
        yield mnt


@pytest.fixture
def broker_on_small_fs(small_fs: Path) -> Iterator[BrokerProcess]:
    """A broker whose data dir is on `small_fs`."""
    with running_broker(small_fs / "data") as proc:
        yield proc


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return f"t-{request.node.name[:40]}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")


