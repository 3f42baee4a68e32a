"""``pocketmq pipeline ...``: the Spark jobs from the command line.

``reconcile``'s options are a stable interface (docs/pipeline.md "Command"): scripts and cron
jobs call it, so options change only with the docs. Spark (and so Java) is only imported when a
job runs, so ``pocketmq --help`` stays fast and works without Java.
Summaries go to stdout as tables; errors go to stderr with exit status 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pocketmq.cli._app import DURATION, main
from pocketmq.cli.output import print_table
from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.clock import utc_naive
from pocketmq.reliability.policy import ResendPolicy

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["pipeline"]

F = TypeVar("F", bound=Callable[..., Any])


class _Timestamp(click.ParamType[datetime, Any]):
    name = "ISO8601"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 date-time (e.g. 2026-11-22T12:00:00Z)", param, ctx
            )
        return utc_naive(moment)


TIMESTAMP = _Timestamp()


def master_option(func: F) -> F:
    """``--master``: every Spark job runs locally by default and on a cluster when told where."""
    return click.option(
        "--master",
        default="local[*]",
        show_default=True,
        help="Spark master URL: local[N], spark://host:7077, yarn, k8s://...",
    )(func)


def now_option(func: F) -> F:
    """``--now``: the instant a job evaluates as of, so a run can be repeated with the same
    result (tests, re-running yesterday's reconcile)."""
    return click.option(
        "--now",
        type=TIMESTAMP,
        default=None,
        help="Evaluate as of this instant (naive = UTC). Default: the current time.",
    )(func)


def log_source_option(func: F) -> F:
    """``--log``: the consumers' message log, read by reconcile and audit from the same kinds of
    source (a database URL or a Parquet path)."""
    return click.option(
        "--log",
        "log_source",
        required=True,
        metavar="URL_OR_PATH",
        help="message_log: database URL or Parquet path.",
    )(func)


def log_table_option(func: F) -> F:
    """``--log-table``: the message log's table when ``--log`` is a database."""
    return click.option(
        "--log-table",
        default="message_log",
        show_default=True,
        help="Log table name (database input).",
    )(func)


@contextmanager
def _job_errors() -> Iterator[None]:
    """Turn failures into one readable line on stderr and exit status 1."""
    from pocketmq.errors import PocketMQError

    try:
        yield
    except click.ClickException:
        raise
    except PocketMQError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:
        java = getattr(exc, "java_exception", None)  # py4j: the JVM-side exception
        text = (str(java) if java is not None else str(exc)).strip().splitlines()
        first = next((line for line in text if line.strip()), type(exc).__name__)
        raise click.ClickException(f"{type(exc).__name__}: {first}") from exc


def _session(master: str, app: str, *inputs: str) -> SparkSession:
    """The job's Spark session, once its local inputs are known to exist (a missing file is
    reported in a second, not after the JVM started)."""
    from pocketmq.pipeline.session import spark_session

    _check_inputs(*inputs)
    return spark_session(master, app, quiet=True)


def _check_inputs(*sources: str) -> None:
    """Fail before starting Spark when a local input path does not exist."""
    from pocketmq.pipeline.io import is_database_url

    for source in sources:
        if is_database_url(source) or "://" in source:
            continue
        if not Path(source).exists():
            raise click.ClickException(f"input not found: {source}")


def _check_resend_stubs(stubs: str, option: str) -> None:
    """A resend updates the stubs, so they must be a database this process can write to."""
    from pocketmq.reliability.database_url import is_database_url, parse_database_url

    if not is_database_url(stubs):
        raise click.UsageError(f"{option} needs --stubs to be a database URL (stubs get updated)")
    try:
        parse_database_url(stubs)
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc), param_hint="--stubs") from exc


def _resend_policy(resend_delay: float) -> ResendPolicy:
    """The toolkit's resend policy with ``--resend-delay`` as its base interval."""
    longest = ResendPolicy().max_interval
    if not 0 < resend_delay <= longest:
        raise click.BadParameter(
            f"must be more than 0 and at most {longest:g} s (the longest interval)",
            param_hint="--resend-delay",
        )
    return ResendPolicy(base_interval=resend_delay)


