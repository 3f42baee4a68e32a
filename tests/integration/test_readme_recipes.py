"""The README's recipes run as written, on their documented ports, one machine (issue 29 items
10 and 11): the quickstart, the replicated group, the failover group with etcd; and §7 of
docs/replication.md.

A recipe is every shell block after a ``<!-- recipe: NAME -->`` line, in order. Each command runs
through ``sh`` in one scratch directory, as a reader would type it: a long-running command
(``pocketmq serve``, ``pocketmq namesrv``, ``etcd``) is a terminal of its own and must print its
ready line; any other must exit 0. ``make run`` is what the Makefile says it is (checked), and
``pocketmq`` is this checkout's. Bodies sent with ``pocketmq send`` must come back from the
recipe's ``pocketmq consume --json``. The recipes run in the README's order, each stopped
before the next, as the README says to (item 11); a port a recipe needs that is taken skips
the test locally, naming it, and fails under CI (CI's machine runs nothing on them).
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pocketmq.testing import require_etcd

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- recipe: ([^(>]+?)\s*(?:\(.*\))?\s*-->\s*\n```(?:sh)?\n(.*?)```", re.S)
READY = {
    "pocketmq serve": re.compile(r"pocketmq ready native=\S+"),
    "pocketmq namesrv": re.compile(r"pocketmq namesrv ready"),
    "etcd": re.compile(r"ready to serve client requests"),
}
STARTUP_TIMEOUT = 30.0


def recipes(path: Path) -> dict[str, list[str]]:
    """The commands of each recipe of a markdown file, continuation lines joined, in order."""
    found: dict[str, list[str]] = {}
    for name, block in MARKER.findall(path.read_text()):
        commands = found.setdefault(name.strip(), [])
        for line in block.replace("\\\n", " ").splitlines():
            if shlex.split(line, comments=True):
                commands.append(line.strip())
    return found


def _program(command: str) -> str:
    words = shlex.split(command, comments=True)
    return " ".join(words[:2]) if words[0] in ("pocketmq", "make") else words[0]


def _option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def ports_of(command: str) -> list[int]:
    """The TCP ports a long-running command of a recipe listens on (docs/cli.md defaults)."""
    words = shlex.split(command, comments=True)
    program = _program(command)
    if program == "etcd":
        return [2379, 2380]
    if program == "pocketmq namesrv":
        return [int(_option(words, "--port") or 9876)]
    if program != "pocketmq serve":
        return []
    port = int(_option(words, "--port") or 10911)
    ports = [port, int(_option(words, "--ha-port") or port + 1)]
    if "--no-grpc" not in words:
        ports.append(int(_option(words, "--grpc-port") or 8081))
    if "--no-http" not in words:
        ports.append(int(_option(words, "--http-port") or 5557))
    if "--namesrv" not in words:
        ports.append(int(_option(words, "--namesrv-port") or 9876))
    return ports


def _taken(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def require_free(ports: list[int], recipe: str) -> None:
    taken = sorted(p for p in set(ports) if _taken(p))
    if not taken:
        return
    reason = f"the {recipe} recipe needs ports {taken}, taken on this machine"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass
class Terminal:
    """A long-running command of a recipe, as in a terminal of its own."""

    command: str
    process: subprocess.Popen[bytes]
    log: Path
    output: bytes = b""

    def wait_ready(self, pattern: re.Pattern[str]) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            said = self.output.decode(errors="replace")
            if pattern.search(said) or pattern.search(self.log.read_text(errors="replace")):
                return  # a ready line on stdout (pocketmq), or in the log (etcd's, on stderr)
            if self.process.poll() is not None:
                break
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                self.output += os.read(self.process.stdout.fileno(), 65536)
        raise AssertionError(
            f"`{self.command}` was not ready (exit {self.process.poll()}):\n"
            f"{self.output.decode(errors='replace')[-3000:]}\n{self.log.read_text()[-3000:]}"
        )

    def stop(self, *, signalled: bool = False) -> int | None:
        """Ctrl-C (SIGTERM, once: a second one during the shutdown would kill it) and wait."""
        if self.process.poll() is None:
            if not signalled:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return None
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


@dataclass
class Reader:
    """Someone following the README in one directory, with this checkout's ``pocketmq``."""

    home: Path
    env: dict[str, str]
    terminals: list[Terminal] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)

    def run(self, recipe: str, commands: list[str]) -> None:
        """Each command in order; long-running ones start in their own terminals at once (as
        a reader opens them) and are waited for before the next command that needs them."""
        waiting: list[tuple[Terminal, re.Pattern[str]]] = []
        for command in commands:
            program = _program(command)
            if command == ". .venv/bin/activate":
                continue  # what it does, putting `pocketmq` on the PATH, the env already has
            if program == "make run":
                command = "pocketmq serve"  # the Makefile's run target (checked separately)
                program = "pocketmq serve"
            if program in READY:
                waiting.append((self.start(command), READY[program]))
                continue
            self._ready(waiting)
            self.once(recipe, command)
        self._ready(waiting)

    def _ready(self, waiting: list[tuple[Terminal, re.Pattern[str]]]) -> None:
        """Every terminal started has printed its ready line; a group's slaves are in sync with
        their master (what a reader's typing takes; a `sync` send before that is answered
        SLAVE_NOT_AVAILABLE, and the recipe's send must be OK)."""
        for terminal, ready in waiting:
            terminal.wait_ready(ready)
        slaves = sum("--master" in t.command.split() for t, _ in waiting)
        waiting.clear()
        if slaves:
            _wait_in_sync("127.0.0.1:9876", slaves)

    def start(self, command: str) -> Terminal:
        log = self.home / f"terminal-{len(self.terminals)}.log"
        with open(log, "ab") as stderr:
            process = subprocess.Popen(
                ["sh", "-c", f"exec {command}"],
                cwd=self.home,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        terminal = Terminal(command, process, log)
        self.terminals.append(terminal)
        return terminal

    def once(self, recipe: str, command: str) -> str:
        done = subprocess.run(
            ["sh", "-c", command],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (
            f"{recipe}: `{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}\n"
            + "\n".join(t.log.read_text()[-2000:] for t in self.terminals)
        )
        words = shlex.split(command, comments=True)
        if words[:2] == ["pocketmq", "send"]:
            assert "status" not in done.stdout, f"{recipe}: a weaker answer: {done.stdout}"
            self.sent.append(words[3])
        if words[:2] == ["pocketmq", "consume"] and "--json" in words:
            bodies = [json.loads(line)["body"] for line in done.stdout.splitlines()]
            assert bodies, f"{recipe}: `{command}` received nothing"
            assert set(bodies) <= set(self.sent), (bodies, self.sent)
        return done.stdout

    def stop_all(self) -> list[tuple[str, int | None]]:
        """Ctrl-C in every terminal at once; their exit codes."""
        for terminal in self.terminals:
            if terminal.process.poll() is None:
                terminal.process.send_signal(signal.SIGTERM)
        codes = [(t.command, t.stop(signalled=True)) for t in self.terminals]
        self.terminals.clear()
        return codes


def _wait_in_sync(namesrv: str, slaves: int, timeout: float = 20.0) -> None:
    from pocketmq.client.sync import SyncAdmin

    deadline = time.monotonic() + timeout
    in_sync = -1
    with SyncAdmin(servers=namesrv) as admin:
        while time.monotonic() < deadline:
            for status in admin.run(lambda a: a.broker_status()):
                if status.replication.get("role") == "master":
                    in_sync = int(str(status.replication.get("in_sync", 0)))
            if in_sync >= slaves:
                return
            time.sleep(0.1)
    raise AssertionError(f"{in_sync} of {slaves} slaves in sync after {timeout} s")


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Reader]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "pocketmq"  # this checkout's pocketmq, whatever the venv has installed
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m pocketmq "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    person = Reader(home, env)
    try:
        yield person
    finally:
        person.stop_all()


def _ports(commands: list[str]) -> list[int]:
    return [p for c in commands for p in ports_of("pocketmq serve" if c == "make run" else c)]


def test_the_makefiles_run_target_is_the_broker_the_quickstart_talks_to() -> None:
    makefile = (ROOT / "Makefile").read_text()
    run = re.search(r"^run: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert run is not None
    assert run.group(1).strip() == "$(VENV)/bin/pocketmq serve"


def test_the_readmes_recipes_run_as_written_in_order(reader: Reader) -> None:
    found = recipes(ROOT / "README.md")
    assert list(found) == ["quickstart", "replicated group", "failover group"]
    quickstart = ["make run", *found["quickstart"]]
    require_etcd()
    require_free(_ports(quickstart + found["replicated group"] + found["failover group"]), "README")

    reader.run("quickstart", quickstart)
    codes = reader.stop_all()
    assert all(code == 0 for _, code in codes), codes

    reader.run("replicated group", found["replicated group"])
    status = [json.loads(line) for line in _status_lines(reader)]
    assert sorted(s["replication"]["role"] for s in status) == ["master", "slave"]
    codes = reader.stop_all()
    assert all(code == 0 for _, code in codes), codes

    reader.run("failover group", found["failover group"])
    listed = reader.once("failover group", "pocketmq cluster list --json --server 127.0.0.1:9876")
    rows = [json.loads(line) for line in listed.splitlines()]
    assert sorted(r["controller"] for r in rows) == ["master", "slave", "slave"], rows
    codes = reader.stop_all()
    assert all(code == 0 for command, code in codes if command.startswith("pocketmq")), codes


def _status_lines(reader: Reader) -> list[str]:
    out = reader.once("replicated group", "pocketmq broker status --json --server 127.0.0.1:9876")
    return out.splitlines()


def test_replication_md_runs_a_three_broker_group_on_one_machine(reader: Reader) -> None:
    found = recipes(ROOT / "docs" / "replication.md")
    commands = found["a group on one machine"]
    require_free(_ports(commands), "docs/replication.md §7")
    reader.run("a group on one machine", commands)
    status = [json.loads(line) for line in _status_lines(reader)]
    assert sorted(s["replication"]["role"] for s in status) == ["master", "slave", "slave"]
    codes = reader.stop_all()
    assert all(code == 0 for _, code in codes), codes


def test_a_broker_started_beside_the_quickstarts_names_the_port_it_finds_taken(
    reader: Reader,
) -> None:
    """Item 11: forgetting to stop the quickstart's broker gets a one-line refusal naming the
    port and the likely culprit, not a traceback or a bare errno."""
    found = recipes(ROOT / "README.md")
    require_free(_ports(["make run", *found["replicated group"]]), "README")
    reader.run("quickstart", ["make run"])
    refused = subprocess.run(
        ["sh", "-c", "pocketmq namesrv --port 9876"],
        cwd=reader.home,
        env=reader.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "Error: cannot start the name server: port 9876 (the name server's port, --port) is "
        "already in use: another broker or name server (the quickstart's `make run`?) or "
        "another program listens there; stop it, or give this one another port"
    )
