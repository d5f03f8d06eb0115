"""Which shard's router runs an operation (SPEC §10, docs/scaling.md "Operations").

Theory of operation. With shards, every operation (router/operations.py) is run by the
router of ONE shard, in one atomic step, as with one store: all or nothing holds because
nothing an operation touches lives on two shards. The shard is chosen here, from the
operation's arguments:

* an operation on a queue (its stats, its selectors, its messages, deleting it) goes to
  the shard the queue lives on (NotFound when there is none);
* creating a queue goes where placement puts it (xumpweb/shards.py), the store passed on
  explicitly; a mailbox and a topic router likewise;
* a pattern and a STOMP topic subscription go to their router queue's shard: their private
  queues are made there too (a pattern's are named `<router>:<name>` and placement keeps
  them there anyway; a subscription's queue is made on its router's shard explicitly), so
  every queue, selector and delivery they make is on one shard. Taking one down goes to
  its private queue's shard (`stomp_topic_close` too: a /temp-queue/ queue, closed the
  same way, lives where placement put it, not with the topic router);
* a DELIVER to a destination read on another shard needs its delivery queue there, made
  before the selector or pattern (`delivery_queue`); deleting the pattern, the selector or
  its queue takes it down again when the service made it and nothing else uses it
  (`release_delivery_queue`), so nothing is left behind, as on one store;
* listing queues asks every shard for its own and puts the pages together in the order
  asked; expiring and trimming run on every shard.

A definitions document whose queues span shards is applied shard by shard
(`definitions_apply`): each shard's part all or nothing, queues first; a later part that
fails leaves the earlier ones applied, which the answer says.
"""

from __future__ import annotations

import logging
from typing import Any

from engine.errors import InvalidArgument, NotFound, XumpError
from engine.validation import check_name

logger = logging.getLogger("xump.shards")
SERVICE = "xump"  # the audit entries' `who` for what the service does by itself

# operations on one queue, by the argument that names it
ON_QUEUE = {
    "queue_get": "name", "queue_update": "name", "queue_delete": "name",
    "selectors": "queue", "selector_get": "queue", "selector_create": "queue",
    "selector_update": "queue", "selector_delete": "queue", "selector_credit": "queue",
    "browse": "queue", "since": "queue", "peek": "queue", "stats": "queue", "purge": "queue",
    "dead_letter_send": "queue", "messages_operate": "queue", "scheduled": "queue",
    "cancel": "queue", "explain": "queue",
}  # fmt: skip
# operations that may make the queue they name: placement decides
PLACED = {"queue_create": "name", "stomp_mailbox": "name", "stomp_topic_router": "router",
          "pattern_build": "router", "stomp_topic_open": "router"}  # fmt: skip
EVERY_SHARD = {"expire", "tick", "trim"}


def call(service: Any, method: str, arguments: dict[str, Any]) -> Any:
    """Run `method` on the router of the shard it concerns (see the module doc); its
    answer."""
    if method in ON_QUEUE:
        name = _name(arguments, ON_QUEUE[method])
        shard = service.shard_of(name)
        if method in ("selector_create", "selector_update"):
            _selector_delivers(service, shard, name, arguments)
        if method in ("selector_delete", "queue_delete"):
            return _delivering_taken_down(service, shard, method, name, arguments)
        return shard.call_here(method, **arguments)
    if method in PLACED:
        name = _name(arguments, PLACED[method])
        explicit = arguments.get("store") if method == "queue_create" else None
        if explicit is not None and not isinstance(explicit, str):
            raise InvalidArgument(f"store must be a store's name, not {explicit!r}"[:200])
        shard = service.shard_for(name, explicit)
        if method == "queue_create":
            arguments = {**arguments, "store": shard.store}
        if method == "pattern_build" and isinstance(arguments.get("name"), str):
            delivery_queue(service, shard, arguments["name"])  # what it delivers to
        return shard.call_here(method, **arguments)
    if method == "queues":
        return _queues(service, arguments.get("names"))
    if method in EVERY_SHARD:
        return _every_shard(service, method, arguments)
    if method == "confirm":
        tags = arguments.get("tags")
        if not isinstance(tags, list):
            raise InvalidArgument("tags must be a list of delivery tags")
        confirmed = 0
        for shard, some in service._tags_by_shard(tags).items():
            confirmed += shard.call_here("confirm", tags=some)["confirmed"]
        return {"confirmed": confirmed}
    if method == "reject":
        [shard] = service._tags_by_shard([arguments.get("tag")])
        return shard.call_here("reject", **arguments)
    if method in ("pattern_remove", "pattern_unbuild"):
        return _pattern_take_down(service, method, arguments)
    if method == "stomp_topic_close":
        return _closing_shard(service, arguments).call_here(method, **arguments)
    if method == "definitions_apply":
        return _definitions(service, arguments)
    return service.call_here(method, **arguments)  # unknown: its router refuses it


