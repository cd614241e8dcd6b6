"""The replication pipelines as Structured Streaming queries over `crossbeat-kafka`.

- `replication-<site>` (one query per destination site, consumer group
  `crossbeat-replication-<site>`): reads `crossbeat-replication`, replicates each entry
  naming the site (in executors, `ReplicationProcessor`), sets the outcomes at the source
  with one compare-and-set batch (`StatusUpdater.try_batch`, unless
  `apply_status_inline = false`) and produces them to `crossbeat-replication-status`,
  those it set marked `applied`. Pausing a site holds its query's offsets (the source's
  pause gate on `crossbeat-replication-control`), so nothing is lost or skipped. A site
  or source that does not answer holds the running batch in the same way (see
  `ReplicationProcessor.process_batch`): its versions stay PENDING, not FAILED.
- `replication-status` (group `crossbeat-replication-status`): applies the outcomes not
  marked `applied` to the source metadata with compare-and-set and retries
  (`StatusUpdater.apply_batch`).

Setting the status in the replication batch puts one micro-batch, not two, between a PUT
and its COMPLETED status; the status pipeline remains the path that waits out a source
that did not answer, and the topic still carries every outcome.

Both are idempotent per record, so a batch replayed after a crash (the batches since the
last progress written, see `_start`) is harmless; the Spark checkpoint under the data dir
is the restart point.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import orjson
import pyarrow as pa

from crossbeat.extensions.replication.messages import (
    ENTRY_KIND,
    STATUS_KIND,
    ReplicationEntry,
    ReplicationOutcome,
)
from crossbeat.extensions.replication.processor import ReplicationProcessor
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.extensions.replication.status_updater import StatusUpdater
from crossbeat.populator.extension import Message, message_key
from crossbeat.populator.publisher import Publisher, ensure_topics
from crossbeat.spark.settings import PipelineSettings
from crossbeat.spark.worker_heap import freeze_heap

log = logging.getLogger(__name__)
COUNT_SCHEMA = "n long"
PIPELINES = ("replication", "replication-status")
# the longest wait before restarting a failed query, and how long a restarted one must run
# before its next failure counts as a first one again
MAX_RESTART_DELAY_S = 60.0

# Per Python worker (workers are reused across batches): clients keyed by pipeline run.
_WORKER_CACHE: dict[tuple[str, str], Any] = {}


def _cached(token: str, what: str, make: Callable[[], Any]) -> Any:
    key = (token, what)
    if key not in _WORKER_CACHE:
        _WORKER_CACHE[key] = make()
        freeze_heap()  # the client lives as long as the worker: out of the per-task GC
    return _WORKER_CACHE[key]


def _docs(batches: Iterator[pa.RecordBatch], kind: str) -> list[dict[str, Any]]:
    docs = []
    for batch in batches:
        for raw in batch.column("value").to_pylist():
            if raw is None:
                continue
            doc = orjson.loads(raw)
            if isinstance(doc, dict) and doc.get("kind") == kind:
                docs.append(doc)
    return docs


def replicate_partition(
    token: str, site: str, settings: ReplicationSettings, brokers: str, status_topic: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of `replication-<site>` (runs in executors)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        entries = [ReplicationEntry.from_json(d) for d in _docs(batches, ENTRY_KIND)]
        outcomes: list[ReplicationOutcome] = []
        if entries:
            processor = _cached(token, f"processor-{site}",
                                lambda: ReplicationProcessor(settings, site))
            outcomes = processor.process_batch(entries)
        if outcomes and settings.apply_status_inline:
            updater = _cached(token, "status", lambda: StatusUpdater(settings))
            results = updater.try_batch(outcomes)
            outcomes = [o if r is None else replace(o, applied=True)
                        for o, r in zip(outcomes, results, strict=True)]
        if outcomes:
            publisher = _cached(token, "publisher", lambda: Publisher(brokers))
            publisher.publish(
                Message(status_topic, message_key(o.bucket, o.key), o.to_json()) for o in outcomes
            )
        yield pa.RecordBatch.from_pydict({"n": [len(outcomes)]}, schema=pa.schema([("n", pa.int64())]))

    return run


def status_partition(
    token: str, settings: ReplicationSettings
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of `replication-status` (runs in executors)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        outcomes = [o for o in map(ReplicationOutcome.from_json, _docs(batches, STATUS_KIND))
                    if not o.applied]
        applied = 0
        if outcomes:
            updater = _cached(token, "status", lambda: StatusUpdater(settings))
            applied = sum(1 for r in updater.apply_batch(outcomes) if r == "applied")
        yield pa.RecordBatch.from_pydict({"n": [applied]}, schema=pa.schema([("n", pa.int64())]))

    return run


def _stream(spark: Any, ps: PipelineSettings, topic: str, group: str, **extra: str) -> Any:
    reader = (
        spark.readStream.format("crossbeat-kafka")
        .option("kafka.bootstrap.servers", ps.brokers)
        .option("subscribe", topic)
        .option("startingOffsets", ps.starting_offsets)
        .option("failOnDataLoss", str(ps.fail_on_data_loss).lower())
        .option("maxOffsetsPerTrigger", str(ps.max_offsets_per_trigger))
        .option("rowsPerTask", str(ps.rows_per_task))
        .option("kafka.group.id", group)
    )
    for k, v in extra.items():
        reader = reader.option(k, v)
    return reader.load().select("value")


def _start(df: Any, ps: PipelineSettings, name: str, fn: Any, trigger_ms: int | None = None) -> Any:
    """Run `fn` (a mapInArrow function with side effects) over each micro-batch.

    The work is the mapInArrow itself, written to the `noop` sink: unlike foreachBatch, no
    call back into the Python driver and no new DataFrame to analyse per batch. Progress
    (offset and commit logs, source commits) is tracked asynchronously: a batch no longer
    waits ~0.2-0.7 s for two checkpoint files on a busy disk. After a crash the query
    resumes from the last progress written, up to about a second behind; the batches since
    are replayed, which the idempotent processors allow (as with any at-least-once sink).
    """
    return (
        df.mapInArrow(fn, COUNT_SCHEMA).writeStream.queryName(name)
        .format("noop")
        .option("asyncProgressTrackingEnabled", "true")
        .option("checkpointLocation", str(ps.checkpoint_dir(name)))
        .trigger(processingTime=f"{ps.trigger_ms if trigger_ms is None else trigger_ms} milliseconds")
        .start()
    )


def start_replication(
    spark: Any, ps: PipelineSettings, rs: ReplicationSettings, sites: list[str] | None = None
) -> list[Any]:
    """One query per destination site (`sites`, default all of `rs.sites`)."""
    token = uuid.uuid4().hex
    topic, status_topic = ps.topic(rs.topic), ps.topic(rs.status_topic)
    control = ps.topic(rs.control_topic)
    ensure_topics(ps.brokers, [topic, status_topic], ps.topic_partitions)
    ensure_topics(ps.brokers, [control], 1)
    queries = []
    for site in sites or sorted(rs.sites):
        df = _stream(spark, ps, topic, f"crossbeat-replication-{site}",
                     pauseTopic=control, pauseKey=site)
        fn = replicate_partition(token, site, rs, ps.brokers, status_topic)
        queries.append(_start(df, ps, f"replication-{site}", fn))
    return queries


def start_status(spark: Any, ps: PipelineSettings, rs: ReplicationSettings) -> list[Any]:
    token = uuid.uuid4().hex
    status_topic = ps.topic(rs.status_topic)
    ensure_topics(ps.brokers, [status_topic], ps.topic_partitions)
    df = _stream(spark, ps, status_topic, "crossbeat-replication-status")
    trigger_ms = ps.status_trigger_ms
    if trigger_ms is None:
        # with the outcomes set inline, this query only has leftovers: no hurry, less work
        trigger_ms = max(ps.trigger_ms, 5000) if rs.apply_status_inline else ps.trigger_ms
    return [_start(df, ps, "replication-status", status_partition(token, rs), trigger_ms)]


def run_pipelines(
    spark: Any,
    names: list[str],
    ps: PipelineSettings,
    rs: ReplicationSettings,
    stop: threading.Event,
    *,
    on_ready: Callable[[list[str]], None] | None = None,
    restart_delay_s: float = 2.0,
) -> None:
    """Run the pipelines until `stop` is set, restarting a query that fails.

    A query fails when a batch cannot finish (broker or source gateway unreachable past
    the retry bounds, data lost under failOnDataLoss); restarting it replays that batch
    from the checkpoint, which the idempotent processors allow. A query that fails again
    soon after its restart is restarted after a doubling delay (`restart_delay`), so that a
    failure that persists costs a restart a minute, not one every few seconds. A restart
    that fails (the broker still unreachable when the query's topics are checked) counts as
    another failure of that query: the process stays up. A query that failed is one that is
    no longer active or that has an exception: Spark can leave a failed query active with
    no thread running it (see `retire`), and waiting for it to go inactive stalled the
    pipeline for good. Queries are stopped gracefully when `stop` is set.
    """
    warm_workers(spark)
    queries = start_pipelines(spark, names, ps, rs)
    if on_ready is not None:
        on_ready([q.name for q in queries])
    supervise(spark, queries, lambda name: _restart(spark, name, ps, rs), stop,
              restart_delay_s=restart_delay_s)


def supervise(
    spark: Any,
    queries: list[Any],
    restart: Callable[[str], Any],
    stop: threading.Event,
    *,
    restart_delay_s: float = 2.0,
) -> None:
    """`run_pipelines`' loop over running `queries`: until `stop` is set, restart (with
    `restart(name)`, which returns the new query) each one that failed, then stop them."""
    reported: dict[str, int] = {}
    failures: dict[str, int] = {}  # failures in a row, by query
    started: dict[str, float] = {q.name: time.monotonic() for q in queries}
    try:
        while not stop.wait(1.0):
            for i, q in enumerate(queries):
                error = q.exception()
                if q.isActive and error is None:
                    _report(q, reported)
                    if time.monotonic() - started[q.name] > MAX_RESTART_DELAY_S:
                        failures.pop(q.name, None)  # it has run a while: a new failure is new
                    continue
                failures[q.name] = failures.get(q.name, 0) + 1
                delay = restart_delay(failures[q.name], restart_delay_s)
                log.error("query %s stopped (%s); restarting in %.0f s (failure %d in a row)",
                          q.name, error, delay, failures[q.name])
                retire(spark, q)
                if stop.wait(delay):
                    return
                try:
                    queries[i] = restart(q.name)
                except Exception as exc:  # noqa: BLE001 - e.g. the broker still away at restart
                    # the dead query stays in place: the next pass counts another failure and
                    # tries again after a longer delay, instead of the process exiting
                    log.error("query %s could not be restarted (%s); trying again", q.name, exc)
                    continue
                started[q.name] = time.monotonic()
    finally:
        for q in queries:
            if q.isActive:
                q.stop()


def retire(spark: Any, query: Any) -> None:
    """Stop a failed query for good, so that one of its name can start again.

    A query with async progress tracking whose batch fails can stay active for ever with
    its thread gone (Spark 4.3's StreamExecution.runStream: `stopSources` closes the Python
    source's runner, then the async cleanup's `commitAllSources` writes to it, throws
    ClosedChannelException, and the query is never marked terminated nor taken out of the
    active queries). Its `exception()` is set: the caller takes that for a failure. `stop()`
    then returns at once, but the manager still holds the query under its name, and a
    restart under that name fails ("a query with that name is already active"): the
    manager is told it terminated (`notifyQueryTermination`, Spark's own step after
    cleanup; a JVM method PySpark does not wrap), which is a no-op for a query that did
    terminate. Failing here changes nothing: the restart then fails and is retried later.
    """
    try:
        query.stop()
    except Exception as exc:  # noqa: BLE001 - py4j or Spark's: a dead query's stop may fail
        log.warning("stopping failed query %s: %s", query.name, exc)
    try:
        spark._jsparkSession.streams().notifyQueryTermination(query._jsq.streamingQuery())
    except Exception as exc:  # noqa: BLE001 - a private Spark method: say so, go on
        log.warning("could not unregister failed query %s: %s", query.name, exc)


def restart_delay(failures: int, base: float, cap: float = MAX_RESTART_DELAY_S) -> float:
    """Seconds before restarting a query that failed `failures` (≥ 1) times in a row:
    `base`, doubling with each failure, at most `cap`."""
    return min(cap, base * 2 ** min(failures - 1, 30))


def _warm(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # Importing what the batches will need is most of a new Python worker's start-up.
    import crossbeat.extensions.replication.processor  # noqa: F401
    import crossbeat.extensions.replication.status_updater  # noqa: F401
    import crossbeat.spark.kafka_client  # noqa: F401

    freeze_heap()
    yield from batches


def warm_workers(spark: Any) -> None:
    """Start and warm the Python workers the queries' first batches would otherwise wait
    for (3-10 s each on a loaded machine): a job with two Python stages per task, as a
    micro-batch has (the source's read and the mapInArrow), on every core. Reused workers
    then serve the streaming tasks."""
    n = max(2, int(spark.sparkContext.defaultParallelism))
    df = spark.range(0, 2 * n, numPartitions=2 * n)
    df.mapInArrow(_warm, df.schema).mapInArrow(_warm, df.schema).collect()


def _report(query: Any, reported: dict[str, int]) -> None:
    """Log each batch that had input, once: rows and where its time went."""
    last = reported.get(query.name, -1)
    for progress in query.recentProgress:
        if progress["batchId"] <= last:
            continue
        last = progress["batchId"]
        if progress.get("numInputRows"):
            log.info("%s batch %s at %s: %s rows, %s", query.name, progress["batchId"],
                     progress.get("timestamp"), progress["numInputRows"],
                     progress.get("durationMs"))
    reported[query.name] = last


def _restart(spark: Any, name: str, ps: PipelineSettings, rs: ReplicationSettings) -> Any:
    if name == "replication-status":
        return start_status(spark, ps, rs)[0]
    site = name.removeprefix("replication-")
    return start_replication(spark, ps, rs, sites=[site])[0]


def start_pipelines(
    spark: Any, names: list[str], ps: PipelineSettings, rs: ReplicationSettings
) -> list[Any]:
    """Start the named pipelines (`replication`, `replication-status`) in one session."""
    queries: list[Any] = []
    for name in names:
        if name == "replication":
            queries += start_replication(spark, ps, rs)
        elif name == "replication-status":
            queries += start_status(spark, ps, rs)
        else:
            raise ValueError(f"unknown pipeline {name!r} (known: {', '.join(PIPELINES)})")
    return queries
