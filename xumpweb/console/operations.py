"""The consumers page (every connected subscriber, closing one; which destinations each
queue's DELIVER selectors feed) and message operations on a queue's waiting messages
(move, copy, delete or re-route those a filter, seqs or mids choose): a form, a dry run
showing how many match and a sample, then the confirmed operation, audited.

Both use what the API uses: api/consumers.py's report and close, and the router's
`messages_operate` (engine/message_ops.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from xumpweb import access
from xumpweb.access import requires
from xumpweb.api import consumers as api_consumers
from xumpweb.api.errors import ApiError
from xumpweb.console.common import LIST_PAGE, CallFailed, audit, call, shown, when
from xumpweb.console.queues import fetch_queue
from xumpweb.wiring.models import Queue

ACTIONS = {
    "move": "Move to another queue",
    "copy": "Copy to another queue",
    "delete": "Delete",
    "reroute": "Re-route (publish again, optionally with a new address)",
}
CHOOSERS = {"filter": "a filter expression", "seqs": "seqs", "mids": "mids"}


# -- consumers -----------------------------------------------------------------------------------
@requires("console")
def consumers(request: HttpRequest) -> HttpResponse:
    """The page; an htmx request (every 2 s) gets the tables only."""
    found = api_consumers.report(access.for_request(request))
    subscribers = Paginator(found["consumers"], LIST_PAGE).get_page(request.GET.get("page"))
    feeds = Paginator(found["feeds"], LIST_PAGE).get_page(request.GET.get("feeds"))
    found = {"consumers": subscribers, "feeds": feeds, "query": request.GET.urlencode()}
    for info in subscribers:
        info["when"] = when(info.get("since"))
    template = "console/partials/consumers.html" if request.headers.get("HX-Request") else \
        "console/consumers.html"  # fmt: skip
    return render(request, template, found)


@requires("console")
@require_POST
def consumer_close(request: HttpRequest, connection: str) -> HttpResponse:
    try:
        closed = api_consumers.close(request, connection)
    except ApiError as error:
        if error.status == 403:
            raise access.refuse(access.for_request(request), "disconnect", None) from None
        messages.error(request, f"Not closed: {error.detail}")
    else:
        messages.success(request, f"Closing subscriber {connection} of "
                         f"{closed['destination']}; its unsettled deliveries go back.")  # fmt: skip
    return redirect("console:consumers")


# -- message operations --------------------------------------------------------------------------
def read_form(name: str, data: QueryDict) -> tuple[dict[str, Any], list[str]]:
    """The operation's arguments from the form, and what is wrong with it."""
    problems = []
    action = data.get("action", "")
    chooser = data.get("chooser", "filter")
    text = data.get("choice", "").strip()
    arguments: dict[str, Any] = {"action": action}
    if action not in ACTIONS:
        problems.append("Choose what to do.")
    if chooser not in CHOOSERS:
        problems.append("Choose the messages by a filter, seqs or mids.")
    elif not text:
        problems.append(f"Give {CHOOSERS[chooser]}.")
    elif chooser == "filter":
        arguments["filter"] = text
    else:
        items = [item for item in text.replace(",", " ").split() if item]
        if chooser == "seqs":
            if not all(item.isdigit() and int(item) >= 1 for item in items):
                problems.append("Seqs are whole numbers from 1, separated by commas or spaces.")
            else:
                arguments["seqs"] = [int(item) for item in items]
        else:
            arguments["mids"] = items
    target = data.get("target", "").strip()
    if action in ("move", "copy") and not target:
        problems.append("Choose the target queue.")
    if target and action in ("move", "copy", "reroute"):
        arguments["target"] = target
    address = data.get("address", "")
    if action == "reroute" and address.strip():
        arguments["address"] = address.strip()
    return arguments, problems


def _form_context(request: HttpRequest, queue: dict[str, Any], data: Any) -> dict[str, Any]:
    reader = access.for_request(request)
    targets = [
        q for q in Queue.objects.order_by("name").values_list("name", flat=True)
        if q != queue["name"] and access.may(reader, "publish", q)
    ]  # fmt: skip
    return {"queue": queue, "actions": ACTIONS, "choosers": CHOOSERS, "targets": targets,
            "data": data}  # fmt: skip


@requires("operate", queue="name")
def queue_operate(request: HttpRequest, name: str) -> HttpResponse:
    """GET: the form. POST: a dry run (count, sample, confirm page) or, with `expect`,
    the operation itself."""
    queue = fetch_queue(name)
    if request.method != "POST":
        return render(request, "console/operate.html", _form_context(request, queue, {}))
    arguments, problems = read_form(name, request.POST)
    target = arguments.get("target")
    if target and target != name and not access.may(access.for_request(request), "publish",
                                                      target):  # fmt: skip
        raise access.refuse(access.for_request(request), "publish", target)
    confirmed = request.POST.get("expect", "")
    if not problems:
        try:
            if confirmed.isdigit():
                answer = call("messages_operate", queue=name, expect=int(confirmed), **arguments)
            else:
                answer = call("messages_operate", queue=name, dry_run=True, **arguments)
        except CallFailed as error:
            problems.append(f"Nothing done: {error}")
    if problems:
        for problem in problems:
            messages.error(request, problem)
        context = _form_context(request, queue, request.POST)
        return render(request, "console/operate.html", context, status=400)
    if answer["dry_run"]:
        context = _form_context(request, queue, request.POST)
        context.update(
            answer=answer,
            action_label=ACTIONS[answer["action"]],
            sample=[shown(m) for m in answer["sample"]],
            hidden=[(k, request.POST.get(k, ""))
                    for k in ("action", "chooser", "choice", "target", "address")],
        )  # fmt: skip
        return render(request, "console/operate_confirm.html", context)
    chosen = {k: v for k, v in arguments.items() if k != "action"}
    audit(request, f"messages.{answer['action']}", name, chosen,
          {"done": answer["done"], "target": answer["target"]})  # fmt: skip
    verb = {"move": "Moved", "copy": "Copied", "delete": "Deleted", "reroute": "Re-routed"}
    where = f" to {answer['target']}" if answer["action"] != "delete" else ""
    count = answer["done"]
    messages.success(request, f"{verb[answer['action']]} {count} message"
                     f"{'s' if count != 1 else ''}{where}.")  # fmt: skip
    return redirect(reverse("console:queue", args=[name]))
