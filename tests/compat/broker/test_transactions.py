"""Transactions (KIP-98) with confluent-kafka's transactional producer and read_committed /
read_uncommitted consumers against a real broker: commit, abort, the last stable offset,
offsets sent to a transaction, fencing, the transaction timeout, and a restart."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.broker.helpers import (
    BrokerProcess,
    consume_n,
    create_topic,
    new_consumer,
    stable_offsets,
)
from tests.support.procs import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def txn_producer(address: str, tid: str, **config: Any) -> Any:
    producer = Producer({"bootstrap.servers": address, "transactional.id": tid,
                         "linger.ms": 5, **config})
    producer.init_transactions(20)
    return producer


def produce_txn(producer: Any, topic: str, values: list[bytes], *, commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(20) == 0  # written, so an abort has something to hide
    if commit:
        producer.commit_transaction(20)
    else:
        producer.abort_transaction(20)


def read_values(address: str, topic: str, n: int, isolation: str, timeout: float = 20) -> list[bytes]:
    consumer = new_consumer(address, f"r-{uuid.uuid4().hex[:8]}", **{"isolation.level": isolation})
    consumer.subscribe([topic])
    try:
        return [m.value() for m in consume_n(consumer, n, timeout)]
    finally:
        consumer.close()


@pytest.fixture
def topic(broker: BrokerProcess, topic_name: str) -> str:
    create_topic(broker.address, topic_name, 1)
    return topic_name


def test_commit_shows_and_abort_hides(broker: BrokerProcess, topic: str) -> None:
    producer = txn_producer(broker.address, "tx-basic")
    produce_txn(producer, topic, [b"a", b"b"], commit=True)
    produce_txn(producer, topic, [b"aborted"], commit=False)
    produce_txn(producer, topic, [b"c"], commit=True)
    # one partition, in order: "c" comes after the aborted record, so seeing it proves the
    # aborted one was dropped, not late
    assert read_values(broker.address, topic, 3, "read_committed") == [b"a", b"b", b"c"]
    assert read_values(broker.address, topic, 4, "read_uncommitted") == [
        b"a", b"b", b"aborted", b"c"]


def test_open_transaction_holds_the_last_stable_offset(broker: BrokerProcess, topic: str) -> None:
    first = txn_producer(broker.address, "tx-first")
    produce_txn(first, topic, [b"first"], commit=True)  # offsets 0, marker 1
    open_one = txn_producer(broker.address, "tx-open")
    open_one.begin_transaction()
    open_one.produce(topic, value=b"pending")  # offset 2
    assert open_one.flush(20) == 0
    produce_txn(first, topic, [b"after"], commit=True)  # offset 3, marker 4
    assert stable_offsets(broker.address, topic) == (2, 5)

    consumer = new_consumer(broker.address, "lso", **{"isolation.level": "read_committed"})
    consumer.subscribe([topic])
    try:
        assert [m.value() for m in consume_n(consumer, 1)] == [b"first"]
        assert consume_n(consumer, 1, timeout=1) == []  # held at the open transaction
        open_one.commit_transaction(20)
        assert stable_offsets(broker.address, topic) == (6, 6)
        assert [m.value() for m in consume_n(consumer, 2)] == [b"pending", b"after"]
    finally:
        consumer.close()


def test_offsets_commit_only_with_the_transaction(broker: BrokerProcess, topic: str) -> None:
    source = f"{topic}-in"
    create_topic(broker.address, source, 1)
    plain = Producer({"bootstrap.servers": broker.address})
    for value in (b"1", b"2", b"3"):
        plain.produce(source, value=value)
    assert plain.flush(20) == 0
    consumer = new_consumer(broker.address, "txg")
    consumer.subscribe([source])
    assert len(consume_n(consumer, 3)) == 3
    tp = TopicPartition(source, 0)
    producer = txn_producer(broker.address, "tx-offsets")
    try:
        for commit in (False, True):
            producer.begin_transaction()
            producer.produce(topic, value=b"out")
            producer.send_offsets_to_transaction(consumer.position([tp]),
                                                 consumer.consumer_group_metadata(), 20)
            if commit:
                producer.commit_transaction(20)
            else:
                producer.abort_transaction(20)
            committed = consumer.committed([tp], timeout=20)[0].offset
            assert committed == (3 if commit else -1001), (commit, committed)
    finally:
        consumer.close()


def test_second_producer_fences_the_first(broker: BrokerProcess, topic: str) -> None:
    zombie = txn_producer(broker.address, "tx-fence")
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    assert zombie.flush(20) == 0
    successor = txn_producer(broker.address, "tx-fence")  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(20)
    assert raised.value.args[0].fatal()
    produce_txn(successor, topic, [b"successor"], commit=True)
    assert read_values(broker.address, topic, 1, "read_committed") == [b"successor"]
    assert read_values(broker.address, topic, 2, "read_uncommitted") == [b"zombie", b"successor"]


def test_transaction_left_open_times_out(broker: BrokerProcess, topic: str) -> None:
    producer = txn_producer(broker.address, "tx-slow", **{"transaction.timeout.ms": 1000})
    producer.begin_transaction()
    producer.produce(topic, value=b"too slow")
    assert producer.flush(20) == 0
    wait_until(lambda: stable_offsets(broker.address, topic) == (2, 2), timeout=20,
               what="the offsets after the abort")  # aborted: marker at 1
    with pytest.raises(KafkaException):
        producer.commit_transaction(20)
    other = txn_producer(broker.address, "tx-other")
    produce_txn(other, topic, [b"later"], commit=True)
    assert read_values(broker.address, topic, 1, "read_committed") == [b"later"]


def test_restart_keeps_open_and_committed(broker: BrokerProcess, topic: str) -> None:
    """A transaction open at a crash stays open (as in Kafka: its producer may still commit
    it, see test_transaction_restart.py) until its producer's successor fences it."""
    kept = txn_producer(broker.address, "tx-kept")
    produce_txn(kept, topic, [b"kept"], commit=True)
    open_one = txn_producer(broker.address, "tx-crash")
    open_one.begin_transaction()
    open_one.produce(topic, value=b"lost")
    assert open_one.flush(20) == 0
    broker.kill()
    broker.start()
    assert stable_offsets(broker.address, topic) == (2, 3)  # kept, marker; lost: still open
    later = txn_producer(broker.address, "tx-crash")  # aborts it: its marker at 3
    assert stable_offsets(broker.address, topic) == (4, 4)
    produce_txn(later, topic, [b"later"], commit=True)
    assert read_values(broker.address, topic, 2, "read_committed") == [b"kept", b"later"]
    assert read_values(broker.address, topic, 3, "read_uncommitted") == [
        b"kept", b"lost", b"later"]


