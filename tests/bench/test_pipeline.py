"""The reconcile benchmark's yardstick: its DuckDB query computes the rule's two lists.

The benchmark compares Spark with DuckDB and reports whether both produced the same lists; that
check is only worth something if the DuckDB query is the rule. It is checked here against the
plain-Python reference the Spark job is tested with (no Spark needed).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from pocketmq.bench.pipeline import duckdb_reconcile
from pocketmq.pipeline.demo import DEMO_NOW, generate_demo_data
from tests.pipeline.helpers import read_rows, reference_lists


def ids(path: Path) -> set[str]:
    return set(pq.read_table(path).column("message_id").to_pylist())


def test_duckdb_query_computes_the_rules_lists(tmp_path: Path) -> None:
    data = generate_demo_data(tmp_path / "in", stubs=3000, seed=4, exports=False)
    seconds, resend, manual = duckdb_reconcile(
        data.stubs_path, data.log_path, tmp_path / "out", DEMO_NOW, max_sends=5, threads=1
    )
    want_resend, want_manual = reference_lists(
        read_rows(data.stubs_path), read_rows(data.log_path), DEMO_NOW, 5
    )
    assert want_resend
    assert want_manual
    assert (resend, manual) == (len(want_resend), len(want_manual))
    assert ids(tmp_path / "out" / "resend") == want_resend
    assert ids(tmp_path / "out" / "manual") == want_manual
    assert seconds > 0
