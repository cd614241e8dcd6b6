"""Hypothesis drives random and mutated frames through a live broker's request dispatch:
every frame ends in a response or a closed connection, no handler raises, and the broker
keeps answering."""

from __future__ import annotations

import contextlib
import logging
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest

from crossbeat.broker.codec import APIS
from tests.unit.broker.conftest import LoopBroker, call

# Frames a client could send, skipping the long polls (a JoinGroup waits for its rebalance)
_SKIP = {11, 14}
VALID = []
for key, spec in APIS.items():
    if key in _SKIP:
        continue
    for version in sorted({spec.min_version, spec.max_version}):
        body = spec.request(version=version)
        body.with_header(correlation_id=3, client_id="fuzz")
        VALID.append(bytes(body.encode(header=True, framed=True))[4:])


def exchange(broker: LoopBroker, payload: bytes) -> None:
    """Send one framed payload; read until a response frame, EOF, or a short timeout."""
    with broker.connect() as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        sock.settimeout(0.5)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            sock.recv(65536)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> LoopBroker:
    b = LoopBroker(tmp_path_factory.mktemp("fuzz") / "data").start()
    yield b  # type: ignore[misc]
    b.close()


class _Failures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def failures() -> _Failures:
    handler = _Failures()
    logging.getLogger("crossbeat.broker").addHandler(handler)
    yield handler  # type: ignore[misc]
    logging.getLogger("crossbeat.broker").removeHandler(handler)


def assert_alive(broker: LoopBroker) -> None:
    with broker.connect() as sock:
        resp = call(sock, ApiVersionsRequest(version=3, client_software_name="x",
                                             client_software_version="1"))
        assert resp.error_code == 0


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=st.binary(min_size=0, max_size=300))
def test_random_payloads(fuzz_broker: LoopBroker, failures: _Failures, payload: bytes) -> None:
    if not payload:
        payload = b"\x00"
    exchange(fuzz_broker, payload)
    assert not failures.records, [r.getMessage() for r in failures.records]


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(base=st.sampled_from(VALID), data=st.data())
def test_mutated_valid_requests(fuzz_broker: LoopBroker, failures: _Failures, base: bytes,
                                data: st.DataObject) -> None:
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(8, max(8, len(buf) - 1)))  # keep key/version: reach handlers
        if i < len(buf):
            buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(8, len(buf))):]
    exchange(fuzz_broker, bytes(buf))
    assert not failures.records, [r.getMessage() for r in failures.records]


def test_still_serving_after_fuzzing(fuzz_broker: LoopBroker) -> None:
    assert_alive(fuzz_broker)
