"""Building the SparkSession crossbeat pipelines run in."""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from crossbeat.spark.source import register


def build_session(master: str = "local[*]", app_name: str = "crossbeat", **conf: Any) -> SparkSession:
    """A session with the crossbeat-kafka source registered.

    Python workers run this interpreter (so they import crossbeat from the same install);
    worker reuse stays on (off costs ~1.5 s per batch); the UI is off unless asked for.
    """
    # Spark's Python planner and workers start `$PYSPARK_PYTHON` (default: `python3` from
    # PATH, which may not have crossbeat); point them at this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        # the console progress bar redraws into the pipelines' log at every stage
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # streaming queries only, which cannot use adaptive execution: Spark warns at
        # every query start that it is turned off for them
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.memory", "1g")
        # Python workers and the streaming-source planner are slow to start on a loaded
        # machine; the 15 s default fails queries spuriously.
        .config("spark.python.authenticate.socketTimeout", "120s")
    )
    if master.startswith("local"):
        # Everything runs in this process: keep the driver's and block manager's ports on
        # loopback. Otherwise Spark binds them to the first non-loopback interface it finds
        # (and warns about the hostname), open to the network for no reason.
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
