"""The dashboard: every queue with its depth, history, outstanding deliveries and rates.

Paged and searched on the server: the page renders PER_PAGE rows of the filtered, sorted
list (1,000 queues render in well under 300 ms, bench/console_bench.py), and tells the live
feed which queues it shows (a "watch" frame, xumpweb/live/monitor.py), so frames carry the
visible page only.

With more than one shard (SPEC §10) the page shows a Shards table above the queues, read
by shard_status.py as GET /api/shards reads it (one pipelined Redis read per shard, at
every render and every poll of the rows fragment, which swaps it in out of band); with one
shard there is no table and nothing more is read.

The page renders from the router's snapshot (service().snapshot()). In the browser,
static/js/console.js opens /ws/monitor/ (htmx's WebSocket extension) and updates the
numbers and sparklines from its frames; while that socket is not open, htmx polls the rows
fragment every 2 s and the script derives rates from the counters between two polls.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from xumpweb import access, shards
from xumpweb.access import requires
from xumpweb.console.common import CallFailed, age, audit, call, health, snapshot_by_name, when
from xumpweb.console.forms import QueueCreateForm
from xumpweb.shard_status import shard_statuses
from xumpweb.wiring.models import Queue

SORTS = {
    "name": lambda q: q["name"],
    "depth": lambda q: q["depth"],
    "history": lambda q: q["history_size"],
    "outstanding": lambda q: q["outstanding"],
    "dead": lambda q: q["dead_lettered"],
    "published": lambda q: q["published"],
}
PER_PAGE = 50  # rows a page shows unless ?per= asks for another of PER_PAGE_CHOICES
PER_PAGE_CHOICES = (25, 50, 100, 200)


def dead_letter_queues() -> set[str]:
    """Queues some queue dead-letters into, and the engine's own ($dead)."""
    named = Queue.objects.exclude(dead_letter__isnull=True).exclude(dead_letter="")
    found = set(named.values_list("dead_letter", flat=True))
    found.update(Queue.objects.filter(name__startswith="$").values_list("name", flat=True))
    return found


