"""One Spark session for the whole test run (a JVM start costs ~5 s; two would not fit 2 cores)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pocketmq.pipeline.session import spark_session

    session = spark_session("local[2]", "pocketmq-tests", for_tests=True)
    yield session
    session.stop()
