"""A big definitions import, applied in steps in the background (issue 21).

Theory of operation. One router call that makes 10,000 queues held the router for more
than a call may wait: the API answered 503 although the import went on and applied in
full, and every other call waited for it. So an import whose wiring takes more than one
step (definitions.steps) is checked whole first, as every import is (400 naming every
problem, nothing changed), its tokens are issued at once (their secrets are in the answer,
shown this once, never stored), and it is answered 202 with where to follow it; a thread
of the web process then makes one router call per step, each a command in the inbox like
any other, so publishes and other calls are applied between them. Progress is a small JSON
record in Redis (`xump:import:<id>`, kept a day) that any web process reads:
`state` running / done / failed, `steps`, `done`, the `summary`, and on failure the
`error`. A failed step undoes itself; the steps before it stay (an import never deletes),
and importing the same document again finishes the job. A web process that dies mid-way
leaves the record at `running` until its `updated` time is a `STALE` while old, when it
reads as `lost` (import again to finish).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from django.db import close_old_connections, transaction

from xumpweb import redis_clients
from xumpweb.wiring import definitions

logger = logging.getLogger("xump.definitions")

KEEP = 24 * 3600  # seconds a record of an import is kept
STALE = 300  # a running import not heard of for this long died with its process


def key(number: str) -> str:
    return redis_clients.service_key(f"import:{number}")


def start(
    result: definitions.Plan, who: str, call: Callable[..., Any], client: redis.Redis
) -> dict[str, Any]:
    """Issue the plan's tokens, record the import and start applying its steps in a
    thread; the 202 answer (with the tokens' secrets)."""
    calls = definitions.steps(result)
    with transaction.atomic():
        issued = definitions.apply_tokens(result)
    number = secrets.token_hex(8)
    record = {
        "id": number, "state": "running", "steps": len(calls), "done": 0,
        "summary": result.summary(), "error": None, "started": time.time(),
        "updated": time.time(),
    }  # fmt: skip
    _save(client, record)
    worker = threading.Thread(target=_run, args=(record, calls, result, who, call, client),
                              name=f"import-{number}", daemon=True)  # fmt: skip
    worker.start()
    return {**result.answer(dry_run=False), **_public(record), "secrets": issued}


def status(client: redis.Redis, number: str) -> dict[str, Any] | None:
    """The import's record as the API shows it; None when there is none (or it is gone)."""
    raw = client.get(key(number)) if len(number) <= 64 else None
    if raw is None:
        return None
    record = json.loads(raw)
    if record["state"] == "running" and time.time() - record["updated"] > STALE:
        record["state"] = "lost"
        record["error"] = ("the web process applying it stopped; the steps done stay, and "
                           "importing the same document again finishes it")  # fmt: skip
    return _public(record)


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "follow": f"/api/definitions/imports/{record['id']}"}


def _save(client: redis.Redis, record: dict[str, Any]) -> None:
    record["updated"] = time.time()
    client.set(key(record["id"]), json.dumps(record), ex=KEEP)


def _run(
    record: dict[str, Any],
    calls: list[dict[str, Any]],
    result: definitions.Plan,
    who: str,
    call: Callable[..., Any],
    client: redis.Redis,
) -> None:
    built: list[dict[str, Any]] = []
    try:
        for arguments in calls:
            built.extend(call("definitions_apply", **arguments)["patterns"])
            record["done"] += 1
            _save(client, record)
        with transaction.atomic():
            definitions.apply_rows(result, built, who)
        record["state"] = "done"
    except Exception as error:  # said in the record, and logged
        logger.warning("definitions import %s failed at step %d of %d: %s",
                       record["id"], record["done"] + 1, record["steps"], error)  # fmt: skip
        record["state"] = "failed"
        record["error"] = (
            f"step {record['done'] + 1} of {record['steps']} failed and was undone "
            f"({type(error).__name__}: {error}); the {record['done']} before it stay, and "
            "importing the same document again finishes it"
        )
    finally:
        try:
            _save(client, record)
        finally:
            close_old_connections()
