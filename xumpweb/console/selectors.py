"""The selector builder: WHEN + DO + credit + start, validation as you type, a preview
against the source queue's recent messages, enable / disable / delete.

The preview decides in this process, with the engine's own matching and filter code, which
of the last 100 messages (history and waiting) the selector would take, and says of each
other one why not, in the words of the engine's explain (SPEC §12: which condition failed
on what value, the filter FALSE or UNKNOWN, the default or overflow rule); it changes
nothing.

The preview runs in a web worker, so its work is capped (`Budget`): a DEFAULT selector's
preview tries each of the queue's other enabled selectors on every message, and each
condition reads its field to the end: RE2 is linear, but 1,000 regexes over 100 messages
with 50 KB headers is 100,000 scans, 22 s (and a pattern with a capturing group, such as
`(a+)+`, ran on RE2's slower submatch engine, some 15 times the DFA's time, before regexes
were compiled with never_capture). The budget counts the characters the conditions read,
by operator, and a filter's headers (PREVIEW_READS, so the cut does not depend on the
machine) and the time (PREVIEW_SECONDS, for what reading does not measure: compiling the
selectors, filters, slow patterns), checked before each selector is tried on each
message. When it is spent the preview stops and shows what it judged (the latest messages
first), saying it was cut short and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from engine.errors import InvalidSelector
from engine.explain import OVERFLOW_ONLY, default_passes, why_not_met
from engine.fields import field_reader
from engine.filters import compile_filter
from engine.matching import check_pattern
from engine.message import Message
from engine.selectors import checked_matches
from xumpweb import access
from xumpweb.access import check, requires
from xumpweb.console.common import CallFailed, audit, call, shown, to_message
from xumpweb.console.forms import SelectorForm
from xumpweb.console.queues import column_error, fetch_queue

PREVIEW = 100  # the latest messages (history and waiting) a preview judges
PREVIEW_SECONDS = 2.0  # the time a preview may spend judging them
PREVIEW_READS = 100_000_000  # characters of message fields its conditions may read


class PreviewCut(Exception):
    """The preview spent its budget: what ran out, in words."""


class Budget:
    """What one preview may spend (see the module doc): `spend(reads)` before each piece of
    work, which raises PreviewCut once the characters or the time are used up."""

    def __init__(self, seconds: float = PREVIEW_SECONDS, reads: float = PREVIEW_READS) -> None:
        self.seconds = seconds
        self.reads = reads
        self.left = reads
        self.deadline = time.monotonic() + seconds

    def spend(self, reads: int = 0) -> None:
        self.left -= reads
        if self.left < 0:
            raise PreviewCut(f"its conditions would read more than {self.reads:,} characters")
        if time.monotonic() > self.deadline:
            raise PreviewCut(f"it took more than {self.seconds:g} s")


UNLIMITED = Budget(seconds=float("inf"), reads=float("inf"))


def fetch_selector(queue: str, number: int) -> dict[str, Any]:
    from django.http import Http404

    try:
        return call("selector_get", queue=queue, id=number)
    except CallFailed as error:
        raise Http404(str(error)) from None


def _saved(
    request: HttpRequest, form: SelectorForm, name: str, selector: dict[str, Any] | None
) -> bool:
    """Create a selector of queue `name` from the form (`selector` None), or update
    `selector` with it; audited and told once saved. False when the form or the engine
    refuses it (the form then carries the error)."""
    if not form.is_valid():
        return False
    blocked = access.cannot_send(access.for_request(request), form.engine_settings(), selector)
    if blocked is not None:
        form.add_error(None, f"You may not {blocked}.")
        return False
    try:
        if selector is None:
            after = call("selector_create", queue=name, **form.engine_settings())
        else:
            after = call("selector_update", queue=name, id=selector["id"], **form.engine_settings())
    except CallFailed as error:
        form.add_error(None, str(error))
        return False
    number = after["id"] if selector is None else selector["id"]
    action, done = ("create", "created") if selector is None else ("update", "saved")
    audit(request, f"selector.{action}", f"{name}#{number}", selector, after)
    messages.success(request, f"Selector {number} {done}.")
    return True


@requires("manage-selectors", queue="name")
def selector_new(request: HttpRequest, name: str) -> HttpResponse:
    queue = fetch_queue(name)
    if request.method == "POST":
        form = SelectorForm(request.POST)
        if _saved(request, form, name, None):
            return redirect("console:queue", name=name)
    else:
        form = SelectorForm(initial={"when": "match", "action": "copy", "credit": -1})
    return render(
        request, "console/selector.html", {"queue": queue, "form": form, "selector": None}
    )


@requires("read", queue="name")
def selector_edit(request: HttpRequest, name: str, number: int) -> HttpResponse:
    queue = fetch_queue(name)
    selector = fetch_selector(name, number)
    if request.method == "POST":
        check(request, "manage-selectors", name)
        form = SelectorForm(request.POST)
        if _saved(request, form, name, selector):
            return redirect("console:queue", name=name)
    else:
        form = SelectorForm(initial=SelectorForm.initial_from(selector))
    context = {"queue": queue, "form": form, "selector": selector}
    return render(request, "console/selector.html", context)


@requires("manage-selectors", queue="name")
@require_POST
def selector_enable(request: HttpRequest, name: str, number: int) -> HttpResponse:
    before = fetch_selector(name, number)
    enabled = request.POST.get("enabled") == "1"
    try:
        after = call("selector_update", queue=name, id=number, enabled=enabled)
    except CallFailed as error:
        messages.error(request, f"Selector {number} unchanged: {error}")
    else:
        action = "selector.enable" if enabled else "selector.disable"
        audit(request, action, f"{name}#{number}", before, after)
        messages.success(request, f"Selector {number} {'enabled' if enabled else 'disabled'}.")
    return redirect("console:queue", name=name)


@requires("manage-selectors", queue="name")
def selector_delete(request: HttpRequest, name: str, number: int) -> HttpResponse:
    selector = fetch_selector(name, number)
    if request.method == "POST":
        try:
            call("selector_delete", queue=name, id=number)
        except CallFailed as error:
            messages.error(request, f"Selector {number} not deleted: {error}")
        else:
            audit(request, "selector.delete", f"{name}#{number}", selector, None)
            messages.success(request, f"Selector {number} deleted.")
        return redirect("console:queue", name=name)
    context = {"queue": {"name": name}, "selector": selector}
    return render(request, "console/confirm_selector_delete.html", context)


# -- as you type ------------------------------------------------------------------------------
@requires("console")
@require_POST
def validate_filter(request: HttpRequest) -> HttpResponse:
    """The filter field's verdict (htmx, on every pause in typing)."""
    expression = request.POST.get("filter", "")
    error = None
    if expression.strip():
        try:
            compile_filter(expression)
        except InvalidSelector as invalid:
            error = column_error(expression, invalid)
    context = {"error": error, "expression": expression, "field_id": "filter"}
    return render(request, "console/partials/expression_check.html", context)