def delivery_queue(service: Any, shard: Any, destination: str) -> None:
    """Before a DELIVER to `destination` is made on `shard`: when the destination is read
    on another shard (its home), make sure that shard has the queue of its name (its
    delivery queue, a mailbox: docs/scaling.md, Consumers), which the DELIVER moves into.
    A bad name is left for the operation itself to refuse (as a destination's name)."""
    if not isinstance(destination, str) or not destination or destination.startswith("$"):
        return
    try:
        check_name("destination", destination)
        home = service.shard_for(destination)
    except XumpError:
        return
    if home is shard:
        return
    made = home.call_here("stomp_mailbox", name=destination)
    if made.get("created"):
        from xumpweb.wiring import audit
        from xumpweb.wiring.models import Queue

        Queue.objects.filter(name=destination).update(mailbox=True)
        # the record that the service made it, not a user: deleting what delivered
        # through it takes it down again (release_delivery_queue)
        audit.record(SERVICE, "queue.create", destination, None, _made_for(destination))


def release_delivery_queue(service: Any, destination: str) -> None:
    """After a DELIVER to `destination` was deleted: take its delivery queue down when the
    service made it (delivery_queue) and nothing else uses it any more, so what a pattern
    leaves behind does not depend on the number of shards (with one store there is no
    delivery queue). It stays when it is not as made (a mailbox a user made through STOMP,
    or any queue of that name a user made or rewired), when another selector still
    DELIVERs to the destination or sends to the queue, and when it is a queue's dead-letter
    queue. Read from the wiring, then deleted by its shard's router: a DELIVER made in
    between (a pattern built at that moment) is not seen (docs/scaling.md, Consumers)."""
    from xumpweb.wiring import audit
    from xumpweb.wiring.models import AuditEvent, Queue, Selector

    queue = Queue.objects.filter(name=destination, mailbox=True).first()
    if queue is None:
        return
    own = list(Selector.objects.filter(queue=queue).values_list(
        "when", "action", "target", "target_from", "filter", "enabled", "credit"))  # fmt: skip
    if own != [("always", "deliver", destination, None, None, True, -1)]:
        return
    if Selector.objects.filter(target=destination).exclude(queue=queue).exists():
        return
    if Queue.objects.filter(dead_letter=destination).exists():
        return
    made = AuditEvent.objects.filter(action="queue.create", subject=destination).first()
    # none: a delivery queue made before they were recorded (a user's mailbox always is)
    if made is not None and made.after != _made_for(destination):
        return
    try:
        service.shard_of(destination).call_here("queue_delete", name=destination)
    except NotFound:
        return  # deleted meanwhile
    except XumpError as problem:  # the pattern is gone all the same; the queue is visible
        logger.warning("cannot remove the delivery queue %r: %s", destination, problem)
        return
    audit.record(SERVICE, "queue.delete", destination, _made_for(destination), None)