def test_kafka_python_transactional_producer(broker: BrokerProcess, topic: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.address, transactional_id="tx-kp",
                             max_block_ms=20000)
    try:
        producer.init_transactions()
        for value, commit in ((b"dropped", False), (b"kept", True)):
            producer.begin_transaction()
            producer.send(topic, value).get(timeout=20)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=5)
    assert read_values(broker.address, topic, 1, "read_committed") == [b"kept"]
    assert read_values(broker.address, topic, 2, "read_uncommitted") == [b"dropped", b"kept"]


def test_read_committed_member_waits_for_offsets_of_an_open_transaction(
        broker: BrokerProcess, topic: str) -> None:
    source = f"{topic}-in"
    create_topic(broker.address, source, 1)
    plain = Producer({"bootstrap.servers": broker.address})
    for i in range(8):
        plain.produce(source, value=b"%d" % i)
    assert plain.flush(20) == 0
    first = new_consumer(broker.address, "stable")
    first.subscribe([source])
    assert len(consume_n(first, 8)) == 8
    first.commit(offsets=[TopicPartition(source, 0, 2)], asynchronous=False)
    producer = txn_producer(broker.address, "tx-stable")
    producer.begin_transaction()
    producer.produce(topic, value=b"out")
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 5)],
                                         first.consumer_group_metadata(), 20)
    first.close()
    # librdkafka sends require_stable for read_committed: offset 2 must not be handed out
    # while the transaction that replaces it with 5 is open
    second = new_consumer(broker.address, "stable", **{"isolation.level": "read_committed"})
    second.subscribe([source])
    try:
        assert consume_n(second, 1, timeout=3) == []
        producer.commit_transaction(20)
        assert [m.offset() for m in consume_n(second, 1)] == [5]
    finally:
        second.close()


