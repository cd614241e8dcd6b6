"""The ONE shared local[2] SparkSession of tests/spark, and a broker to read from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import Service, start_service


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from crossbeat.spark.session import build_session

    session = build_session("local[2]", "crossbeat-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data: Path = tmp_path_factory.mktemp("spark-broker")
    service = start_service(["broker", "--data-dir", str(data), "--listen", "127.0.0.1:0"])
    yield service
    service.stop()
