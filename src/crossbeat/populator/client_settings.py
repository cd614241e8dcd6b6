"""librdkafka settings that every Kafka client crossbeat makes starts from (a user's own
settings, where a client takes them, come after and win)."""

from __future__ import annotations

# librdkafka (2.16 here) retries a refused connection at a steady half of
# reconnect.backoff.ms, without growing the wait, and logs every failure: with its 100 ms
# default, a broker that is down made each client log 20 lines a second (58 a second from
# the replication pipelines). At 2 s it is one line a second per client, and a client is
# back within a second of the broker.
RECONNECT: dict[str, int] = {"reconnect.backoff.ms": 2000, "reconnect.backoff.max.ms": 10000}
