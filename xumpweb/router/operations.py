"""The operations the router offers to every other process (engine.relay calls).

Each takes the router's engine and JSON arguments and returns a JSON-able answer and the
Deliveries it caused. They run inside the router's step, after every command sent before
them, so a caller reads its own writes. An operation that makes several engine calls
checks what it can first and undoes what it began when a later call fails, so a failed
operation changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from django.db import transaction

from engine import message_ops, patterns
from engine.core import Engine, QueueInfo
from engine.errors import InvalidArgument, NotFound
from engine.message import Delivery, Message
from engine.selectors import Selector, all_matches, describe
from xumpweb.router.codec import message_out

Answer = tuple[Any, list[Delivery]]
NONE: list[Delivery] = []

WHEN_KINDS = ("match", "filter", "always", "default", "overflow")
ACTIONS = ("copy", "move", "deliver", "delete", "bounce")


# -- queues ------------------------------------------------------------------------------
def queue_json(engine: Engine, info: QueueInfo) -> dict[str, Any]:
    stats = engine.stats(info.name)
    return {
        "name": info.name,
        "store": info.store,
        "depth": info.depth,
        "history_size": info.history_size,
        "outstanding": info.outstanding,
        "limit": info.limit,
        "history": info.history,
        "dead_letter": info.dead_letter,
        "self_destruct": info.self_destruct,
        "journal": info.journal,
        "max_deliveries": info.max_deliveries,
        "redelivery_delay": info.redelivery_delay,
        "redelivery_backoff": info.redelivery_backoff,
        "redelivery_delay_max": info.redelivery_delay_max,
        "ttl": info.ttl,
        "priorities": info.priorities,
        "scheduled": info.scheduled,
        "stats": stats,
    }


def queues(engine: Engine, names: list[str] | None = None) -> Answer:
    """Every queue, or those of `names` that exist (one page of a listing), in that order."""
    if names is None:
        return [queue_json(engine, info) for info in engine.queues()], NONE
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise InvalidArgument("names must be a list of queue names")
    found = []
    for name in names:
        try:
            found.append(queue_json(engine, engine.queue_fetch(name)))
        except NotFound:
            continue  # deleted since the page was chosen
    return found, NONE


def queue_get(engine: Engine, name: str) -> Answer:
    answer = queue_json(engine, engine.queue_fetch(name))
    answer["selectors"] = [selector_json(s) for s in engine.selectors(name)]
    return answer, NONE


def queue_create(engine: Engine, name: str, **settings: Any) -> Answer:
    try:
        engine.queue_fetch(name)
        exists = True
    except NotFound:
        exists = False
    info = engine.queue_create(name, **settings)
    return {"queue": queue_json(engine, info), "created": not exists}, NONE


def queue_update(engine: Engine, name: str, **changes: Any) -> Answer:
    return queue_json(engine, engine.queue_update(name, **changes)), NONE


# the private queues of STOMP connections (topic and durable subscriptions, temp queues):
# the COPY selectors feeding them are part of the subscription, not wiring of their own
STOMP_PRIVATE = ("stomp:", "stomp-durable:")


def queue_delete(engine: Engine, name: str) -> Answer:
    """Delete a queue. A STOMP subscription's private queue (a durable subscription an
    operator removes on the console, say) goes with the COPY selectors that feed it, as
    UNSUBSCRIBE takes it down: left behind, a COPY into a queue that is gone would wait
    there, unseen, and feed the queue of the same name made by the subscriber's next
    SUBSCRIBE with its old pattern and selector."""
    if not name.startswith(STOMP_PRIVATE):
        return {"deleted": name}, engine.queue_delete(name)
    engine.queue_fetch(name)  # NotFound before anything is removed
    return {"deleted": name}, _take_down(engine, _feeding(engine, name), [name])


def _feeding(engine: Engine, queue: str) -> list[tuple[str, int]]:
    """The COPY selectors (owner queue, number) of every queue that copy into `queue`."""
    return [
        (info.name, selector.id)
        for info in engine.queues()
        for selector in engine.selectors(info.name)
        if selector.spec.action == "copy" and selector.spec.target == queue
    ]


# -- selectors ---------------------------------------------------------------------------
def selector_json(selector: Selector) -> dict[str, Any]:
    spec = selector.spec
    operator, pattern, field = spec.match or (None, None, None)
    when = spec.when
    if when == "match" and spec.match is None:
        when = "filter"
    return {
        "queue": selector.queue,
        "id": selector.id,
        "when": when,
        "match": None if operator is None else
        {"operator": operator, "pattern": pattern, "field": field},
        # every MATCH condition, the first (indexed) one included: all must hold (SPEC §12)
        "matches": [{"operator": o, "pattern": p, "field": f} for o, p, f in all_matches(spec)],
        "filter": spec.filter,
        "action": spec.action,
        "target": spec.target,
        "target_from": spec.target_from,
        "enabled": spec.enabled,
        "start": spec.start,
        "credit": spec.credit,
        "available_credit": selector.available_credit,
        "outstanding": selector.outstanding,
        "held": selector.held,
        # WHEN → DO in words (describe: the same, kept under its first name)
        "description": describe(spec),
        "describe": describe(spec),
    }  # fmt: skip


def selectors(engine: Engine, queue: str) -> Answer:
    return [selector_json(s) for s in engine.selectors(queue)], NONE


def selector_get(engine: Engine, queue: str, id: int) -> Answer:
    return selector_json(engine.selector_fetch(queue, id)), NONE


def _configure(selector: Selector, settings: dict[str, Any]) -> None:
    """Apply WHEN, DO, credit and start from `settings` (keys that are absent stay). A WHEN
    of conditions and a filter is one: a change that names one half keeps the other,
    unless it takes it away (`matches` empty, `match` null or `when` "filter": the filter
    alone; `filter` null: the conditions alone)."""
    problem = inapplicable(settings)
    if problem is not None:
        raise InvalidArgument(problem)
    when = settings.get("when")
    match = settings.get("match")
    matches = settings.get("matches")
    expression = settings.get("filter")
    if match is not None and matches is not None:
        raise InvalidArgument("give `match` (one condition) or `matches` (a list), not both")
    if match is not None:
        if not isinstance(match, dict):
            raise InvalidArgument("match must be {operator, pattern, field}")
        matches = [match]
    if when is not None:
        if when not in WHEN_KINDS:
            raise InvalidArgument(f"when must be one of {', '.join(WHEN_KINDS)}, not {when!r}")
        if when in ("match", "filter"):
            if not matches and expression is None:
                raise InvalidArgument(
                    "a match or filter selector needs `match`, `matches` or `filter`"
                )
            takes_away = (not matches and (when == "filter" or "match" in settings
                                           or "matches" in settings)) or (
                "filter" in settings and expression is None)  # fmt: skip
            if takes_away:  # the setters keep the other half (engine `_set_when`)
                selector.when_always()
            if matches:
                selector.when_matches(matches)
                if expression is not None:
                    selector.when_filter(expression)
            else:
                selector.when_filter(expression)
        else:
            getattr(selector, f"when_{when}")()
    action = settings.get("action")
    if action is not None:
        if action not in ACTIONS:
            raise InvalidArgument(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        if action == "delete":
            selector.do_delete()
        elif settings.get("target_from") is not None:
            getattr(selector, f"do_{action}")(
                settings.get("target"), target_from=settings["target_from"]
            )
        else:
            getattr(selector, f"do_{action}")(settings.get("target"))
    if settings.get("start") is not None:
        selector.start_at(settings["start"])
    if settings.get("credit") is not None:
        selector.set_credit(settings["credit"])


def inapplicable(settings: dict[str, Any]) -> str | None:
    """Why some of a selector's settings (when, match, matches, filter, action, target,
    target_from) would not apply, so that the engine would drop them, or None: conditions
    or a filter on a WHEN that has none, a target on a DELETE or with no action. Every
    door (the API, the console, a definitions import) is refused them rather than have
    them dropped unseen."""
    when, action = settings.get("when"), settings.get("action")
    parts = []
    if settings.get("match") or settings.get("matches"):
        parts.append("the match conditions")
    if settings.get("filter"):
        parts.append("the filter")
    if parts and when is None:
        return f"a WHEN is needed for {' and '.join(parts)}: give `when` (match or filter)"
    if parts and when in ("always", "default", "overflow"):
        return f"when {when!r} has no conditions: leave out {' and '.join(parts)}"
    targets = [f"`{key}`" for key in ("target", "target_from") if settings.get(key) is not None]
    if targets and action is None:
        return f"an action is needed for {' and '.join(targets)}: give `action`"
    if targets and action == "delete":
        return f"a delete selector has no target: leave out {' and '.join(targets)}"
    return None


SELECTOR_SETTINGS = {
    "when", "match", "matches", "filter", "action", "target", "target_from", "start", "credit",
    "enabled",
}  # fmt: skip


def _check_settings(settings: dict[str, Any]) -> None:
    unknown = set(settings) - SELECTOR_SETTINGS
    if unknown:
        raise InvalidArgument(f"unknown selector setting(s): {', '.join(sorted(unknown))}")
    enabled = settings.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidArgument(f"enabled must be true or false, not {enabled!r}")


def selector_create(engine: Engine, queue: str, **settings: Any) -> Answer:
    """A configured selector in one call; enabled when `enabled` is true."""
    _check_settings(settings)
    selector = engine.selector_create(queue)
    try:
        _configure(selector, settings)
        deliveries = selector.enable() if settings.get("enabled") else []
    except Exception:  # the engine's refusal, or a catalog that could not save
        engine.selector_delete(queue, selector.id)
        raise
    return selector_json(selector), deliveries


def selector_update(engine: Engine, queue: str, id: int, **settings: Any) -> Answer:
    """Change some of a selector's settings: all of them, or (refused) none. Paused while it
    changes, so a half-changed selector never routes, and resumed as it was (no history
    replayed anew, a replay under way goes on) unless the change gives it another `start`
    (then it starts there, as when enabled); on a bad setting the old ones come back, the
    credit in use untouched."""
    _check_settings(settings)
    selector = engine.selector_fetch(queue, id)
    before = selector.spec
    was_enabled = before.enabled
    position = selector.pause() if was_enabled else None
    try:
        _configure(selector, settings)
    except Exception:  # the engine's refusal, or a catalog that could not save
        _restore(selector, before, settings)
        if was_enabled:
            selector.resume(position)
        raise
    if not settings.get("enabled", was_enabled):
        return selector_json(selector), []
    # a selector enabled by this change, or given another start, starts as a new one does
    moved = settings.get("start") is not None and settings["start"] != before.start
    deliveries = selector.resume(position) if was_enabled and not moved else selector.enable()
    return selector_json(selector), deliveries  # the answer made after: it is enabled


def _restore(selector: Selector, spec: Any, settings: dict[str, Any]) -> None:
    """The WHEN, DO and start of `spec` again, exactly: each setter keeps what the others
    set (a MATCH and a filter combine), so the WHEN is cleared first. The credit needs
    nothing: set last, it changes nothing when refused (Selector.set_credit), and setting
    it again would forget the credit in use."""
    if spec.when is not None:
        selector.when_always()  # clears every condition a part of the change had set
        if spec.when == "match":
            if spec.match is not None:
                selector.when_matches(list(all_matches(spec)))
            if spec.filter is not None:
                selector.when_filter(spec.filter)
        elif spec.when != "always":
            getattr(selector, f"when_{spec.when}")()
    if spec.action == "delete":
        selector.do_delete()
    elif spec.target_from is not None:
        getattr(selector, f"do_{spec.action}")(target_from=spec.target_from)
    elif spec.action is not None:
        getattr(selector, f"do_{spec.action}")(spec.target)
    if "start" in settings:
        selector.start_at(spec.start)


def explain(engine: Engine, queue: str, message: dict[str, Any]) -> Answer:
    """Engine.explain of a message given as JSON (address, headers, return_address, ttl,
    delay); the body never changes where a message goes, so it is not carried."""
    envelope = Message(
        message.get("address", ""),
        message.get("headers") or {},
        b"",
        message.get("return_address"),
        ttl=message.get("ttl"),
        delay=message.get("delay"),
    )
    return engine.explain(queue, envelope), NONE


def selector_delete(engine: Engine, queue: str, id: int) -> Answer:
    return {"deleted": id, "queue": queue}, engine.selector_delete(queue, id)


def selector_credit(engine: Engine, queue: str, id: int, n: int) -> Answer:
    selector = engine.selector_fetch(queue, id)
    deliveries = selector.credit(n)
    return selector_json(selector), deliveries


# -- messages ----------------------------------------------------------------------------
def browse(
    engine: Engine,
    queue: str,
    start: str | None = None,
    before: int | None = None,
    after: int | None = None,
    count: int = 50,
) -> Answer:
    found = engine.browse(queue, start, count, before=before, after=after)
    return [message_out(m) for m in found], NONE


def since(engine: Engine, queue: str, timestamp: float, count: int = 50) -> Answer:
    found = []
    for message in engine.since(queue, timestamp):
        found.append(message_out(message))
        if len(found) >= count:
            break
    return found, NONE


def peek(engine: Engine, queue: str, count: int = 50) -> Answer:
    return [message_out(m) for m in engine.peek(queue, count)], NONE


def purge(engine: Engine, queue: str, seqs: list[int] | None = None) -> Answer:
    """Drop a queue's unprocessed messages (all, or the given seqs)."""
    before = engine.queue_fetch(queue).depth
    deliveries = engine.purge(queue, seqs)
    return {"purged": before - engine.queue_fetch(queue).depth}, deliveries


