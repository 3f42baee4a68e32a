"""The dashboard's pages and their JSON twins under ``/api/`` (docs/operations.md, "Dashboard").

Every page is built from :mod:`pocketmq.broker.overview` in one pass on the event loop and paged
(50 rows), so a page never holds the loop for long; the templates are Jinja2 with autoescaping,
and the only script is htmx, served from ``/static/``.
"""

from __future__ import annotations

import asyncio
import collections
import csv
import dataclasses
import io
import time
from typing import Any

import jinja2
import markupsafe
import msgspec
from aiohttp import web

from pocketmq.broker import Broker
from pocketmq.broker.overview import (
    DeadLetterRow,
    committed_positions,
    dead_letters,
    depth,
    group_overview,
    group_overviews,
    last_error,
    scheduled,
    traffic,
)
from pocketmq.broker.redrive import REDRIVE_AUDIT_TOPIC, RedriveRecord
from pocketmq.broker.topics import DLQ_PREFIX, RETRY_PREFIX, TopicConfig
from pocketmq.errors import (
    GroupNotFoundError,
    InvalidArgumentError,
    MessageNotFoundError,
    NoPermissionError,
    PocketMQError,
    TopicNotFoundError,
)
from pocketmq.server.auth.acl import CLUSTER, Action
from pocketmq.server.auth.authorizer import Authorizer, Need, topic_need
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.http.dashboard import actions
from pocketmq.server.http.dashboard.guard import CSRF_HEADER, Guard, csrf_token
from pocketmq.server.http.dashboard.present import (
    age,
    copy_json,
    counted,
    group_json,
    letter_json,
    line_json,
    parse_time,
    preview,
    when,
)
from pocketmq.server.http.dashboard.signin import SignIn
from pocketmq.version import VERSION

__all__ = ["Dashboard"]

PAGE = 50
_CLUSTER_GET: Need = ("Cluster", CLUSTER, Action.GET)
_YIELD_EVERY = 50  # dead letters examined between returns to the event loop
_NOT_FOUND = (GroupNotFoundError, TopicNotFoundError, MessageNotFoundError)


