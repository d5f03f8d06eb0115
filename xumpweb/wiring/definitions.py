"""Definitions: the whole wiring as one versioned JSON document, exported and imported.

Theory of operation. `export()` reads the wiring from the models (the catalog always says
what the router's engine runs) and writes it sorted, so the same wiring always gives the
same document: stores by name, queues by name, selectors by queue and then by number,
patterns by kind/router/name, live tokens by owner/name. Selectors carry no id: they are
identified by their queue and content (WHEN + DO), so a document imported into an empty
system, where ids may differ, exports the same again. Tokens carry name, owner and rights,
never a secret.

`plan(document)` checks the whole document before anything changes and compares it with
what exists: every problem is named (structure, names and ranges, filters that do not
compile, targets that exist neither in the document nor already); the changes are listed
(create or update, with before and after). `apply(...)` carries a valid plan out: the
wiring in one router call, `definitions_apply` (xumpweb/router/operations.py, all or
nothing inside the router's step), then patterns' and tokens' rows and one audit entry.

A big plan (more than STEP wiring changes) would hold the router for longer than a call
may wait (10,000 queues took more than 10 s, while every other call waited): `steps(...)`
cuts its wiring into router calls of at most STEP changes each, in an order that keeps
each one valid (stores, queues, then their updates and dead-letter queues once every
queue exists, selectors, patterns), so the router routes between them. Those are not all
or nothing together: a failing step undoes itself, the ones before stay, and importing
the same document again finishes the job (xumpweb/wiring/imports.py runs them).

Import adds and updates; it never deletes what the document does not name (as RabbitMQ's
definitions import). What the engine cannot change is a problem, not a change: a store of
another kind, a queue in another store, a pattern with another topic or credit. A store's
URL is not compared (each installation runs its stores where it likes). A token the
document names that does not exist is created with a new secret, shown once in the answer
(secrets cannot be exported, so they cannot be recreated).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from engine import patterns as engine_patterns
from engine.core import Engine
from engine.errors import InvalidArgument, InvalidSelector, XumpError
from engine.fields import check_field
from engine.selectors import MAX_CONDITIONS
from engine.validation import check_name
from xumpweb.router.operations import inapplicable
from xumpweb.wiring import audit
from xumpweb.wiring.models import ApiToken, Pattern, Queue, Selector, Store

VERSION = 1
SECTIONS = ("stores", "queues", "selectors", "patterns", "tokens")
STORE_KEYS = ("name", "kind", "url")
QUEUE_KEYS = ("name", "store", "limit", "history", "dead_letter", "self_destruct", "journal")
QUEUE_SETTINGS = ("limit", "history", "dead_letter", "self_destruct", "journal")
# `match` is the first condition (all a selector had before SPEC §12); `matches` all of them
SELECTOR_KEYS = ("queue", "when", "match", "matches", "filter", "action", "target",
                 "target_from", "enabled", "credit", "start")  # fmt: skip
SELECTOR_CONTENT = ("when", "match", "matches", "filter", "action", "target", "target_from")
SELECTOR_SETTINGS = ("enabled", "credit", "start")
PATTERN_KEYS = ("kind", "name", "router", "topic", "credit")
TOKEN_KEYS = ("name", "owner", "rights")
MASK = "***"


class InvalidDefinitions(Exception):
    """A document that cannot be imported; `problems` names every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s): " + "; ".join(problems[:5]))
        self.problems = problems


# -- export ----------------------------------------------------------------------------------
def export() -> dict[str, Any]:
    """The wiring as one document, sorted so the same wiring gives the same text."""
    tokens = ApiToken.objects.filter(revoked__isnull=True).select_related("user")
    exported_tokens = sorted(
        (token_json(t) for t in tokens),
        key=lambda t: (t["owner"] or "", t["name"], json.dumps(t["rights"], sort_keys=True)),
    )
    return {
        "xump_definitions": VERSION,
        "stores": [store_json(s) for s in Store.objects.order_by("name")],
        "queues": [queue_json(q) for q in Queue.objects.select_related("store").order_by("name")],
        "selectors": [
            selector_json(s)
            for s in Selector.objects.select_related("queue").order_by("queue__name", "number")
        ],
        "patterns": [pattern_json(p) for p in Pattern.objects.order_by("kind", "router", "name")],
        "tokens": exported_tokens,
    }