DEAD_LETTER_HEADERS = ("x-reason", "x-original-queue")


def dead_letter_send(
    engine: Engine,
    queue: str,
    seqs: list[int],
    target: str | None = None,
    bounce: bool = False,
) -> Answer:
    """Send waiting dead letters on: to `target`, or back to the queue each came from
    (`x-original-queue`); `bounce` addresses them to their return address. The dead-letter
    headers are taken off (the mid stays, for tracing); the dead letters leave `queue`.
    All or nothing: an unknown seq or target queue changes nothing."""
    if not isinstance(seqs, list) or not seqs:
        raise InvalidArgument("seqs must be a non-empty list of seqs")
    waiting = {m.seq: m for m in engine.peek(queue, engine.queue_fetch(queue).depth)}
    missing = [seq for seq in seqs if seq not in waiting]
    if missing:
        raise NotFound(f"queue {queue!r} holds no waiting message with seq {missing[0]}")
    plan: dict[str, list[Message]] = {}
    for seq in dict.fromkeys(seqs):
        message = waiting[seq]
        destination = target or message.headers.get("x-original-queue")
        if not isinstance(destination, str):
            raise InvalidArgument(f"message {seq} has no x-original-queue; choose a target")
        engine.check_target(destination)  # NotFound before anything changes
        headers = {k: v for k, v in message.headers.items() if k not in DEAD_LETTER_HEADERS}
        address = message.address
        if bounce:
            if not message.return_address:
                raise InvalidArgument(f"message {seq} has no return address to bounce to")
            headers["x-original-address"] = address
            address = message.return_address
        plan.setdefault(destination, []).append(
            Message(address, headers, message.body, message.return_address, message.mid)
        )
    # publish first: a full target raises before anything changed; the purge cannot fail
    deliveries: list[Delivery] = []
    for destination, messages in plan.items():
        deliveries.extend(engine.publish_many(destination, messages, keep_mids=True))
    deliveries.extend(engine.purge(queue, list(dict.fromkeys(seqs)), reason="moved"))
    counts = {destination: len(messages) for destination, messages in plan.items()}
    return {"sent": sum(counts.values()), "to": counts}, deliveries


