"""Throughput and produce-ack latency: crossbeat's broker vs NATS JetStream, same run.

    .venv/bin/python benchmarks/broker_throughput.py [--messages-256 N] [--messages-4k N]

Clients: librdkafka (confluent-kafka) against `crossbeat broker`; nats-py against
`nats-server -js`. One partition / one stream, no compression, payloads of 256 B and 4 KiB.

Durability, both sides acknowledge only what is on disk:
- crossbeat: acks=all; a produce is answered after `append(durable=True)`, i.e. after the
  fdatasync of a group-commit round (one fsync per round, shared by every batch that
  arrived within `flush_max_delay_ms`, default 2 ms).
- JetStream: file storage with `sync_interval: always` (fsync after every write), each
  publish acknowledged by a PubAck.

Measured per system and size: produce msgs/s and MB/s (pipelined: librdkafka batching with
linger.ms=5, nats-py publish_async with up to 4000 acks outstanding), consume msgs/s and
MB/s (librdkafka consumer from offset 0; JetStream pull consumer, ack none, batches of
1000), and produce-ack latency p50/p99 for one message at a time (send, wait for its ack).
The last line is `produce_ratio_vs_nats=X consume_ratio_vs_nats=Y` for 256 B messages
(crossbeat msgs/s divided by JetStream msgs/s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

LISTEN_RE = re.compile(r"listening on kafka://(\S+):(\d+)")


@dataclass
class Result:
    system: str
    size: int
    produce_rate: float
    consume_rate: float
    p50_ms: float
    p99_ms: float

    def line(self) -> str:
        mb = 1024 * 1024
        return (f"{self.system:<10} {self.size:>5} B  produce {self.produce_rate:>9.0f} msg/s "
                f"{self.produce_rate * self.size / mb:>7.1f} MB/s  consume {self.consume_rate:>9.0f} "
                f"msg/s {self.consume_rate * self.size / mb:>7.1f} MB/s  ack latency p50 "
                f"{self.p50_ms:.2f} ms p99 {self.p99_ms:.2f} ms")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- crossbeat -------------------------------------------------------------------------------
def start_crossbeat(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbeat", "broker", "--data-dir", str(data_dir),
         "--listen", "127.0.0.1:0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        m = LISTEN_RE.search(line)
        if m:
            return proc, f"{m.group(1)}:{m.group(2)}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("crossbeat broker did not start")


def bench_crossbeat(address: str, size: int, count: int, latency_samples: int) -> Result:
    topic = f"bench-{size}-{os.getpid()}"
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    payload = os.urandom(size)

    producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 2_000_000})
    failures = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(300)
    produce_rate = count / (time.perf_counter() - start)
    assert not failures, failures[:3]

    latencies = []
    single = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 0})
    single.produce(topic, payload)
    single.flush(10)
    for _ in range(latency_samples):
        t0 = time.perf_counter()
        single.produce(topic, payload)
        single.flush(10)
        latencies.append((time.perf_counter() - t0) * 1000)

    consumer = Consumer({"bootstrap.servers": address, "group.id": f"bench-{topic}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < count and time.perf_counter() < deadline:
        for msg in consumer.consume(10000, 0.5):
            if msg.error() is None:
                got += 1
    consume_rate = got / (time.perf_counter() - start)
    consumer.close()
    return Result("crossbeat", size, produce_rate, consume_rate,
                  percentile(latencies, 0.5), percentile(latencies, 0.99))


# -- NATS JetStream --------------------------------------------------------------------------
def start_nats(store_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("nats-server") or str(Path(sys.executable).with_name("nats-server"))
    port = free_port()
    conf = store_dir / "nats.conf"
    conf.write_text(f"port: {port}\nhost: 127.0.0.1\n"
                    f"jetstream {{\n  store_dir: {store_dir}\n  sync_interval: always\n}}\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("nats-server did not start")


async def bench_nats_async(port: int, size: int, count: int, latency_samples: int) -> Result:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream(publish_async_max_pending=4000)
    name = f"BENCH{size}"
    subject = f"bench.{size}"
    await js.add_stream(name=name, subjects=[subject], storage=StorageType.FILE)
    payload = os.urandom(size)

    start = time.perf_counter()
    for _ in range(count):
        await js.publish_async(subject, payload)
    await asyncio.wait_for(js.publish_async_completed(), 300)
    produce_rate = count / (time.perf_counter() - start)

    latencies = []
    for _ in range(latency_samples):
        t0 = time.perf_counter()
        await js.publish(subject, payload)
        latencies.append((time.perf_counter() - t0) * 1000)

    sub = await js.pull_subscribe(subject, durable=f"bench{size}", stream=name,
                                  config=ConsumerConfig(ack_policy=AckPolicy.NONE))
    got = 0
    start = time.perf_counter()
    while got < count:
        msgs = await sub.fetch(batch=1000, timeout=10)
        got += len(msgs)
    consume_rate = count / (time.perf_counter() - start)
    await nc.close()
    return Result("jetstream", size, produce_rate, consume_rate,
                  percentile(latencies, 0.5), percentile(latencies, 0.99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages-256", type=int, default=100_000)
    parser.add_argument("--messages-4k", type=int, default=20_000)
    parser.add_argument("--latency-samples", type=int, default=500)
    args = parser.parse_args()

    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="cb-bench-") as tmp:
        root = Path(tmp)
        (root / "nats").mkdir()
        cb_proc, address = start_crossbeat(root / "crossbeat")
        nats_proc, nats_port = start_nats(root / "nats")
        try:
            for size, count in ((256, args.messages_256), (4096, args.messages_4k)):
                cb = bench_crossbeat(address, size, count, args.latency_samples)
                print(cb.line(), flush=True)
                ns = asyncio.run(bench_nats_async(nats_port, size, count, args.latency_samples))
                print(ns.line(), flush=True)
                results += [cb, ns]
        finally:
            cb_proc.terminate()
            nats_proc.terminate()
            cb_proc.wait(30)
            nats_proc.wait(30)

    print("fsync policy: crossbeat acks=all = fdatasync per group-commit round "
          "(flush_max_delay_ms=2); JetStream sync_interval: always (fsync per write)")
    cb256 = next(r for r in results if r.system == "crossbeat" and r.size == 256)
    ns256 = next(r for r in results if r.system == "jetstream" and r.size == 256)
    print(f"produce_ratio_vs_nats={cb256.produce_rate / ns256.produce_rate:.2f} "
          f"consume_ratio_vs_nats={cb256.consume_rate / ns256.consume_rate:.2f}")


if __name__ == "__main__":
    main()
