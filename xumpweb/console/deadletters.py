"""The dead-letter inspector: dead letters (waiting messages carrying `x-reason`) across
every dead-letter queue, grouped by reason and source queue, sent back, moved, bounced or
deleted one or many at a time, each action audited. Below them, the commands the router
refused (its errors list: a publish to a queue deleted meanwhile, a stale ack), which an
operator may clear.

Sending uses the `dead_letter_send` operation (publish to the target and take the dead
letter out of its queue in one step, mids kept) and deleting uses `purge`; a router of a
version without them cannot do either, and the page says so.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from engine.errors import StoreError
from xumpweb import access
from xumpweb.access import requires
from xumpweb.console.common import CallFailed, audit, call, has_operation, shown, when
from xumpweb.console.dashboard import dead_letter_queues
from xumpweb.runtime import service
from xumpweb.wiring.models import Queue

SHOWN = 500  # dead letters read per dead-letter queue
REFUSED_SHOWN = 50  # refused commands shown, newest first


def collect(reader: access.Principal) -> tuple[list[dict[str, Any]], list[str]]:
    """Groups of dead letters by (dead-letter queue, reason, original queue), of the
    dead-letter queues `reader` may read."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    problems = []
    names = sorted(dead_letter_queues() & set(Queue.objects.values_list("name", flat=True)))
    for name in names:
        if not access.may(reader, "read", name):
            continue
        try:
            waiting = call("peek", queue=name, count=SHOWN)
        except CallFailed as error:
            problems.append(f"{name}: {error}")
            continue
        for message in waiting:
            headers = message.get("headers") or {}
            if "x-reason" not in headers:
                continue
            key = (name, str(headers["x-reason"]), str(headers.get("x-original-queue", "")))
            groups[key].append(shown(message))
    found = [
        {"queue": queue, "reason": reason, "source": source, "messages": items}
        for (queue, reason, source), items in sorted(groups.items())
    ]
    return found, problems


def refused_commands() -> tuple[int, list[dict[str, Any]]]:
    """How many commands the router refused, and the newest as the page shows them."""
    total, items = service().refused(REFUSED_SHOWN)
    rows = []
    for item in items:
        command = item.get("command") or {}
        messages_of = command.get("messages") or []
        rows.append({
            "when": when(item.get("at")) if item.get("at") else "",
            "op": str(command.get("op", "")),
            "queue": str(command.get("queue", "")),
            "what": (f"{len(messages_of)} message{'s' if len(messages_of) != 1 else ''}: "
                     + ", ".join(str(m.get("mid", "")) for m in messages_of[:3])
                     + (" …" if len(messages_of) > 3 else ""))
                    if messages_of else ", ".join(map(str, command.get("tags", [])[:3])),
            "error": str(item.get("error", "")),
        })  # fmt: skip
    return total, rows


@requires("console")
def inspector(request: HttpRequest) -> HttpResponse:
    reader = access.for_request(request)
    groups, problems = collect(reader)
    for group in groups:  # whether the buttons show: see `allowed_letters`
        group["may_act"] = access.may(reader, "deadletter", group["queue"]) or access.may(
            reader, "deadletter", group["source"] or group["queue"]
        )
    try:
        refused_total, refused = refused_commands() if access.may(reader, "read-all") else (0, [])
    except StoreError as error:
        refused_total, refused = 0, []
        problems.append(str(error))
    context = {
        "groups": groups,
        "problems": problems,
        "total": sum(len(g["messages"]) for g in groups),
        "queues": sorted(Queue.objects.values_list("name", flat=True)),
        "can_send": has_operation("dead_letter_send"),
        "can_delete": has_operation("purge"),
        "refused": refused,
        "refused_total": refused_total,
        "may_act": any(group["may_act"] for group in groups),
    }
    return render(request, "console/deadletters.html", context)


