"""A broker whose state files were damaged at rest still starts, says what it lost, and
serves: a transaction state that decodes but lacks its fields was a KeyError traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.broker.helpers import BrokerProcess, create_topic

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_a_damaged_transaction_state_is_forgotten_and_the_broker_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "transactions.log").write_text('{"tid":"x","state":"Ongoing"}\n')
    broker = BrokerProcess(data)
    broker.start()
    try:
        create_topic(broker.address, "after", 1)
        assert "the state of 'x' is damaged" in broker.output()
        assert "Traceback" not in broker.output()
    finally:
        broker.stop()