def masked_url(url: str) -> str:
    """The URL with any password replaced by ***, which an export never shows."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        if ":" in credentials:
            user = credentials.split(":", 1)[0]
            return f"{scheme}://{user}:{MASK}@{host}"
    return url


def store_json(store: Store) -> dict[str, Any]:
    return {"name": store.name, "kind": store.kind, "url": masked_url(store.url or "") or None}


def queue_json(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "store": queue.store.name,
        "limit": queue.limit,
        "history": queue.history,
        "dead_letter": queue.dead_letter or None,
        "self_destruct": queue.self_destruct,
        "journal": queue.journal,
    }


def selector_json(row: Selector) -> dict[str, Any]:
    when = row.when or None
    match = None
    if row.match_operator:
        match = {"operator": row.match_operator, "pattern": row.match_pattern,
                 "field": row.match_field or "address"}  # fmt: skip
    if when == "match" and match is None:
        when = "filter"
    matches = None
    if match is not None:
        more = [{"operator": o, "pattern": p, "field": f} for o, p, f in row.more_matches or ()]
        matches = [match, *more]
    start: str | int = int(row.start) if row.start.isdigit() else row.start
    return {
        "queue": row.queue.name,
        "when": when,
        "match": match,
        "matches": matches,
        "filter": row.filter,
        "action": row.action or None,
        "target": row.target,
        "target_from": row.target_from or None,
        "enabled": row.enabled,
        "credit": row.credit,
        "start": start,
    }


def pattern_json(pattern: Pattern) -> dict[str, Any]:
    return {"kind": pattern.kind, "name": pattern.name, "router": pattern.router,
            "topic": pattern.topic, "credit": pattern.credit}  # fmt: skip


def token_json(token: ApiToken) -> dict[str, Any]:
    rights = {glob: sorted(granted) for glob, granted in sorted(token.rights.items())}
    owner = token.user.get_username() if token.user else None
    return {"name": token.name, "owner": owner, "rights": rights}


# -- plan ------------------------------------------------------------------------------------
@dataclass
class Plan:
    """What importing a document would change. `changes` lists each create/update with
    before and after, for people; the other fields are what `apply` carries out."""

    changes: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0
    stores: list[dict[str, Any]] = field(default_factory=list)
    queues_create: list[dict[str, Any]] = field(default_factory=list)
    queues_update: list[dict[str, Any]] = field(default_factory=list)
    selectors_create: list[dict[str, Any]] = field(default_factory=list)
    selectors_update: list[dict[str, Any]] = field(default_factory=list)
    patterns: list[dict[str, Any]] = field(default_factory=list)
    tokens_create: list[dict[str, Any]] = field(default_factory=list)
    tokens_update: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        counts = {"create": 0, "update": 0, "unchanged": self.unchanged}
        for change in self.changes:
            counts[change["change"]] += 1
        return counts

    def answer(self, dry_run: bool) -> dict[str, Any]:
        return {"dry_run": dry_run, "summary": self.summary(), "changes": self.changes}


def plan(document: Any) -> Plan:
    """Check `document` whole against what exists and say what importing it would change;
    InvalidDefinitions naming every problem when it cannot be imported. Changes nothing."""
    problems: list[str] = []
    doc = _structure(document, problems)
    if problems:
        raise InvalidDefinitions(problems)
    result = Plan()
    current = export()
    _plan_stores(doc["stores"], current["stores"], result, problems)
    _plan_queues(doc, current, result, problems)
    _check_wiring(doc, current, problems)
    _plan_selectors(doc["selectors"], result)
    _plan_patterns(doc["patterns"], result, problems)
    _plan_tokens(doc["tokens"], result, problems)
    if problems:
        raise InvalidDefinitions(problems)
    return result


def _change(result: Plan, kind: str, subject: str, before: Any, after: Any) -> None:
    change = "create" if before is None else "update"
    result.changes.append(
        {"kind": kind, "subject": subject, "change": change, "before": before, "after": after}
    )


# the document's shape: section -> (keys, required keys, {key: (types, may be null)})
SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[type, ...]]]] = {
    "stores": (STORE_KEYS, ("name", "kind"), {"name": (str,), "kind": (str,), "url": (str,)}),
    "queues": (QUEUE_KEYS, ("name",),
               {"name": (str,), "store": (str,), "limit": (int,), "history": (int,),
                "dead_letter": (str,), "self_destruct": (bool,), "journal": (bool,)}),
    "selectors": (SELECTOR_KEYS, ("queue",),
                  {"queue": (str,), "when": (str,), "match": (dict,), "matches": (list,),
                   "filter": (str,), "action": (str,), "target": (str,),
                   "target_from": (str,), "enabled": (bool,), "credit": (int,),
                   "start": (str, int)}),
    "patterns": (PATTERN_KEYS, ("kind", "name", "router"),
                 {"kind": (str,), "name": (str,), "router": (str,), "topic": (str,),
                  "credit": (int,)}),
    "tokens": (TOKEN_KEYS, ("name", "rights"),
               {"name": (str,), "owner": (str,), "rights": (dict,)}),
}  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "stores": {"url": None},
    "queues": {"store": None, "limit": None, "history": 0, "dead_letter": None,
               "self_destruct": False, "journal": True},
    "selectors": {"when": None, "match": None, "matches": None, "filter": None, "action": None,
                  "target": None, "target_from": None, "enabled": False, "credit": -1,
                  "start": "current"},
    "patterns": {"topic": "", "credit": 1},
    "tokens": {"owner": None},
}  # fmt: skip


def _structure(document: Any, problems: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The document with every item's keys filled in; its shape's problems appended."""
    if not isinstance(document, dict):
        problems.append("the document must be a JSON object")
        return {}
    version = document.get("xump_definitions")
    if type(version) is not int or version != VERSION:  # not True, not 1.0: they equal 1
        problems.append(f"xump_definitions must be {VERSION} (the format's version)")
    unknown = set(document) - {"xump_definitions", *SECTIONS}
    if unknown:
        problems.append(f"unknown section(s): {', '.join(sorted(map(str, unknown)))}")
    doc: dict[str, list[dict[str, Any]]] = {}
    for section in SECTIONS:
        items = document.get(section, [])
        doc[section] = []
        if not isinstance(items, list):
            problems.append(f"{section} must be a list")
            continue
        keys, required, types = SHAPES[section]
        for index, item in enumerate(items):
            where = f"{section}[{index}]"
            if not isinstance(item, dict):
                problems.append(f"{where}: must be an object")
                continue
            bad = sorted(set(item) - set(keys))
            if bad:
                problems.append(f"{where}: unknown key(s) {', '.join(bad)}")
            missing = [key for key in required if key not in item]
            if missing:
                problems.append(f"{where}: missing {', '.join(missing)}")
            given = {**DEFAULTS[section], **item}
            filled = {key: given.get(key) for key in keys}  # in the format's order
            for key, allowed in types.items():
                value = filled.get(key)
                if value is None and key not in required:
                    continue
                is_bool = isinstance(value, bool)
                if not isinstance(value, allowed) or (is_bool and bool not in allowed):
                    names = " or ".join(t.__name__ for t in allowed)
                    problems.append(f"{where}: {key} must be {names}, not {value!r}"[:300])
            if section == "selectors":
                _normalize_selector(filled, where, problems)
            doc[section].append(filled)
    return doc