@requires("console")
@require_POST
def validate_pattern(request: HttpRequest) -> HttpResponse:
    pattern = request.POST.get("pattern", "")
    operator = request.POST.get("operator", "topic")
    error = None
    if request.POST.get("when") == "match":
        try:
            check_pattern(operator, pattern)
        except InvalidSelector as invalid:
            error = column_error(pattern, invalid)
    context = {"error": error, "expression": pattern, "field_id": "pattern"}
    return render(request, "console/partials/expression_check.html", context)


def unmet(settings: dict[str, Any]) -> Callable[[Message], dict[str, Any] | None]:
    """Why a message does not meet a WHEN of MATCH conditions and/or a filter (None when it
    does), as the engine decides it when it routes or replays history and says it when it
    explains (engine.explain.why_not_met). InvalidSelector for a bad pattern or filter."""
    return _unmet_reading(settings)[0]


def _unmet_reading(
    settings: dict[str, Any],
) -> tuple[Callable[[Message], dict[str, Any] | None], tuple[tuple[str, int | None], ...]]:
    """`unmet(settings)`, and what judging a message reads: a (field, at most) pair for each
    condition (see `_Reading`), and ("", None) for a filter (it may read any header)."""
    matches = settings.get("matches") or ([settings["match"]] if settings.get("match") else [])
    conditions = checked_matches(matches) if matches else ()
    expression = settings.get("filter")
    fails = why_not_met(conditions, compile_filter(expression) if expression else None)
    reads = tuple((field, _READ_AT_MOST.get(operator, lambda _: None)(pattern))
                  for operator, pattern, field in conditions)  # fmt: skip
    return fails, reads + ((("", None),) if expression else ())


