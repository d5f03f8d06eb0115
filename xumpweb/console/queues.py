"""The queue page: settings, selectors in routing order, the history browser, message
detail, publishing a test message and purging; its Scheduled tab (delayed messages and
redeliveries waiting out their delay, SPEC §8) with cancelling."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, time
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from engine.errors import InvalidSelector, XumpError
from engine.explain import visible_to
from engine.filters import compile_filter
from engine.message import Message
from xumpweb import access, shards
from xumpweb.access import requires
from xumpweb.console.common import (
    CallFailed,
    audit,
    body_views,
    call,
    has_operation,
    shown,
    to_message,
    when,
)
from xumpweb.console.forms import PublishForm, QueueSettingsForm
from xumpweb.runtime import service
from xumpweb.stompgate import mailboxes

PAGE = 20
WAITING_SHOWN = 20
MODES = ("latest", "oldest", "before", "after", "since")


def fetch_queue(name: str) -> dict[str, Any]:
    try:
        queue = call("queue_get", name=name)
    except CallFailed as error:
        raise Http404(str(error)) from None
    queue["mailbox"] = name in mailboxes.names()
    return queue


SETTINGS = (
    "limit", "history", "dead_letter", "self_destruct", "journal", "max_deliveries",
    "redelivery_delay", "redelivery_backoff", "redelivery_delay_max", "ttl",
)  # fmt: skip


def settings_initial(queue: dict[str, Any]) -> dict[str, Any]:
    return {k: queue.get(k) for k in SETTINGS}


@requires("read", queue="name")
def queue_page(request: HttpRequest, name: str) -> HttpResponse:
    queue = fetch_queue(name)
    context = {
        "queue": queue,
        "settings_form": QueueSettingsForm(initial=settings_initial(queue)),
        "publish_form": PublishForm(),
        "waiting": [shown(m) for m in call("peek", queue=name, count=WAITING_SHOWN)],
        "can_purge": has_operation("purge"),
        "sharded": shards.sharded(),  # the store is then the queue's shard (SPEC §10)
        **history_context(name, request.GET),
    }
    return render(request, "console/queue.html", context)


def parse_since(text: str) -> float:
    """A time typed as HH:MM[:SS] (today, UTC) or an ISO date and time (UTC unless it says)."""
    text = text.strip()
    try:
        clock = time.fromisoformat(text)
    except ValueError:
        moment = datetime.fromisoformat(text.replace(" ", "T"))
    else:
        moment = datetime.combine(datetime.now(UTC).date(), clock)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


SCAN_BATCH = 500  # history messages read per call while a filter looks for matches
SCAN_LIMIT = 50_000  # messages a filtered page reads at most before it stops and says so


def scan(
    name: str,
    backward: bool,
    first: dict[str, Any],
    selects: Callable[[Message], bool] | None,
    want: int,
) -> tuple[list[dict[str, Any]], bool, int | None, int]:
    """Walk the history from `first` (browse arguments) newest first when `backward`, else
    oldest first, keeping the messages `selects` takes until `want` of them.

    Returns the kept messages in walking order, whether the walk stopped before the end of
    the history (SCAN_LIMIT reached), the seq it stopped after (where the next page starts)
    and how many it read."""
    kept: list[dict[str, Any]] = []
    arguments = dict(first)
    count = SCAN_BATCH if selects is not None else want  # unfiltered: read just the page
    read = 0
    last: int | None = None
    while True:
        if "timestamp" in arguments:
            batch = call("since", queue=name, count=count, **arguments)
        else:
            batch = call("browse", queue=name, count=count, **arguments)
        for out in batch:
            read += 1
            last = out["seq"]
            if selects is None or selects(to_message(out)):
                kept.append(out)
                if len(kept) >= want:
                    return kept, False, last, read
            if read >= SCAN_LIMIT:
                return kept, True, last, read
        if len(batch) < count or last is None:
            return kept, False, last, read
        arguments = {"before": last} if backward else {"after": last}


def history_context(name: str, query: Any) -> dict[str, Any]:
    """One page of history, newest first, as the query asks for it. A filter looks through
    the whole history (up to SCAN_LIMIT messages a page) for a page of matches; the Older
    and Newer buttons show only when there is something (that matches) on their side."""
    mode = query.get("mode", "latest")
    since = query.get("since", "").strip()
    if since:
        mode = "since"  # the form's time wins over the page it was sent from
    if mode not in MODES:
        mode = "latest"
    expression = query.get("filter", "").strip()
    filter_error = None
    selects = None
    if expression:
        try:
            selects = compile_filter(expression)
        except InvalidSelector as invalid:
            filter_error = column_error(expression, invalid)
    error = ""
    found: list[dict[str, Any]] = []
    more = partial = False
    read = 0
    older_from: dict[str, Any] | None = None  # where a look for older messages starts
    newer_from: dict[str, Any] | None = None
    try:
        backward = mode in ("latest", "before")
        if mode in ("latest", "oldest"):
            first: dict[str, Any] = {"start": mode}
        elif mode == "since":
            first = {"timestamp": parse_since(since)}
        else:
            anchor = int(query.get("seq", ""))
            if anchor < 0:
                raise ValueError(anchor)
            first = {mode: anchor}
        walked, partial, stop, read = scan(name, backward, first, selects, PAGE + 1)
        more = partial or len(walked) > PAGE
        found = walked[:PAGE]
        if found:
            stop = found[-1]["seq"] if len(walked) > PAGE else stop
            near = found[0]["seq"]
        if backward:
            older_from = {"before": stop} if more else None
            if found:
                newer_from = {"after": near}
            elif mode == "before":
                newer_from = {"after": max(anchor - 1, 0)}
        else:
            newer_from = {"after": stop} if more else None
            if found:
                older_from = {"before": near}
            elif mode == "after":
                older_from = {"before": anchor + 1}
            elif mode == "since":
                older_from = {"start": "latest"}
        # the other side: is there anything (that matches) there at all?
        for side in ("older", "newer"):
            look = older_from if side == "older" else newer_from
            if look is None or (side == "older") == backward:
                continue  # nothing there, or the walk itself said so
            there, cut, _, _ = scan(name, side == "older", look, selects, 1)
            if not there and not cut:
                if side == "older":
                    older_from = None
                else:
                    newer_from = None
    except (ValueError, TypeError):
        error = "give a time as HH:MM or YYYY-MM-DD HH:MM" if mode == "since" else "bad seq"
    except CallFailed as failure:
        error = str(failure)
    found.sort(key=lambda m: m["seq"], reverse=True)
    return {
        "history": [shown(m) for m in found],
        "history_mode": mode,
        "history_error": error,
        "history_read": read,
        "history_partial": partial,
        "older_seq": older_from.get("before") if older_from else None,
        "older_latest": bool(older_from) and "start" in older_from,
        "newer_seq": newer_from.get("after") if newer_from else None,
        "history_filter": expression,
        "filter_error": filter_error,
        "since": since,
    }


def column_error(expression: str, invalid: InvalidSelector | XumpError) -> dict[str, Any]:
    """An expression's error split at its column, for the caret the template draws."""
    column = getattr(invalid, "column", None)
    if column is None:
        return {"message": str(invalid), "column": None}
    index = max(0, min(len(expression), column - 1))
    return {
        "message": str(invalid),
        "column": column,
        "before": expression[:index],
        "at": expression[index : index + 1] or " ",
        "after": expression[index + 1 :],
    }


