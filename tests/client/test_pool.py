"""The connection pool's shared connection attempt (src/pocketmq/client/pool.py).

Issue 29 item 16: "Task exception was never retrieved" appeared in about 2 of 10 runs when a
broker went away under a push consumer and a producer. The attempt is a task shielded from its
callers; when every caller had given up (a consumer closing, a timeout) and the attempt then
failed, nobody read its exception and asyncio logged it when the task was collected. Here the
peer accepts the connection and never answers HELLO, so the attempt is still running when its
callers give up, every time. (The real-process scenario: tests/integration/
test_broker_goes_away.py.)
"""

from __future__ import annotations

import asyncio

from pocketmq.client.pool import ConnectionPool


async def test_an_attempt_that_fails_after_its_callers_gave_up_has_its_outcome_read() -> None:
    accepted: list[asyncio.StreamWriter] = []
    connected = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing: HELLO waits
        connected.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    pool = ConnectionPool("test-client", connect_timeout=5.0)
    callers = [asyncio.create_task(pool.get(address)) for _ in range(3)]
    await connected.wait()
    attempt = pool._connecting[address]
    for caller in callers:  # everybody gives up while the attempt waits for its HELLO answer
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    for writer in accepted:  # the broker goes away: the attempt fails with nobody waiting
        writer.transport.abort()
    await asyncio.wait([attempt])  # waits without reading the outcome
    await asyncio.sleep(0)  # the done callbacks run
    # asyncio's own flag behind "Task exception was never retrieved": set while nobody read
    # the exception, it makes the task log that line when it is collected (checked before
    # this test reads the exception itself, which would clear it)
    assert not attempt._log_traceback
    assert attempt.exception() is not None
    server.close()
    await server.wait_closed()
    await pool.close()
