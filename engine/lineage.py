"""Lineage: what happened to one message, from the engine's event journal (SPEC §12).

Theory of operation: the routing rules already record each thing that happens to a message
in the event journal (event_journal.py) of an engine made with `journal=`, for every queue
whose spec keeps `journal=True`. A copy or move keeps the mid, so the events of one mid are
the message's whole tree. `trace(mid)` reads the journal's events that are still in the
engine (the ones not yet drained by an exporter) and returns them oldest first, each as a
JSON-able step with a sentence a person reads. Nothing is recorded for tracing alone, so
routing pays nothing for it; `step_of` turns an event read back from wherever a drained
journal went (the service's Redis list, the Parquet archive) into the same step.
"""

from __future__ import annotations

from typing import Any

from engine.errors import InvalidArgument, NotFound
from engine.event_journal import EVENT_FIELDS, EventJournal, widened

MAX_MID = 200  # characters of a mid worth looking for (the engine's are far shorter)


def check_mid(mid: object) -> str:
    if not isinstance(mid, str) or not mid or len(mid) > MAX_MID or not mid.isprintable():
        raise InvalidArgument(
            f"a mid is 1 to {MAX_MID} printable characters"
            + ("" if isinstance(mid, str) else f", not {type(mid).__name__}")
        )
    return mid


class Lineage:
    """`trace`, as a method the Engine inherits."""

    _lock: Any
    _journal: EventJournal | None

    def trace(self, mid: str) -> list[dict[str, Any]]:
        """Everything that happened to message `mid` in this engine, oldest first, as
        recorded by the event journal: each step has `time`, `kind`, `queue`, `selector`,
        `target`, `detail`, `tag` (the delivery's, for deliver, confirm, reject and
        expire), `seq` for a publish, and `said`, a sentence.

        InvalidArgument when the engine keeps no journal; NotFound when the journal holds
        no event of `mid` (an unknown mid, or events already drained to an archive)."""
        check_mid(mid)
        journal = self._journal
        if journal is None:
            raise InvalidArgument(
                "this engine keeps no event journal, so it has no lineage to show: "
                "make it with Engine(journal=True)"
            )
        with self._lock:
            events = journal.events_of(mid)
        if not events:
            raise NotFound(
                f"no events of message {mid!r} in the journal (an unknown mid, a queue with "
                "journal=False, or events already drained to the archive)"
            )
        return [step_of(event) for event in events]


def step_of(event: tuple | list) -> dict[str, Any]:
    """One journal event (EVENT_FIELDS order; one recorded before a field existed lacks
    it) as a step of a trace."""
    step: dict[str, Any] = dict(zip(EVENT_FIELDS, widened(event), strict=True))
    kind, detail = step["kind"], step["detail"]
    if kind == "publish":
        step["seq"] = int(detail) if isinstance(detail, str) and detail.isdigit() else None
        step["detail"] = None
    step["said"] = _said(step)
    return step


def _said(step: dict[str, Any]) -> str:
    kind, queue, selector = step["kind"], step["queue"], step["selector"]
    target, detail = step["target"], step["detail"]
    by = f"selector {selector} of {queue!r}" if selector is not None else repr(queue)
    if kind == "publish":
        seq = f" as seq {step['seq']}" if step.get("seq") is not None else ""
        return f"published into {queue!r}{seq}"
    if kind == "route":
        done = {"copy": "copied", "move": "moved", "bounce": "bounced"}.get(detail, detail)
        return f"{by} {done} it into {target!r}"
    tag = f" as {step['tag']}" if step.get("tag") else ""
    which = f" (delivery {step['tag']})" if step.get("tag") else ""
    if kind == "deliver":
        again = " again (redelivered)" if detail == "redelivered" else ""
        return f"{by} delivered it to destination {target!r}{tag}{again}"
    if kind == "delete":
        return f"{by} deleted it"
    if kind == "confirm":
        return f"confirmed by destination {target!r}{tag} ({by})"
    if kind == "reject":
        back = ", back to the queue" if detail == "requeue" else ""
        return f"rejected by destination {target!r}{tag} ({by}){back}"
    if kind == "expire":
        if detail == "recalled":
            return f"recalled from {by}{which}: its destination {target!r} was away"
        return f"timed out unconfirmed at {by}{which}: back to the front of {queue!r}"
    if kind == "dead_letter":
        return f"dead-lettered from {queue!r} into {target!r} ({detail})"
    if kind == "drop":
        if detail in TAKEN_OUT:
            return f"taken out of {queue!r} ({TAKEN_OUT[detail]})"
        why = "expired" if detail == "expired" else detail
        return f"dropped at {queue!r} ({why}; no dead-letter queue)"
    return f"{kind} at {queue!r}"


# a `drop` event's detail when a person or a program took the message out (no dead-letter
# queue would have had it): what the trace says
TAKEN_OUT = {
    "cancelled": "its delayed publish was cancelled",
    "purged": "purged",
    "deleted": "deleted by a message operation",
    "moved": "moved out by a message operation; it goes on where it was published next",
    "queue deleted": "the queue was deleted",
}
