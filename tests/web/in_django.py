"""Django's test client in a process of its own, driven by a test one JSON line at a time.

For tests that change settings per request with django.test.override_settings (the shards'
views with XUMP_SHARDS=4, which the service's settings refuse at start until its shard
routers land) and read the answers through the service's HTTP interface. The test process
itself never sets Django up (as in test_outbox_reader.py): this one does, on the session's
private redis-server and a SQLite file of its own (tests/web/conftest.py's environment),
as a client only: nothing routes unless a test asks (`route`).

`InDjango(env)` starts `python -m tests.web.in_django`; each request is one line in, its
answer one line out:

  {"do": "request", "method": "GET", "path": "/api/shards", "as": "admin",
   "settings": {"XUMP_SHARDS": 4}, "json": null}
      -> {"status": 200, "type": "application/json...", "text": "..."}
      `as`: admin, viewer, nobody (a user without a role) or anonymous (logged-in users),
      token:admin, token:metrics or token:narrow (read on one queue only: Bearer tokens)
  {"do": "wiring", "queues": {"name": "store", ...}, "dead_letters": {"name": "dlq"},
   "selectors": [{"queue", "action", "target"}]}   -> {}
      Store and Queue rows (and selectors), as a router's catalog writes them
  {"do": "shard", "store": "s", "lease": str|null, "snapshot": {...}|null, "inbox": n,
   "forward": n, "unreadable": false}   -> {}   the shard's Redis keys as its router would
      leave them (`unreadable`: its inbox key holds a string, so reading it fails)
  {"do": "route"}   -> {}   route the service's own store (XUMP_STORE) in a thread
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class InDjango:
    """The driving side: one process, its requests in order."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.web.in_django"], cwd=ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        ready = self._read()
        assert ready == {"ready": True}, ready

    def send(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def get(self, path: str, who: str = "admin", **settings: Any) -> dict[str, Any]:
        """GET `path` as `who` with `settings` overridden."""
        return self.send(do="request", method="GET", path=path, settings=settings, **{"as": who})

    def post(self, path: str, body: Any, who: str = "token:admin") -> dict[str, Any]:
        return self.send(do="request", method="POST", path=path, json=body, **{"as": who})

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Django process ended ({self.process.wait()}); see stderr")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


# -- the driven side: `python -m tests.web.in_django` ----------------------------------------
def _serve() -> None:  # pragma: no cover - runs in the subprocess
    import traceback

    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.test import Client, override_settings

    from engine.relay.wire import forward_keys
    from xumpweb import runtime
    from xumpweb.wiring.models import ApiToken, Queue, Selector, Store

    call_command("migrate", verbosity=0)
    runtime.client_only()  # nobody routes but the thread `route` starts
    users = {
        "admin": User.objects.create_superuser("admin", "", "admin-password"),
        "viewer": User.objects.create_user("viewer", "", "viewer-password"),
        "nobody": User.objects.create_user("nobody", "", "nobody-password"),
    }
    users["viewer"].groups.add(Group.objects.get(name="viewer"))
    tokens = {
        "token:admin": ApiToken.issue("admin", {"*": ["publish", "consume", "manage"]})[1],
        "token:metrics": ApiToken.issue("metrics", {"*": ["metrics"]})[1],
        "token:narrow": ApiToken.issue("narrow", {"orders": ["read"]})[1],
    }
    redis = runtime.service().redis

    def send(request: dict[str, Any]) -> dict[str, Any]:
        who = request.get("as", "admin")
        client = Client()
        headers = {}
        if who in users:
            client.force_login(users[who], "django.contrib.auth.backends.ModelBackend")
        elif who in tokens:
            headers["Authorization"] = f"Bearer {tokens[who]}"
        body = request.get("json")
        with override_settings(**request.get("settings") or {}):
            answer = client.generic(
                request.get("method", "GET"), request["path"],
                data=json.dumps(body) if body is not None else "",
                content_type="application/json", headers=headers,
            )  # fmt: skip
        return {"status": answer.status_code, "type": answer.get("Content-Type", ""),
                "text": answer.content.decode()}  # fmt: skip

    def wiring(request: dict[str, Any]) -> dict[str, Any]:
        dead_letters = request.get("dead_letters", {})
        for name, store in request.get("queues", {}).items():
            row, _ = Store.objects.get_or_create(name=store, defaults={"kind": "ram"})
            Queue.objects.create(name=name, store=row, dead_letter=dead_letters.get(name))
        for number, selector in enumerate(request.get("selectors", []), start=1):
            Selector.objects.create(
                queue=Queue.objects.get(name=selector["queue"]), number=number, when="always",
                action=selector["action"], target=selector["target"], enabled=True,
            )  # fmt: skip
        return {}

    def shard(request: dict[str, Any]) -> dict[str, Any]:
        keys = runtime.keys(request["store"])
        forward = forward_keys(request["store"])["forward"]
        pipe = redis.pipeline(transaction=True)
        pipe.delete(keys["lease"], keys["snapshot"], keys["inbox"], forward)
        if request.get("lease") is not None:
            pipe.set(keys["lease"], request["lease"], px=60_000)
        if request.get("snapshot") is not None:
            pipe.set(keys["snapshot"], json.dumps(request["snapshot"]))
        for key, count in ((keys["inbox"], request.get("inbox", 0)),
                           (forward, request.get("forward", 0))):  # fmt: skip
            if count:
                pipe.rpush(key, *[json.dumps({"op": "test", "n": n}) for n in range(count)])
        if request.get("unreadable"):
            pipe.set(keys["inbox"], "not a list")
        pipe.execute()
        return {}

    def route(request: dict[str, Any]) -> dict[str, Any]:
        runtime.start_inline_router()
        return {}

    actions = {"request": send, "wiring": wiring, "shard": shard, "route": route}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = actions[request["do"]](request)
        except Exception:
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    _serve()
