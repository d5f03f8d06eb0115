"""Pattern wizards (housecat, parrot, wolfpack) and the list of patterns with their state.

A wizard shows, before saving, the queues and selectors the pattern will create or reuse
(engine.patterns is idempotent: it reuses a selector that already does the job). Saving
runs the `pattern_build` operation and keeps a Pattern row naming what was built, so
deleting the pattern can remove it (`pattern_remove`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from xumpweb import access
from xumpweb.access import requires
from xumpweb.console.common import LIST_PAGE, CallFailed, audit, call, snapshot_by_name
from xumpweb.console.forms import PatternForm
from xumpweb.wiring.models import Pattern, Queue

KINDS = {
    "housecat": "Direct addressing: the router queue copies messages addressed exactly to "
    "the recipient into the recipient's private queue, which delivers to the recipient.",
    "parrot": "Publish/subscribe: the router queue copies messages whose address matches "
    "the topic pattern into the subscriber's private queue, which delivers to the subscriber.",
    "wolfpack": "Work distribution: the service queue moves messages, round-robin and "
    "credited, into each worker's private queue, which delivers to the worker.",
}


def planned(arguments: dict[str, Any]) -> dict[str, Any]:
    """The queues and selectors `pattern_build` would create (or find and reuse)."""
    kind, name, router = arguments["kind"], arguments["name"], arguments["router"]
    private = f"{router}:{name}"
    existing = set(Queue.objects.filter(name__in=[router, private]).values_list("name", flat=True))
    if kind == "housecat":
        take = ("match", {"operator": "eq", "pattern": name, "field": "address"}, "copy")
        take_text = f"WHEN address = {name!r} DO COPY to {private}"
    elif kind == "parrot":
        topic = arguments.get("topic", "")
        take = ("match", {"operator": "topic", "pattern": topic, "field": "address"}, "copy")
        take_text = f"WHEN topic {topic!r} DO COPY to {private}"
    else:
        take = ("always", None, "move")
        take_text = f"WHEN always DO MOVE to {private} (credit {arguments.get('credit', 1)})"
    selectors = [
        {"queue": router, "describe": take_text, "reused": False, "spec": take, "target": private,
         "credit": arguments.get("credit", 1) if kind == "wolfpack" else None},
        {"queue": private, "describe": f"WHEN always DO DELIVER to {name}", "reused": False,
         "spec": ("always", None, "deliver"), "target": name, "credit": None},
    ]  # fmt: skip
    for planned_selector in selectors:
        if planned_selector["queue"] not in existing:
            continue
        try:
            found = call("selectors", queue=planned_selector["queue"])
        except CallFailed:
            continue
        wanted = (*planned_selector["spec"], planned_selector["target"])
        for selector in found:
            have = (selector["when"], selector.get("match"), selector["action"], selector["target"])
            if have == wanted:
                planned_selector["reused"] = True
                wanted_credit = planned_selector["credit"]
                if wanted_credit is not None and selector["credit"] != wanted_credit:
                    planned_selector["old_credit"] = selector["credit"]
    return {
        "queues": [
            {"name": router, "exists": router in existing, "role": "router" if kind != "wolfpack"
             else "service"},
            {"name": private, "exists": private in existing, "role": "private"},
        ],
        "selectors": selectors,
    }  # fmt: skip


@requires("console")
def pattern_list(request: HttpRequest) -> HttpResponse:
    by_name, _ = snapshot_by_name()
    rows = []
    reader = access.for_request(request)
    readable = [p for p in Pattern.objects.all() if access.may(reader, "read", p.router)]
    page = Paginator(readable, LIST_PAGE).get_page(request.GET.get("page"))
    for pattern in page:
        live = by_name.get(pattern.built_queue) or {}
        stats = live.get("stats") or {}
        rows.append({
            "pattern": pattern,
            "exists": bool(live) or Queue.objects.filter(name=pattern.built_queue).exists(),
            "depth": live.get("depth", 0),
            "outstanding": live.get("outstanding", 0),
            "delivered": stats.get("delivered", 0),
            "confirmed": stats.get("confirmed", 0),
        })  # fmt: skip
    return render(request, "console/patterns.html", {"rows": rows, "kinds": KINDS, "page": page})


@requires("patterns")
def pattern_new(request: HttpRequest, kind: str) -> HttpResponse:
    if kind not in KINDS:
        raise Http404(f"no pattern kind {kind!r}")
    form = PatternForm(kind, request.POST or None)
    if request.method == "POST" and form.is_valid():
        arguments = form.build_arguments()
        try:
            built = call("pattern_build", **arguments)
        except CallFailed as error:
            form.add_error(None, str(error))
        else:
            row, _ = Pattern.objects.update_or_create(
                kind=kind, router=arguments["router"], name=arguments["name"],
                defaults={"topic": arguments.get("topic", ""),
                          "credit": arguments.get("credit", 1),
                          "built_queue": built["queue"], "built_selectors": built["selectors"]},
            )  # fmt: skip
            audit(request, "pattern.create", str(row), None, {**arguments, "built": built})
            updated = built.get("updated_selectors") or []
            said = f"Built {row}: queue {built['queue']}."
            if updated:
                said += " Updated " + ", ".join(f"{q}#{n}" for q, n in updated)
                said += f": credit {arguments.get('credit', 1)}."
            messages.success(request, said)
            return redirect("console:patterns")
    context = {"form": form, "kind": kind, "about": KINDS[kind]}
    return render(request, "console/pattern_new.html", context)


@requires("patterns")
@require_POST
def pattern_plan(request: HttpRequest, kind: str) -> HttpResponse:
    """What saving the wizard's form would build (htmx, as the form changes)."""
    if kind not in KINDS:
        raise Http404(f"no pattern kind {kind!r}")
    form = PatternForm(kind, request.POST)
    context: dict[str, Any] = {"plan": None}
    if form.is_valid():
        context["plan"] = planned(form.build_arguments())
    return render(request, "console/partials/pattern_plan.html", context)


@requires("patterns")
def pattern_delete(request: HttpRequest, number: int) -> HttpResponse:
    pattern = get_object_or_404(Pattern, pk=number)
    if request.method == "POST":
        try:
            call("pattern_remove", queue=pattern.built_queue, selectors=pattern.built_selectors)
        except CallFailed as error:
            messages.error(request, f"Not removed: {error}")
            return redirect("console:patterns")
        before = {"kind": pattern.kind, "name": pattern.name, "router": pattern.router,
                  "queue": pattern.built_queue, "selectors": pattern.built_selectors}  # fmt: skip
        audit(request, "pattern.delete", str(pattern), before, None)
        pattern.delete()
        messages.success(request, f"Removed {before['queue']} and its selectors.")
        return redirect("console:patterns")
    return render(request, "console/confirm_pattern_delete.html", {"pattern": pattern})