# what a condition reads of its field, at most, by operator (the whole field when absent):
# an equality or a prefix compares no more than its pattern's length; a topic and a regex
# read it all, each condition again
_READ_AT_MOST: dict[str, Callable[[str], int | None]] = {
    "eq": lambda pattern: len(pattern) + 1,
    "prefix": lambda pattern: len(pattern) + 1,
}


class _Reading:
    """How many characters judging one message reads: for each condition its field's
    length, or less when its operator stops sooner (`_READ_AT_MOST`); for a filter, every
    header's text and the address (field ""). Each field is measured once a message."""

    def __init__(self) -> None:
        self.readers: dict[str, Callable[[Message], str | None]] = {}
        self.message: Message | None = None
        self.sizes: dict[str, int] = {}

    def size(self, message: Message, reads: Sequence[tuple[str, int | None]]) -> int:
        if message is not self.message:
            self.message, self.sizes = message, {}
        total = 0
        for field, at_most in reads:
            size = self.sizes.get(field)
            if size is None:
                size = self.sizes[field] = self._measure(message, field)
            total += size if at_most is None else min(size, at_most)
        return total

    def _measure(self, message: Message, field: str) -> int:
        if not field:  # a filter's: whatever it may read
            headers = message.headers or {}
            return len(message.address or "") + sum(len(str(v)) for v in headers.values())
        read = self.readers.get(field)
        if read is None:
            read = self.readers[field] = field_reader(field)
        value = read(message)
        return 0 if value is None else len(value)


def selector_settings(selector: dict[str, Any]) -> dict[str, Any]:
    return {"when": selector["when"], "match": selector.get("match"),
            "matches": selector.get("matches"), "filter": selector.get("filter")}  # fmt: skip


