"""One Spark session for the whole test run (a JVM start costs ~5 s; two would not fit 2 cores),
and a real broker process per module for the export and data-source tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pocketmq.testing import BrokerProcess

from ..scratch import scratch_broker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Short delay levels and persistence intervals so retries and history writes happen in test time.
FAST_BROKER: dict[str, dict[str, Any]] = {
    "broker": {
        "delay_levels": [round(0.1 * n, 1) for n in range(1, 19)],
        "state_persist_interval": 0.2,
        # a loaded 2-core CI machine stalls the broker's loop >200 ms at times; refusing sends
        # then is flow control's job (tests/broker/test_flow_control.py), not these tests'
        "max_queue_wait": 5.0,
    },
    "store": {"flush_interval": 0.05, "checkpoint_interval": 0.2},
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pocketmq.pipeline.session import spark_session

    session = spark_session("local[2]", "pocketmq-tests", for_tests=True)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A real ``pocketmq serve`` for the module (each test uses its own topics and groups)."""
    with scratch_broker(tmp_path_factory, "broker", config=FAST_BROKER, grpc_port=None) as process:
        yield process
