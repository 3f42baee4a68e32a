"""Data pipelines on Apache Spark (PySpark): reconcile/resend, delivery audit, DLQ analytics,
broker exports and a Spark data source for topics.

The jobs are plain ``DataFrame -> DataFrame`` functions (:func:`resend_candidates`,
:func:`manual_handling`, :func:`delivery_audit`, :func:`dlq_report`) plus ``run_*`` drivers that
read the inputs (Parquet paths or database URLs), write Parquet and return a summary; the
``pocketmq pipeline`` command wraps the drivers. :func:`spark_session` builds the session they
expect (UTC, JDBC drivers on the class path, sensible local defaults, the ``pocketmq`` data
source of :mod:`pocketmq.pipeline.datasource` registered). :func:`export_to_parquet` (``pocketmq
export``) writes topics, DLQs and the attempt history as the Parquet the jobs read, with pyarrow
alone. See ``docs/pipeline.md``.

The resend step works with the reliability toolkit's own types: ``MessageSender``,
``InMemorySender`` and ``ResendPolicy`` are re-exported here from :mod:`pocketmq.reliability`
(the same objects), so a pipeline script needs one import line.

Importing this package needs pyarrow (``pocketmq[spark]``) but does not start Spark or Java.
"""

from pocketmq.pipeline.audit import DeliveryAudit, delivery_audit, run_audit
from pocketmq.pipeline.demo import DEMO_NOW, DemoData, generate_demo_data
from pocketmq.pipeline.dlq import DlqReport, dlq_report, run_dlq_report
from pocketmq.pipeline.export import ExportedSource, ExportSummary, export_to_parquet
from pocketmq.pipeline.io import jdbc_source, read_table
from pocketmq.pipeline.reconcile import (
    ReconcileSummary,
    manual_handling,
    reconcile_lists,
    resend_candidates,
    run_reconcile,
    unsettled_stubs,
)
from pocketmq.pipeline.resend import BrokerSender, ResendOutcome, SenderFactory, run_resend
from pocketmq.pipeline.schemas import (
    ATTEMPT_HISTORY_SCHEMA,
    MESSAGE_LOG_SCHEMA,
    MESSAGE_STUB_SCHEMA,
    TOPIC_EXPORT_SCHEMA,
)
from pocketmq.pipeline.session import spark_session
from pocketmq.reliability.policy import ResendPolicy
from pocketmq.reliability.sender import InMemorySender, MessageSender

__all__ = [
    "ATTEMPT_HISTORY_SCHEMA",
    "DEMO_NOW",
    "MESSAGE_LOG_SCHEMA",
    "MESSAGE_STUB_SCHEMA",
    "TOPIC_EXPORT_SCHEMA",
    "BrokerSender",
    "DeliveryAudit",
    "DemoData",
    "DlqReport",
    "ExportSummary",
    "ExportedSource",
    "InMemorySender",
    "MessageSender",
    "ReconcileSummary",
    "ResendOutcome",
    "ResendPolicy",
    "SenderFactory",
    "delivery_audit",
    "dlq_report",
    "export_to_parquet",
    "generate_demo_data",
    "jdbc_source",
    "manual_handling",
    "read_table",
    "reconcile_lists",
    "resend_candidates",
    "run_audit",
    "run_dlq_report",
    "run_reconcile",
    "run_resend",
    "spark_session",
    "unsettled_stubs",
]