def rivals_of(others: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The selectors a DEFAULT selector beside `others` yields to: the enabled ones, defaults
    and overflows aside, by id."""
    return [
        other for other in sorted(others, key=lambda other: other["id"])
        if other.get("enabled") and other["when"] not in ("default", "overflow")
    ]  # fmt: skip


def why_not_taken(
    settings: dict[str, Any], others: list[dict[str, Any]], budget: Budget = UNLIMITED
) -> Callable[[Message], str | None]:
    """For the selector in `settings` beside the queue's `others`: a function giving, for
    one message, None when the selector would take it, else why not. A DEFAULT selector
    acts only on what no other enabled selector (defaults and overflows aside) matches; an
    OVERFLOW selector only on a message arriving at a full queue, which a message already
    in the queue did not (or it would not be there). Each selector compiled and each one
    tried on a message is spent from `budget` first: PreviewCut when it runs out."""
    when = settings["when"]
    if when == "always":
        return lambda message: None
    if when == "overflow":
        return lambda message: OVERFLOW_ONLY
    reading = _Reading()
    if when == "default":
        rivals = []
        for other in rivals_of(others):
            budget.spend()
            fails, reads = _unmet_reading(selector_settings(other))
            rivals.append((other["id"], str(other.get("describe") or ""), fails, reads))

        def default(message: Message) -> str | None:
            matched = []
            for number, said, fails, reads in rivals:
                budget.spend(reading.size(message, reads))
                if fails(message) is None:
                    matched.append((number, said))
            if not matched:
                return None
            return default_passes([number for number, _ in matched], matched[0][1])

        return default
    own, reads = _unmet_reading(settings)

    def condition(message: Message) -> str | None:
        budget.spend(reading.size(message, reads))
        failed = own(message)
        return None if failed is None else failed["reason"]

    return condition


def priority_level(message: dict[str, Any], levels: int) -> int:
    """The level a queue with `levels` priorities routes this message at (SPEC 8: the
    `priority` header, missing = 0, out of range clamped)."""
    value = (message.get("headers") or {}).get("priority", 0)
    try:
        level = int(value)
    except (TypeError, ValueError):
        level = 0
    return max(0, min(levels - 1, level))


@requires("read", queue="name")
@require_POST
def preview(request: HttpRequest, name: str) -> HttpResponse:
    """Which of the source queue's last 100 messages the selector in the form would take,
    and why each other one would not be taken; cut short, and saying so, when judging them
    spends the preview's budget (see the module doc)."""
    form = SelectorForm(request.POST)
    context: dict[str, Any] = {"queue": {"name": name}, "taken": [], "examined": 0}
    if not form.is_valid():
        context["error"] = "; ".join(
            f"{field}: {' '.join(errors)}" for field, errors in form.errors.items()
        )
        return render(request, "console/partials/preview.html", context)
    settings = form.engine_settings()
    try:
        recent = call("browse", queue=name, start="latest", count=PREVIEW)
        waiting = call("peek", queue=name, count=PREVIEW)
        others = call("selectors", queue=name)
        levels = call("queue_get", name=name).get("priorities") or 1
    except CallFailed as error:
        context["error"] = str(error)
        return render(request, "console/partials/preview.html", context)
    candidates = sorted(recent + waiting, key=lambda m: m["seq"], reverse=True)[:PREVIEW]
    own = request.POST.get("selector_id")
    others = [s for s in others if str(s["id"]) != own]
    waiting_seqs = {m["seq"] for m in waiting}
    taken: list[dict[str, Any]] = []
    not_taken: list[dict[str, Any]] = []
    examined = 0
    try:
        judge = why_not_taken(settings, others, Budget())
        for out in candidates:  # the latest first: a preview cut short shows those
            reason = judge(to_message(out))
            examined += 1
            if reason is None:
                taken.append(shown(out))
            else:
                seq = out["seq"]
                not_taken.append({"seq": seq, "address": out.get("address") or "",
                                  "waiting": seq in waiting_seqs, "reason": reason})  # fmt: skip
    except InvalidSelector as invalid:
        context["error"] = str(invalid)
        return render(request, "console/partials/preview.html", context)
    except PreviewCut as cut:
        context["cut"] = _cut_note(str(cut), settings, others, examined, len(candidates))
    for message in taken:
        message["waiting"] = message["seq"] in waiting_seqs
        message["priority"] = priority_level(message, levels)
    if levels > 1:  # waiting messages first, in the order the queue will route them
        taken.sort(key=lambda m: (not m["waiting"], -m["priority"] if m["waiting"] else 0,
                                  m["seq"] if m["waiting"] else -m["seq"]))  # fmt: skip
    context.update(
        levels=levels,
        taken=taken,
        not_taken=not_taken,
        examined=examined,
        when=settings["when"],
        action=settings["action"],
        target=settings.get("target") or settings.get("target_from"),
    )
    return render(request, "console/partials/preview.html", context)


def _cut_note(ran_out: str, settings: dict[str, Any], others: list[dict[str, Any]],
              examined: int, candidates: int) -> str:  # fmt: skip
    """What the preview says when its budget ran out (`ran_out`: which, in words)."""
    if settings["when"] == "default":
        tried = len(rivals_of(others))
        costly = (
            f"a DEFAULT selector's preview tries each of the {tried} other enabled selectors "
            "of this queue on every message"
        )
    else:
        costly = "its conditions read long fields"
    return (
        f"Preview cut short: it judged {examined} of the latest {candidates} messages, then "
        f"stopped, as {ran_out} ({costly}). The messages it did not judge are left out; "
        "the selector itself, once saved, judges every message."
    )