def test_admin_lists_and_describes_transactions(broker: BrokerProcess, topic: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    produce_txn(txn_producer(broker.address, "tx-done"), topic, [b"x"], commit=True)
    txn_producer(broker.address, "tx-idle")
    ongoing = txn_producer(broker.address, "tx-ongoing", **{"transaction.timeout.ms": 30000})
    ongoing.begin_transaction()
    ongoing.produce(topic, value=b"open")
    assert ongoing.flush(20) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        described = admin.describe_transactions(["tx-done", "tx-idle", "tx-ongoing"])
        assert {tid: (d.state.value, {tuple(tp) for tp in d.topic_partitions})
                for tid, d in described.items()} == {
            "tx-done": ("CompleteCommit", set()), "tx-idle": ("Empty", set()),
            "tx-ongoing": ("Ongoing", {(topic, 0)})}
        d = described["tx-ongoing"]
        assert (d.transaction_timeout_ms, d.producer_epoch) == (30000, 0)
        assert abs(d.transaction_start_time_ms - time.time() * 1000) < 60_000
        assert described["tx-idle"].transaction_start_time_ms == -1
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["tx-unknown"])

        def listed(**filters: Any) -> dict[str, str]:
            (rows,) = admin.list_transactions(**filters).values()
            return {r.transactional_id: r.state.value for r in rows}

        assert listed() == {"tx-done": "CompleteCommit", "tx-idle": "Empty",
                            "tx-ongoing": "Ongoing"}
        assert listed(state_filters=["Ongoing", "Empty"]) == {
            "tx-idle": "Empty", "tx-ongoing": "Ongoing"}
        assert listed(state_filters=["NoSuchState"]) == {}
        assert listed(producer_id_filters=[described["tx-done"].producer_id]) == {
            "tx-done": "CompleteCommit"}
        # started just now: not running longer than 10 minutes (Empty has no start: listed)
        assert listed(duration_filter_ms=600_000) == {"tx-idle": "Empty"}
        # v2 (KIP-1152): a regular expression the whole id must match
        assert listed(transactional_id_pattern="tx-(done|idle)") == {
            "tx-done": "CompleteCommit", "tx-idle": "Empty"}
        assert listed(transactional_id_pattern="tx-on") == {}  # a prefix does not match
        assert listed(transactional_id_pattern="") == listed()
        with pytest.raises(Exception, match="error_code=128"):  # INVALID_REGULAR_EXPRESSION
            listed(transactional_id_pattern="(")
    finally:
        admin.close()
        ongoing.abort_transaction(20)


