"""The only package that imports pyspark.

- `source`: `format("crossbeat-kafka")`, a Python streaming and batch source over
  Kafka-protocol topics with the options and rows of Spark's Kafka source that matter
  (subscribe/subscribePattern/assign, starting/endingOffsets, failOnDataLoss,
  includeHeaders, maxOffsetsPerTrigger), plus consumer-group commits and a pause gate
  (confluent-kafka inside `read()`, Arrow batches);
- `pipelines`: the `replication-<site>` and `replication-status` Structured Streaming
  queries, driving `crossbeat.extensions.replication`;
- `session`: the SparkSession they run in. `offsets`, `kafka_client` and `settings` hold
  no pyspark and are importable without it.
"""