def messages_operate(engine: Engine, queue: str, action: str, **choice: Any) -> Answer:
    """Move, copy, delete or re-route the unprocessed messages of `queue` chosen by a
    filter, seqs or mids, in one step (engine/message_ops.py); `dry_run` counts them and
    shows a sample, changing nothing. `choice` is message_ops.operate's keywords (filter,
    seqs, mids, target, address, dry_run, expect), passed on as they are."""
    outcome, deliveries = message_ops.operate(engine, queue, action, **choice)
    answer = {
        "action": outcome.action,
        "queue": outcome.queue,
        "target": outcome.target,
        "matched": outcome.matched,
        "done": outcome.done,
        "dry_run": outcome.dry_run,
        "sample": [message_out(m) for m in outcome.sample],
    }
    return answer, deliveries


def stats(engine: Engine, queue: str) -> Answer:
    return engine.stats(queue), NONE


def confirm(engine: Engine, tags: list[str]) -> Answer:
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidArgument("tags must be a list of delivery tags")
    return {"confirmed": len(tags)}, engine.confirm_many(tags)


def reject(engine: Engine, tag: str, requeue: bool = True) -> Answer:
    if not isinstance(requeue, bool):
        raise InvalidArgument(f"requeue must be true or false, not {requeue!r}")
    return {"rejected": tag, "requeued": requeue}, engine.reject(tag, requeue=requeue)


