"""Cross-site replication: one vertical slice.

- `extension.ReplicationExtension`: the populator filter (PENDING versions and delete
  markers → `crossbeat-replication`);
- `processor.ReplicationProcessor`: replicates one version to one site (skips a site already
  COMPLETED, retries with bounded backoff) and returns the outcome for
  `crossbeat-replication-status`;
- `status_updater.StatusUpdater`: applies outcomes to the source with compare-and-set;
- `settings.ReplicationSettings`: sites, topics, retry bounds.
Pure Python: the Spark pipelines in `crossbeat.spark` drive these.
"""

from crossbeat.extensions.replication.extension import ReplicationExtension

__all__ = ["ReplicationExtension"]