def test_abortable_error_is_recovered_with_an_epoch_bump(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    stuck = f"{topic}-stuck"  # NOT_ENOUGH_REPLICAS forever: the message times out locally
    admin.create_topics([NewTopic(stuck, 1, 1, config={"min.insync.replicas": "2"})])[
        stuck].result(20)
    producer = txn_producer(broker.address, "tx-bump", **{"message.timeout.ms": 1000})
    producer.begin_transaction()
    producer.produce(stuck, value=b"never")
    producer.flush(20)
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(20)
    assert raised.value.args[0].txn_requires_abort()
    # abort bumps the epoch by InitProducerId v3+ (KIP-360); older brokers make it fatal
    producer.abort_transaction(20)
    produce_txn(producer, topic, [b"after"], commit=True)
    assert read_values(broker.address, topic, 1, "read_committed") == [b"after"]


def hang_a_transaction(broker: BrokerProcess, topic: str) -> None:
    """Offsets 0-1: a committed transaction; 2: one left open by producer "tx-lost" (epoch 1)
    whose coordinator state is then lost, so the restart cannot abort it."""
    produce_txn(txn_producer(broker.address, "tx-kept"), topic, [b"kept"], commit=True)
    txn_producer(broker.address, "tx-lost")
    lost = txn_producer(broker.address, "tx-lost")  # same producer id, epoch bumped to 1
    lost.begin_transaction()
    lost.produce(topic, value=b"hanging")  # offset 2
    assert lost.flush(20) == 0
    broker.kill()
    (broker.data_dir / "transactions.log").write_bytes(b"")  # the coordinator's state, lost
    broker.start()
    assert stable_offsets(broker.address, topic) == (2, 3)  # held at the hanging transaction


def test_a_transaction_its_coordinator_lost_is_aborted_by_an_admin(
    broker: BrokerProcess, topic: str,
) -> None:
    """The hanging transaction of KIP-664: the coordinator's state is lost (its log damaged
    at rest), so the restart cannot abort what a partition still holds open, and the last
    stable offset stays there. DescribeProducers finds it; kafka-python's abort_transaction
    (WriteTxnMarkers) ends it, as `kafka-transactions.sh abort` does."""
    from kafka import KafkaAdminClient
    from kafka.admin import AbortTransactionSpec
    from kafka.errors import InvalidProducerEpochError
    from kafka.structs import TopicPartition as KTopicPartition

    hang_a_transaction(broker, topic)

    tp = KTopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        (hanging,) = [p for p in admin.describe_producers([tp])[tp].active_producers
                      if p.current_transaction_start_offset >= 0]
        assert (hanging.current_transaction_start_offset, hanging.producer_epoch) == (2, 1)
        with pytest.raises(InvalidProducerEpochError):  # epoch 0's transaction is over
            admin.abort_transaction(AbortTransactionSpec(tp, hanging.producer_id, 0))
        assert stable_offsets(broker.address, topic) == (2, 3)
        spec = AbortTransactionSpec(tp, hanging.producer_id, hanging.producer_epoch)
        admin.abort_transaction(spec)
        assert stable_offsets(broker.address, topic) == (4, 4)  # the abort marker at 3
        admin.abort_transaction(spec)  # nothing open any more: no second marker
        assert stable_offsets(broker.address, topic) == (4, 4)
        assert [p.current_transaction_start_offset
                for p in admin.describe_producers([tp])[tp].active_producers] == [-1, -1]
    finally:
        admin.close()
    assert read_values(broker.address, topic, 1, "read_committed") == [b"kept"]
    later = txn_producer(broker.address, "tx-later")
    produce_txn(later, topic, [b"later"], commit=True)
    assert read_values(broker.address, topic, 2, "read_committed") == [b"kept", b"later"]
    assert read_values(broker.address, topic, 3, "read_uncommitted") == [
        b"kept", b"hanging", b"later"]
    assert broker.service is not None
    assert any("ended by a WriteTxnMarkers ABORT" in line for line in broker.service.output)


def test_the_transactions_command_finds_and_aborts_a_hanging_transaction(
    broker: BrokerProcess, topic: str,
) -> None:
    """`crossbeat transactions` (as kafka-transactions.sh): find-hanging lists what a partition
    holds open and its coordinator does not, not a transaction merely under way; abort ends
    the one starting at an offset."""
    import subprocess
    import sys

    def crossbeat(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "crossbeat", "transactions",
                               "--bootstrap-server", broker.address, *args],
                              capture_output=True, text=True, timeout=60)

    hang_a_transaction(broker, topic)
    ongoing = txn_producer(broker.address, "tx-ongoing")  # its coordinator holds it: not hanging
    ongoing.begin_transaction()
    ongoing.produce(topic, value=b"under way")  # offset 3
    assert ongoing.flush(20) == 0
    found = crossbeat("find-hanging", "--max-transaction-timeout", "0")
    assert found.returncode == 0, found.stderr
    rows = [line.split("\t") for line in found.stdout.splitlines()[1:]]
    assert [(r[0], r[1], r[3], r[5]) for r in rows] == [(topic, "0", "1", "2")], found.stdout
    assert crossbeat("find-hanging").stdout.count("\n") == 1  # none open 15 minutes yet
    missing = crossbeat("abort", "--topic", topic, "--partition", "0", "--start-offset", "1")
    assert missing.returncode == 1 and "no transaction is open" in missing.stderr
    done = crossbeat("abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert done.returncode == 0 and "aborted the transaction" in done.stdout, done.stderr
    assert stable_offsets(broker.address, topic)[0] == 3  # now held only by the one under way
    ongoing.commit_transaction(20)
    assert read_values(broker.address, topic, 2, "read_committed") == [b"kept", b"under way"]