def expire(engine: Engine, older_than: float) -> Answer:
    deliveries = engine.expire(older_than)
    return {"redelivered": len(deliveries)}, deliveries


def tick(engine: Engine, now: float | None = None) -> Answer:
    """Message lifetime's time-based transitions (SPEC §8): delayed messages and waiting
    redeliveries that are due enter their queues, expired ones leave."""
    deliveries = engine.tick(now)
    return {"delivered": len(deliveries)}, deliveries


def scheduled(engine: Engine, queue: str, count: int = 1000) -> Answer:
    """The messages `queue` holds out of routing, soonest due first, each with its `due`
    time: delayed messages (seq null) and redeliveries waiting out their delay."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 10_000:
        raise InvalidArgument(f"count must be from 1 to 10000, not {count!r}")
    found = engine.scheduled_due(queue)
    return {
        "total": len(found),
        "messages": [{**message_out(m), "due": due} for due, m in found[:count]],
    }, NONE


def cancel(engine: Engine, queue: str, mids: list[str]) -> Answer:
    """Withdraw scheduled messages of `queue` by mid, all or nothing: NotFound (nothing
    cancelled) when one of them is not scheduled there."""
    if not isinstance(mids, list) or not mids or not all(isinstance(m, str) for m in mids):
        raise InvalidArgument("mids must be a non-empty list of message ids")
    waiting = {m.mid for m in engine.scheduled(queue)}
    missing = [mid for mid in mids if mid not in waiting]
    if missing:
        raise NotFound(f"message {missing[0]!r} is not scheduled in queue {queue!r}")
    deliveries = []
    for mid in dict.fromkeys(mids):
        deliveries.extend(engine.cancel(queue, mid))
    return {"cancelled": len(dict.fromkeys(mids))}, deliveries


def trim(engine: Engine) -> Answer:
    """Hold every queue's history to its setting (history is trimmed as it grows; this
    catches up after a setting was lowered elsewhere)."""
    for info in engine.queues():
        engine.queue_update(info.name, history=info.history)
    return {"queues": len(engine.queues())}, NONE


# -- patterns ----------------------------------------------------------------------------
def pattern_build(
    engine: Engine, kind: str, name: str, router: str, topic: str = "", credit: int = 1
) -> Answer:
    if kind == "housecat":
        wiring = patterns.housecat(engine, name, router=router)
    elif kind == "parrot":
        wiring = patterns.parrot(engine, name, topic, router=router)
    elif kind == "wolfpack":
        wiring = patterns.wolfpack(engine, router, name, credit=credit)
    else:
        raise InvalidArgument(f"kind must be housecat, parrot or wolfpack, not {kind!r}")
    answer = {
        "queue": wiring.queue,
        "selectors": [list(pair) for pair in wiring.selectors],
        "made_queues": list(wiring.made_queues),
        "made_selectors": [list(pair) for pair in wiring.made_selectors],
        "updated_selectors": [list(pair) for pair in wiring.updated_selectors],
    }
    return answer, list(wiring.deliveries)


def pattern_unbuild(engine: Engine, queues: list[str], selectors: list[list[Any]]) -> Answer:
    """Take down what one pattern_build made (its answer's made_queues and made_selectors),
    when the pattern's record could not be written: the build is all or nothing."""
    kept = [(owner, number) for owner, number in reversed(selectors) if owner not in queues]
    return {"removed": queues}, _take_down(engine, kept, list(reversed(queues)))


def pattern_remove(engine: Engine, queue: str, selectors: list[list[Any]]) -> Answer:
    """Delete the selectors a pattern built and its private queue (the router stays: other
    patterns share it)."""
    kept = [(owner, number) for owner, number in selectors if owner != queue]
    return {"removed": queue}, _take_down(engine, kept, [queue])


def _take_down(
    engine: Engine, selectors: list[tuple[str, int]], queues: list[str]
) -> list[Delivery]:
    """Delete these selectors (owner queue, number), then these queues, in this order, each
    one that is still there: taking down what a pattern or subscription built may meet
    parts an operator already removed. What went back to be routed again."""
    deliveries: list[Delivery] = []
    for owner, number in selectors:
        try:
            deliveries.extend(engine.selector_delete(owner, number))
        except NotFound:
            pass
    for queue in queues:
        try:
            deliveries.extend(engine.queue_delete(queue))
        except NotFound:
            pass
    return deliveries


# -- STOMP /topic/ subscriptions (xumpweb/stompgate/topics.py) ---------------------------
def stomp_topic_open(
    engine: Engine,
    queue: str,
    router: str,
    pattern: str,
    filter: str | None = None,
    durable: bool = False,
    operator: str | None = "topic",
    make_router: bool = True,
) -> Answer:
    """A /topic/<pattern> (or /exchange/<router>/<pattern>) subscription's private wiring,
    all or nothing: `queue` (self-destructing) delivering to the destination of the same
    name, fed by a COPY of what the router queue `router` receives whose address matches
    `pattern` by `operator` ("topic", "eq"; None: every address) and `filter`, when
    given, from now on. `make_router`: make the router when missing (the topic router,
    amq.direct, amq.fanout); else it must exist and already route (an operator's queue
    used as an exchange: a COPY on a queue without enabled selectors would route, and so
    drop, what it holds for wiring to come). `durable`: a durable subscription's queue, not
    self-destructing, kept as it is when it exists already with the same pattern and
    filter (what it holds waits for the subscriber's return). Asked for with another
    pattern or filter, it is made anew, what it held dropped, as JMS and ActiveMQ do when a
    durable subscription changes its topic or selector: kept, it would go on receiving
    what the old pattern matches and nothing the new one asks for."""
    deliveries: list[Delivery] = []
    if durable:
        try:
            engine.queue_fetch(queue)
        except NotFound:
            pass
        else:
            copies = [s for s in engine.selectors(router)
                      if s.spec.action == "copy" and s.spec.target == queue]  # fmt: skip
            wanted = ((operator, pattern, "address") if operator else None, filter)
            found = [(tuple(s.spec.match) if s.spec.match else None, s.spec.filter)
                     for s in copies]  # fmt: skip
            if found == [wanted]:
                return {"queue": queue, "selectors": [], "existing": True}, NONE
            deliveries = _take_down(engine, [(router, s.id) for s in copies], [queue])
    building = patterns.Building(engine)
    try:
        if make_router:
            deliveries += _topic_router(engine, building, router)
        elif not any(
            s.spec.enabled and s.spec.when != "overflow" for s in engine.selectors(router)
        ):
            raise InvalidArgument(
                f"queue {router!r} routes nothing yet (no enabled selector): a subscription "
                "to it as an exchange would route, and drop, what it holds; give it its "
                "selectors first"
            )
        engine.queue_create(queue, self_destruct=not durable)
        building.queues.append(queue)
        deliver = engine.selector_create(queue).when_always().do_deliver(queue)
        building.selectors.append((queue, deliver.id))
        deliveries += deliver.enable()
        copy = engine.selector_create(router)
        building.selectors.append((router, copy.id))
        if operator is not None:
            copy.when_match(operator, pattern, "address")
        if filter is not None:
            copy.when_filter(filter)
        if operator is None and filter is None:
            copy.when_always()
        deliveries += copy.do_copy(queue).enable()
    except BaseException:
        building.undo()
        raise
    return {"queue": queue, "selectors": [list(pair) for pair in building.selectors]}, deliveries


def stomp_topic_router(engine: Engine, router: str) -> Answer:
    """The topic router queue that SEND /topic/<address> publishes to, made when missing
    (a SEND may come before any subscription)."""
    building = patterns.Building(engine)
    try:
        deliveries = _topic_router(engine, building, router)
    except BaseException:
        building.undo()
        raise
    return {"router": router}, deliveries


def _topic_router(engine: Engine, building: patterns.Building, router: str) -> list[Delivery]:
    """Make sure `router` exists with a DEFAULT selector. Without one, a router whose
    subscriptions have all ended has no enabled selector and holds what arrives (SPEC §2
    rule 6), for the next subscriber to receive what was published before it subscribed;
    a DEFAULT DELETE drops what no subscription wants, as a topic does. A DEFAULT selector
    an operator put there (one sending to a dead-letter queue, say) is kept as it is."""
    patterns.ensure_queue(building, router)
    if any(s.spec.when == "default" for s in engine.selectors(router)):
        return []
    default = engine.selector_create(router).when_default().do_delete()
    building.selectors.append((router, default.id))
    return list(default.enable())


def stomp_topic_close(engine: Engine, queue: str, router: str) -> Answer:
    """Take down what stomp_topic_open made: the router's COPY into `queue`, then the
    queue (what it still holds goes with it, as a subscription's private queue should)."""
    try:
        copies = [
            (router, selector.id)
            for selector in engine.selectors(router)
            if selector.spec.action == "copy" and selector.spec.target == queue
        ]
    except NotFound:  # the router is gone, and its selectors with it
        copies = []
    return {"removed": queue}, _take_down(engine, copies, [queue])


def stomp_mailbox(engine: Engine, name: str, history: int = 0) -> Answer:
    """The mailbox `name` for a SEND or SUBSCRIBE to /queue/<name> (SPEC §9): when no queue
    `name` exists and no DELIVER selector feeds destination `name`, a queue of that name
    whose one selector DELIVERs to destination `name` (credit unlimited). Inside the
    router's step, so concurrent first uses make one mailbox; an existing queue is never
    rewired. `created` says whether this call made it."""
    try:
        engine.queue_fetch(name)
        return {"queue": name, "created": False}, NONE
    except NotFound:
        pass
    for info in engine.queues():
        for selector in engine.selectors(info.name):
            if selector.spec.action == "deliver" and selector.spec.target == name:
                return {"queue": name, "created": False}, NONE
    building = patterns.Building(engine)
    try:
        engine.queue_create(name, history=history)
        building.queues.append(name)
        deliver = engine.selector_create(name).when_always().do_deliver(name)
        building.selectors.append((name, deliver.id))
        deliveries = list(deliver.enable())
    except BaseException:
        building.undo()
        raise
    return {"queue": name, "created": True}, deliveries


# -- definitions ---------------------------------------------------------------------------
@contextmanager
def _all_or_nothing() -> Iterator[list[Callable[[], Any]]]:
    """A list for the undo of each engine call the block makes. The catalog's rows are saved
    in one database transaction: a commit per row (an fsync each on SQLite) made 200 queues
    take 4 s of the router's time. When the block fails, the transaction is rolled back and
    the undo steps run in reverse to take back the engine's side; the error is raised."""
    undo: list[Callable[[], Any]] = []
    try:
        with transaction.atomic():
            yield undo
    except Exception:  # the engine's refusal, or a catalog that could not save
        for step in reversed(undo):
            try:
                step()
            except Exception:  # undo the rest even when one step cannot
                continue
        raise


def definitions_apply(
    engine: Engine,
    stores: list[dict[str, Any]],
    queues_create: list[dict[str, Any]],
    queues_update: list[dict[str, Any]],
    selectors_create: list[dict[str, Any]],
    selectors_update: list[dict[str, Any]],
    patterns: list[dict[str, Any]],
) -> Answer:
    """Apply an imported definitions document's wiring (xumpweb/wiring/definitions.py
    checked it and planned it) in one step: stores, queues (dead-letter queues set once
    every queue exists), selectors created or changed, patterns built. All or nothing:
    when any call fails, what this call did is undone in reverse and the error raised."""
    deliveries: list[Delivery] = []
    built: list[dict[str, Any]] = []
    with _all_or_nothing() as undo:
        for store in stores:
            engine.store_create(store["kind"], store["name"], store.get("url"))
            undo.append(lambda name=store["name"]: engine.store_delete(name))
        dead_letters = []
        for queue in queues_create:
            settings = {k: v for k, v in queue.items() if k not in ("name", "dead_letter")}
            engine.queue_create(queue["name"], **settings)
            undo.append(lambda name=queue["name"]: engine.queue_delete(name))
            if queue.get("dead_letter") is not None:
                dead_letters.append({"name": queue["name"], "dead_letter": queue["dead_letter"]})
        for queue in [*queues_update, *dead_letters]:
            info = engine.queue_fetch(queue["name"])
            changes = {k: v for k, v in queue.items() if k != "name"}
            old = {k: getattr(info, k) for k in changes}
            engine.queue_update(queue["name"], **changes)
            undo.append(lambda name=queue["name"], old=old: engine.queue_update(name, **old))
        for selector in selectors_create:
            settings = {k: v for k, v in selector.items() if k != "queue"}
            answer, caused = selector_create(engine, selector["queue"], **settings)
            deliveries.extend(caused)
            undo.append(lambda q=selector["queue"], n=answer["id"]: engine.selector_delete(q, n))
        for change in selectors_update:
            spec = engine.selector_fetch(change["queue"], change["id"]).spec
            old = {"enabled": spec.enabled, "credit": spec.credit, "start": spec.start}
            _, caused = selector_update(engine, change["queue"], change["id"], **change["settings"])
            deliveries.extend(caused)
            undo.append(partial(selector_update, engine, change["queue"], change["id"], **old))
        for pattern in patterns:
            answer, caused = pattern_build(engine, **pattern)
            deliveries.extend(caused)
            built.append(answer)
            made = (answer["made_queues"], answer["made_selectors"])
            undo.append(partial(pattern_unbuild, engine, *made))
    return {"patterns": built}, deliveries


CALLS = {
    name: function
    for name, function in globals().items()
    if name
    in {
        "queues", "queue_get", "queue_create", "queue_update", "queue_delete",
        "selectors", "selector_get", "selector_create", "selector_update", "selector_delete",
        "selector_credit", "browse", "since", "peek", "stats", "confirm", "reject", "expire",
        "tick", "trim", "pattern_build", "pattern_remove", "pattern_unbuild", "purge",
        "dead_letter_send", "definitions_apply", "messages_operate", "scheduled", "cancel",
        "stomp_topic_open", "stomp_topic_close", "stomp_topic_router", "stomp_mailbox",
        "explain",
    }
}  # fmt: skip

# operations that change the wiring: the router tells every process when one ran
WIRING_CALLS = {
    "queue_create", "queue_update", "queue_delete", "selector_create", "selector_update",
    "selector_delete", "pattern_build", "pattern_remove", "pattern_unbuild",
    "definitions_apply", "stomp_topic_open", "stomp_topic_close", "stomp_topic_router",
    "stomp_mailbox",
}  # fmt: skip