def _made_for(destination: str) -> dict[str, Any]:
    """A delivery queue as its audit entries say it (STOMP's mailboxes say `via: stomp`)."""
    return {"name": destination, "mailbox": True, "selector": f"always → deliver {destination}",
            "via": "delivery"}  # fmt: skip


def _selector_delivers(service: Any, shard: Any, queue: str, arguments: dict[str, Any]) -> None:
    """A selector made or changed to DELIVER to a fixed destination: its delivery queue."""
    target = arguments.get("target")
    if not isinstance(target, str) or arguments.get("target_from") is not None:
        return
    action = arguments.get("action")
    if action is None and "id" in arguments:  # the target alone changes: as it is now
        try:
            action = shard.call_here("selector_get", queue=queue, id=arguments["id"])["action"]
        except XumpError:
            return
    if action == "deliver":
        delivery_queue(service, shard, target)


def _delivering_taken_down(
    service: Any, shard: Any, method: str, queue: str, arguments: dict[str, Any]
) -> Any:
    """selector_delete or queue_delete, then the delivery queues the deleted selectors'
    DELIVERs needed on other shards, when nothing else uses them (release_delivery_queue),
    as a pattern's deletion takes down what it needed."""
    from xumpweb.wiring.models import Selector

    delivered = Selector.objects.filter(
        queue__name=queue, action="deliver", target__isnull=False, target_from__isnull=True
    )
    if method == "selector_delete":
        number = arguments.get("id")
        if type(number) is not int or not 0 < number < 2**63:  # the router refuses it
            return shard.call_here(method, **arguments)
        delivered = delivered.filter(number=number)
    destinations = sorted(set(delivered.values_list("target", flat=True)) - {queue, ""})
    answer = shard.call_here(method, **arguments)
    for destination in destinations:
        release_delivery_queue(service, destination)
    return answer


def _pattern_take_down(service: Any, method: str, arguments: dict[str, Any]) -> Any:
    """pattern_remove (a pattern deleted) or pattern_unbuild (a build whose record could not
    be written) on the shard of the pattern's private queue, then the delivery queues its
    DELIVERs needed on other shards, when nothing else uses them. The private queue an
    operator deleted already: where placement keeps it (with its router, whose selectors
    the pattern made), as one store takes down what is left."""
    from xumpweb.wiring.models import Selector

    if method == "pattern_remove":
        queues = [_name(arguments, "queue")]
    else:
        queues = [q for q in arguments.get("queues") or [] if isinstance(q, str)]
    owners = [pair[0] for pair in arguments.get("selectors") or []
              if isinstance(pair, list | tuple) and pair and isinstance(pair[0], str)]  # fmt: skip
    first = next(iter(queues + owners), None)
    shard = service.shard_for(first) if first is not None else service
    delivered = Selector.objects.filter(
        queue__name__in=queues, action="deliver", target__isnull=False, target_from__isnull=True
    )
    destinations = sorted(set(delivered.values_list("target", flat=True)))  # before they go
    answer = shard.call_here(method, **arguments)
    for destination in destinations:
        release_delivery_queue(service, destination)
    return answer


def _closing_shard(service: Any, arguments: dict[str, Any]) -> Any:
    """Where stomp_topic_close runs: the shard of the private queue it takes down, which
    stomp_topic_open made on its router's shard, and a /temp-queue/ one where placement put
    it, whatever shard the topic router is on; the router's when the queue is gone (its
    COPY may be left), else shard 0 (nothing to take down: answered as one store does)."""
    version = service.wiring_version()
    for key in ("queue", "router"):
        name = arguments.get(key)
        store = service.placement.store_of(name, version) if isinstance(name, str) else None
        if store is not None:
            return service._shard(store, f"queue {name!r}")
    return service


def _name(arguments: dict[str, Any], key: str) -> str:
    name = arguments.get(key)
    if not isinstance(name, str):
        raise InvalidArgument(f"{key} must be a queue's name, not {name!r}"[:200])
    return name


