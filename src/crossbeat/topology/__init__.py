"""Stretched multi-site planning (seed 001): sites, racks and rack-aware replica placement,
per-workflow durability, failure analysis, rendered Kafka/ZooKeeper/KRaft configuration and
failover/failback runbooks.

Layers, bottom up (each module imports only the ones above it):

- `placement`: Kafka's AdminUtils replica assignment, pure functions over broker ids and racks
  (`assign_replicas`, `stable_draw`, `spread_site_copies`, `pin_site_copies`); the stream
  store's placement driver reuses it.
- `durability`: per-workflow topic defaults (acks, replication factor, min.insync.replicas).
- `sitemap`: the TOML site map (pydantic models, validation with readable errors) and
  `quorum_survives`, the voter count the analysis and the runbooks share.
- `plan`: resolves a site map into per-topic assignments (`plan_topics`).
- `analysis`: every single/pair/site loss -> writable, acked data at risk, quorum.
- `render`, `bundle`: configuration text, and the files `plan --out` writes.
- `runbook` (model and shared steps), `failover`, `failback`, `mirrormaker`: runbooks.

The package is pure planning code: it imports no other crossbeat component.
"""