def queue_rows(
    query: str = "",
    sort: str = "name",
    descending: bool = False,
    reader: Any = None,
    page: int = 1,
    per_page: int = PER_PAGE,
) -> dict[str, Any]:
    """The dashboard's rows: one page of the queues `reader` (an access.Principal) may read,
    totals over every queue the search matches."""
    by_name, snap = snapshot_by_name()
    if reader is not None:
        by_name = {name: q for name, q in by_name.items() if access.may(reader, "read", name)}
    stores = dict(Queue.objects.values_list("name", "store__name"))
    if reader is not None:
        stores = {name: s for name, s in stores.items() if access.may(reader, "read", name)}
    dead = dead_letter_queues()
    rows = []
    for name, info in by_name.items():
        stats = info.get("stats") or {}
        rows.append({
            "name": name,
            "store": stores.get(name, ""),
            "depth": info.get("depth", 0),
            "history_size": info.get("history_size", 0),
            "outstanding": info.get("outstanding", 0),
            "limit": info.get("limit"),
            "dead_letter": info.get("dead_letter"),
            "dead_lettered": stats.get("dead_lettered", 0),
            "published": stats.get("published", 0),
            "delivered": stats.get("delivered", 0),
            "confirmed": stats.get("confirmed", 0),
            "is_dead_letter_queue": name in dead,
        })  # fmt: skip
    for name in stores.keys() - by_name.keys():  # created since the last snapshot
        rows.append({
            "name": name, "store": stores[name], "depth": 0, "history_size": 0,
            "outstanding": 0, "limit": None, "dead_letter": None, "dead_lettered": 0,
            "published": 0, "delivered": 0, "confirmed": 0,
            "is_dead_letter_queue": name in dead,
        })  # fmt: skip
    every = len(rows)
    if query:
        needle = query.lower()
        rows = [r for r in rows if needle in r["name"].lower() or needle in r["store"].lower()]
    rows.sort(key=SORTS.get(sort, SORTS["name"]), reverse=descending)
    totals = {
        "queues": every,
        "shown": len(rows),
        "depth": sum(r["depth"] for r in rows),
        "history_size": sum(r["history_size"] for r in rows),
        "outstanding": sum(r["outstanding"] for r in rows),
        "dead_letters": sum(r["depth"] for r in rows if r["is_dead_letter_queue"]),
        "inbox": snap.get("inbox", 0),
        "snapshot_age": age(snap.get("time")),
    }
    pages = max(1, -(-len(rows) // per_page))
    page = min(max(1, page), pages)
    start = (page - 1) * per_page
    return {
        "rows": rows[start : start + per_page],
        "totals": totals,
        "paging": {
            "page": page,
            "pages": pages,
            "per": per_page,
            "first": start + 1 if rows else 0,
            "last": min(start + per_page, len(rows)),
            "previous": page - 1 if page > 1 else None,
            "next": page + 1 if page < pages else None,
        },
        "snapshot_time": snap.get("time") or 0,
        "recent": list(reversed(snap.get("recent") or []))[:15],
    }


def shard_rows() -> list[dict[str, Any]]:
    """The Shards table's rows (shard_status.py's figures, `since` written out and its
    age), or none with one shard: the table is not shown."""
    if not shards.sharded():
        return []
    rows = shard_statuses()
    for row in rows:
        since = row["since"]
        row["since_text"] = f"{when(since)[:19]} ({age(since)})" if since is not None else ""
    return rows


def _whole(text: str | None, default: int) -> int:
    """A page number from the query string; anything not a small whole number is `default`."""
    if text is None or not text.isdigit() or len(text) > 6:
        return default
    return int(text)


def _listing(request: HttpRequest) -> dict[str, Any]:
    query = request.GET.get("q", "").strip()
    sort = request.GET.get("sort", "name")
    if sort not in SORTS:
        sort = "name"
    descending = request.GET.get("dir") == "desc"
    page = _whole(request.GET.get("page"), 1)
    per_page = _whole(request.GET.get("per"), PER_PAGE)
    if per_page not in PER_PAGE_CHOICES:
        per_page = PER_PAGE
    context = queue_rows(query, sort, descending, access.for_request(request), page, per_page)
    context.update(q=query, sort=sort, dir="desc" if descending else "asc")
    context["per_choices"] = PER_PAGE_CHOICES
    context["shards"] = shard_rows()
    context["sorts"] = [(key, key.replace("_", " ")) for key in SORTS]
    return context


@requires("console")
def dashboard(request: HttpRequest) -> HttpResponse:
    context = _listing(request)
    context["health"] = health()
    context["form"] = QueueCreateForm()
    return render(request, "console/dashboard.html", context)


@requires("console")
def dashboard_rows(request: HttpRequest) -> HttpResponse:
    """The rows fragment (htmx polling and re-sorting), totals and health out of band."""
    context = _listing(request)
    context["health"] = health()
    return render(request, "console/partials/dashboard_rows.html", context)


@requires("console")
def dashboard_frame(request: HttpRequest) -> JsonResponse:
    """The snapshot as the topology page reads it while /ws/monitor/ is not open."""
    by_name, snap = snapshot_by_name()
    reader = access.for_request(request)
    queues = [
        {
            "name": name,
            "depth": info.get("depth", 0),
            "history_size": info.get("history_size", 0),
            "outstanding": info.get("outstanding", 0),
            "stats": info.get("stats") or {},
        }
        for name, info in by_name.items()
        if access.may(reader, "read", name)
    ]
    return JsonResponse({"type": "snapshot", "time": snap.get("time"), "queues": queues})


@requires("console")
@require_POST
def queue_create(request: HttpRequest) -> HttpResponse:
    form = QueueCreateForm(request.POST)
    if form.is_valid():
        settings = form.engine_settings()
        name = settings.pop("name")
        access.check(request, "manage-queue", name)
        blocked = access.cannot_send(access.for_request(request), settings)
        if blocked is not None:
            form.add_error(None, f"You may not {blocked}.")
        else:
            try:
                answer = call("queue_create", name=name, **settings)
            except CallFailed as error:
                form.add_error(None, str(error))
            else:
                audit(request, "queue.create", name, None, answer.get("queue"))
                return redirect("console:queue", name=name)
    context = _listing(request)
    context.update(health=health(), form=form)
    return render(request, "console/dashboard.html", context, status=400)