def _queues(service: Any, names: Any) -> list[dict[str, Any]]:
    if names is None:
        found = [queue for shard in service.shards.values() for queue in shard.call_here("queues")]
        return sorted(found, key=lambda queue: queue["name"])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise InvalidArgument("names must be a list of queue names")
    version = service.wiring_version()
    asked: dict[Any, list[str]] = {}
    for name in names:
        store = service.placement.store_of(name, version)
        if store in service.shards:
            asked.setdefault(service.shards[store], []).append(name)
    by_name = {queue["name"]: queue for shard, some in asked.items()
               for queue in shard.call_here("queues", names=some)}  # fmt: skip
    return [by_name[name] for name in names if name in by_name]


def _every_shard(service: Any, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The answers of every shard, their counts added up."""
    total: dict[str, Any] = {}
    for shard in service.shards.values():
        for key, value in shard.call_here(method, **arguments).items():
            total[key] = total.get(key, 0) + value if isinstance(value, int) else value
    return total


def _definitions(service: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """A definitions document applied shard by shard (see the module doc)."""
    version = service.wiring_version()
    parts: dict[Any, dict[str, list[Any]]] = {}

    def part(shard: Any) -> dict[str, list[Any]]:
        return parts.setdefault(shard, {
            "stores": [], "queues_create": [], "queues_update": [], "selectors_create": [],
            "selectors_update": [], "patterns": [],
        })  # fmt: skip

    placed: dict[str, Any] = {}
    for queue in arguments.get("queues_create") or []:
        shard = service.shard_for(queue["name"], queue.get("store"))
        placed[queue["name"]] = shard
        part(shard)["queues_create"].append({**queue, "store": shard.store})

    def owner(name: str) -> Any:
        if name in placed:
            return placed[name]
        store = service.placement.store_of(name, version)
        if store is None:
            raise NotFound(f"queue {name!r} does not exist")
        return service._shard(store, f"queue {name!r}")

    for queue in arguments.get("queues_update") or []:
        part(owner(queue["name"]))["queues_update"].append(queue)
    for key in ("selectors_create", "selectors_update"):
        for selector in arguments.get(key) or []:
            part(owner(selector["queue"]))[key].append(selector)
    for pattern in arguments.get("patterns") or []:
        router = pattern.get("router") or pattern.get("queue") or ""
        part(placed.get(router) or service.shard_for(router))["patterns"].append(pattern)
    if arguments.get("stores"):
        part(service)["stores"] = list(arguments["stores"])
    # queues first everywhere (a selector may target another shard's new queue), then the
    # rest: each shard's part is one all-or-nothing step of its router
    built: list[Any] = []
    order = sorted(parts.items(), key=lambda item: list(service.shards.values()).index(item[0]))
    for shard, found in order:
        made = [{k: v for k, v in queue.items() if k != "dead_letter"}
                for queue in found["queues_create"]]  # fmt: skip
        queues_only = {**{key: [] for key in found}, "queues_create": made,
                       "stores": found["stores"]}  # fmt: skip
        if made or found["stores"]:
            shard.call_here("definitions_apply", **queues_only)
    for shard, found in order:  # what they deliver to, read on another shard
        for selector in [*found["selectors_create"], *found["selectors_update"]]:
            if selector.get("action") == "deliver" and selector.get("target_from") is None:
                delivery_queue(service, shard, selector.get("target"))
        for pattern in found["patterns"]:
            delivery_queue(service, shard, pattern.get("name"))
    for shard, found in order:
        # a dead-letter queue may be another shard's new queue: set once every one exists
        letters = [
            {"name": queue["name"], "dead_letter": queue["dead_letter"]}
            for queue in found["queues_create"]
            if queue.get("dead_letter") is not None
        ]
        rest = {**found, "queues_create": [], "stores": [],
                "queues_update": [*found["queues_update"], *letters]}  # fmt: skip
        if any(rest.values()):
            built.extend(shard.call_here("definitions_apply", **rest)["patterns"])
    return {"patterns": built}
