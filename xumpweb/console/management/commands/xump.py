"""`python manage.py xump ...`: the operators' command-line client.

    xump publish QUEUE [BODY] [-a ADDRESS] [-H name=value ...] [-r RETURN_ADDRESS]
    xump publish QUEUE --file messages.jsonl [--batch 500] [--progress | --no-progress]
    xump subscribe DESTINATION [--count N] [--idle SECONDS] [--no-confirm]
    xump queues [--json]
    xump selectors QUEUE [--json]
    xump pattern housecat RECIPIENT [--router R]
    xump pattern parrot SUBSCRIBER TOPIC [--router R]
    xump pattern wolfpack SERVICE WORKER [--credit N]
    xump archive [--out PATH] [--progress | --no-progress]
    xump definitions export [--out FILE]
    xump definitions import FILE|- [--dry-run]

It reaches the queues as every process does (xumpweb/runtime.py): publishes go to the
store's durable inbox; listings and patterns are operations the router answers, so a router
must be running (`make run`'s worker, or the web process with XUMP_ROUTING=inline).
A batch file holds one message per line as the HTTP API's batch publish takes them:
{"address": ..., "headers": {...}, "body": "text" | "body_base64": ... | "json": ...}.
`subscribe` prints each delivery as one JSON line (the WebSocket's delivery frame) and
confirms it once printed. `archive` exports every queue's history and the delivery
journal as Parquet (default XUMP_ARCHIVE_DIR; xumpweb/analytics/archiving.py), recorded
as an AnalyticsRun the console shows. `definitions` exports the whole wiring as one JSON
document or imports one (xumpweb/wiring/definitions.py): every problem is listed and
nothing changes, `--dry-run` prints the changes without making them, new tokens' secrets
are printed once. Errors are one line on stderr and exit status 1.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from engine import Message
from engine.errors import InvalidArgument, XumpError
from engine.validation import check_headers
from xumpweb import redis_clients, shards
from xumpweb.router.codec import delivery_out
from xumpweb.runtime import Service

PATTERN_ARGUMENTS = {
    "housecat": ("recipient",),
    "parrot": ("subscriber", "topic"),
    "wolfpack": ("service", "worker"),
}


class Failed(Exception):
    """A mistake the user can act on; printed as one line."""


class Command(BaseCommand):
    help = "Publish, subscribe, list queues and selectors, build patterns (see --help)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        publish = actions.add_parser("publish", help="publish one message, or a JSON-lines file")
        publish.add_argument("queue")
        publish.add_argument("body", nargs="?", help="the body (default: read from stdin)")
        publish.add_argument("-a", "--address", default="")
        publish.add_argument("-H", "--header", action="append", default=[],
                             metavar="NAME=VALUE", help="a header; numbers and true/false "
                             "are typed, quote as JSON for a string: n='\"42\"'")  # fmt: skip
        publish.add_argument("-r", "--return-address", default=None)
        publish.add_argument("-f", "--file", help="JSON lines, one message each ('-': stdin)")
        publish.add_argument("--batch", type=int, default=500, help="messages per publish")
        publish.add_argument("--progress", action="store_true", default=None,
                             help="draw a progress bar (default: on a terminal)")  # fmt: skip
        publish.add_argument("--no-progress", dest="progress", action="store_false")

        subscribe = actions.add_parser("subscribe", help="print deliveries as JSON lines")
        subscribe.add_argument("destination")
        subscribe.add_argument("-n", "--count", type=int, default=None,
                               help="stop after this many deliveries")  # fmt: skip
        subscribe.add_argument("--idle", type=float, default=None,
                               help="stop when nothing arrived for this many seconds")  # fmt: skip
        subscribe.add_argument("--no-confirm", dest="confirm", action="store_false",
                               help="print only; the deliveries stay outstanding")  # fmt: skip

        queues = actions.add_parser("queues", help="list queues with their depth")
        queues.add_argument("--json", action="store_true")

        selectors = actions.add_parser("selectors", help="list a queue's selectors")
        selectors.add_argument("queue")
        selectors.add_argument("--json", action="store_true")

        pattern = actions.add_parser("pattern", help="build a housecat, parrot or wolfpack")
        kinds = pattern.add_subparsers(dest="kind", required=True, metavar="KIND")
        housecat = kinds.add_parser("housecat", help="direct: router -> recipient")
        housecat.add_argument("recipient")
        housecat.add_argument("--router", default="housecat")
        parrot = kinds.add_parser("parrot", help="publish/subscribe by topic")
        parrot.add_argument("subscriber")
        parrot.add_argument("topic", help="e.g. stock.*.price")
        parrot.add_argument("--router", default="parrot")
        wolfpack = kinds.add_parser("wolfpack", help="work shared among workers")
        wolfpack.add_argument("service", help="the service queue")
        wolfpack.add_argument("worker")
        wolfpack.add_argument("--credit", type=int, default=1,
                              help="messages a worker holds at once (-1: unlimited)")  # fmt: skip

        archive = actions.add_parser("archive", help="export history and the journal to Parquet")
        archive.add_argument("--out", help="the archive directory (default: XUMP_ARCHIVE_DIR)")
        archive.add_argument("--progress", action="store_true", default=None,
                             help="draw a progress bar (default: on a terminal)")  # fmt: skip
        archive.add_argument("--no-progress", dest="progress", action="store_false")

        definitions = actions.add_parser("definitions", help="export or import the wiring")
        verbs = definitions.add_subparsers(dest="verb", required=True, metavar="VERB")
        export = verbs.add_parser("export", help="print the definitions document (JSON)")
        export.add_argument("--out", help="write it to this file instead")
        load = verbs.add_parser("import", help="import a definitions document")
        load.add_argument("file", help="the JSON document, or - for stdin")
        load.add_argument("--dry-run", action="store_true", help="show the changes only")

    def handle(self, *args: Any, **options: Any) -> None:
        # a Service of its own, never the process-wide one: with XUMP_ROUTING=inline that
        # one would start a router in this short-lived command
        self.service = Service(
            redis_clients.store_url(), settings.XUMP_STORE, settings.XUMP_ROUTING,
            settings.XUMP_CALL_TIMEOUT, shards=shards.names(),
        )  # fmt: skip
        try:
            getattr(self, "do_" + options["action"])(options)
        except (Failed, XumpError) as error:
            self._fail(str(error))
        except redis.RedisError as error:
            self._fail(f"cannot reach Redis at {settings.XUMP_REDIS_URL}: {error}")
        except OSError as error:
            self._fail(str(error))
        except KeyboardInterrupt:
            self.stderr.write("")
            raise SystemExit(130) from None
        finally:
            for shard in self.service.shards.values():
                shard.relay.close()

    def _fail(self, message: str) -> None:
        self.stderr.write(f"xump: error: {message}")
        raise SystemExit(1)

    # -- publish ---------------------------------------------------------------------------
    def do_publish(self, options: dict[str, Any]) -> None:
        queue = options["queue"]
        if options["file"]:
            if options["body"] is not None or options["header"] or options["address"]:
                raise Failed("give either --file or one message (body, -a, -H), not both")
            self._publish_file(queue, options)
            return
        body = options["body"]
        data = body.encode() if body is not None else _read_stdin()
        headers = _headers(options["header"])
        if len(data) > settings.XUMP_MAX_BODY:
            raise Failed(f"the body is {len(data)} bytes; the limit is {settings.XUMP_MAX_BODY}")
        message = Message(options["address"], headers, data, options["return_address"])
        [mid] = self._publish(queue, [message])
        self.stdout.write(mid)

    def _publish(self, queue: str, messages: list[Message]) -> list[str]:
        return self.service.publish_many(queue, messages)

    def _publish_file(self, queue: str, options: dict[str, Any]) -> None:
        from xumpweb.api.publishing import message_from

        if options["batch"] < 1:
            raise Failed("--batch must be at least 1")
        name = options["file"]
        stream: IO[bytes] = sys.stdin.buffer if name == "-" else open(name, "rb")  # noqa: SIM115
        total = None if name == "-" else _count_lines(Path(name))
        draw = sys.stderr.isatty() if options["progress"] is None else options["progress"]
        bar = Progress(total, sys.stderr if draw else None)
        sent = 0
        started = time.monotonic()
        try:
            batch: list[Message] = []
            for number, line in _lines(stream):
                try:
                    data = json.loads(line)
                    batch.append(message_from(data, settings.XUMP_MAX_BODY))
                except (ValueError, RecursionError, XumpError) as error:
                    why = str(error) if isinstance(error, XumpError) else "not valid JSON"
                    done = f" ({sent} messages before it were published)" if sent else ""
                    raise Failed(f"{name}, line {number}: {why}{done}") from None
                if len(batch) >= options["batch"]:
                    sent += len(self._publish(queue, batch))
                    bar.show(sent)
                    batch = []
            if batch:
                sent += len(self._publish(queue, batch))
        finally:
            bar.show(sent, last=True)
            if stream is not sys.stdin.buffer:
                stream.close()
        elapsed = max(time.monotonic() - started, 1e-6)
        self.stdout.write(f"published {sent} messages to {queue} ({sent / elapsed:,.0f} msg/s)")

    # -- subscribe -------------------------------------------------------------------------
    def do_subscribe(self, options: dict[str, Any]) -> None:
        destination, count, idle = options["destination"], options["count"], options["idle"]
        if count is not None and count < 1:
            raise Failed("--count must be at least 1")
        relay = self.service.shard_for(destination).relay  # read on its home shard
        taken = 0
        last = time.monotonic()
        while count is None or taken < count:
            want = 100 if count is None else min(100, count - taken)
            deliveries = relay.deliveries(destination, count=want, wait=1.0)
            if not deliveries:
                if idle is not None and time.monotonic() - last >= idle:
                    break
                continue
            last = time.monotonic()
            for delivery in deliveries:
                self.stdout.write(json.dumps(delivery_out(delivery), ensure_ascii=False))
            self.stdout.flush()
            if options["confirm"]:
                self.service.confirm_later([d.tag for d in deliveries])
            taken += len(deliveries)

    # -- listings --------------------------------------------------------------------------
    def do_queues(self, options: dict[str, Any]) -> None:
        queues = self.service.call("queues")
        if options["json"]:
            self.stdout.write(json.dumps(queues, indent=2))
            return
        rows = [
            [q["name"], q["store"], q["depth"], q["history_size"], q["outstanding"],
             _or(q["limit"], "-"), q["history"], _or(q["dead_letter"], "-")]
            for q in queues
        ]  # fmt: skip
        header = ["QUEUE", "STORE", "UNPROCESSED", "HISTORY", "OUTSTANDING", "LIMIT", "KEEP",
                  "DEAD-LETTER"]  # fmt: skip
        self._table(header, rows, numeric={2, 3, 4, 5, 6})

    def do_selectors(self, options: dict[str, Any]) -> None:
        found = self.service.call("selectors", queue=options["queue"])
        if options["json"]:
            self.stdout.write(json.dumps(found, indent=2))
            return
        rows = [
            [s["id"], "on" if s["enabled"] else "off", _credit(s), s["outstanding"],
             s["start"], s["describe"]]
            for s in found
        ]  # fmt: skip
        header = ["ID", "ENABLED", "CREDIT", "OUTSTANDING", "START", "WHEN -> DO"]
        self._table(header, rows, numeric={0, 2, 3})

    def do_definitions(self, options: dict[str, Any]) -> None:
        from xumpweb.wiring import definitions

        if options["verb"] == "export":
            text = json.dumps(definitions.export(), indent=2) + "\n"
            if options["out"]:
                Path(options["out"]).write_text(text)
            else:
                self.stdout.write(text, ending="")
            return
        raw = _read_stdin() if options["file"] == "-" else Path(options["file"]).read_bytes()
        try:
            document = json.loads(raw)
        except ValueError as error:
            raise Failed(f"the definitions are not JSON: {error}") from None
        who = f"cli:{getpass.getuser()}"
        try:
            answer = definitions.import_document(
                document, who, self.service.call, dry_run=options["dry_run"]
            )
        except definitions.InvalidDefinitions as invalid:
            for problem in invalid.problems:
                self.stderr.write(f"xump: problem: {problem}")
            raise Failed(f"{len(invalid.problems)} problem(s); nothing changed") from None
        for change in answer["changes"]:
            self.stdout.write(f"{change['change']:<7} {change['kind']:<9} {change['subject']}")
        summary = answer["summary"]
        counts = (
            f"{summary['create']} to create, {summary['update']} to update, "
            f"{summary['unchanged']} unchanged"
        )
        if answer["dry_run"]:
            self.stdout.write(f"dry run: {counts}; nothing changed")
        else:
            self.stdout.write(
                f"imported: {summary['create']} created, {summary['update']} updated, "
                f"{summary['unchanged']} unchanged"
            )
        for token in answer.get("secrets", []):
            self.stdout.write(f"new token {token['name']} ({token['owner']}): {token['secret']}")

    def _table(self, header: list[str], rows: list[list[Any]], numeric: set[int]) -> None:
        cells = [header] + [[str(cell) for cell in row] for row in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        for row in cells:
            line = "  ".join(
                cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                for i, cell in enumerate(row)
            )
            self.stdout.write(line.rstrip())

    # -- patterns --------------------------------------------------------------------------
    def do_pattern(self, options: dict[str, Any]) -> None:
        from xumpweb.wiring import audit
        from xumpweb.wiring.models import Pattern

        kind = options["kind"]
        if kind == "wolfpack":
            router, name, credit = options["service"], options["worker"], options["credit"]
            topic = ""
        else:
            router, credit = options["router"], 1
            name = options["recipient" if kind == "housecat" else "subscriber"]
            topic = options.get("topic") or ""
        built = self.service.call(
            "pattern_build", kind=kind, name=name, router=router, topic=topic, credit=credit
        )
        pattern, created = Pattern.objects.get_or_create(
            kind=kind, router=router, name=name,
            defaults={"topic": topic, "credit": credit, "built_queue": built["queue"],
                      "built_selectors": built["selectors"]},
        )  # fmt: skip
        if created:
            after = {"kind": kind, "router": router, "name": name, "topic": topic,
                     "credit": credit, **built}  # fmt: skip
            audit.record(f"cli:{getpass.getuser()}", "pattern.create", str(pattern), None, after)
        updated = built.get("updated_selectors") or []
        if updated and not created:
            before = {"credit": pattern.credit}
            Pattern.objects.filter(pk=pattern.pk).update(credit=credit)
            audit.record(f"cli:{getpass.getuser()}", "pattern.update", str(pattern), before,
                         {"credit": credit})  # fmt: skip
        selectors = ", ".join(f"{queue}#{number}" for queue, number in built["selectors"])
        state = "built" if created else f"updated (credit {credit})" if updated else "already there"
        self.stdout.write(f"{kind} {router} -> {name} {state}: queue {built['queue']}, "
                          f"selectors {selectors}")  # fmt: skip

    # -- archive ---------------------------------------------------------------------------
    def do_archive(self, options: dict[str, Any]) -> None:
        from xumpweb.analytics.archiving import export
        from xumpweb.analytics.models import AnalyticsRun

        path = Path(options["out"]).resolve() if options["out"] else settings.XUMP_ARCHIVE_DIR
        draw = sys.stderr.isatty() if options["progress"] is None else options["progress"]
        run = AnalyticsRun.objects.create(
            kind="archive", parameters={"path": str(path)}, created_by=f"cli:{getpass.getuser()}"
        )
        run.begin()
        bars: dict[str, Progress] = {}
        shown = [0.0]

        def progress(what: str, done: int, total: int) -> None:
            unit = "chunk" if what == "journal" else "queue"
            bar = bars.get(unit)
            if bar is None or bar.total != total:
                bar = bars[unit] = Progress(total, sys.stderr if draw else None, unit)
            bar.show(done, last=done >= total)
            now = time.monotonic()
            if now - shown[0] >= 0.5 or done >= total:
                shown[0] = now
                run.report_progress(f"{what}: {done} of {total}")

        try:
            result = export(self.service, path, progress).as_json()
        except BaseException as error:
            run.fail(str(error) or type(error).__name__)
            raise
        run.finish(result)
        lost = f", {result['events_lost']} events lost before" if result["events_lost"] else ""
        self.stdout.write(
            f"archived {result['events']} events and {result['history_total']} history "
            f"messages of {len(result['history'])} queues to {path} (run {run.pk}{lost})"
        )


class Progress:
    """A one-line progress bar on a terminal (nothing when `out` is None)."""

    WIDTH = 30

    def __init__(self, total: int | None, out: IO[str] | None, unit: str = "msg") -> None:
        self.total = total
        self.unit = unit
        self.out = out
        self.started = time.monotonic()
        self.drawn = 0.0

    def show(self, done: int, last: bool = False) -> None:
        if self.out is None:
            return
        now = time.monotonic()
        if not last and now - self.drawn < 0.1:
            return
        self.drawn = now
        rate = done / max(now - self.started, 1e-6)
        if self.total:
            filled = round(self.WIDTH * min(done / self.total, 1.0))
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            line = f"[{bar}] {done}/{self.total} {rate:,.0f} {self.unit}/s"
        else:
            line = f"{done} messages {rate:,.0f} {self.unit}/s"
        self.out.write("\r" + line + ("\n" if last else ""))
        self.out.flush()


def _or(value: Any, instead: str) -> Any:
    return instead if value is None else value


def _credit(selector: dict[str, Any]) -> str:
    if selector["credit"] == -1:
        return "unlimited"
    return f"{selector['available_credit']}/{selector['credit']}"


def _headers(pairs: list[str]) -> dict[str, Any]:
    """NAME=VALUE pairs as headers: JSON numbers and booleans typed, the rest text."""
    headers: dict[str, Any] = {}
    for pair in pairs:
        name, equals, text = pair.partition("=")
        if not equals:
            raise Failed(f"header {pair!r} is not NAME=VALUE")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to read
            value = text
        if not isinstance(value, str | int | float | bool):
            value = text
        headers[name] = value
    try:
        return dict(check_headers(headers))
    except InvalidArgument as error:
        raise Failed(str(error)) from None


def _read_stdin() -> bytes:
    if sys.stdin is None or sys.stdin.isatty():
        return b""
    return sys.stdin.buffer.read()


def _count_lines(path: Path) -> int:
    with path.open("rb") as counting:
        return sum(1 for line in counting if line.strip())


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(stream, start=1):
        if line.strip():
            yield number, line