def _normalize_selector(selector: dict[str, Any], where: str, problems: list[str]) -> None:
    """Write a selector as export writes it, so a hand-written one pairs with the same
    existing selector: each `field` and the `target_from` in the engine's canonical form
    (engine/fields.py: "header:color" is kept as "color"), `field` "address" when not
    given, `when` "match" for a selector with conditions and "filter" for a filter-only
    one. A `field` given empty is a problem (only a missing one is the address)."""
    match = selector["match"]
    if isinstance(match, dict):
        match = selector["match"] = _normal_match(match, f"{where}: match", problems)
    matches = selector["matches"]
    if isinstance(matches, list):
        if len(matches) > MAX_CONDITIONS:
            problems.append(f"{where}: at most {MAX_CONDITIONS} matches, not {len(matches)}")
            matches = matches[:MAX_CONDITIONS]
        normal = []
        for number, item in enumerate(matches):
            if not isinstance(item, dict):
                problems.append(f"{where}: matches[{number}] must be an object")
                continue
            normal.append(_normal_match(item, f"{where}: matches[{number}]", problems))
        if match is not None and normal and normal[0] != match:
            problems.append(f"{where}: match and matches[0] differ; give one of them")
        selector["matches"] = normal or None
        selector["match"] = normal[0] if normal else match
    elif isinstance(match, dict):
        selector["matches"] = [match]
    if selector["when"] in ("match", "filter"):
        selector["when"] = "filter" if selector["match"] is None else "match"
    selector["target_from"] = _canonical_field(selector["target_from"])


