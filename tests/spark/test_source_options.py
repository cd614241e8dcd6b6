"""Option checking of crossbeat-kafka (no broker, no Spark session: it happens in load())."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from crossbeat.spark.source_options import parse_options  # noqa: E402

BASE = {"kafka.bootstrap.servers": "localhost:9092"}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, None, "One of the following options must be specified for Kafka source: "
                   "subscribe, subscribePattern, assign"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, None, "Only one of the following options"),
        ({"subscribe": " , "}, None, "No topics to subscribe to"),
        ({"subscribePattern": "a("}, None, "not a valid regular expression"),
        ({"assign": "a"}, None, "No topicpartitions to assign"),
        ({"assign": '{"a":["x"]}'}, None, 'expected e.g. {"topicA":[0,1]'),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, None, "failOnDataLoss must be true or false"),
        ({"subscribe": "a", "includeHeaders": "1"}, None, "includeHeaders must be true or false"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, None, "maxOffsetsPerTrigger must be a positive"),
        ({"subscribe": "a", "rowsPerTask": "x"}, None, "rowsPerTask must be a positive"),
        ({"subscribe": "a", "startingOffsets": "first"}, None, "option startingOffsets: expected"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, None, "offset -3 of a[0]"),
        ({"subscribe": "a", "startingOffsets": '{"b":{"0":1}}'}, None, "names b[0], which the query"),
        ({"subscribePattern": "a.*", "startingOffsets": '{"xa":{"0":1}}'}, None, "names xa[0]"),
        ({"assign": '{"a":[1]}', "startingOffsets": '{"a":{"0":1}}'}, None, "names a[0]"),
        ({"subscribe": "a", "minPartitions": "2"}, None, "does not support option(s) minpartitions"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, None,
         "option startingTimestamp: Expected a single long value"),
        ({"subscribe": "a", "endingTimestamp": "-5"}, False, "option endingTimestamp: Expected"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":-1}}'}, None,
         "option startingOffsetsByTimestamp: expected e.g."),
        ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a":{"0":1.5}}'}, False,
         "option endingOffsetsByTimestamp: expected e.g."),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"b":{"0":1}}'}, None,
         "option startingOffsetsByTimestamp names b[0], which the query"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "earliest"}, None,
         "startingOffsetsByTimestampStrategy must be error or latest"),
        ({"subscribe": "a", "endingTimestamp": "1"}, True, "endingTimestamp is for batch"),
        ({"subscribe": "a", "endingOffsetsByTimestamp": '{"a":{"0":1}}'}, True,
         "endingOffsetsByTimestamp is for batch"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "-1"}, None,
         "minOffsetsPerTrigger must be a positive"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, None,
         "The value of minOffsetsPerTrigger(10) is higher than the maxOffsetsPerTrigger(5)."),
        ({"subscribe": "a", "maxTriggerDelay": "5 parsecs"}, None,
         "option maxTriggerDelay must be a duration"),
        ({"subscribe": "a", "maxTriggerDelay": "-1s"}, None, "maxTriggerDelay must be a duration"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, None,
         "Kafka option 'kafka.auto.offset.reset' is not supported: set the source option "
         "startingOffsets"),
        ({"subscribe": "a", "kafka.security.protocol": "bogus"}, None,
         'Invalid value "bogus" for configuration property "security.protocol"'),
        ({"subscribe": "a", "kafka.sasl.jaas.config": "x"}, None,
         "Java JAAS configuration is not supported"),
        ({"subscribe": "a", "endingOffsets": "latest"}, True, "endingOffsets is for batch"),
        ({"subscribe": "a", "startingOffsets": "latest"}, False, "can't be latest"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "can't be earliest"),
        ({"subscribe": "a", "pauseKey": "k"}, None, "pauseKey needs pauseTopic"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    options: dict[str, str], streaming: bool | None, message: str
) -> None:
    with pytest.raises(ValueError) as info:
        parse_options({**BASE, **options}, streaming=streaming)
    assert message in str(info.value)


def test_good_options_parse_as_spark_spells_them() -> None:
    opts = parse_options({**BASE, "SUBSCRIBEPATTERN": "ev-.*", "failondataloss": "False",
                          "includeHeaders": "TRUE", "startingOffsets": '{"ev-1":{"0":-2}}'},
                         streaming=True)
    assert opts.subscription.covers("ev-1", 3) and not opts.subscription.covers("xev-1", 0)
    assert (opts.fail_on_data_loss, opts.include_headers) == (False, True)
    assert opts.starting == {"ev-1": {"0": -2}} and opts.ending == "latest"
    assigned = parse_options({**BASE, "assign": '{"a":[2,0],"b":[1]}'}).subscription
    assert assigned.covers("a", 0) and not assigned.covers("a", 1) and assigned.covers("b", 1)
    plain = parse_options({**BASE, "subscribe": "a, b,", "kafka.client.id": "me",
                           "kafka.group.id": "g"})
    assert plain.subscription.topics == ("a", "b")
    assert (plain.settings, plain.group) == ({"client.id": "me"}, "g")


def test_timestamp_options_take_precedence_as_in_spark() -> None:
    # startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets; the losers
    # are not even parsed (Spark does not look at them)
    both = parse_options({**BASE, "subscribe": "a", "startingTimestamp": " 1700000000000 ",
                          "startingOffsetsByTimestamp": "{bad", "startingOffsets": "bad"})
    assert (both.starting.every, both.starting.option) == (1700000000000, "startingTimestamp")
    by = parse_options({**BASE, "subscribe": "a", "startingOffsets": "latest",
                        "startingOffsetsByTimestamp": '{"a":{"1":5}}',
                        "endingOffsetsByTimestamp": '{"a":{"0":9}}', "endingOffsets": "bad",
                        "startingOffsetsByTimestampStrategy": "LATEST"}, streaming=False)
    assert by.starting.partitions == {"a": {"1": 5}} and by.starting.of("a", "0") is None
    assert by.ending.partitions == {"a": {"0": 9}} and by.no_match == "latest"
    assert parse_options({**BASE, "subscribe": "a"}).no_match == "error"


@pytest.mark.parametrize(("value", "ms"), [(None, 900_000), ("250", 250), ("30s", 30_000),
                                           ("2min", 120_000), ("1h", 3_600_000),
                                           ("1500us", 1)])
def test_max_trigger_delay_reads_spark_durations(value: str | None, ms: int) -> None:
    opts = {**BASE, "subscribe": "a", "minOffsetsPerTrigger": "3", "maxOffsetsPerTrigger": "3"}
    if value is not None:
        opts["maxTriggerDelay"] = value
    parsed = parse_options(opts, streaming=True)
    assert (parsed.min_rows, parsed.max_rows, parsed.max_trigger_delay_ms) == (3, 3, ms)
