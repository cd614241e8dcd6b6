"""`crossbeat populate` and a broker that is away: started before it, stopped while it is gone.

Operators start components in any order, and upgrade the broker while the populator runs.
The populator waits for the broker (one log line per attempt, no traceback), a SIGTERM stops
it within seconds whatever it waits for, and nothing is lost: a batch it gave up to stop
was not checkpointed, so the next start publishes it.

The broker sits behind a relay (`tests/compat/broker/relay.py`): the populator is given the
relay's fixed address before any broker listens there, and the broker, on port 0, is put
behind it later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import pytest
from confluent_kafka import Consumer

from crossbeat.populator.auth import SigV4HttpxAuth
from crossbeat.populator.journal import JournalClient
from tests.compat.broker.helpers import BrokerProcess
from tests.compat.broker.relay import Relay, relay
from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client
from tests.support.procs import Service, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BUCKET = "popdown"
TOPIC = "crossbeat-replication"
STOP_BOUND_S = 10.0  # "stops within a couple of seconds", with room for a loaded machine


class Populate:
    """A `crossbeat populate` subprocess whose output is collected as it comes."""

    def __init__(self, config: Path) -> None:
        env = {**os.environ, "CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK,
               "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crossbeat", "populate", "--config", str(config)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        # Without librdkafka's own connection log lines (`%3|…`), which say nothing new here.
        return "".join(line for line in list(self.lines) if not line.startswith("%"))

    def wait_for(self, text: str, timeout: float) -> None:
        """Until `text` is in the output; fails at once if the process exits first."""
        wait_until(lambda: text in self.output() or self.proc.poll() is not None,
                   timeout=timeout, what=f"populator output {text!r}")
        assert self.proc.poll() is None, (
            f"populator exited with {self.proc.returncode} instead of waiting:\n{self.output()}"
        )
        assert text in self.output()

    def terminate(self) -> tuple[int | None, float]:
        """SIGTERM; (exit code, seconds it took), exit code None if it did not exit in time."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc: int | None = self.proc.wait(timeout=STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Service]:
    with running_gateway(tmp_path / "gw", extra_args=["--site", "a"]) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        s3.put_bucket_replication(Bucket=BUCKET, ReplicationConfiguration={
            "Role": "arn:aws:iam::000000000000:role/crossbeat",
            "Rules": [{"ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
                       "DeleteMarkerReplication": {"Status": "Enabled"},
                       "Destination": {"Bucket": f"arn:aws:s3:::{BUCKET}", "StorageClass": "b"}}]})
        yield gw


@pytest.fixture
def front() -> Iterator[Relay]:
    with relay() as r:
        yield r


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker")
    yield b
    if b.service is not None:
        b.stop()


def write_config(root: Path, gateway_url: str, brokers: str) -> Path:
    cfg = root / "crossbeat.toml"
    # Site b is never contacted: the populator only publishes.
    cfg.write_text(f"""
[populator]
gateway = "{gateway_url}"
brokers = "{brokers}"
data_dir = "{root / 'pop'}"
poll_wait_s = 0.5
topic_partitions = 2

[extensions.replication]
source = {{ endpoint = "{gateway_url}" }}
[extensions.replication.sites.b]
endpoint = "http://127.0.0.1:9"
""")
    return cfg


def put(gateway: Service, *keys: str) -> None:
    s3 = s3_client(gateway.url)
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"x")


def journal_last_seq(gateway: Service) -> int:
    journal = JournalClient(gateway.url, SigV4HttpxAuth(ROOT_AK, ROOT_SK, "us-east-1"))
    try:
        seq = 0
        while entries := journal.read(seq, 1000):
            seq = entries[-1].seq
        return seq
    finally:
        journal.close()


def checkpointed(root: Path) -> int:
    path = root / "pop" / "populator" / "populator.checkpoint.json"
    return int(orjson.loads(path.read_bytes())["seq"]) if path.exists() else 0