@requires("read", queue="name")
def history(request: HttpRequest, name: str) -> HttpResponse:
    context = {"queue": {"name": name}, **history_context(name, request.GET)}
    return render(request, "console/partials/history.html", context)


@requires("manage-queue", queue="name")
@require_POST
def queue_settings(request: HttpRequest, name: str) -> HttpResponse:
    before = fetch_queue(name)
    form = QueueSettingsForm(request.POST)
    blocked = None
    if form.is_valid():
        blocked = access.cannot_send(access.for_request(request), form.engine_settings(), before)
    if blocked is not None:
        messages.error(request, f"Settings not saved: you may not {blocked}.")
    elif form.is_valid():
        try:
            after = call("queue_update", name=name, **form.engine_settings())
        except CallFailed as error:
            messages.error(request, f"Settings not saved: {error}")
        else:
            audit(request, "queue.update", name, settings_initial(before), settings_initial(after))
            messages.success(request, "Settings saved.")
    else:
        messages.error(request, f"Settings not saved: {form.errors.as_text()}")
    return redirect("console:queue", name=name)


@requires("publish", queue="name")
@require_POST
def publish(request: HttpRequest, name: str) -> HttpResponse:
    from engine import Message

    form = PublishForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not published: {form.errors.as_text()}")
        return redirect("console:queue", name=name)
    data = form.cleaned_data
    message = Message(
        address=data["address"],
        headers=data["headers"],
        body=data["body"].encode(),
        return_address=data["return_address"] or None,
    )
    try:
        [mid] = service().publish_many(name, [message])
    except XumpError as error:
        messages.error(request, f"Not published: {error}")
    else:
        audit(request, "message.publish", name, None, {"mid": mid, "address": data["address"]})
        messages.success(request, f"Published message {mid}.")
    return redirect("console:queue", name=name)


@requires("read", queue="name")
@require_POST
def explain(request: HttpRequest, name: str) -> HttpResponse:
    """Where the test message in the publish form would go and why (SPEC §12); htmx
    fragment. Nothing is published."""
    form = PublishForm(request.POST)
    context: dict[str, Any] = {"error": None, "said": None}
    if not form.is_valid():
        context["error"] = form.errors.as_text()
    else:
        data = form.cleaned_data
        envelope = {
            "address": data["address"],
            "headers": data["headers"],
            "return_address": data["return_address"] or None,
        }
        reader = access.for_request(request)
        try:
            said = call("explain", queue=name, message=envelope)
            context["said"] = visible_to(said, lambda queue: access.may(reader, "read", queue))
        except CallFailed as error:
            context["error"] = str(error)
    return render(request, "console/partials/explain.html", context)


