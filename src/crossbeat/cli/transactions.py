"""`crossbeat transactions find-hanging | abort`: Kafka's `kafka-transactions.sh` for
hanging transactions (KIP-664), against crossbeat's broker or any Kafka cluster.

A transaction hangs when a partition holds it open while its coordinator does not know it
(its state was lost, or the producer's epoch moved on): the partition's last stable offset,
and every read_committed consumer, stay at its first record. `find-hanging` looks at every
partition's open transactions (DescribeProducers) and asks the coordinators about them
(ListTransactions, DescribeTransactions), as the Java tool does; `abort` writes the ABORT
marker of the transaction that starts at an offset (WriteTxnMarkers). Through kafka-python's
admin client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import click

# Kafka's transaction.max.timeout.ms: no transaction may run longer, so one open longer than
# this is not a slow one.
DEFAULT_MAX_TIMEOUT_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class OpenTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int


def _admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient  # kafka-python: its import is slow

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="crossbeat-transactions")


def open_transactions(admin: Any, topics: list[str] | None = None) -> list[OpenTransaction]:
    """Every transaction some partition holds open (DescribeProducers on all partitions of
    `topics`, default every topic)."""
    from kafka.structs import TopicPartition

    names = topics or sorted(t for t in admin.list_topics() if not t.startswith("__"))
    partitions = [TopicPartition(t["name"], p["partition_index"])
                  for t in admin.describe_topics(names) for p in t["partitions"]]
    found = []
    for tp, state in (admin.describe_producers(partitions) if partitions else {}).items():
        for p in state.active_producers:
            if p.current_transaction_start_offset >= 0:
                found.append(OpenTransaction(tp.topic, tp.partition, p.producer_id, p.producer_epoch,
                                             p.coordinator_epoch, p.current_transaction_start_offset,
                                             p.last_timestamp))
    return sorted(found, key=lambda o: (o.topic, o.partition, o.start_offset))


def hanging(admin: Any, found: list[OpenTransaction], max_timeout_ms: int,
            now_ms: int | None = None) -> list[OpenTransaction]:
    """Those of `found` open longer than `max_timeout_ms` (by the producer's last write there)
    whose coordinator does not hold them: no transactional id with that producer id, or one
    whose transaction has another epoch, is not ongoing, or does not include the partition."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    old = [o for o in found if now_ms - o.last_timestamp_ms >= max_timeout_ms]
    if not old:
        return []
    listed = admin.list_transactions(producer_id_filters=sorted({o.producer_id for o in old}))
    tid_of = {row.producer_id: row.transactional_id for rows in listed.values() for row in rows}
    described = admin.describe_transactions(sorted(set(tid_of.values()))) if tid_of else {}
    result = []
    for o in old:
        d = described.get(tid_of.get(o.producer_id, ""))
        held = (d is not None and d.producer_id == o.producer_id
                and d.producer_epoch == o.producer_epoch
                and d.state.value in ("Ongoing", "PrepareCommit", "PrepareAbort")
                and any((tp.topic, tp.partition) == (o.topic, o.partition) for tp in d.topic_partitions))
        if not held:
            result.append(o)
    return result


@click.group()
@click.option("--bootstrap-server", "bootstrap", required=True, help="HOST:PORT of a broker")
@click.pass_context
def transactions(ctx: click.Context, bootstrap: str) -> None:
    """Find and abort hanging transactions (as Kafka's kafka-transactions.sh)."""
    ctx.obj = {"bootstrap": bootstrap}


@transactions.command("find-hanging")
@click.option("--topic", "topics", multiple=True, help="only these topics (default: all)")
@click.option("--max-transaction-timeout", "max_minutes", type=float,
              default=DEFAULT_MAX_TIMEOUT_MS / 60000, show_default=True,
              help="minutes a transaction may stay open (Kafka's transaction.max.timeout.ms)")
@click.pass_context
def find_hanging(ctx: click.Context, topics: tuple[str, ...], max_minutes: float) -> None:
    """List transactions partitions hold open that their coordinator does not."""
    admin = _admin(ctx.obj["bootstrap"])
    try:
        found = hanging(admin, open_transactions(admin, list(topics) or None), int(max_minutes * 60000))
    finally:
        admin.close()
    click.echo("Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\t"
               "LastTimestamp\tDuration(min)")
    now_ms = int(time.time() * 1000)
    for o in found:
        click.echo(f"{o.topic}\t{o.partition}\t{o.producer_id}\t{o.producer_epoch}\t"
                   f"{o.coordinator_epoch}\t{o.start_offset}\t{o.last_timestamp_ms}\t"
                   f"{(now_ms - o.last_timestamp_ms) // 60000}")


@transactions.command()
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, required=True,
              help="the first offset of the transaction (StartOffset of find-hanging)")
@click.pass_context
def abort(ctx: click.Context, topic: str, partition: int, start_offset: int) -> None:
    """Abort the transaction open on a partition from --start-offset."""
    from kafka.admin import AbortTransactionSpec
    from kafka.errors import KafkaError
    from kafka.structs import TopicPartition

    admin = _admin(ctx.obj["bootstrap"])
    try:
        match = [o for o in open_transactions(admin, [topic])
                 if o.partition == partition and o.start_offset == start_offset]
        if not match:
            raise click.ClickException(
                f"no transaction is open on {topic}-{partition} from offset {start_offset}")
        o = match[0]
        try:
            admin.abort_transaction(AbortTransactionSpec(
                TopicPartition(topic, partition), o.producer_id, o.producer_epoch,
                max(o.coordinator_epoch, 0)))
        except KafkaError as exc:
            raise click.ClickException(f"the broker refused the abort: {exc}") from exc
    finally:
        admin.close()
    click.echo(f"aborted the transaction of producer {o.producer_id} (epoch {o.producer_epoch}) "
               f"on {topic}-{partition} from offset {start_offset}")
