"""Stretched multi-site planning (seed 001): sites, racks and rack-aware replica placement,
per-workflow durability, failure analysis, rendered Kafka/ZooKeeper/KRaft configuration and
failover/failback runbooks.

Layers, bottom up (each module imports only the ones above it):

- `placement`: Kafka's AdminUtils replica assignment, pure functions over broker ids and racks;
  the stream store's placement driver reuses it.
- `sitemap`: the TOML site map (pydantic models, validation with readable errors).
- `durability`: per-workflow topic defaults (acks, replication factor, min.insync.replicas).
- `plan`: resolves a site map into per-topic assignments.
- `analysis`, `render`, `runbook`: what operators read before and during a site loss.

The package is pure planning code: it imports no other crossbeat component.
"""