def _normal_match(match: dict[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
    bad = sorted(str(key)[:40] for key in set(match) - {"operator", "pattern", "field"})
    if bad:
        problems.append(f"{where}: unknown key(s) {', '.join(bad)}")
    field_ = match.get("field")
    if field_ == "":
        problems.append(f"{where}: field must not be empty (leave it out for the address)")
    return {"operator": match.get("operator"), "pattern": match.get("pattern"),
            "field": "address" if field_ is None else _canonical_field(field_)}  # fmt: skip


def _canonical_field(field_: Any) -> Any:
    """A field (or `target_from`) as the engine keeps it; one the engine refuses is left as
    it is, for the scratch engine to name the problem (_check_wiring)."""
    if not isinstance(field_, str) or not field_:
        return field_
    try:
        return check_field(field_)
    except InvalidSelector:
        return field_


def router_settings(selector: dict[str, Any]) -> dict[str, Any]:
    """A selector of the document as the router's selector_create takes it: `matches`
    alone when there are conditions (the first is `match` too, in the document)."""
    settings = {k: selector[k] for k in SELECTOR_KEYS}
    if settings["matches"]:
        settings["match"] = None
    return settings


def _plan_stores(
    stores: list[dict[str, Any]], current: list[dict[str, Any]], result: Plan, problems: list[str]
) -> None:
    existing = {s["name"]: s for s in current}
    seen: set[str] = set()
    for index, store in enumerate(stores):
        where = f"stores[{index}] ({store['name']})"
        if store["name"] in seen:
            problems.append(f"{where}: named twice")
            continue
        seen.add(store["name"])
        try:
            check_name("store", store["name"])
        except XumpError as error:
            problems.append(f"{where}: {error}")
            continue
        if store["kind"] not in ("ram", "redis", "sql"):
            problems.append(f"{where}: kind must be ram, redis or sql, not {store['kind']!r}")
            continue
        found = existing.get(store["name"])
        if found is not None:
            # the URL is not compared: each installation keeps a store where it runs it
            if found["kind"] != store["kind"]:
                problems.append(
                    f"{where}: exists as a {found['kind']} store; a store cannot be changed"
                )
            else:
                result.unchanged += 1
            continue
        if MASK in (store["url"] or ""):
            problems.append(f"{where}: its URL hides the password ({MASK}); give the real URL")
            continue
        result.stores.append({"kind": store["kind"], "name": store["name"], "url": store["url"]})
        _change(result, "store", store["name"], None, store)


def _plan_queues(
    doc: dict[str, Any], current: dict[str, Any], result: Plan, problems: list[str]
) -> None:
    from django.conf import settings

    existing = {q["name"]: q for q in current["queues"]}
    stores = {s["name"] for s in current["stores"]} | {s["name"] for s in doc["stores"]}
    seen: set[str] = set()
    for index, queue in enumerate(doc["queues"]):
        where = f"queues[{index}] ({queue['name']})"
        if queue["name"] in seen:
            problems.append(f"{where}: named twice")
            continue
        seen.add(queue["name"])
        queue["store"] = queue["store"] or (
            None if settings.XUMP_SHARDS > 1 else settings.XUMP_STORE  # placed (SPEC §10)
        )
        if queue["store"] not in stores:
            problems.append(f"{where}: store {queue['store']!r} exists neither here nor in the "
                            "document")  # fmt: skip
        found = existing.get(queue["name"])
        if found is None:
            result.queues_create.append(queue)
            _change(result, "queue", queue["name"], None, queue)
            continue
        if found["store"] != queue["store"]:
            problems.append(f"{where}: lives in store {found['store']!r}; a queue cannot move "
                            "to another store")  # fmt: skip
            continue
        changes = {k: queue[k] for k in QUEUE_SETTINGS if queue[k] != found[k]}
        if changes:
            result.queues_update.append({"name": queue["name"], **changes})
            _change(result, "queue", queue["name"], found, queue)
        else:
            result.unchanged += 1


def _check_wiring(doc: dict[str, Any], current: dict[str, Any], problems: list[str]) -> None:
    """Build the document's queues, selectors and patterns in a scratch engine beside the
    queues that exist, so the engine's own checks (names, ranges, filters, patterns,
    targets) judge every item; each refusal is a problem."""
    from xumpweb.router.operations import _check_settings, _configure

    scratch = Engine()
    named = {q["name"] for q in doc["queues"]}
    for queue in current["queues"]:
        if queue["name"] not in named:
            scratch.queue_create(queue["name"])
    made = set()
    for index, queue in enumerate(doc["queues"]):
        try:
            scratch.queue_create(
                queue["name"], limit=queue["limit"], history=queue["history"],
                self_destruct=queue["self_destruct"], journal=queue["journal"],
            )  # fmt: skip
            made.add(queue["name"])
        except XumpError as error:
            if queue["name"] not in made:
                problems.append(f"queues[{index}] ({queue['name']}): {error}")
    for index, queue in enumerate(doc["queues"]):
        if queue["name"] in made and queue["dead_letter"] is not None:
            try:
                scratch.queue_update(queue["name"], dead_letter=queue["dead_letter"])
            except XumpError as error:
                problems.append(f"queues[{index}] ({queue['name']}): {error}")
    for index, selector in enumerate(doc["selectors"]):
        where = f"selectors[{index}] (on {selector['queue']})"
        settings = {k: v for k, v in router_settings(selector).items() if k != "queue"}
        problem = inapplicable(selector)
        if problem is not None:
            problems.append(f"{where}: {problem}")
            continue
        try:
            _check_settings(settings)
            created = scratch.selector_create(selector["queue"])
        except XumpError as error:
            problems.append(f"{where}: {error}")
            continue
        try:
            _configure(created, settings)
        except XumpError as error:
            problems.append(f"{where}: {error}")
        except (TypeError, ValueError, AttributeError) as error:
            problems.append(f"{where}: {error}"[:300])
    for index, pattern in enumerate(doc["patterns"]):
        where = f"patterns[{index}] ({pattern['kind']} {pattern['name']})"
        try:
            _build_pattern(scratch, pattern)
        except XumpError as error:
            problems.append(f"{where}: {error}")


def _build_pattern(engine: Engine, pattern: dict[str, Any]) -> Any:
    kind = pattern["kind"]
    if kind == "housecat":
        return engine_patterns.housecat(engine, pattern["name"], router=pattern["router"])
    if kind == "parrot":
        return engine_patterns.parrot(
            engine, pattern["name"], pattern["topic"], router=pattern["router"]
        )
    if kind == "wolfpack":
        return engine_patterns.wolfpack(
            engine, pattern["router"], pattern["name"], credit=pattern["credit"]
        )
    raise InvalidArgument(f"kind must be housecat, parrot or wolfpack, not {kind!r}")


def _content(selector: dict[str, Any]) -> str:
    return json.dumps([selector["queue"], *(selector[k] for k in SELECTOR_CONTENT)],
                      sort_keys=True)  # fmt: skip


def _plan_selectors(selectors: list[dict[str, Any]], result: Plan) -> None:
    """Pair each of the document's selectors with the first unpaired selector of the same
    queue and content (WHEN + DO); the rest are new."""
    existing: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for row in Selector.objects.select_related("queue").order_by("queue__name", "number"):
        found = selector_json(row)
        existing.setdefault(_content(found), []).append((row.number, found))
    for selector in selectors:
        subject = f"{selector['queue']}: {_describe(selector)}"
        pool = existing.get(_content(selector))
        if not pool:
            result.selectors_create.append(selector)
            _change(result, "selector", subject, None, selector)
            continue
        number, found = pool.pop(0)
        changes = {k: selector[k] for k in SELECTOR_SETTINGS if selector[k] != found[k]}
        if changes:
            result.selectors_update.append(
                {"queue": selector["queue"], "id": number, "settings": changes}
            )
            _change(result, "selector", f"{subject} (#{number})", found, selector)
        else:
            result.unchanged += 1


def _describe(selector: dict[str, Any]) -> str:
    """WHEN -> DO in words, for the diff."""
    when = selector["when"] or "(no WHEN)"
    if when in ("match", "filter"):
        parts = []
        for match in selector["matches"] or ([selector["match"]] if selector["match"] else []):
            field_ = match.get("field") or "address"
            parts.append(f"{field_} {match.get('operator')} {match.get('pattern')!r}")
        if selector["filter"]:
            parts.append(f"filter {selector['filter']}")
        when = " and ".join(parts)
    action = selector["action"] or "(no DO)"
    target = f" {selector['target']}" if selector["target"] else ""
    if selector["target_from"]:
        target = f" (target from {selector['target_from']})"
    return f"WHEN {when} DO {action}{target}"


def _plan_patterns(patterns: list[dict[str, Any]], result: Plan, problems: list[str]) -> None:
    seen: set[tuple[str, str, str]] = set()
    for index, pattern in enumerate(patterns):
        where = f"patterns[{index}] ({pattern['kind']} {pattern['router']} -> {pattern['name']})"
        key = (pattern["kind"], pattern["router"], pattern["name"])
        if key in seen:
            problems.append(f"{where}: named twice")
            continue
        seen.add(key)
        found = Pattern.objects.filter(
            kind=pattern["kind"], router=pattern["router"], name=pattern["name"]
        ).first()
        if found is None:
            result.patterns.append(pattern)
            _change(result, "pattern", where.split(" ", 1)[1].strip("()"), None, pattern)
        elif pattern_json(found) != pattern:
            problems.append(f"{where}: exists with topic {found.topic!r} and credit "
                            f"{found.credit}; remove it first to change it")  # fmt: skip
        else:
            result.unchanged += 1


def _plan_tokens(tokens: list[dict[str, Any]], result: Plan, problems: list[str]) -> None:
    users = get_user_model()
    existing: dict[tuple[str | None, str], list[ApiToken]] = {}
    for token in ApiToken.objects.filter(revoked__isnull=True).select_related("user"):
        owner = token.user.get_username() if token.user else None
        existing.setdefault((owner, token.name), []).append(token)
    for pool in existing.values():
        pool.sort(key=lambda t: t.pk)
    for index, token in enumerate(tokens):
        where = f"tokens[{index}] ({token['name']})"
        problem = _rights_problem(token["rights"])
        if not 1 <= len(token["name"]) <= 200:
            problem = "name must be 1 to 200 characters"
        owner = token["owner"]
        if (
            problem is None
            and owner is not None
            and not users.objects.filter(**{users.USERNAME_FIELD: owner}).exists()
        ):
            problem = f"owner {token['owner']!r} is not a user here"
        if problem is not None:
            problems.append(f"{where}: {problem}")
            continue
        wanted = {glob: sorted(set(granted)) for glob, granted in sorted(token["rights"].items())}
        after = {"name": token["name"], "owner": token["owner"], "rights": wanted}
        pool = existing.get((token["owner"], token["name"]))
        if not pool:
            result.tokens_create.append(after)
            _change(result, "token", token["name"], None, after)
            continue
        found = pool.pop(0)
        before = token_json(found)
        if before["rights"] != wanted:
            result.tokens_update.append((found.pk, after))
            _change(result, "token", token["name"], before, after)
        else:
            result.unchanged += 1


def _rights_problem(rights: dict[str, Any]) -> str | None:
    for glob, granted in rights.items():
        if not glob or len(glob) > 200:
            return "a rights key is a queue name or glob of 1 to 200 characters"
        if not isinstance(granted, list) or not all(r in ApiToken.RIGHTS for r in granted):
            return f"rights on {glob!r} must be a list among {', '.join(ApiToken.RIGHTS)}"
    return None


# -- apply -----------------------------------------------------------------------------------
# wiring changes per router call of a big import, each step well under a second of the
# router's time: a queue is about 2 ms (its catalog row in the step's one transaction), a
# selector about 15 (four saves of its row), a pattern two of each
STEP = 200
SELECTOR_STEP = 50
PATTERN_STEP = 25
NO_WIRING = {"stores": [], "queues_create": [], "queues_update": [], "selectors_create": [],
             "selectors_update": [], "patterns": []}  # fmt: skip


def steps(result: Plan) -> list[dict[str, Any]]:
    """The `definitions_apply` calls that carry out a plan's wiring, each of at most STEP
    queue changes, SELECTOR_STEP selector changes or PATTERN_STEP patterns (the stores in
    one). A queue's dead-letter queue is set in a later step than any queue is made, as
    one call does it after making every queue."""
    created = [{k: q[k] for k in QUEUE_KEYS} for q in result.queues_create]
    dead_letters = [{"name": q["name"], "dead_letter": q["dead_letter"]}
                    for q in created if q["dead_letter"] is not None]  # fmt: skip
    phases = [
        ("queues_create", [{**q, "dead_letter": None} for q in created], STEP),
        ("queues_update", [*result.queues_update, *dead_letters], STEP),
        ("selectors_create", [router_settings(s) for s in result.selectors_create],
         SELECTOR_STEP),
        ("selectors_update", result.selectors_update, SELECTOR_STEP),
        ("patterns", result.patterns, PATTERN_STEP),
    ]  # fmt: skip
    calls = [{**NO_WIRING, "stores": result.stores}] if result.stores else []
    for key, items, step in phases:
        for start in range(0, len(items), step):
            calls.append({**NO_WIRING, key: items[start : start + step]})
    return calls


def is_big(result: Plan) -> bool:
    """Whether the plan has more than STEP wiring changes (applied in steps, then)."""
    wiring = (result.stores, result.queues_create, result.queues_update,
              result.selectors_create, result.selectors_update, result.patterns)  # fmt: skip
    return sum(len(part) for part in wiring) > STEP


def apply(result: Plan, who: str, call: Any) -> dict[str, Any]:
    """Carry out a plan: the wiring in one router call (`call` runs a router operation),
    then the patterns' and tokens' rows, then one audit entry. The answer lists the
    changes and the secrets of new tokens (shown this once)."""
    built: list[dict[str, Any]] = []
    if any((result.stores, result.queues_create, result.queues_update,
            result.selectors_create, result.selectors_update, result.patterns)):  # fmt: skip
        answer = call(
            "definitions_apply",
            stores=result.stores,
            queues_create=[{k: q[k] for k in QUEUE_KEYS} for q in result.queues_create],
            queues_update=result.queues_update,
            selectors_create=[router_settings(s) for s in result.selectors_create],
            selectors_update=result.selectors_update,
            patterns=result.patterns,
        )
        built = answer["patterns"]
    try:
        with transaction.atomic():
            secrets = apply_tokens(result)
            apply_rows(result, built, who)
    except Exception:  # no rows, no wiring: take down what the patterns' builds made
        for made in built:
            call("pattern_unbuild", queues=made["made_queues"], selectors=made["made_selectors"])
        raise
    return {**result.answer(dry_run=False), "secrets": secrets}


def apply_tokens(result: Plan) -> list[dict[str, Any]]:
    """The plan's tokens: new ones issued (their secrets returned, to be shown this once),
    changed ones' rights saved."""
    secrets: list[dict[str, Any]] = []
    users = get_user_model()
    for token in result.tokens_create:
        owner = None
        if token["owner"] is not None:
            owner = users.objects.get(**{users.USERNAME_FIELD: token["owner"]})
        issued, secret = ApiToken.issue(token["name"], token["rights"], user=owner)
        secrets.append({"name": issued.name, "owner": token["owner"],
                        "prefix": issued.prefix, "secret": secret})  # fmt: skip
    for pk, token in result.tokens_update:
        found = ApiToken.objects.get(pk=pk)  # saved, so api/auth.py forgets it
        found.rights = token["rights"]
        found.save(update_fields=["rights"])
    return secrets


def apply_rows(result: Plan, built: list[dict[str, Any]], who: str) -> None:
    """The patterns' rows (for what the router built) and the import's audit entry."""
    for pattern, made in zip(result.patterns, built, strict=True):
        Pattern.objects.create(
            **pattern, built_queue=made["queue"], built_selectors=made["selectors"]
        )
    changed = result.summary()
    audit.record(
        who, "definitions.import", f"{changed['create']} created, "
        f"{changed['update']} updated, {changed['unchanged']} unchanged",
        [c["before"] for c in result.changes], [c["after"] for c in result.changes],
    )  # fmt: skip


def import_document(document: Any, who: str, call: Any, dry_run: bool = False) -> dict[str, Any]:
    """Plan (InvalidDefinitions on any problem), then apply unless `dry_run`: a big plan
    in steps, one after the other, before this returns (the CLI's way; the API answers
    202 and applies them in the background, xumpweb/wiring/imports.py)."""
    result = plan(document)
    if dry_run:
        return result.answer(dry_run=True)
    if not is_big(result):
        return apply(result, who, call)
    with transaction.atomic():
        secrets = apply_tokens(result)
    built: list[dict[str, Any]] = []
    for arguments in steps(result):
        built.extend(call("definitions_apply", **arguments)["patterns"])
    with transaction.atomic():
        apply_rows(result, built, who)
    return {**result.answer(dry_run=False), "secrets": secrets}
