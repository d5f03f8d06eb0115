"""Topology: every queue and selector as a directed graph (static/js/topology.js draws it
with cytoscape and the dagre layout). Queues are nodes; COPY, MOVE and BOUNCE selectors
are edges between queues; DELIVER edges end at destination nodes; DELETE at one sink; a
thin red line joins a queue to its dead-letter queue; a selector whose target comes from
each message (target_from) fans out to a node named after the field.
With more than one shard (SPEC §10), an edge between queues on different shards (a COPY,
MOVE or BOUNCE selector, or the dead-letter line) is marked `crosses` (drawn with an orange
halo, named in the legend and in the list): what travels along it goes through the source
shard's forward list. An edge whose target comes from each message, or whose target queue
does not exist yet, is never marked: where it goes is not known here.
The wiring is read from the catalog's models (what the router runs); live numbers come
from the router's snapshot and, in the browser, from /ws/monitor/."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse

from xumpweb import access, shards
from xumpweb.access import requires
from xumpweb.console.common import snapshot_by_name
from xumpweb.console.dashboard import dead_letter_queues
from xumpweb.console.lineage import readable_steps, traced_ids
from xumpweb.wiring.models import Queue, Selector


def graph(reader: access.Principal) -> dict[str, Any]:
    """The queues `reader` may read, their selectors and dead-letter lines."""
    by_name, _ = snapshot_by_name()
    dead = dead_letter_queues()
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    wired = [
        (name, dead_letter)
        for name, dead_letter in Queue.objects.values_list("name", "dead_letter")
        if access.may(reader, "read", name)
    ]
    readable = {name for name, _ in wired}
    names = [name for name, _ in wired]
    crossing = _crossing()
    for name in names:
        live = by_name.get(name) or {}
        nodes.append({
            "id": f"q:{name}", "kind": "queue", "name": name,
            "url": reverse("console:queue", args=[name]),
            "depth": live.get("depth", 0), "outstanding": live.get("outstanding", 0),
            "dead": name in dead,
        })  # fmt: skip
    destinations: set[str] = set()
    sink = False
    for row in Selector.objects.select_related("queue").order_by("queue__name", "number"):
        if row.queue.name not in readable:
            continue
        source = f"q:{row.queue.name}"
        if row.target_from and row.action in ("copy", "move", "bounce", "deliver"):
            # the target comes from each message (SPEC §12): a fan to a node named by the field
            target = f"f:{row.queue.name}#{row.number}"
            nodes.append({"id": target, "kind": "fan", "name": f"by {row.target_from}",
                          "url": "", "depth": 0, "outstanding": 0, "dead": False})  # fmt: skip
        elif row.action in ("copy", "move", "bounce") and row.target:
            target = f"q:{row.target}"
            if row.target not in names:  # waiting for a queue of that name
                nodes.append({"id": target, "kind": "missing", "name": row.target, "url": "",
                              "depth": 0, "outstanding": 0, "dead": False})  # fmt: skip
                names.append(row.target)
        elif row.action == "deliver" and row.target:
            target = f"d:{row.target}"
            destinations.add(row.target)
        elif row.action == "delete":
            target, sink = "sink:delete", True
        else:
            continue
        between = row.action in ("copy", "move", "bounce") and not row.target_from
        edges.append({
            "id": f"s:{row.queue.name}#{row.number}", "source": source, "target": target,
            "action": row.action, "enabled": row.enabled, "label": row.describe(),
            "queue": row.queue.name, "number": row.number,
            **crossing(row.queue.name, row.target if between else None),
        })  # fmt: skip
    known = set(names)
    for name, dead_letter in wired:  # where a queue's dead letters go: a thin red line
        if dead_letter and dead_letter in known:
            edges.append({
                "id": f"dl:{name}", "source": f"q:{name}", "target": f"q:{dead_letter}",
                "action": "dead-letter", "enabled": True, "label": f"dead letters to {dead_letter}",
                "queue": name, "number": 0, **crossing(name, dead_letter),
            })  # fmt: skip
    for destination in sorted(destinations):
        nodes.append({"id": f"d:{destination}", "kind": "destination", "name": destination,
                      "url": "", "depth": 0, "outstanding": 0, "dead": False})  # fmt: skip
    if sink:
        nodes.append({"id": "sink:delete", "kind": "sink", "name": "deleted", "url": "",
                      "depth": 0, "outstanding": 0, "dead": False})  # fmt: skip
    return {"nodes": nodes, "edges": edges, "sharded": shards.sharded()}


def _crossing() -> Callable[[str, str | None], dict[str, Any]]:
    """`crossing(source, target)`: an edge's `crosses` (and, when it does, the two shards
    as `shards`), from the queues' stores in the wiring; never with one shard."""
    if not shards.sharded():
        return lambda source, target: {"crosses": False}
    stores = dict(Queue.objects.values_list("name", "store__name"))

    def crossing(source: str, target: str | None) -> dict[str, Any]:
        ends = (stores.get(source), stores.get(target) if target is not None else None)
        if None in ends or ends[0] == ends[1]:
            return {"crosses": False}
        return {"crosses": True, "shards": list(ends)}

    return crossing


@requires("console")
def topology(request: HttpRequest) -> HttpResponse:
    """The graph; with `?mid=`, the path that message took drawn over it (SPEC §12)."""
    drawn = graph(access.for_request(request))
    mid = (request.GET.get("mid") or "").strip()
    context: dict[str, Any] = {"graph": drawn, "mid": mid, "trace_error": None}
    if mid:
        steps, context["trace_error"] = readable_steps(request, mid)
        ids = traced_ids(steps)
        for item in (*drawn["nodes"], *drawn["edges"]):
            item["traced"] = item["id"] in ids
        context["traced_steps"] = len(steps)
    return render(request, "console/topology.html", context)


@requires("console")
def topology_graph(request: HttpRequest) -> JsonResponse:
    return JsonResponse(graph(access.for_request(request)))
