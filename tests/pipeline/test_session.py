"""The session builder's decisions that do not need a JVM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pocketmq.pipeline import session
from pocketmq.pipeline.schemas import TOPIC_EXPORT_SCHEMA, spark_ddl


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local", 1), ("local[3]", 3), ("local[*]", os.cpu_count() or 1), ("local[2,4]", 2)],
)
def test_local_cores(master: str, cores: int) -> None:
    assert session._local_cores(master) == cores


def test_cluster_masters_are_not_local() -> None:
    assert session._is_local("local[2]")
    assert not session._is_local("spark://head:7077")
    assert not session._is_local("yarn")


def test_extra_jdbc_jars_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    jar = tmp_path / "custom.jar"
    monkeypatch.setenv("POCKETMQ_JDBC_JARS", f"{jar}, ,{jar}")
    jars = session.available_jdbc_jars()
    assert jars.count(str(jar)) == 1
    assert all(os.path.exists(j) for j in jars if j != str(jar))


def test_default_local_memory_is_bounded() -> None:
    mib = int(session._default_local_memory().removesuffix("m"))
    assert 1024 <= mib <= 8192


def test_quiet_logging_config_ships_with_the_package() -> None:
    text = session.QUIET_LOG4J2_PROPERTIES.read_text()
    assert "rootLogger.level = error" in text
    assert "org.apache.spark.deploy.SparkSubmit" in text


def test_export_schema_as_spark_ddl() -> None:
    ddl = spark_ddl(TOPIC_EXPORT_SCHEMA)
    assert "`properties` MAP<STRING, STRING>" in ddl
    assert "`store_timestamp` TIMESTAMP," in ddl
    assert ddl.endswith("`date` STRING")