def assert_published(address: str, keys: set[str], timeout: float = 90) -> None:
    """Every one of `keys` (object keys of BUCKET) has a message on the replication topic."""
    consumer: Any = Consumer({"bootstrap.servers": address, "group.id": f"check-{uuid.uuid4()}",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: set[str] = set()
    try:
        consumer.subscribe([TOPIC])

        def all_there() -> bool:
            for msg in consumer.consume(100, 0.5):
                if msg.error() is None and msg.key():
                    bucket, _, key = unquote(msg.key().decode()).partition("/")
                    if bucket == BUCKET:
                        seen.add(key)
            return keys <= seen

        wait_until(all_there, timeout=timeout, what=f"messages for {sorted(keys - seen)}")
    finally:
        consumer.close()


def test_started_before_the_broker_it_waits_stops_on_sigterm_then_publishes_everything(
    tmp_path: Path, gateway: Service, front: Relay, broker: BrokerProcess,
) -> None:
    keys = {f"k{i}" for i in range(3)}
    put(gateway, *sorted(keys))
    cfg = write_config(tmp_path, gateway.url, front.address)  # nothing behind the relay yet

    first = Populate(cfg)
    try:
        # Waiting, said in log lines: not dead after ~30 s with a librdkafka traceback.
        first.wait_for("retrying in", timeout=45)
        assert "Traceback" not in first.output(), first.output()
        rc, took = first.terminate()
        assert rc == 0, f"exit {rc} after {took:.1f}s:\n{first.output()}"
        assert "Traceback" not in first.output(), first.output()
    finally:
        first.kill()

    second = Populate(cfg)
    try:
        second.wait_for("retrying in", timeout=45)
        front.start_broker(broker)  # the broker comes up behind the address it was given
        second.wait_for("crossbeat populate ready", timeout=90)
        assert_published(front.address, keys)  # what the journal held before: nothing lost
        wait_until(lambda: checkpointed(tmp_path) >= journal_last_seq(gateway), timeout=30,
                   what="the checkpoint to reach the journal's end")
        rc, took = second.terminate()
        assert rc == 0, f"exit {rc} after {took:.1f}s:\n{second.output()}"
        assert "Traceback" not in second.output(), second.output()
    finally:
        second.kill()


def test_sigterm_while_the_broker_is_away_stops_promptly_and_the_batch_is_published_later(
    tmp_path: Path, gateway: Service, front: Relay, broker: BrokerProcess,
) -> None:
    front.start_broker(broker)
    cfg = write_config(tmp_path, gateway.url, front.address)
    pop = Populate(cfg)
    try:
        pop.wait_for("crossbeat populate ready", timeout=90)
        put(gateway, "k0")
        before = journal_last_seq(gateway)
        wait_until(lambda: checkpointed(tmp_path) >= before, timeout=60, what="k0 checkpointed")
        broker.stop()  # the relay now turns every connection away
        later = {f"k{i}" for i in range(1, 6)}
        # Once these are acknowledged, the populator cannot stop before it has tried to
        # publish them: it is waiting for the broker, whichever step the SIGTERM finds.
        put(gateway, *sorted(later))
        rc, took = pop.terminate()
        assert rc is not None, f"still running {took:.1f}s after SIGTERM:\n{pop.output()}"
        assert rc == 0, f"exit {rc} after {took:.1f}s:\n{pop.output()}"
        assert "Traceback" not in pop.output(), pop.output()
        # Nothing the broker did not acknowledge was checkpointed …
        assert checkpointed(tmp_path) == before
    finally:
        pop.kill()

    # … so the next start publishes it.
    front.start_broker(broker)
    again = Populate(cfg)
    try:
        again.wait_for("crossbeat populate ready", timeout=90)
        assert_published(front.address, {"k0", *later})
        rc, took = again.terminate()
        assert rc == 0, f"exit {rc} after {took:.1f}s:\n{again.output()}"
    finally:
        again.kill()
