# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HASH := $(shell sha1sum pyproject.toml | cut -c1-12)
# Two stamps: `make run` needs the runtime only (pip install -e .); the test stamp adds the
# `test` extra (PySpark, Selenium, mypy, ...) on top of it (docs/testing.md, "Installing").
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
TEST_STAMP := $(VENV)/.installed-test-$(HASH)

.PHONY: run test test-slow lint fmt bench install install-test clean prerequisites

# the editable install compiles the hot paths in place with mypyc (hatch_build.py); a failed
# compile installs pure Python, which `make install` then says (docs/design.md "Compiled hot paths")
$(RUN_STAMP): pyproject.toml hatch_build.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	rm -f $(VENV)/.installed-*
	touch $(RUN_STAMP)

$(TEST_STAMP): $(RUN_STAMP)
	$(PY) -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.compiled-*  # the reinstall may have rebuilt the package: check the build again
	touch $(TEST_STAMP)

# rebuilt when a compiled module's source changes (a stale build is never used: pure instead)
# (hatch_build.py's GROUPS, in order)
COMPILED_SOURCES := src/pocketmq/protocol/_framecodec.py src/pocketmq/client/_views.py \
	src/pocketmq/client/consumer/_work.py src/pocketmq/client/consumer/_process_queue.py \
	src/pocketmq/client/consumer/_listener.py src/pocketmq/client/consumer/_reports.py \
	src/pocketmq/client/consumer/_consumption.py src/pocketmq/client/consumer/_concurrent.py \
	src/pocketmq/store/_readpass.py src/pocketmq/store/_consumequeue.py \
	src/pocketmq/store/_commitlog.py src/pocketmq/store/_writer.py
COMPILED_STAMP := $(VENV)/.compiled-$(shell cat $(COMPILED_SOURCES) | sha1sum | cut -c1-12)
$(COMPILED_STAMP): $(RUN_STAMP) $(COMPILED_SOURCES)
	$(PY) hatch_build.py --if-stale || echo "WARNING: the hot paths did not compile: pure Python"
	rm -f $(VENV)/.compiled-*
	touch $(COMPILED_STAMP)
	@$(PY) -c 'import pocketmq.protocol.frames, pocketmq.client.consumer.push as _; \
		from pocketmq.compiled import COMPILED; print("compiled:", ", ".join(COMPILED) or "none")'

install: $(COMPILED_STAMP)

install-test: $(TEST_STAMP) $(COMPILED_STAMP)

## Prerequisites that pip cannot provide (Java 17 and JDBC drivers for the Spark pipeline tests,
## the official Node.js client for the gRPC compatibility tests).
prerequisites:
	@sh scripts/prerequisites.sh

run: install
	$(VENV)/bin/pocketmq serve

test: install-test prerequisites
	# compiled hot paths (the build must be there: tests/protocol/test_compiled.py)
	POCKETMQ_REQUIRE_EXTENSIONS=1 $(PY) -m pytest -m "not slow"
	# the fast unit tests again in pure Python (~30 s): both implementations must pass
	POCKETMQ_NO_EXTENSIONS=1 $(PY) -m pytest -m "not slow" tests/protocol \
		tests/client tests/store tests/server/test_connection_limits.py \
		tests/server/test_joined_requests.py tests/server/test_read_turns.py
	# every official-client test again, through the proxy tier (docs/proxy.md)
	POCKETMQ_TEST_GRPC_WORKERS=2 $(PY) -m pytest -m "not slow" tests/grpc \
		tests/server/test_tls.py tests/server/test_authentication.py \
		tests/server/test_acl.py tests/server/test_grpc_tls_modes.py

test-slow: install-test prerequisites
	$(PY) -m pytest -m slow

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy

fmt: $(TEST_STAMP)
	$(VENV)/bin/ruff format src tests
	$(VENV)/bin/ruff check --fix src tests

## Benchmarks: figures go to the terminal and to bench-results/figures.jsonl (docs/benchmarks.md)
BENCH_LOG := bench-results/figures.jsonl
bench: $(TEST_STAMP)
	mkdir -p bench-results
	$(VENV)/bin/pocketmq bench store --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench produce --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench consume --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench latency --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench delay --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench fifo --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench replication --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench scrape --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench dashboard --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench history --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench security --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench grpc-tls --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench peers --record $(BENCH_LOG)
	$(VENV)/bin/pocketmq bench idempotent --url postgresql+psycopg://postgres@127.0.0.1:5432/test --redis redis://127.0.0.1:6379/0
	$(VENV)/bin/pocketmq bench grpc
	$(VENV)/bin/pocketmq bench proxy
	$(VENV)/bin/pocketmq bench reconcile

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
