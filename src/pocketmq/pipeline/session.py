"""Building the SparkSession every pipeline job runs in.

Why one builder: the jobs depend on a few settings being right everywhere — timestamps are UTC
wall-clock values in the reliability tables, so the session time zone and the JVM time zone are
pinned to UTC; JDBC reads need the driver jars on the class path *and* a ``driver`` option (see
:mod:`pocketmq.pipeline.io`); on a single machine the default 200 shuffle partitions cost more than
they give. Tests add a fast, quiet start-up (serial GC, C1 JIT only, log4j at ERROR) that is
deliberately *not* used in production, where the full JIT pays for itself.

``pyspark`` is imported inside the functions so that importing this module (and the ``pocketmq``
command) does not need Java or start anything.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "JDBC_DRIVER_JARS",
    "QUIET_LOG4J2_PROPERTIES",
    "available_jdbc_jars",
    "spark_session",
]

DEFAULT_MASTER: Final = "local[*]"

#: Where Debian's JDBC driver packages put their jars (``scripts/prerequisites.sh`` installs them):
#: libpostgresql-jdbc-java, libmariadb-java, libxerial-sqlite-jdbc-java (+ -jni).
JDBC_DRIVER_JARS: Final[tuple[str, ...]] = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/mariadb-java-client.jar",
    "/usr/share/java/sqlite-jdbc.jar",
)

#: A log4j2 configuration that keeps Spark at ERROR (shipped inside the package).
QUIET_LOG4J2_PROPERTIES: Final = Path(__file__).with_name("log4j2-quiet.properties")

# Debian's sqlite-jdbc loads its native library from the JNI directory, not from inside the jar.
_JNI_DIRS: Final = (
    "/usr/lib/x86_64-linux-gnu/jni",
    "/usr/lib/aarch64-linux-gnu/jni",
    "/usr/lib/jni",
)


def available_jdbc_jars() -> list[str]:
    """The JDBC driver jars from :data:`JDBC_DRIVER_JARS` present on this machine.

    ``POCKETMQ_JDBC_JARS`` (comma-separated paths) adds jars of your own, e.g. a newer driver.
    """
    jars = [jar for jar in JDBC_DRIVER_JARS if os.path.exists(jar)]
    extra = os.environ.get("POCKETMQ_JDBC_JARS", "")
    jars.extend(j for j in (p.strip() for p in extra.split(",")) if j and j not in jars)
    return jars


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _local_cores(master: str) -> int:
    inner = master[len("local[") : -1] if master.startswith("local[") else "1"
    inner = inner.split(",")[0]
    if inner == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(inner))
    except ValueError:
        return os.cpu_count() or 1


def _default_local_memory() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "2g"
    mib = max(1024, min(8192, total // 4 // (1024 * 1024)))
    return f"{mib}m"


def spark_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "pocketmq-pipeline",
    *,
    for_tests: bool = False,
    quiet: bool = False,
    driver_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create the SparkSession configured for the pocketmq jobs, or return the active one.

    When a session is already active in this process (a notebook, a test run, a job calling
    another) it is returned with its settings unchanged: they were chosen by whoever started it.
    Either way the data source ``pocketmq`` (:mod:`pocketmq.pipeline.datasource`) is registered.

    ``master`` is any Spark master URL (``local[*]``, ``spark://host:7077``, ``yarn``,
    ``k8s://...``). On a local master the session uses this interpreter for Python workers and
    ``2 x cores`` shuffle partitions (instead of 200). ``conf`` entries are applied last and win.
    ``quiet`` logs only errors (the command line uses it: its output is a summary table). With
    ``for_tests=True`` the JVM also starts faster; use that for tests only.
    """
    from pyspark.sql import SparkSession

    from pocketmq.pipeline.datasource import register_data_source

    active = SparkSession.getActiveSession()
    if active is not None:
        register_data_source(active)
        return active

    settings = _session_settings(
        master, for_tests=for_tests, quiet=quiet, driver_memory=driver_memory, conf=conf
    )
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if quiet or for_tests:
        session.sparkContext.setLogLevel("ERROR")
    register_data_source(session)
    return session


