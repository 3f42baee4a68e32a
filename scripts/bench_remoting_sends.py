"""Remoting pipelined sends side by side with native ones, against one broker process
(docs/benchmarks.md, "Remoting sends"): the same 1 KiB message, 512 in flight on one
connection, unbatched on both sides, alternating rounds; the broker's CPU per message is the
steadier figure on a shared machine.

The remoting client pre-encodes one ``SEND_MESSAGE_V2`` frame with a binary header and patches
each request's ``opaque`` into it, so the client (this process) stays cheap; the native client
is the SDK's producer with batching off (``pocketmq bench produce``'s "pipelined, unbatched").

    PYTHONPATH=src python scripts/bench_remoting_sends.py [count] [rounds]
"""

from __future__ import annotations

import asyncio
import struct
import sys
import tempfile
from pathlib import Path

from pocketmq import Message
from pocketmq.bench.broker import BODY, Meter, _topic, in_flight
from pocketmq.client import Producer, ProducerConfig
from pocketmq.protocol.remoting import RemotingCommand, RemotingFrameDecoder, encode_command
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.properties import encode_properties
from pocketmq.testing import BrokerProcess

TOPIC = "bench-remoting"
WIDTH = 512
_OPAQUE_AT = 4 + 4 + 5  # length, header length, then code i16, language u8, version i16


class RemotingSender:
    """One remoting connection sending pre-encoded frames, answers matched by opaque."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, binary: bool
    ) -> None:
        self._reader, self._writer = reader, writer
        properties = encode_properties({"TAGS": "t"})
        fields = {"a": "bench", "b": TOPIC, "c": "TBW102", "d": "8", "e": "-1", "f": "0",
                  "g": "1700000000000", "h": "0", "i": properties}  # fmt: skip
        command = RemotingCommand(RequestCode.SEND_MESSAGE_V2, 0, 0, fields, body=BODY, version=401)
        command.serialize_type = 1 if binary else 0
        self._command = command
        self._binary = binary
        self._frame = bytearray(encode_command(command))
        self._opaque = 0
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.busy = 0
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        decoder = RemotingFrameDecoder()
        while data := await self._reader.read(1 << 20):
            for answer in decoder.feed(data):
                future = self._waiting.pop(answer.opaque, None)
                if future is not None and not future.done():
                    future.set_result(answer)

    async def send(self) -> None:
        """One send; SYSTEM_BUSY (flow control) is retried after 10 ms, as the Java producer
        retries it (counted in ``busy``)."""
        while True:
            answer = await self._send_once()
            if answer.code != 2:
                break
            self.busy += 1
            await asyncio.sleep(0.01)
        if answer.code != 0:
            raise RuntimeError(f"remoting send answered {answer.code}: {answer.remark}")

    async def _send_once(self) -> RemotingCommand:
        self._opaque += 1
        if self._binary:
            struct.pack_into(">i", self._frame, _OPAQUE_AT, self._opaque)
            frame = bytes(self._frame)
        else:  # a JSON header (what Java and ali-ons send by default) is encoded per request
            self._command.opaque = self._opaque
            frame = encode_command(self._command)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[self._opaque] = future
        self._writer.write(frame)
        return await future

    async def close(self) -> None:
        self._writer.close()
        self._task.cancel()


async def main(count: int, rounds: int) -> None:
    # a shared 2-core machine stalls the loop at times: flow control's threshold is raised (as
    # in the test suite's brokers) so both protocols are measured without refusals
    config = {"broker": {"record_history": False, "max_queue_wait": 5.0}}
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-") as tmp:
        process = BrokerProcess(Path(tmp), grpc_port=None, config=config,
                                extra_args=("--log-level", "warning"))  # fmt: skip
        try:
            assert process.process is not None
            await _rounds(process.address, process.process.pid, count, rounds)
        finally:
            process.stop()


async def _rounds(address: str, pid: int, count: int, rounds: int) -> None:
    if True:
        await _topic(address, TOPIC)
        message = Message(topic=TOPIC, body=BODY)
        host, port = address.rsplit(":", 1)
        producer = Producer(servers=address, config=ProducerConfig(batching=False))
        await producer.start()
        await producer.send(message)
        json = RemotingSender(*await asyncio.open_connection(host, int(port)), binary=False)
        binary = RemotingSender(*await asyncio.open_connection(host, int(port)), binary=True)
        await json.send()
        await binary.send()
        cases = (
            ("native", lambda: producer.send(message)),
            ("remoting JSON", json.send),
            ("remoting binary", binary.send),
        )
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in cases}
        for _ in range(rounds):
            for name, send in cases:
                with Meter(pid) as meter:
                    await in_flight(count, WIDTH, send)  # type: ignore[arg-type]
                figures[name].append((count / meter.seconds, meter.broker_cpu / count * 1e6))
                rate, cpu = figures[name][-1]
                print(f"{name:16} {rate:9.0f} msg/s  broker {cpu:6.1f} µs CPU/msg", flush=True)
        await json.close()
        await binary.close()
        await producer.aclose()
    print(f"remoting sends retried after SYSTEM_BUSY: {json.busy + binary.busy}")
    for name, rows in figures.items():
        rates = sorted(rate for rate, _ in rows)
        cpus = sorted(cpu for _, cpu in rows)
        rate, cpu = rates[len(rates) // 2], cpus[len(cpus) // 2]
        print(f"{name:16} median {rate:9.0f} msg/s, {cpu:6.1f} µs broker CPU/msg")
    native = sorted(r for r, _ in figures["native"])[rounds // 2]
    for name in ("remoting JSON", "remoting binary"):
        remote = sorted(r for r, _ in figures[name])[rounds // 2]
        print(f"{name} / native throughput: {remote / native:.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000,
                     int(sys.argv[2]) if len(sys.argv) > 2 else 3))  # fmt: skip