@requires("console")
@require_POST
def act(request: HttpRequest) -> HttpResponse:
    """One action on the chosen dead letters, one operation per dead-letter queue."""
    action = request.POST.get("action")
    target = request.POST.get("target", "").strip() or None
    chosen: dict[str, list[int]] = defaultdict(list)
    for value in request.POST.getlist("letter"):
        queue, _, seq = value.rpartition("|")
        if queue and seq.isdigit():
            chosen[queue].append(int(seq))
    if not chosen:
        messages.error(request, "Choose at least one dead letter.")
        return redirect("console:deadletters")
    if action not in ("reroute", "move", "bounce", "delete"):
        messages.error(request, "Choose what to do with them.")
        return redirect("console:deadletters")
    if action == "move" and not target:
        messages.error(request, "Choose the queue to move them to.")
        return redirect("console:deadletters")
    problem = allowed_letters(request, chosen, action, target)
    if problem is not None:
        raise access.refuse(access.for_request(request), problem)
    needed = "purge" if action == "delete" else "dead_letter_send"
    if not has_operation(needed):
        messages.error(request, f"This version of the router has no {needed} operation.")
        return redirect("console:deadletters")
    done = 0
    for queue, seqs in chosen.items():
        try:
            if action == "delete":
                answer = call("purge", queue=queue, seqs=seqs)
                done += answer.get("purged", 0)
            else:
                arguments: dict[str, Any] = {"queue": queue, "seqs": seqs}
                if action == "move":
                    arguments["target"] = target
                if action == "bounce":
                    arguments["bounce"] = True
                answer = call("dead_letter_send", **arguments)
                done += answer.get("sent", 0)
        except CallFailed as error:
            messages.error(request, f"{queue}: nothing changed: {error}")
            continue
        audit(request, f"deadletter.{action}", queue, {"seqs": seqs}, answer)
    if done:
        verb = {"reroute": "Re-routed", "move": "Moved", "bounce": "Bounced",
                "delete": "Deleted"}[action]  # fmt: skip
        messages.success(request, f"{verb} {done} dead letter{'s' if done != 1 else ''}.")
    return redirect("console:deadletters")


def allowed_letters(
    request: HttpRequest, chosen: dict[str, list[int]], action: str, target: str | None
) -> str | None:
    """What the caller may not do to the chosen dead letters, or None. A dead letter may be
    handled by whoever may `deadletter` its dead-letter queue or the queue it came from
    (`x-original-queue`, which the engine writes when it dead-letters a message); sending it
    on also needs publish on where it goes (the target, or the queue it came from). Only a
    message with `x-reason` in a dead-letter queue is a dead letter: any other message's
    `x-original-queue` is whatever its publisher wrote, and gives no right."""
    reader = access.for_request(request)
    letter_queues = dead_letter_queues()
    for queue, seqs in chosen.items():
        try:
            waiting = {m["seq"]: m for m in call("peek", queue=queue, count=SHOWN)}
        except CallFailed:
            waiting = {}
        for seq in seqs:
            headers = (waiting.get(seq) or {}).get("headers") or {}
            source = str(headers.get("x-original-queue") or "")
            if queue not in letter_queues or "x-reason" not in headers:
                source = ""  # not a dead letter: only the rights on its own queue count
            if not (access.may(reader, "deadletter", queue)
                    or (source and access.may(reader, "deadletter", source))):  # fmt: skip
                return f"handle the dead letters of {queue!r}"
            going = target or source
            if action != "delete" and going and not access.may(reader, "publish", going):
                return f"send dead letters to {going!r}"
    return None


@requires("refused")
def refused_clear(request: HttpRequest) -> HttpResponse:
    """Forget the refused commands, after a confirmation page (audited with how many there
    were)."""
    try:
        if request.method != "POST":
            total, _ = service().refused(0)
            return render(request, "console/confirm_refused_clear.html", {"total": total})
        count = service().clear_refused()
    except StoreError as error:
        messages.error(request, f"Nothing cleared: {error}.")
        return redirect("console:deadletters")
    audit(request, "refused.clear", "router", {"refused": count}, {"refused": 0})
    messages.success(request, f"Cleared {count} refused command{'s' if count != 1 else ''}.")
    return redirect("console:deadletters")
