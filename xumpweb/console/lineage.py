"""The console's trace of a message (SPEC §12): search by mid, then its steps oldest first
and the path it took through the queues, read from the journal and the archive
(xumpweb/analytics/lineage.py). Only steps at queues the person may read are shown."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from engine.errors import XumpError
from xumpweb import access
from xumpweb.access import requires
from xumpweb.analytics.lineage import trace as trace_of
from xumpweb.runtime import service

ACTIONS = {"route": None, "dead_letter": "dead letter"}  # the steps that go from queue to queue


def readable_steps(request: HttpRequest, mid: str) -> tuple[list[dict[str, Any]], str | None]:
    """The steps of message `mid` at queues the person may read, and the error that kept
    the others from being read, if any."""
    try:
        steps = trace_of(service(), mid, Path(settings.XUMP_ARCHIVE_DIR))
    except XumpError as error:
        return [], str(error)
    reader = access.for_request(request)
    readable: dict[str, bool] = {}
    shown = []
    for step in steps:
        queue = step["queue"]
        if queue not in readable:
            readable[queue] = access.may(reader, "read", queue)
        if readable[queue]:
            moment = datetime.fromtimestamp(step["time"], UTC)
            shown.append({**step, "when": moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]})
    return shown, None


@requires("console")
def message_trace(request: HttpRequest) -> HttpResponse:
    mid = (request.GET.get("mid") or "").strip()
    context: dict[str, Any] = {"mid": mid, "steps": None, "path": [], "error": None}
    if mid:
        context["steps"], context["error"] = readable_steps(request, mid)
        context["path"] = path_of(context["steps"])
    return render(request, "console/trace.html", context)


def traced_ids(steps: list[dict[str, Any]]) -> set[str]:
    """The topology's node and edge ids (console/topology.py) a message's steps went along."""
    ids = set()
    for step in steps:
        queue, kind, selector = step["queue"], step["kind"], step["selector"]
        ids.add(f"q:{queue}")
        if kind in ("route", "deliver", "delete") and selector is not None:
            ids.add(f"s:{queue}#{selector}")
            ids.add(f"f:{queue}#{selector}")  # a target from the envelope: its fan node
        if kind == "route" and step["target"]:
            ids.add(f"q:{step['target']}")
        elif kind == "deliver" and step["target"]:
            ids.add(f"d:{step['target']}")
        elif kind == "delete":
            ids.add("sink:delete")
        elif kind == "dead_letter" and step["target"]:
            ids.add(f"dl:{queue}")
            ids.add(f"q:{step['target']}")
    return ids


def path_of(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edges the message travelled, in order: queue to queue (copy, move, bounce, dead
    letter) and queue to destination (deliver), each once."""
    edges: list[dict[str, Any]] = []
    seen = set()
    for step in steps:
        kind, target = step["kind"], step["target"]
        if kind == "route":
            edge = (step["queue"], target, step["detail"], "queue")
        elif kind == "dead_letter":
            edge = (step["queue"], target, f"dead letter ({step['detail']})", "queue")
        elif kind == "deliver":
            edge = (step["queue"], target, "deliver", "destination")
        else:
            continue
        if edge not in seen:
            seen.add(edge)
            edges.append({"source": edge[0], "target": edge[1], "label": edge[2], "to": edge[3]})
    return edges
