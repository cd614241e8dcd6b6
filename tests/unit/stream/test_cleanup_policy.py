"""`cleanup.policy` and retention: time and size retention delete only where the policy names
`delete` (as in Kafka); a compact-only stream keeps every record, and a policy changed at
run time applies at the next retention pass."""

from __future__ import annotations

import asyncio
from pathlib import Path

from crossbeat.stream import StreamSettings, StreamStore
from crossbeat.stream.stream import StreamLimits
from tests.unit.stream.conftest import all_values, make_batch

HOUR = 3600 * 1000


def _settings(**kw: object) -> StreamSettings:
    base: dict[str, object] = {"segment_bytes": 2048, "index_interval_bytes": 200,
                               "flush_max_delay_ms": 0.0, "retention_ms": HOUR,
                               "retention_bytes": 4096}
    base.update(kw)
    return StreamSettings.model_validate(base)


def test_retention_limits_follow_the_policy() -> None:
    settings = _settings()
    policies = {None: True, "delete": True, "compact,delete": True, "delete, compact": True,
                "compact": False, "": False}
    for policy, retained in policies.items():
        for config in ({}, {"retention.ms": "1", "retention.bytes": "10"}):
            if policy is not None:
                config = {**config, "cleanup.policy": policy}
            limits = StreamLimits.resolve(config, settings)
            expected = (((HOUR, 4096) if "retention.ms" not in config else (1, 10)) if retained
                        else (None, None))
            assert (limits.retention_ms, limits.retention_bytes) == expected, config
            assert limits.segment_bytes == 2048  # rolling is unaffected


def test_compact_stream_keeps_records_retention_would_delete(tmp_path: Path) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, _settings())
        compact = store.create_stream("compact", {"cleanup.policy": "compact",
                                                  "retention.ms": "1", "retention.bytes": "0"})
        delete = store.create_stream("delete", {"cleanup.policy": "delete", "retention.ms": "1"})
        for i in range(40):
            for stream in (compact, delete):
                await stream.append(make_batch([b"x" * 150], timestamp=1_000 + i))
        await store.enforce_retention(now_ms=10 * HOUR)
        assert delete.start_offset == delete.end_offset == 40
        assert compact.start_offset == 0
        assert [o for o, _ in all_values(compact.read(0, 10**9))] == list(range(40))

        # changed at run time (as an alter does): delete added, then taken away again
        compact.update_config({"cleanup.policy": "compact,delete", "retention.ms": "1"})
        await store.enforce_retention(now_ms=10 * HOUR)
        assert compact.start_offset == compact.end_offset == 40
        compact.update_config({"cleanup.policy": "compact", "retention.ms": "1"})
        await compact.append(make_batch([b"kept"], timestamp=1_000))
        await store.enforce_retention(now_ms=10 * HOUR)
        assert compact.start_offset == 40 and compact.end_offset == 41
        await store.close()

        # the policy is the stream's persisted config: it holds after a restart
        store = await StreamStore.open(tmp_path, _settings())
        reopened = store.get_stream("compact")
        assert reopened is not None
        await store.enforce_retention(now_ms=10 * HOUR)
        assert (reopened.start_offset, reopened.end_offset) == (40, 41)
        await store.close()

    asyncio.run(main())