def find_message(name: str, seq: int) -> tuple[dict[str, Any], str]:
    """The message with `seq` in the queue's history or among its waiting messages."""
    for message in call("browse", queue=name, after=seq - 1, count=1):
        if message["seq"] == seq:
            return message, "history"
    depth = fetch_queue(name)["depth"]
    for message in call("peek", queue=name, count=min(depth, 10_000)):
        if message["seq"] == seq:
            return message, "unprocessed"
    raise Http404(f"queue {name!r} holds no message {seq}")


def expires(message: dict[str, Any]) -> str:
    """When a message with a ttl expires unprocessed (UTC), else ""."""
    ttl, timestamp = message.get("ttl"), message.get("timestamp")
    return when(timestamp + ttl) if ttl is not None and timestamp is not None else ""


@requires("read", queue="name")
def message_detail(request: HttpRequest, name: str, seq: int) -> HttpResponse:
    try:
        message, section = find_message(name, seq)
    except CallFailed as error:
        raise Http404(str(error)) from None
    view = request.GET.get("view", "text")
    bodies = body_views(message)
    if view not in ("text", "json", "hex") or (view == "json" and bodies["json"] is None):
        view = "text"
    context = {
        "queue": {"name": name},
        "message": {
            **shown(message),
            "expires": expires(message),
            "priority": (message.get("headers") or {}).get("priority"),
        },
        "section": section,
        "bodies": bodies,
        "view": view,
        "views": [("text", "Text"), ("json", "JSON"), ("hex", "Hex")],
    }
    return render(request, "console/message.html", context)


@requires("purge", queue="name")
def purge(request: HttpRequest, name: str) -> HttpResponse:
    queue = fetch_queue(name)
    if not has_operation("purge"):
        messages.error(request, "This version of the router has no purge operation.")
        return redirect("console:queue", name=name)
    if request.method == "POST":
        if request.POST.get("confirm") != name:
            messages.error(request, "Type the queue's name to confirm the purge.")
            return redirect(reverse("console:queue_purge", args=[name]))
        try:
            answer = call("purge", queue=name)
        except CallFailed as error:
            messages.error(request, f"Not purged: {error}")
        else:
            audit(request, "queue.purge", name, {"depth": queue["depth"]}, answer)
            messages.success(request, f"Purged {answer.get('purged', 0)} waiting messages.")
        return redirect("console:queue", name=name)
    return render(request, "console/confirm_purge.html", {"queue": queue})


SCHEDULED_SHOWN = 1000


@requires("read", queue="name")
def scheduled(request: HttpRequest, name: str) -> HttpResponse:
    """The Scheduled tab: what the queue holds out of routing, soonest due first."""
    queue = fetch_queue(name)
    error = ""
    try:
        found = call("scheduled", queue=name, count=SCHEDULED_SHOWN)
    except CallFailed as failure:
        error, found = str(failure), {"total": 0, "messages": []}
    rows = [{**shown(m), "due_at": when(m["due"])} for m in found["messages"]]
    context = {"queue": queue, "rows": rows, "total": found["total"], "error": error}
    return render(request, "console/scheduled.html", context)


@requires("manage-queue", queue="name")
@require_POST
def scheduled_cancel(request: HttpRequest, name: str) -> HttpResponse:
    """Cancel the chosen scheduled messages (one button per row, or the chosen ones): all
    or nothing, audited."""
    one = request.POST.get("one")
    mids = [one] if one else request.POST.getlist("mid")
    if not mids:
        messages.error(request, "Choose the scheduled messages to cancel.")
        return redirect("console:queue_scheduled", name=name)
    try:
        answer = call("cancel", queue=name, mids=mids)
    except CallFailed as error:
        messages.error(request, f"Nothing cancelled: {error}")
    else:
        audit(request, "message.cancel", name, {"mids": mids}, answer)
        count = answer["cancelled"]
        messages.success(request, f"Cancelled {count} scheduled message{'s' * (count != 1)}.")
    return redirect("console:queue_scheduled", name=name)


@requires("manage-queue", queue="name")
def queue_delete(request: HttpRequest, name: str) -> HttpResponse:
    queue = fetch_queue(name)
    if request.method == "POST":
        try:
            call("queue_delete", name=name)
        except CallFailed as error:
            messages.error(request, f"Not deleted: {error}")
            return redirect("console:queue", name=name)
        audit(request, "queue.delete", name, settings_initial(queue), None)
        messages.success(request, f"Deleted queue {name}.")
        return redirect("console:dashboard")
    return render(request, "console/confirm_queue_delete.html", {"queue": queue})