class Dashboard:
    """Routes, data and rendering of the dashboard of one broker."""

    def __init__(self, broker: Broker, guard: Guard, authorizer: Authorizer | None = None) -> None:
        self._broker = broker
        self._guard = guard
        self._authorizer = authorizer  # with --authorization, users' sessions follow the ACL
        self._templates = jinja2.Environment(
            loader=jinja2.PackageLoader("pocketmq.server.http.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self._templates.filters["when"] = when
        self._templates.filters["age"] = age
        self._templates.filters["counted"] = counted
        self._rates: collections.deque[tuple[float, dict[str, int]]] = collections.deque()
        self.sign_in = SignIn(guard, self._render)

    def add_routes(self, app: web.Application) -> None:
        """Register every page, action and API route."""
        get, post = app.router.add_get, app.router.add_post
        get("/", self.front)
        get("/groups/{group}", self.group)
        get("/groups/{group}/dlq", self.dlq)
        get("/groups/{group}/dlq.csv", self.dlq_csv)
        get("/groups/{group}/redrives", self.redrives)
        post("/groups/{group}/dlq/resend", self.resend)
        post("/groups/{group}/reset", self.reset)
        post("/groups/{group}/policy", self.policy)
        get("/messages", self.message)
        get("/topics", self.topics)
        post("/topics/{topic}/send", self.send)
        self.sign_in.add_routes(app)
        get("/api/groups", self.front)
        get("/api/groups/{group}", self.group)
        get("/api/groups/{group}/dlq", self.dlq)
        get("/api/groups/{group}/redrives", self.redrives)
        post("/api/groups/{group}/dlq/resend", self.resend)
        post("/api/groups/{group}/reset-offset", self.reset)
        post("/api/groups/{group}/policy", self.policy)
        get("/api/messages", self.message)
        get("/api/topics", self.topics)
        post("/api/topics/{topic}/messages", self.send)
        here = __file__.rsplit("/", 1)[0]
        app.router.add_static("/static/", f"{here}/static", append_version=False)

    # -- what the sibling page families (trends.py, cluster.py) share --------------------

    @property
    def broker(self) -> Broker:
        """The broker whose pages these are."""
        return self._broker

    def render(self, request: web.Request, name: str, **values: Any) -> web.Response:
        """A page from template ``name`` with the values every page gets."""
        return self._render(request, name, **values)

    def check(self, request: web.Request, *needs: Need) -> None:
        """Refuse what a signed-in user's rules do not allow (:meth:`_check`)."""
        self._check(request, *needs)

    def failure(self, request: web.Request, exc: PocketMQError) -> web.Response:
        """The answer to a refused or failed request, as a page, an htmx fragment or JSON."""
        return self._failure(request, exc)

    # -- rendering ---------------------------------------------------------------------------

    def _render(self, request: web.Request, name: str, **values: Any) -> web.Response:
        template = self._templates.get_template(name)
        text = template.render(
            broker=self._broker,
            version=VERSION,
            csrf=csrf_token(request),
            csrf_header=CSRF_HEADER,
            path=request.path,
            users_sign_in=self._guard.users_enabled,
            **values,
        )
        return web.Response(text=text, content_type="text/html")

    def _check(self, request: web.Request, *needs: Need) -> None:
        """Refuse (:class:`NoPermissionError`) what a signed-in user's rules do not allow; the
        HTTP token's holder and a visitor on loopback are not checked (docs/security.md)."""
        user = self._guard.user_of(request)
        if user and self._authorizer is not None:
            try:
                self._authorizer.check(user, needs, request.remote or "")
            except NoPermissionError:
                count_failure("http", "forbidden")
                raise

    @staticmethod
    def _api(request: web.Request) -> bool:
        return request.path.startswith("/api/")

    async def _form(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            data = await request.json()
            if not isinstance(data, dict):
                raise InvalidArgumentError("the body must be a JSON object")
            return data
        form = await request.post()
        out: dict[str, Any] = {}
        for key in form:
            values = form.getall(key)
            out[key] = values if len(values) > 1 or key == "offset" else values[0]
        return out

    def _failure(self, request: web.Request, exc: PocketMQError) -> web.Response:
        status = (
            404
            if isinstance(exc, _NOT_FOUND)
            else 403
            if isinstance(exc, NoPermissionError)
            else 400
        )
        if self._api(request):
            return web.json_response({"error": str(exc)}, status=status)
        if request.headers.get("HX-Request"):
            return web.Response(
                text=f'<p class="error" role="alert">{markupsafe.escape(str(exc))}</p>',
                content_type="text/html",
                status=200,  # htmx swaps 2xx only: show the error where the result would go
            )
        response = self._render(request, "error.html", message=str(exc))
        response.set_status(status)
        return response

    # -- pages ------------------------------------------------------------------------------

    async def front(self, request: web.Request) -> web.Response:
        """Groups ranked by trouble, and the broker's state."""
        try:
            self._check(request, _CLUSTER_GET)
        except PocketMQError as exc:
            return self._failure(request, exc)
        overviews = group_overviews(self._broker)
        page = _page(request)
        shown = overviews[page * PAGE : (page + 1) * PAGE]
        if self._api(request):
            return web.json_response([group_json(o) for o in shown])
        return self._render(
            request,
            "front.html",
            groups=shown,
            page=page,
            more=len(overviews) > (page + 1) * PAGE,
            scheduled=scheduled(self._broker),
            status=self._broker.status(),
            held=sum(self._held(config) for config in self._user_topics()),
            role=self._broker.role.value,
        )

    async def group(self, request: web.Request) -> web.Response:
        """One group: consumers, queues, retry policy, reset."""
        try:
            self._check(request, ("Group", request.match_info["group"], Action.GET))
            overview = group_overview(self._broker, request.match_info["group"])
        except PocketMQError as exc:
            return self._failure(request, exc)
        if self._api(request):
            return web.json_response(group_json(overview, detail=True))
        topics = sorted({q.topic for q in overview.queues if not q.topic.startswith("%")})
        return self._render(request, "group.html", g=overview, topics=topics, now=time.time())

    async def dlq(self, request: web.Request) -> web.Response:
        """A group's dead letters, filtered and paged, each with its last error."""
        name = request.match_info["group"]
        try:
            self._check(request, ("Group", name, Action.GET))
            self._broker.require_group(name)
            rows, more, filters = await self._dead_letters(request, name)
        except PocketMQError as exc:
            return self._failure(request, exc)
        if self._api(request):
            return web.json_response({"dead_letters": [letter_json(r) for r in rows], "more": more})
        return self._render(
            request,
            "dlq.html",
            group=name,
            rows=rows,
            more=more,
            filters=filters,
            page=_page(request),
            max_selection=actions.MAX_SELECTION,
        )

    async def _dead_letters(
        self, request: web.Request, group: str, *, everything: bool = False
    ) -> tuple[list[DeadLetterRow], bool, dict[str, str]]:
        """One page of the dead letters that pass the filters (or all, for exports). A long scan
        gives the event loop back every few hundred rows, so other clients are served meanwhile;
        the attempt history is read only for rows shown or filtered by their error."""
        query = request.query
        filters = {k: query.get(k, "").strip() for k in ("key", "tag", "error", "since", "until")}
        since, until = parse_time(filters["since"]), parse_time(filters["until"])
        wanted_error = filters["error"].lower()
        page = _page(request)
        skip, wanted = (0, 10**9) if everything else (page * PAGE, PAGE + 1)
        rows: list[DeadLetterRow] = []
        for examined, row in enumerate(dead_letters(self._broker, group), 1):
            if examined % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if filters["key"] and filters["key"] not in row.keys.split(" "):
                continue
            if filters["tag"] and row.tag != filters["tag"]:
                continue
            if (since and row.stored_at_ms < since) or (until and row.stored_at_ms > until):
                continue
            error: str | None = None
            if wanted_error:
                error = last_error(self._broker.message_history(row.message_id), group)
                if wanted_error not in (error + " " + row.reason).lower():
                    continue
            if skip:
                skip -= 1
                continue
            if error is None:
                error = last_error(self._broker.message_history(row.message_id), group)
            rows.append(_with_error(row, error))
            if len(rows) >= wanted:
                break
        more = not everything and len(rows) > PAGE
        return rows[:PAGE] if not everything else rows, more, filters

    async def dlq_csv(self, request: web.Request) -> web.Response:
        """The filtered dead letters as CSV (every match, not one page)."""
        name = request.match_info["group"]
        try:
            self._check(request, ("Group", name, Action.GET))
            self._broker.require_group(name)
            rows, _, _ = await self._dead_letters(request, name, everything=True)
        except PocketMQError as exc:
            return self._failure(request, exc)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(
            ["dlq_offset", "message_id", "origin_topic", "tag", "keys", "attempts",
             "stored_at", "reason", "last_error", "redriven", "body"]
        )  # fmt: skip
        for r in rows:
            writer.writerow(
                [r.dlq_offset, *map(_inert, (r.message_id, r.origin_topic, r.tag, r.keys)),
                 r.attempts, when(r.stored_at_ms), _inert(r.reason), _inert(r.last_error),
                 r.redriven, _inert(r.body.decode("utf-8", "replace"))]
            )  # fmt: skip
        return web.Response(
            text=out.getvalue(),
            content_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="dlq-{name}.csv"'},
        )

    async def redrives(self, request: web.Request) -> web.Response:
        """The redrive audit of a group: what was resent where, by whom, when."""
        name = request.match_info["group"]
        try:
            self._check(request, ("Group", name, Action.GET))
        except PocketMQError as exc:
            return self._failure(request, exc)
        records = [r for r in self._audit() if r["group"] == name]
        records.reverse()
        if self._api(request):
            return web.json_response(records)
        return self._render(request, "redrives.html", group=name, records=records[:500])

    def _audit(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset = 0
        while True:
            batch = self._broker.browse(REDRIVE_AUDIT_TOPIC, 0, offset, 1024)
            for message in batch:
                try:
                    record = msgspec.json.decode(message.body, type=RedriveRecord)
                    out.append(msgspec.to_builtins(record))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
            if len(batch) < 1024:
                return out
            offset = batch[-1].queue_offset + 1

    async def message(self, request: web.Request) -> web.Response:
        """A message by id (or by topic and key): properties, body, delivery timeline."""
        query = request.query
        message_id, topic, key = query.get("id", ""), query.get("topic", ""), query.get("key", "")
        try:
            self._check(request, _CLUSTER_GET)
            found = self._broker.query_messages(
                message_id=message_id.strip(), topic=topic.strip(), key=key.strip(), max_count=32
            )
            if not found:
                raise MessageNotFoundError("no message matches")
        except PocketMQError as exc:
            return self._failure(request, exc)
        ids = list(dict.fromkeys(m.properties.get("UNIQ_KEY", "") for m in found))
        timeline = self._broker.message_history(ids[0]) if len(ids) == 1 and ids[0] else []
        if self._api(request):
            return web.json_response(
                {
                    "copies": [copy_json(m) for m in found],
                    "attempts": [{f: getattr(a, f) for f in a.__struct_fields__} for a in timeline],
                }
            )
        copies = [(m, *preview(m.body)) for m in found]
        return self._render(
            request, "message.html", copies=copies, timeline=timeline, ids=ids, query=query
        )

    async def topics(self, request: web.Request) -> web.Response:
        """Topics with their rates, queues, and the groups consuming them with their lag."""
        try:
            self._check(request, _CLUSTER_GET)
        except PocketMQError as exc:
            return self._failure(request, exc)
        rows = self._topic_rows()
        if self._api(request):
            return web.json_response(rows)
        return self._render(request, "topics.html", rows=rows)

    def _topic_rows(self) -> list[dict[str, Any]]:
        broker = self._broker
        now = time.monotonic()
        counts = dict(traffic(broker).messages_in)
        if not self._rates or now - self._rates[-1][0] >= 5:
            self._rates.append((now, counts))
        while len(self._rates) > 2 and now - self._rates[1][0] >= 60:
            self._rates.popleft()
        then, before = self._rates[0]
        elapsed = max(now - then, 1e-9)
        committed, _ = committed_positions(broker)
        lag: dict[str, dict[str, int]] = {}
        for (group, topic, queue_id), offset in committed.items():
            behind = max(0, broker.queue_range(topic, queue_id)[1] - offset)
            lag.setdefault(topic, {}).setdefault(group, 0)
            lag[topic][group] += behind
        rows = []
        for config in self._user_topics():
            stored = self._held(config)
            rate = (counts.get(config.name, 0) - before.get(config.name, 0)) / elapsed
            rows.append(
                {
                    "name": config.name,
                    "type": config.topic_type.value,
                    "queues": config.queues,
                    "stored": stored,
                    "messages_in": counts.get(config.name, 0),
                    "rate": round(rate if elapsed >= 1 else 0.0, 1),
                    "groups": dict(sorted(lag.get(config.name, {}).items())),
                }
            )
        return rows

    def _user_topics(self) -> list[TopicConfig]:
        """The topics users send to, by name: no retry, dead-letter or system topic."""
        return [
            config
            for config in self._broker.list_topics()
            if not (config.name.startswith((DLQ_PREFIX, RETRY_PREFIX)) or config.system)
        ]

    def _held(self, config: TopicConfig) -> int:
        """The messages the store holds in ``config``'s queues now (retention removed the
        rest); a total over the store's life, unlike the since-start counters."""
        return depth(self._broker, config.name)

    # -- actions ----------------------------------------------------------------------------

    async def resend(self, request: web.Request) -> web.Response:
        """Dry run or resend the selected dead letters."""
        group = request.match_info["group"]
        try:
            self._check(request, ("Group", group, Action.UPDATE))
            form = await self._form(request)
            raw = form.get("offset", [])
            offsets = [int(o) for o in (raw if isinstance(raw, list) else [raw])]
            lines = await actions.redrive(
                self._broker,
                group,
                offsets,
                target=str(form.get("target", "origin")),
                rate=float(form.get("rate", 100)),
                dry_run=str(form.get("dry_run", "")).lower() in ("1", "true", "on", "yes"),
            )
        except ValueError as exc:
            if isinstance(exc, PocketMQError):
                return self._failure(request, exc)
            return self._failure(request, InvalidArgumentError(f"bad value: {exc}"))
        except PocketMQError as exc:
            return self._failure(request, exc)
        if self._api(request):
            return web.json_response([line_json(line) for line in lines])
        return self._render(request, "resend_result.html", group=group, lines=lines)

    async def reset(self, request: web.Request) -> web.Response:
        """Reset the group's offsets on a topic to a time, the earliest or the latest."""
        group = request.match_info["group"]
        try:
            form = await self._form(request)
            self._check(
                request,
                ("Group", group, Action.UPDATE),
                topic_need(str(form.get("topic", "")), Action.GET),
            )
            to = str(form.get("to", "time"))
            at_ms = parse_time(str(form.get("time", ""))) if to == "time" else 0
            moves = actions.reset_offsets(
                self._broker, group, str(form.get("topic", "")), to, at_ms
            )
        except PocketMQError as exc:
            return self._failure(request, exc)
        if self._api(request):
            return web.json_response(moves)
        return self._render(request, "reset_result.html", moves=moves)

    async def policy(self, request: web.Request) -> web.Response:
        """Edit the group's retry policy."""
        group = request.match_info["group"]
        try:
            self._check(request, ("Group", group, Action.UPDATE))
            form = await self._form(request)
            text = str(form.get("delays", "")).replace(",", " ")
            delays = [float(d) for d in text.split()]
            policy = actions.update_policy(
                self._broker, group, int(form.get("max_retries", 16)), delays
            )
        except PocketMQError as exc:
            return self._failure(request, exc)
        except ValueError as exc:
            return self._failure(request, InvalidArgumentError(f"bad value: {exc}"))
        if self._api(request):
            return web.json_response({"max_retries": policy.max_retries, "delays": policy.delays})
        return web.Response(
            text=f'<p class="ok" role="status">saved: {policy.max_retries} retries</p>',
            content_type="text/html",
        )

    async def send(self, request: web.Request) -> web.Response:
        """Send a test message to a topic."""
        try:
            self._check(request, topic_need(request.match_info["topic"], Action.PUB))
            form = await self._form(request)
            result = await actions.send_test(
                self._broker,
                request.match_info["topic"],
                str(form.get("body", "")),
                str(form.get("tag", "")),
                str(form.get("key", "")),
            )
        except PocketMQError as exc:
            return self._failure(request, exc)
        if self._api(request):
            return web.json_response(result)
        return web.Response(
            text=(
                f'<p class="ok" role="status">{result["code"]}: '
                f'<a href="/messages?id={result["message_id"]}">{result["message_id"]}</a></p>'
            ),
            content_type="text/html",
        )


def _page(request: web.Request) -> int:
    try:
        return max(0, int(request.query.get("page", "0")))
    except ValueError:
        return 0


def _with_error(row: DeadLetterRow, error: str) -> DeadLetterRow:
    return dataclasses.replace(row, last_error=error)


def _inert(cell: str) -> str:
    """A text cell a spreadsheet shows as text: one starting with ``= + - @``, a tab or a
    carriage return would be read as a formula (OWASP's "CSV injection"), so it gets a leading
    ``'``."""
    return "'" + cell if cell.startswith(("=", "+", "-", "@", "\t", "\r")) else cell