def _session_settings(
    master: str,
    *,
    for_tests: bool,
    quiet: bool,
    driver_memory: str | None,
    conf: Mapping[str, str] | None,
) -> dict[str, str]:
    """Every Spark setting of a new session, in the order they are given to the builder."""
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
    }
    settings.update(_jdbc_jar_settings())
    # Both lists of the reconcile job are written in one pass with partitionBy: write each
    # partition through its own writer instead of sorting the rows by partition first.
    settings["spark.sql.maxConcurrentOutputFileWriters"] = "4"
    if _is_local(master):
        settings.update(_local_master_settings(master, driver_memory))
    if driver_memory:
        settings["spark.driver.memory"] = driver_memory
    if for_tests:
        settings.update(
            {
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "2",
                "spark.default.parallelism": "2",
                "spark.sql.warehouse.dir": tempfile.mkdtemp(prefix="pocketmq-spark-warehouse-"),
                "spark.driver.memory": driver_memory or "1g",
            }
        )
    java_options = " ".join(_java_options(master, for_tests=for_tests, quiet=quiet))
    settings["spark.driver.extraJavaOptions"] = java_options
    settings["spark.executor.extraJavaOptions"] = java_options
    if conf:
        settings.update(conf)
    return settings


def _jdbc_jar_settings() -> dict[str, str]:
    """The JDBC driver jars found on this machine, for the driver and the executors."""
    jars = available_jdbc_jars()
    if not jars:
        return {}
    # spark.jars ships the drivers to a cluster's executors; the class path entries make the
    # driver classes visible to java.sql.DriverManager on a local master.
    return {
        "spark.jars": ",".join(jars),
        "spark.driver.extraClassPath": ":".join(jars),
        "spark.executor.extraClassPath": ":".join(jars),
    }


def _local_master_settings(master: str, driver_memory: str | None) -> dict[str, str]:
    """One JVM does all the work: size it and its parallelism from this machine's cores."""
    cores = _local_cores(master)
    settings: dict[str, str] = {}
    # The driver's memory is all the executors get. Default to a quarter of RAM, at most 8 GiB.
    if not driver_memory and "SPARK_DRIVER_MEMORY" not in os.environ:
        settings["spark.driver.memory"] = _default_local_memory()
    settings["spark.sql.shuffle.partitions"] = str(2 * cores)
    settings["spark.default.parallelism"] = str(cores)
    # Split file scans into 4 x cores tasks at least: with ~2 tasks per core the last round
    # of a scan left one core idle (5 tasks on 2 cores: 3 rounds for 2.5 rounds of work).
    settings["spark.sql.files.minPartitionNum"] = str(4 * cores)
    # Everything runs in this process: no need to look up (or expose) a network address.
    settings["spark.driver.host"] = "127.0.0.1"
    settings["spark.driver.bindAddress"] = "127.0.0.1"
    if "PYSPARK_PYTHON" not in os.environ:
        settings["spark.pyspark.python"] = sys.executable
    settings["spark.pyspark.driver.python"] = sys.executable
    return settings


def _java_options(master: str, *, for_tests: bool, quiet: bool) -> list[str]:
    """The JVM options of the driver and the executors: UTC, the JNI directories, the collector,
    and for tests a quiet, fast start-up (serial GC, C1 JIT only)."""
    options = ["-Duser.timezone=UTC"]
    jni = [d for d in _JNI_DIRS if os.path.isdir(d)]
    if jni:
        options.append(f"-Djava.library.path={':'.join(jni)}")
    if _is_local(master) and not for_tests:
        # One JVM does all the work on a local master: a throughput collector suits batch jobs.
        options.append("-XX:+UseParallelGC")
    if quiet or for_tests:
        options.append(f"-Dlog4j2.configurationFile={QUIET_LOG4J2_PROPERTIES.resolve().as_uri()}")
    if for_tests:
        options += ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    return options