def _sender_factory(
    send_with: str | None, resend_to: str | None, stubs: str
) -> Callable[[], Any] | None:
    """The sender factory chosen by ``--resend-to`` or ``--send-with`` (at most one), or None."""
    if send_with and resend_to:
        raise click.UsageError("--resend-to and --send-with are exclusive: choose one sender")
    if resend_to:
        from pocketmq.pipeline.resend import BrokerSender

        _check_resend_stubs(stubs, "--resend-to")
        return BrokerSender(resend_to)
    if send_with:
        _check_resend_stubs(stubs, "--send-with")
        return _load_factory(send_with)
    return None


def _load_factory(spec: str) -> Callable[[], Any]:
    """Resolve ``module:attribute`` to the sender factory for ``--send-with``."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not MODULE:FACTORY", param_hint="--send-with")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load {spec!r}: {exc}", param_hint="--send-with") from exc
    if not callable(factory):
        raise click.BadParameter(f"{spec!r} is not callable", param_hint="--send-with")
    return factory  # type: ignore[no-any-return]


def _print_table(title: str, headers: list[str], rows: list[list[Any]]) -> None:
    """A summary table on stdout (the commands' output; errors go to stderr)."""
    from rich.table import Table

    table = Table(title=title)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[str(v) for v in row])
    print_table(table)


def _print_written(where: str, seconds: float) -> None:
    click.echo(f"written to {where}")
    click.echo(f"took {seconds:.1f} s")


@main.group("pipeline")
def pipeline() -> None:
    """Spark jobs over the outbox, the consumer logs and broker exports: reconcile, audit,
    dlq-report, and demo-data to try them."""


@pipeline.command("reconcile")
@click.option(
    "--stubs",
    required=True,
    metavar="URL_OR_PATH",
    help="message_stub: database URL or Parquet path.",
)
@log_source_option
@click.option(
    "--out", required=True, metavar="DIR", help="Output directory (gets resend/ and manual/)."
)
@click.option(
    "--max-sends",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Sends allowed before manual handling.",
)
@now_option
@master_option
@click.option("--group", default=None, help="Only count this consumer group's log rows.")
@click.option(
    "--stubs-table",
    default="message_stub",
    show_default=True,
    help="Stub table name (database input).",
)
@log_table_option
@click.option(
    "--resend-to",
    default=None,
    metavar="H:P[,H:P]",
    help="Also resend the resend list to these pocketmq brokers (same message ids). Needs "
    "--stubs to be a database URL: each stub is claimed there before it is sent.",
)
@click.option(
    "--send-with",
    default=None,
    metavar="MODULE:FACTORY",
    help="Like --resend-to, through a sender factory of your own (a picklable zero-argument "
    "callable returning a MessageSender).",
)
@click.option(
    "--resend-delay",
    type=DURATION,
    default=f"{ResendPolicy().base_interval:g}s",
    show_default=True,
    help="With --resend-to/--send-with: base delay before a resent stub is due again (doubles "
    "per send, at most 1h; the reliability toolkit's ResendPolicy).",
)
def reconcile_cmd(
    stubs: str,
    log_source: str,
    out: str,
    max_sends: int,
    now: datetime | None,
    master: str,
    group: str | None,
    stubs_table: str,
    log_table: str,
    resend_to: str | None,
    send_with: str | None,
    resend_delay: float,
) -> None:
    """List the messages to send again, and those needing manual handling.

    A stub is selected when it is UNCONFIRMED or UNKNOWN, due (next_resend_at <= now), its
    offset is NULL or below the highest offset logged for its queue, and no consumer logged
    it. Below --max-sends sends it goes to OUT/resend, otherwise to OUT/manual (Parquet).
    With --resend-to (or --send-with) the resend list is also sent, each stub claimed first so
    that a re-run never sends it twice.
    """
    factory = _sender_factory(send_with, resend_to, stubs)
    policy = _resend_policy(resend_delay) if factory is not None else None
    with _job_errors():
        from pocketmq.pipeline.reconcile import run_reconcile

        spark = _session(master, "pocketmq-reconcile", stubs, log_source)
        summary = run_reconcile(
            spark,
            stubs=stubs,
            log=log_source,
            out=out,
            now=now,
            max_sends=max_sends,
            group=group,
            stubs_table=stubs_table,
            log_table=log_table,
            by_topic=True,
        )
    rows: list[list[Any]] = [[t, r, m] for t, r, m in summary.by_topic]
    rows.append(["total", summary.resend, summary.manual])
    title = f"reconcile as of {summary.now.isoformat(sep=' ')} UTC (max sends {summary.max_sends}"
    title += f", group {summary.group})" if summary.group else ")"
    _print_table(title, ["topic", "resend", "manual"], rows)
    click.echo(f"resend list: {summary.resend_path}")
    click.echo(f"manual-handling list: {summary.manual_path}")
    click.echo(f"took {summary.seconds:.1f} s")
    if factory is not None:
        with _job_errors():
            from pocketmq.pipeline.resend import run_resend

            outcome = run_resend(
                spark.read.parquet(summary.resend_path),
                sender_factory=factory,
                stub_db=stubs,
                table=stubs_table,
                # The stub updates use the real clock: --now only chose what is due.
                now=None,
                policy=policy,
            )
        click.echo(
            f"resent: sent {outcome.sent}, skipped {outcome.skipped} (already claimed), "
            f"failed {outcome.failed}, outcome unknown {outcome.unknown}"
        )
        for line in outcome.errors[:5]:
            click.echo(f"send error: {line}", err=True)


