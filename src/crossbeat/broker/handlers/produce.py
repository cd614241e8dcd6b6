"""Produce (0): validate each partition's RecordBatch, check idempotent-producer
sequences, append, and answer once durable.

Acknowledgement: with acks=1 or acks=all (-1) the response is sent only after the stream
store's `append(durable=True)` returned, i.e. the batch and everything before it in its
partition is fsynced (concurrent appends share fsyncs: group commit). On this single node
1 and all mean the same, except that acks=all to a topic whose `min.insync.replicas` exceeds
our in-sync replica count (1) is refused with NOT_ENOUGH_REPLICAS and nothing written, as
Kafka checks before appending. acks=0 gets no response at all; its batches become durable
in the next group-commit round.

A batch that fails validation is refused for its partition and nothing of it is written;
other partitions of the same request are unaffected. The error codes are Kafka's, since
clients act on them: CORRUPT_MESSAGE (retriable: the Java producer resends the batch until
delivery.timeout.ms) for bytes that may have been damaged — a CRC-32C mismatch, a batch
length shorter than a header, a magic above 2; also a batch length running past the bytes
given, where Kafka finds no batch at all and answers INVALID_RECORD —, and
INVALID_RECORD (not retriable) for a batch that is intact but not what a Produce v3+ may
carry: an old message format (magic 0 or 1), anything after the one batch (a second batch,
trailing bytes), a record count that is not positive or does not match lastOffsetDelta + 1
(`ProduceRequest.validateRecords` and `LogValidator` in Kafka).

A topic whose `compression.type` names a codec gets every batch in that codec: one produced
with another is rebuilt first (`crossbeat.broker.recompress`); records that cannot be
decoded are CORRUPT_MESSAGE, and a rebuilt batch larger than `max.message.bytes` is
MESSAGE_TOO_LARGE. Decoding is bounded: a batch that decompresses (header + records) to more
than the broker's `max_decompressed_batch_bytes` — or, for `uncompressed`, than
`max.message.bytes`, since the rebuilt batch would be that large — is MESSAGE_TOO_LARGE too,
found before more than that was decompressed. With `producer`, the default, batches are
stored as produced, once every record in them has been walked, as Kafka's broker walks them
(`recompress.check_records`, decompressed under the same bound): records that are not what
the header says (garbage behind a valid CRC, fewer or more than its count, offset deltas
not 0..n-1, a header key that is not UTF-8) are INVALID_RECORD; before, they were stored
and every consumer stopped at them. A batch of `OFFLOAD_REBUILD_BYTES` or more, or whose header
counts `OFFLOAD_REBUILD_RECORDS` records or more, is rebuilt in a worker thread, so that
other clients are served meanwhile; the batches of its partition
that come behind it wait for its append (`crossbeat.broker.produce_order`), so each
partition's batches are appended in arrival order, as everywhere else on this path.

A CreateTime topic with `message.timestamp.before.max.ms` / `after.max.ms` (or the
deprecated `difference.max.ms`) refuses a batch holding a record timestamped further from
the broker's clock than that: INVALID_TIMESTAMP (not retriable) with Kafka's message, found
on the same walk of the records, and nothing of the batch is written.

Transactions (KIP-98): a transactional batch is accepted only from the producer (id and
epoch) of an open transaction of the request's transactional id that holds the partition
(AddPartitionsToTxn): an older epoch is INVALID_PRODUCER_EPOCH, anything else
INVALID_TXN_STATE; transactional requests need acks=all (INVALID_REQUIRED_ACKS). The
partition's transaction index (`crossbeat.broker.partition_txns`) holds the last stable
offset at the batch before it can become visible. Control batches are written by the
transaction coordinator only: a client's is INVALID_RECORD.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from crc32c import crc32c
from kafka.protocol.producer import ProduceResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.producers import Verdict
from crossbeat.broker.recompress import (
    CodecUnavailable,
    DecodedTooLarge,
    InvalidRecords,
    InvalidTimestamp,
    check_records,
    recompress,
    target_codec,
)
from crossbeat.broker.topic_configs import compacted, timestamp_bounds
from crossbeat.stream.batch import (
    CRC_START,
    BatchHeader,
    check_structure,
    crc_ok,
    parse_header,
)
from crossbeat.stream.errors import CorruptBatch, StreamError, StreamNotFound

log = logging.getLogger(__name__)

_Topic = ProduceResponse.TopicProduceResponse
_Partition = _Topic.PartitionProduceResponse
_RecordError = _Partition.BatchIndexAndErrorMessage

_LOG_APPEND_TIME = 0x08
# a batch at least this large is rebuilt for compression.type in a worker thread (a 1 MB
# batch takes 4-19 ms to rebuild, one that decodes to 32 MiB up to 3 s)
OFFLOAD_REBUILD_BYTES = 64 * 1024
# ... and so is one whose header counts at least this many records, however small it is
# compressed: the rebuild costs per record (kafka-python parses and re-encodes each one in
# Python). Measured zstd -> lz4: 2.6 us per empty record (100: 0.29 ms, 1000: 2.7 ms,
# 100000: 0.26 s), 3.6 us per record of 100-byte values; so the ~4.6M empty records that
# fit in the 32 MiB decode limit held the event loop ~12 s, from a zstd batch under 3 KB.
# 1000 keeps what runs on the loop under ~3-4 ms, while a smaller batch is rebuilt in well
# under a few ms and would gain little from the thread hop (~75 us measured)
OFFLOAD_REBUILD_RECORDS = 1000
# A batch stored as produced has its records walked (`recompress.check_records`, aiokafka's
# C parser: ~0.1 us a record, 0.13-0.33 us with lz4 or zstd decompression) in a worker
# thread from these sizes on: a librdkafka batch of 1 MB (~3,500 records of 256 B) is
# checked on the loop in about 0.4 ms, cheaper than the hop; millions of records are not.
OFFLOAD_CHECK_BYTES = 1024 * 1024
OFFLOAD_CHECK_RECORDS = 10_000
_MAX_COMPRESSION = 4  # zstd

# (error code, base offset, log append time, log start offset, error message, record errors:
# (index in the batch, message) of each record that failed its batch)
Outcome = tuple[int, int, int, int, str | None, list[tuple[int, str]]]


def _fail(code: int, message: str | None = None, records: list[tuple[int, str]] | None = None) -> Outcome:
    return (code, -1, -1, -1, message, records or [])


_MAGIC_AT = 16  # baseOffset i64, batchLength i32, partitionLeaderEpoch i32: the same in v0-v2


def check_batch(records: bytes | bytearray | memoryview) -> BatchHeader | Outcome:
    """The header of `records` if it is exactly one valid RecordBatch v2 (what
    `validate_batch` checks), else the refusal Kafka gives it (see the module docstring for
    which is CORRUPT_MESSAGE and which INVALID_RECORD).

    Checked in Kafka's order where the two codes compete: the old formats first, then the
    first batch's structure and CRC, then what follows it, then its counts. A batch length a
    few bytes short thus fails its CRC (CORRUPT_MESSAGE), as in Kafka, rather than leaving
    trailing bytes. One deliberate difference: Kafka drops up to 11 trailing bytes unread
    and appends the batch; here any are INVALID_RECORD, the answer it gives a second batch.
    """
    if len(records) > _MAGIC_AT and records[_MAGIC_AT] in (0, 1):
        return _fail(ErrorCode.INVALID_RECORD,
                     f"Produce requests with version >= 3 are only allowed to contain record "
                     f"batches with magic version 2, not {records[_MAGIC_AT]}")
    try:
        header = parse_header(records)
        check_structure(header, len(records))
    except CorruptBatch as exc:
        return _fail(ErrorCode.CORRUPT_MESSAGE, str(exc))
    if not crc_ok(records, 0, header):
        return _fail(ErrorCode.CORRUPT_MESSAGE, "batch CRC-32C mismatch")
    if header.size != len(records):
        return _fail(ErrorCode.INVALID_RECORD,
                     f"Produce requests with version >= 3 are only allowed to contain exactly "
                     f"one record batch per partition: {len(records) - header.size} bytes "
                     f"follow the batch of {header.size}")
    if header.record_count <= 0 or header.record_count != header.last_offset_delta + 1:
        return _fail(ErrorCode.INVALID_RECORD,
                     f"record count {header.record_count} does not match last offset delta "
                     f"{header.last_offset_delta} (count must be lastOffsetDelta + 1 > 0)")
    return header


def _min_insync_replicas(configs: dict[str, str]) -> int:
    try:
        return int(configs.get("min.insync.replicas", "1"))
    except ValueError:  # a value stored before CreateTopics checked it: Kafka's default
        return 1


def _set_log_append_time(buf: bytearray, now_ms: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp = now and recompute its CRC."""
    (attributes,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attributes | _LOG_APPEND_TIME)
    struct.pack_into(">q", buf, 35, now_ms)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[CRC_START:]))


