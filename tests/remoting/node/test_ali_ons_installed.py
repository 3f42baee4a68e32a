"""The remoting suite's client is installed: ali-ons 3.12, as pinned by package-lock.json."""

from __future__ import annotations

from .conftest import run_node


def test_ali_ons_loads_with_its_producer_and_consumer() -> None:
    answer = run_node(
        "const ons = require('ali-ons');"
        "const pkg = require('ali-ons/package.json');"
        "console.log(JSON.stringify({version: pkg.version,"
        " producer: typeof ons.Producer, consumer: typeof ons.Consumer}));"
    )
    assert answer == {"version": "3.12.0", "producer": "function", "consumer": "function"}