@pipeline.command("demo-data")
@click.option("--out", required=True, metavar="DIR", help="Directory to write the Parquet data to.")
@click.option(
    "--stubs",
    "n_stubs",
    default=10_000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Number of stub rows.",
)
@click.option(
    "--log-ratio",
    default=0.9,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of stubs with a log row.",
)
@click.option(
    "--seed", default=7, show_default=True, type=int, help="Random seed (same seed, same data)."
)
@click.option(
    "--now",
    type=TIMESTAMP,
    default=None,
    help="The clock the data is built around. Default: 2026-11-22T12:00:00.",
)
@click.option(
    "--exports/--no-exports",
    default=True,
    show_default=True,
    help="Also write topic/DLQ exports and attempt history.",
)
def demo_data_cmd(
    out: str, n_stubs: int, log_ratio: float, seed: int, now: datetime | None, exports: bool
) -> None:
    """Generate a realistic outbox (stubs), consumer log and broker exports as Parquet."""
    with _job_errors():
        from pocketmq.pipeline.demo import DEMO_NOW, generate_demo_data

        data = generate_demo_data(
            out, stubs=n_stubs, log_ratio=log_ratio, seed=seed, now=now or DEMO_NOW, exports=exports
        )
    rows: list[list[Any]] = [
        ["stubs", data.stubs, str(data.stubs_path)],
        ["log", data.log, str(data.log_path)],
    ]
    for name, path in (
        ("topic export", data.topic_export_path),
        ("DLQ export", data.dlq_export_path),
        ("attempt history", data.attempts_path),
    ):
        if path is not None:
            rows.append([name, "", str(path)])
    _print_table(f"demo data (seed {seed})", ["dataset", "rows", "path"], rows)
    out_dir = Path(out)
    click.echo(
        "next: pocketmq pipeline reconcile "
        f"--stubs {out_dir / 'stubs'} --log {out_dir / 'log'} --out {out_dir / 'reconcile'} "
        f"--now {data.now.isoformat()}"
    )


def _subscription(value: str) -> tuple[str, str]:
    topic, sep, group = value.partition("=")
    if not sep or not topic or not group:
        raise click.BadParameter(f"{value!r} is not TOPIC=GROUP", param_hint="--subscription")
    return topic, group