async def produce_one(ctx: Context, topic_name: str, index: int, records: Any,
                      acks: int, transactional_id: str | None = None) -> Outcome:
    """Validate and append one partition's batch; never raises for bad input."""
    broker = ctx.broker
    topic = broker.topics.get(topic_name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return _fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    stream = topic.partitions[index]
    if records is None:
        return _fail(ErrorCode.CORRUPT_MESSAGE, "no records")
    min_isr = _min_insync_replicas(topic.configs)
    isr = {broker.node_id}  # a single node: every partition's only replica is ours
    if acks == -1 and min_isr > len(isr):
        return _fail(ErrorCode.NOT_ENOUGH_REPLICAS,
                     f"The size of the current ISR {isr} is insufficient to satisfy the "
                     f"min.isr requirement of {min_isr} for partition {topic_name}-{index}")
    header = check_batch(records)
    if not isinstance(header, BatchHeader):
        log.warning("produce to %s-%d from %s: %s batch rejected: %s", topic_name, index,
                    ctx.client_host, "corrupt" if header[0] == ErrorCode.CORRUPT_MESSAGE
                    else "invalid", header[4])
        return header
    limit = int(topic.configs.get("max.message.bytes", broker.settings.max_message_bytes))
    if len(records) > limit:
        return _fail(ErrorCode.MESSAGE_TOO_LARGE, f"batch of {len(records)} bytes > {limit}")
    if header.is_control:
        return _fail(ErrorCode.INVALID_RECORD, "control batches are written by the broker only")
    if header.compression > _MAX_COMPRESSION:
        return _fail(ErrorCode.CORRUPT_MESSAGE, f"unknown compression codec {header.compression}")
    keyed = compacted(topic.configs)  # a compacted topic refuses records without a key
    window = _timestamp_window(topic.configs)
    codec = target_codec(topic.configs)
    if codec == header.compression:
        codec = None  # stored as produced
    if codec is not None:
        offload = (len(records) >= OFFLOAD_REBUILD_BYTES
                   or header.record_count >= OFFLOAD_REBUILD_RECORDS)
    else:
        offload = (len(records) >= OFFLOAD_CHECK_BYTES
                   or header.record_count >= OFFLOAD_CHECK_RECORDS)
    index_missing = header.is_transactional and broker.partition_txns.peek(stream.name) is None
    order = broker.produce_order
    # a batch that will await before its append keeps its place (`produce_order`), and so
    # does every batch of the partition that comes while one does
    turn = order.join(stream.name) if offload or index_missing or order.busy(stream.name) else None
    try:
        buf: bytearray | None = None
        if codec is not None:
            # before the sequence check, so a batch refused here leaves no pending state; a
            # large one in a worker thread, while the batches ahead of it are appended
            rebuilt = await _rebuild(ctx, topic_name, index, records, header, codec, limit, offload,
                                     keyed, window)
            if not isinstance(rebuilt, bytearray):
                return rebuilt
            buf = rebuilt
        else:
            refused = await _check(ctx, topic_name, index, records, header, offload, keyed, window)
            if refused is not None:
                return refused
        if turn is not None:
            await turn.wait()

        txn_index = None
        if header.is_transactional:
            # the partition's transaction index, built in a worker thread the first time
            await broker.partition_txns.ensure(stream)
            # no await from here to the append: a marker ending the transaction is appended
            # either before this check (which then refuses) or after this batch
            code = broker.txns.verify_produce(transactional_id, header.producer_id,
                                              header.producer_epoch, (topic_name, index))
            if code:
                return _fail(code)
            try:
                txn_index = broker.partition_txns.get(stream)
            except StreamError as exc:
                return _fail(ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
        verdict: Verdict = broker.producers.check(stream, header)
        if verdict.error:
            return _fail(verdict.error)
        if verdict.duplicate_of is not None:
            if turn is not None:
                turn.release()  # nothing to append: the next batch need not wait for the original
            try:
                offset = (verdict.duplicate_of if isinstance(verdict.duplicate_of, int)
                          else await asyncio.shield(verdict.duplicate_of))
            except CorruptBatch:
                return _fail(ErrorCode.CORRUPT_MESSAGE)
            except StreamError:
                return _fail(ErrorCode.KAFKA_STORAGE_ERROR)
            return (ErrorCode.NONE, offset, -1, stream.start_offset, None, [])

        if buf is None:
            buf = bytearray(records)
        lower_bound = stream.log_end_offset
        began = txn_index is not None and txn_index.begin(header.producer_id, lower_bound)
        append_time = -1
        if topic.log_append_time:
            append_time = int(time.time() * 1000)
            _set_log_append_time(buf, append_time)
        if turn is not None:
            turn.release()  # the append below is queued before the next batch wakes
        try:
            base = await stream.append(buf, durable=acks != 0)
        except CorruptBatch as exc:
            broker.producers.failed(stream, header, verdict, exc)
            return _fail(ErrorCode.CORRUPT_MESSAGE, str(exc))
        except StreamNotFound as exc:
            broker.producers.failed(stream, header, verdict, exc)
            return _fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        except StreamError as exc:
            broker.producers.failed(stream, header, verdict, exc)
            log.error("produce to %s-%d failed: %s", topic_name, index, exc)
            return _fail(ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
        broker.producers.appended(verdict, base)
        if began and txn_index is not None:
            txn_index.started(header.producer_id, lower_bound, base)
        return (ErrorCode.NONE, base, append_time, stream.start_offset, None, [])
    finally:
        if turn is not None:
            turn.release()


def _timestamp_window(configs: dict[str, str]) -> tuple[int, int] | None:
    """The lowest and highest record timestamp (ms) the topic accepts now, or None: any."""
    bounds = timestamp_bounds(configs)
    if bounds is None:
        return None
    now_ms = int(time.time() * 1000)
    return now_ms - bounds[0], now_ms + bounds[1]


async def _rebuild(ctx: Context, topic_name: str, index: int, records: Any, header: Any,
                   codec: int, limit: int, offload: bool, keyed: bool,
                   window: tuple[int, int] | None) -> bytearray | Outcome:
    """The batch rebuilt in the topic's codec, or the answer refusing it."""
    decoded_limit = ctx.broker.settings.max_decompressed_batch_bytes
    if codec == 0:  # stored uncompressed, the decoded batch is the one to check
        decoded_limit = min(decoded_limit, limit)
    try:
        if offload:  # not on the event loop: other clients are served meanwhile
            buf = await asyncio.to_thread(recompress, records, header, codec,
                                          max_decoded_bytes=decoded_limit, require_keys=keyed,
                                          timestamps=window)
        else:
            buf = recompress(records, header, codec, max_decoded_bytes=decoded_limit,
                             require_keys=keyed, timestamps=window)
    except (DecodedTooLarge, CorruptBatch, CodecUnavailable) as exc:
        return _undecodable(ctx, topic_name, index, exc)
    if len(buf) > limit:  # Kafka checks the rebuilt batch again
        return _fail(ErrorCode.MESSAGE_TOO_LARGE,
                     f"recompressed batch of {len(buf)} bytes > {limit}")
    return buf


async def _check(ctx: Context, topic_name: str, index: int, records: Any, header: Any,
                 offload: bool, keyed: bool, window: tuple[int, int] | None) -> Outcome | None:
    """None if every record of a batch stored as produced parses, else the answer refusing
    it, as `_rebuild` refuses a batch it cannot decode."""
    decoded_limit = ctx.broker.settings.max_decompressed_batch_bytes
    try:
        if offload:  # not on the event loop: other clients are served meanwhile
            await asyncio.to_thread(check_records, records, header, max_decoded_bytes=decoded_limit,
                                    require_keys=keyed, timestamps=window)
        else:
            check_records(records, header, max_decoded_bytes=decoded_limit, require_keys=keyed,
                          timestamps=window)
    except (DecodedTooLarge, CorruptBatch, CodecUnavailable) as exc:
        return _undecodable(ctx, topic_name, index, exc)
    return None


def _undecodable(ctx: Context, topic_name: str, index: int, exc: Exception) -> Outcome:
    """The answer to a batch whose records could not be decoded (see `recompress`)."""
    where = f"produce to {topic_name}-{index} from {ctx.client_host}"
    if isinstance(exc, DecodedTooLarge):
        # MESSAGE_TOO_LARGE, not CORRUPT_MESSAGE: the bytes are valid, there are just too
        # many once decoded, which is how Kafka answers a batch its rebuild makes too large
        # (RecordTooLargeException). The Java producer splits such a batch and retries the
        # halves, where CORRUPT_MESSAGE is retriable and would be resent unchanged
        # (Kafka trunk's max.decompressed.message.bytes bounds one record, not the batch,
        # and answers INVALID_RECORD for it)
        log.warning("%s: batch refused: %s", where, exc)
        return _fail(ErrorCode.MESSAGE_TOO_LARGE, str(exc))
    if isinstance(exc, InvalidTimestamp):  # the topic's message.timestamp.*.max.ms
        log.info("%s: batch refused: %s", where, exc.records[0][1])
        return _fail(ErrorCode.INVALID_TIMESTAMP, str(exc), exc.records)
    if isinstance(exc, InvalidRecords):  # Kafka's answer to records it cannot read
        log.warning("%s: invalid records rejected: %s", where, exc)
        return _fail(ErrorCode.INVALID_RECORD, str(exc))
    if isinstance(exc, CorruptBatch):
        log.warning("%s: undecodable batch rejected: %s", where, exc)
        return _fail(ErrorCode.CORRUPT_MESSAGE, str(exc))
    log.error("produce to %s-%d: %s", topic_name, index, exc)  # CodecUnavailable
    return _fail(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))


async def handle(ctx: Context, req: Any) -> Any:
    acks = req.acks
    jobs: list[tuple[str, int]] = []
    outcomes: list[Outcome]
    if acks not in (0, 1, -1) or (req.transactional_id is not None and acks != -1):
        jobs = [(t.name, p.index) for t in req.topic_data for p in t.partition_data]
        outcomes = [_fail(ErrorCode.INVALID_REQUIRED_ACKS) for _ in jobs]
    else:
        coros = []
        for t in req.topic_data:
            for p in t.partition_data:
                jobs.append((t.name, p.index))
                coros.append(produce_one(ctx, t.name, p.index, p.records, acks,
                                         req.transactional_id))
        # one partition: no task at all; several: gather starts them in creation order,
        # so appends are queued in request order
        outcomes = [await coros[0]] if len(coros) == 1 else list(await asyncio.gather(*coros))
    if acks == 0:
        return None
    by_topic: dict[str, list[Any]] = {}
    for (name, index), (code, base, append_time, log_start, message, records) in zip(
            jobs, outcomes, strict=True):
        by_topic.setdefault(name, []).append(_Partition(
            index=index, error_code=int(code), base_offset=base, log_append_time_ms=append_time,
            log_start_offset=log_start, error_message=message,
            record_errors=[_RecordError(batch_index=i, batch_index_error_message=m) for i, m in records]))
    return ProduceResponse(
        responses=[_Topic(name=name, partition_responses=parts) for name, parts in by_topic.items()],
        throttle_time_ms=0,
    )
