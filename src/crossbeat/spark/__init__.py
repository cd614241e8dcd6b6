"""The only package that imports pyspark.

- `source`: `format("crossbeat-kafka")`, a Python streaming source over Kafka-protocol
  topics (confluent-kafka inside `read()`, Arrow batches, startingOffsets,
  maxOffsetsPerTrigger, consumer-group commits, a pause gate);
- `pipelines`: the `replication-<site>` and `replication-status` Structured Streaming
  queries, driving `crossbeat.extensions.replication`;
- `session`: the SparkSession they run in. `offsets`, `kafka_client` and `settings` hold
  no pyspark and are importable without it.
"""