@pipeline.command("audit")
@click.option(
    "--export",
    "export_path",
    required=True,
    metavar="PATH",
    help="Topic export (Parquet, topic/date partitions).",
)
@log_source_option
@click.option(
    "--out",
    required=True,
    metavar="DIR",
    help="Output directory (summary/, lost/, duplicated/, late/).",
)
@click.option(
    "--late-after",
    type=DURATION,
    default="60s",
    show_default=True,
    help="Consumed later than this after storing = late.",
)
@click.option(
    "--grace",
    type=DURATION,
    default="5m",
    show_default=True,
    help="Younger unconsumed messages are not counted as lost.",
)
@click.option(
    "--group", "groups", multiple=True, help="Only audit this consumer group (repeatable)."
)
@click.option(
    "--subscription",
    "subscriptions",
    multiple=True,
    metavar="TOPIC=GROUP",
    help="A group expected to consume a topic even if its log is empty (repeatable).",
)
@now_option
@master_option
@log_table_option
def audit_cmd(
    export_path: str,
    log_source: str,
    out: str,
    late_after: float,
    grace: float,
    groups: tuple[str, ...],
    subscriptions: tuple[str, ...],
    now: datetime | None,
    master: str,
    log_table: str,
) -> None:
    """Audit deliveries: stored messages never consumed (lost), received more than once
    (duplicated) or consumed late, per topic, consumer group and hour."""
    pairs = [_subscription(s) for s in subscriptions]
    with _job_errors():
        from pocketmq.pipeline.audit import run_audit

        spark = _session(master, "pocketmq-audit", export_path, log_source)
        summary = run_audit(
            spark,
            export=export_path,
            log=log_source,
            out=out,
            now=now,
            late_after=late_after,
            grace=grace,
            groups=list(groups) or None,
            subscriptions=pairs,
            log_table=log_table,
        )
    headers = [
        "topic",
        "group",
        "stored",
        "consumed",
        "lost",
        "duplicated",
        "late",
        "max latency s",
    ]
    rows = [
        [
            r["topic"],
            r["consumer_group"],
            r["stored"],
            r["consumed"],
            r["lost"],
            r["duplicated"],
            r["late"],
            "" if r["max_latency_s"] is None else f"{float(r['max_latency_s']):.1f}",  # type: ignore[arg-type]
        ]
        for r in summary.rows
    ]
    _print_table("delivery audit", headers, rows)
    _print_written(f"{summary.out}/{{summary,lost,duplicated,late}}", summary.seconds)


@pipeline.command("dlq-report")
@click.option(
    "--dlq",
    "dlq_path",
    required=True,
    metavar="PATH",
    help="DLQ topic export (Parquet, topic/date partitions).",
)
@click.option("--attempts", required=True, metavar="PATH", help="Attempt history export (Parquet).")
@click.option(
    "--out",
    required=True,
    metavar="DIR",
    help="Output directory (ageing/, errors/, stuck/, summary/).",
)
@click.option(
    "--stuck-after",
    type=DURATION,
    default="10m",
    show_default=True,
    help="A failing FIFO message group unsettled this long is stuck.",
)
@click.option(
    "--top-errors",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Error texts to keep per group.",
)
@click.option("--group", default=None, help="Only this consumer group.")
@now_option
@master_option
def dlq_report_cmd(
    dlq_path: str,
    attempts: str,
    out: str,
    stuck_after: float,
    top_errors: int,
    group: str | None,
    now: datetime | None,
    master: str,
) -> None:
    """Report on dead letters and retries: DLQ ageing, top error texts, stuck FIFO groups."""
    with _job_errors():
        from pocketmq.pipeline.dlq import run_dlq_report

        spark = _session(master, "pocketmq-dlq-report", dlq_path, attempts)
        summary = run_dlq_report(
            spark,
            dlq=dlq_path,
            attempts=attempts,
            out=out,
            now=now,
            stuck_after=stuck_after,
            top_errors=top_errors,
            group=group,
        )
    headers = [
        "group",
        "DLQ messages",
        "oldest DLQ (UTC)",
        "attempts",
        "failed",
        "retried msgs",
        "stuck FIFO groups",
    ]
    rows = [
        [
            r["consumer_group"],
            r["dlq_messages"],
            r["oldest_dlq_at"] or "",
            r["attempts"],
            r["failed_attempts"],
            r["retried_messages"],
            r["stuck_message_groups"],
        ]
        for r in summary.rows
    ]
    _print_table("DLQ and retry report", headers, rows)
    _print_written(f"{summary.out}/{{ageing,errors,stuck,summary}}", summary.seconds)
