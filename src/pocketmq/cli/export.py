"""``pocketmq export``: topics, DLQs and the attempt history to Parquet (no Spark needed).

The files are what ``pocketmq pipeline audit`` (``--export OUT/topics``) and ``pocketmq pipeline
dlq-report`` (``--dlq OUT/dlq --attempts OUT/history``) read. Re-runs export only what is new;
see :mod:`pocketmq.pipeline.export` for the layout and why.
"""

from __future__ import annotations

from datetime import datetime

import click

from pocketmq.cli._app import main, server_option
from pocketmq.cli.commands import handle_errors
from pocketmq.cli.output import print_table
from pocketmq.cli.pipeline import TIMESTAMP

__all__ = ["export_cmd"]


@main.command("export")
@click.option("--out", required=True, metavar="DIR", help="Directory to write Parquet under.")
@click.option("--topic", "topics", multiple=True, metavar="T", help="Export a topic (repeatable).")
@click.option("--all-topics", is_flag=True, help="Export every topic except system topics.")
@click.option(
    "--dlq", "dlq_groups", multiple=True, metavar="GROUP", help="Export %DLQ%GROUP (repeatable)."
)
@click.option("--history", is_flag=True, help="Export the attempt history (%SYS%HISTORY).")
@click.option(
    "--since",
    type=TIMESTAMP,
    default=None,
    help="Skip messages stored (attempts delivered) before this instant (naive = UTC).",
)
@server_option
@handle_errors
def export_cmd(
    out: str,
    topics: tuple[str, ...],
    all_topics: bool,
    dlq_groups: tuple[str, ...],
    history: bool,
    since: datetime | None,
    server: str,
) -> None:
    """Export topics, dead-letter queues and the attempt history as Parquet under OUT:
    OUT/topics and OUT/dlq partitioned by topic/date, OUT/history by date. Only offsets no
    earlier run exported are read, so re-running is safe and cheap."""
    from rich.table import Table

    from pocketmq.cli.progress import progress_bar
    from pocketmq.pipeline.export import export_to_parquet

    if not (topics or all_topics or dlq_groups or history):
        raise click.UsageError("name something to export: --topic, --all-topics, --dlq, --history")
    with progress_bar("exporting", None) as advance:
        summary = export_to_parquet(
            out,
            servers=server,
            topics=topics,
            all_topics=all_topics,
            dlq_groups=dlq_groups,
            history=history,
            since=since,
            progress=lambda source: advance(1, f"{source.topic}: {source.rows} rows"),
        )
    table = Table(title="export")
    for i, header in enumerate(("kind", "topic", "queues", "rows", "files", "already", "skipped")):
        table.add_column(header, justify="left" if i < 2 else "right")
    for s in summary.sources:
        table.add_row(
            s.kind,
            s.topic,
            str(s.queues),
            str(s.rows),
            str(s.files),
            str(s.already),
            str(s.skipped),
        )
    print_table(table)
    click.echo(f"written to {summary.out}/{{topics,dlq,history}} in {summary.seconds:.1f} s")
