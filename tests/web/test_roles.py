"""Roles (xumpweb/access.py): viewer, operator (granted `jobs*`) and admin, times every console
URL and every API operation, allowed or forbidden. A forbidden request answers 403 (or, for
a token form asking for rights the user does not hold, the form with its error) and
changes nothing: the queues, selectors, messages, tokens, patterns, analytics runs and
refused commands of this test are compared before and after each one.

The table below must name every console URL (xumpweb/console/urls.py and
xumpweb/analytics/urls.py) and every API operation (/api/openapi.json): a new one without a
row fails `test_the_matrix_covers_every_console_url_and_api_operation`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.web.test_subscribe import as_console, closing, next_frame, receive, subscribe

ROOT = Path(__file__).resolve().parents[2]
U = uuid.uuid4().hex[:6]
ROLES = ("viewer", "operator", "admin")
V, O, A = {"viewer"}, {"operator"}, {"admin"}  # noqa: E741
ALL = V | O | A
JOBS, JOBS_DEAD = f"jobs-{U}", f"jobs-dead-{U}"
ORDERS, ORDERS_DEAD = f"orders-{U}", f"orders-dead-{U}"
PARROT = f"parrot-{U}"
PASSWORD = "role-password-1"
SEQ = {"viewer": 1, "operator": 2, "admin": 3}  # each role's own dead letter


def own(role: str) -> str:
    """A queue in the operator's grant that only `role`'s allowed cases change."""
    return f"jobs-x{role}-{U}"


@dataclass
class World:
    service: Any
    sessions: dict[str, httpx.Client]
    admin: httpx.Client  # the admin token
    tokens: dict[str, dict[str, Any]]  # role -> {"id", "secret"}, each user's own token
    victim: int  # a token of a user without a role, for others to try to revoke
    pattern: int
    run: int
    broad: str = ""  # the operator's token with every right on '*' (bounded by the role)
    second_pattern: int = 0


SETUP = """
import json
from django.contrib.auth.models import Group, User
from xumpweb.analytics.models import AnalyticsRun
from xumpweb.wiring.models import ApiToken, QueueGrant
out = {"tokens": {}}
for role in ("viewer", "operator", "admin", "nobody"):
    user = User.objects.create_user(f"{role}-%(u)s", password="%(password)s")
    if role != "nobody":
        user.groups.add(Group.objects.get(name=role))
    token, secret = ApiToken.issue(f"own-{role}-%(u)s", {"*": ["read"]}, user=user)
    out["tokens"][role] = {"id": token.pk, "secret": secret, "user": user.pk}
operator = User.objects.get(username="operator-%(u)s")
QueueGrant.objects.create(user=operator, queues="jobs*", rights=["publish", "consume", "manage"])
victim, _ = ApiToken.issue("victim-%(u)s", {"*": ["read"]}, user=User.objects.get(
    username="nobody-%(u)s"))
out["victim"] = victim.pk
broad, secret = ApiToken.issue("broad-%(u)s", {"*": ["publish", "consume", "manage"]},
                               user=operator)
out["broad"] = secret
out["run"] = AnalyticsRun.objects.create(kind="backtest", status="done", created_by="t").pk
print(json.dumps(out))
"""


def log_in(service: Any, username: str) -> httpx.Client:
    client = httpx.Client(base_url=service.url, timeout=30)
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    done = client.post("/login/", data={"username": username, "password": PASSWORD,
                                        "csrfmiddlewaretoken": token})  # fmt: skip
    assert done.status_code == 302, done.text
    client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
    return client


@pytest.fixture(scope="module")
def world(service):
    made = service.manage("shell", "-c", SETUP % {"u": U, "password": PASSWORD})
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout.strip().splitlines()[-1])
    admin = service.client()
    for name, dead in ((JOBS, JOBS_DEAD), (ORDERS, ORDERS_DEAD)):
        for queue in (dead, name):
            settings = {"name": queue, "history": 10}
            if queue == name:
                settings.update(limit=3, dead_letter=dead)
            assert admin.post("/api/queues", json=settings).status_code == 201
        # held: the selector is disabled; beyond the limit of 3, dead letters
        admin.post(f"/api/queues/{name}/selectors", json={"when": "always", "action": "delete"})
        batch = {"messages": [{"address": f"a{i}", "body": f"m{i}"} for i in range(6)]}
        assert admin.post(f"/api/queues/{name}/publish-batch", json=batch).status_code == 202
    for role in ROLES:
        assert admin.post("/api/queues", json={"name": own(role), "history": 5}).status_code == 201
        for _ in range(3):
            admin.post(f"/api/queues/{own(role)}/selectors",
                       json={"when": "always", "action": "delete"})  # fmt: skip
        admin.post(f"/api/queues/{own(role)}/publish", json={"body": "x"})
    pattern = admin.post("/api/patterns", json={"kind": "parrot", "name": "sub", "router": PARROT,
                                                "topic": "#"})  # fmt: skip
    assert pattern.status_code == 201, pattern.text
    second = admin.post("/api/patterns", json={"kind": "parrot", "name": "sub2", "router": PARROT,
                                               "topic": "#"})  # fmt: skip
    wait_for(lambda: admin.get(f"/api/queues/{JOBS_DEAD}").json()["depth"] == 3)
    wait_for(lambda: admin.get(f"/api/queues/{ORDERS_DEAD}").json()["depth"] == 3)
    sessions = {role: log_in(service, f"{role}-{U}") for role in (*ROLES, "nobody")}
    built = World(service, sessions, admin, out["tokens"], out["victim"], pattern.json()["id"],
                  out["run"], out["broad"], second.json()["id"])  # fmt: skip
    yield built
    for client in (*sessions.values(), admin):
        client.close()


def wait_for(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.05)


# -- the matrix -------------------------------------------------------------------------------
@dataclass
class Case:
    key: str  # console URL name, or "METHOD /api/path" as /api/openapi.json names it
    method: str
    path: Callable[[str], str]  # role -> path
    allowed: set[str]
    body: Callable[[str], Any] | None = None  # role -> form data (console) or JSON (API)
    ok: tuple[int, ...] = (200, 302)
    refused: int = 403  # the status when forbidden
    send_when_allowed: bool = True  # False: allowed would start something heavy (Spark)

    @property
    def api(self) -> bool:
        return self.key.split(" ")[-1].startswith("/api/")


def same(text: str) -> Callable[[str], str]:
    return lambda role: text


def selector_form(**extra: str) -> dict[str, str]:
    return {"when": "always", "action": "delete", "credit": "-1", "start": "current", **extra}


def console_cases(w: World) -> list[Case]:
    token = lambda role: w.tokens[role]["id"]  # noqa: E731
    return [
        Case("dashboard", "GET", same("/"), ALL),
        Case("static", "GET", same("/static/css/console.css"), ALL),
        Case("dashboard_rows", "GET", same("/dashboard/rows/"), ALL),
        Case("dashboard_frame", "GET", same("/dashboard/frame/"), ALL),
        Case("login", "GET", same("/login/"), ALL),
        Case("queue_create", "POST", same("/queues/new/"), O | A,
             lambda r: {"name": f"jobs-new-{r}-{U}", "history": "0"}),
        Case("queue_create", "POST", same("/queues/new/"), A,
             lambda r: {"name": f"orders-new-{r}-{U}", "history": "0"}),
        Case("selector_new", "GET", lambda r: f"/queues/{own(r)}/selectors/new/", O | A),
        Case("selector_new", "POST", lambda r: f"/queues/{own(r)}/selectors/new/", O | A,
             lambda r: selector_form()),
        Case("selector_new", "POST", same(f"/queues/{ORDERS}/selectors/new/"), A,
             lambda r: selector_form(), ok=(302,), send_when_allowed=False),
        Case("selector_preview", "POST", same(f"/queues/{JOBS}/selectors/preview/"), ALL,
             lambda r: selector_form()),
        Case("selector_enable", "POST", lambda r: f"/queues/{own(r)}/selectors/1/enable/",
             O | A, lambda r: {"enabled": "1"}),
        Case("selector_enable", "POST", same(f"/queues/{ORDERS}/selectors/1/enable/"), A,
             lambda r: {"enabled": "1"}, send_when_allowed=False),
        Case("selector", "GET", same(f"/queues/{ORDERS}/selectors/1/"), ALL),
        Case("selector", "POST", lambda r: f"/queues/{own(r)}/selectors/2/", O | A,
             lambda r: selector_form(credit="5")),
        Case("selector", "POST", same(f"/queues/{ORDERS}/selectors/1/"), A,
             lambda r: selector_form(credit="5"), send_when_allowed=False),
        Case("selector_delete", "GET", lambda r: f"/queues/{own(r)}/selectors/3/delete/", O | A),
        Case("selector_delete", "POST", lambda r: f"/queues/{own(r)}/selectors/3/delete/",
             O | A, lambda r: {}),
        Case("selector_delete", "POST", same(f"/queues/{ORDERS}/selectors/1/delete/"), A,
             lambda r: {}, send_when_allowed=False),
        Case("queue_history", "GET", same(f"/queues/{ORDERS}/history/"), ALL),
        Case("queue_scheduled", "GET", same(f"/queues/{ORDERS}/scheduled/"), ALL),
        # nothing scheduled there: the cancel is refused with a message (a redirect)
        Case("scheduled_cancel", "POST", lambda r: f"/queues/{own(r)}/scheduled/cancel/",
             O | A, lambda r: {"one": "none"}),
        Case("scheduled_cancel", "POST", same(f"/queues/{ORDERS}/scheduled/cancel/"), A,
             lambda r: {"one": "none"}),
        Case("queue_series", "GET", same(f"/queues/{ORDERS}/series/"), ALL),
        Case("queue_settings", "POST", lambda r: f"/queues/{own(r)}/settings/", O | A,
             lambda r: {"history": "7"}),
        Case("queue_settings", "POST", same(f"/queues/{ORDERS}/settings/"), A,
             lambda r: {"history": "7"}, send_when_allowed=False),
        Case("queue_publish", "POST", lambda r: f"/queues/{own(r)}/publish/", O | A,
             lambda r: {"address": "a", "body": "b", "headers": ""}),
        Case("queue_publish", "POST", same(f"/queues/{ORDERS}/publish/"), A,
             lambda r: {"address": "a", "body": "b", "headers": ""}, send_when_allowed=False),
        Case("queue_purge", "GET", lambda r: f"/queues/{own(r)}/purge/", O | A),
        Case("queue_purge", "POST", lambda r: f"/queues/{own(r)}/purge/", O | A,
             lambda r: {"confirm": own(r)}),
        Case("queue_purge", "POST", same(f"/queues/{ORDERS}/purge/"), A,
             lambda r: {"confirm": ORDERS}, send_when_allowed=False),
        Case("queue_operate", "GET", lambda r: f"/queues/{own(r)}/operate/", O | A),
        Case("queue_operate", "POST", lambda r: f"/queues/{own(r)}/operate/", O | A,
             lambda r: {"action": "delete", "chooser": "filter", "choice": "n = 1"}),
        Case("queue_operate", "POST", same(f"/queues/{ORDERS}/operate/"), A,
             lambda r: {"action": "delete", "chooser": "seqs", "choice": "1"},
             send_when_allowed=False),
        Case("consumers", "GET", same("/consumers/"), ALL),
        Case("consumer_close", "POST", same("/consumers/0123456789abcdef/close/"), ALL,
             lambda r: {}),
        Case("message", "GET", same(f"/queues/{ORDERS}/messages/1/"), ALL),
        Case("queue", "GET", same(f"/queues/{ORDERS}/"), ALL),
        Case("check_filter", "POST", same("/check/filter/"), ALL, lambda r: {"filter": "a = 1"}),
        Case("check_pattern", "POST", same("/check/pattern/"), ALL,
             lambda r: {"pattern": "a.*", "operator": "topic", "when": "match"}),
        Case("patterns", "GET", same("/patterns/"), ALL),
        Case("pattern_new", "GET", same("/patterns/new/parrot/"), A),
        Case("pattern_new", "POST", same("/patterns/new/parrot/"), A,
             lambda r: {"name": f"new-{r}", "router": PARROT, "topic": "#", "credit": "1"}),
        Case("pattern_plan", "POST", same("/patterns/plan/parrot/"), A,
             lambda r: {"name": "x", "router": PARROT, "topic": "#"}),
        Case("deadletters", "GET", same("/dead-letters/"), ALL),
        Case("deadletters_act", "POST", same("/dead-letters/act/"), O | A,
             lambda r: {"action": "delete", "letter": f"{JOBS_DEAD}|{SEQ.get(r, 1)}"}),
        Case("deadletters_act", "POST", same("/dead-letters/act/"), A,
             lambda r: {"action": "delete", "letter": f"{ORDERS_DEAD}|{SEQ.get(r, 1)}"}),
        Case("deadletters_act", "POST", same("/dead-letters/act/"), A,  # out of the grant
             lambda r: {"action": "move", "target": ORDERS, "letter": f"{JOBS_DEAD}|3"},
             send_when_allowed=False),
        Case("refused_clear", "GET", same("/dead-letters/refused/clear/"), A),
        Case("refused_clear", "POST", same("/dead-letters/refused/clear/"), A, lambda r: {}),
        Case("topology", "GET", same("/topology/"), ALL),
        Case("message_trace", "GET", same("/messages/trace/?mid=nope-1"), ALL),
        Case("queue_explain", "POST", same(f"/queues/{ORDERS}/explain/"), ALL,
             lambda r: {"address": "x", "headers": "", "body": "", "return_address": ""}),
        Case("topology_graph", "GET", same("/topology/graph/"), ALL),
        Case("audit", "GET", same("/audit/"), ALL),
        Case("definitions", "GET", same("/definitions/"), A),
        Case("definitions", "POST", same("/definitions/"), A,
             lambda r: {"document": '{"xump_definitions": 1}', "preview": "1"}),
        Case("tokens", "GET", same("/tokens/"), ALL),
        Case("tokens", "POST", same("/tokens/"), ALL,
             lambda r: {"name": f"made-{r}-{U}", "rights": "*: read"}),
        Case("tokens", "POST", same("/tokens/"), O | A,
             lambda r: {"name": f"made-{r}-{U}", "rights": "jobs-z*: publish, manage"},
             refused=200),
        Case("tokens", "POST", same("/tokens/"), A,
             lambda r: {"name": f"made-{r}-{U}", "rights": "*: publish, consume, manage"},
             refused=200),  # the form says why
        Case("tokens", "POST", same("/tokens/"), A,
             lambda r: {"name": f"made-{r}-{U}", "rights": f"{ORDERS}: publish"}, refused=200),
        Case("token_revoke", "POST", same(f"/tokens/{w.victim}/revoke/"), A, lambda r: {}),
        Case("analytics:runs", "GET", same("/analytics/"), ALL),
        Case("analytics:new", "GET", same("/analytics/new/?kind=report"), O | A),
        Case("analytics:new", "POST", same("/analytics/new/"), O | A,
             lambda r: {"kind": "report"}, send_when_allowed=False),
        Case("analytics:archive", "POST", same("/analytics/archive/"), O | A, lambda r: {},
             send_when_allowed=False),
        Case("analytics:run", "GET", same(f"/analytics/{w.run}/"), ALL),
        Case("analytics:status", "GET", same(f"/analytics/{w.run}/status/"), ALL),
        Case("analytics:json", "GET", same(f"/analytics/{w.run}/run.json"), ALL),
        Case("analytics:replay", "GET", same(f"/analytics/{w.run}/replay/"), O | A),
        Case("analytics:replay", "POST", same(f"/analytics/{w.run}/replay/"), A,
             lambda r: {"queue": ORDERS, "confirm": "on"}, send_when_allowed=False),
        # last: these change what the cases above use
        Case("token_revoke", "POST", lambda r: f"/tokens/{token(r)}/revoke/", ALL, lambda r: {}),
        Case("pattern_delete", "GET", same(f"/patterns/{w.pattern}/delete/"), A),
        Case("pattern_delete", "POST", same(f"/patterns/{w.pattern}/delete/"), A, lambda r: {}),
        Case("queue_delete", "GET", lambda r: f"/queues/{own(r)}/delete/", O | A),
        Case("queue_delete", "POST", lambda r: f"/queues/{own(r)}/delete/", O | A, lambda r: {}),
        Case("queue_delete", "POST", same(f"/queues/{ORDERS}/delete/"), A, lambda r: {},
             send_when_allowed=False),
        Case("logout", "POST", same("/logout/"), ALL, lambda r: {}),
    ]  # fmt: skip


def api_cases(w: World) -> list[Case]:
    q = "/api/queues/{queue}"
    s = q + "/selectors/{id}"
    token = lambda role: w.tokens[role]["id"]  # noqa: E731
    created = (200, 201)
    return [
        Case(f"GET {q[:-8]}", "GET", same("/api/queues"), ALL),
        Case(f"POST {q[:-8]}", "POST", same("/api/queues"), O | A,
             lambda r: {"name": f"jobs-api-{r}-{U}"}, ok=created),
        Case(f"POST {q[:-8]}", "POST", same("/api/queues"), A,
             lambda r: {"name": f"orders-api-{r}-{U}"}, ok=created),
        Case(f"GET {q}/stats", "GET", same(f"/api/queues/{ORDERS}/stats"), ALL),
        Case(f"GET {q}", "GET", same(f"/api/queues/{ORDERS}"), ALL),
        Case(f"PATCH {q}", "PATCH", lambda r: f"/api/queues/{own(r)}", O | A,
             lambda r: {"history": 3}),
        Case(f"PATCH {q}", "PATCH", same(f"/api/queues/{ORDERS}"), A,
             lambda r: {"history": 3}, send_when_allowed=False),
        Case(f"GET {q}/selectors", "GET", same(f"/api/queues/{ORDERS}/selectors"), ALL),
        Case(f"POST {q}/selectors", "POST", lambda r: f"/api/queues/{own(r)}/selectors", O | A,
             lambda r: {"when": "always", "action": "delete"}, ok=(201,)),
        Case(f"POST {q}/selectors", "POST", same(f"/api/queues/{ORDERS}/selectors"), A,
             lambda r: {"when": "always", "action": "delete"}, send_when_allowed=False),
        Case(f"POST {s}/credit", "POST", lambda r: f"/api/queues/{own(r)}/selectors/1/credit",
             O | A, lambda r: {"n": 1}),
        Case(f"POST {s}/credit", "POST", same(f"/api/queues/{ORDERS}/selectors/1/credit"), A,
             lambda r: {"n": 1}, send_when_allowed=False),
        Case(f"GET {s}", "GET", same(f"/api/queues/{ORDERS}/selectors/1"), ALL),
        Case(f"PATCH {s}", "PATCH", lambda r: f"/api/queues/{own(r)}/selectors/1", O | A,
             lambda r: {"credit": 4}),
        Case(f"PATCH {s}", "PATCH", same(f"/api/queues/{ORDERS}/selectors/1"), A,
             lambda r: {"credit": 4}, send_when_allowed=False),
        Case(f"POST {q}/publish", "POST", lambda r: f"/api/queues/{own(r)}/publish", O | A,
             lambda r: {"body": "x"}, ok=(202,)),
        Case(f"POST {q}/publish", "POST", same(f"/api/queues/{ORDERS}/publish"), A,
             lambda r: {"body": "x"}, send_when_allowed=False),
        Case(f"POST {q}/publish-batch", "POST", lambda r: f"/api/queues/{own(r)}/publish-batch",
             O | A, lambda r: {"messages": [{"body": "x"}]}, ok=(202,)),
        Case(f"POST {q}/publish-batch", "POST", same(f"/api/queues/{ORDERS}/publish-batch"), A,
             lambda r: {"messages": [{"body": "x"}]}, send_when_allowed=False),
        Case(f"GET {q}/history", "GET", same(f"/api/queues/{ORDERS}/history"), ALL),
        Case(f"GET {q}/waiting", "GET", same(f"/api/queues/{ORDERS}/waiting"), ALL),
        Case(f"POST {q}/explain", "POST", same(f"/api/queues/{ORDERS}/explain"), ALL,
             lambda r: {"address": "x"}),
        Case("GET /api/messages/{mid}/trace", "GET", same("/api/messages/nope-1/trace"), ALL,
             ok=(404,)),  # no step of it anywhere: the same answer for every role
        Case(f"POST {q}/messages/operate", "POST",
             lambda r: f"/api/queues/{own(r)}/messages/operate", O | A,
             lambda r: {"action": "delete", "filter": "n = 1", "dry_run": True}),
        Case(f"POST {q}/messages/operate", "POST", same(f"/api/queues/{ORDERS}/messages/operate"),
             A, lambda r: {"action": "delete", "seqs": [1]}, send_when_allowed=False),
        Case(f"POST {q}/purge", "POST", lambda r: f"/api/queues/{own(r)}/purge", O | A),
        Case(f"POST {q}/purge", "POST", same(f"/api/queues/{ORDERS}/purge"), A,
             send_when_allowed=False),
        Case(f"POST {q}/dead-letters/send", "POST",
             same(f"/api/queues/{JOBS_DEAD}/dead-letters/send"), O | A,
             lambda r: {"seqs": [99]}, ok=(404,)),
        Case(f"POST {q}/dead-letters/send", "POST",
             same(f"/api/queues/{ORDERS_DEAD}/dead-letters/send"), A, lambda r: {"seqs": [99]},
             ok=(404,)),
        Case("GET /api/consumers", "GET", same("/api/consumers"), ALL),
        Case("DELETE /api/consumers/{connection}", "DELETE",
             same("/api/consumers/0123456789abcdef"), ALL, ok=(404,)),
        Case(f"GET {q}/scheduled", "GET", same(f"/api/queues/{ORDERS}/scheduled"), ALL),
        # cancelling a mid that is not scheduled is a 404: the right was granted
        Case(f"DELETE {q}/scheduled/{{mid}}", "DELETE",
             lambda r: f"/api/queues/{own(r)}/scheduled/none", O | A, ok=(404,)),
        Case(f"DELETE {q}/scheduled/{{mid}}", "DELETE",
             same(f"/api/queues/{ORDERS}/scheduled/none"), A, ok=(404,)),
        # an unknown tag of a queue the caller may consume is a 404: the right was granted
        Case("POST /api/confirm", "POST", same("/api/confirm"), O | A,
             lambda r: {"tags": [f"{JOBS}:1:999"]}, ok=(404,)),
        Case("POST /api/confirm", "POST", same("/api/confirm"), A,
             lambda r: {"tags": [f"{ORDERS}:1:999"]}, ok=(404,)),
        Case("POST /api/reject", "POST", same("/api/reject"), O | A,
             lambda r: {"tag": f"{JOBS}:1:999"}, ok=(404,)),
        Case("POST /api/reject", "POST", same("/api/reject"), A,
             lambda r: {"tag": f"{ORDERS}:1:999"}, ok=(404,)),
        Case("GET /api/patterns", "GET", same("/api/patterns"), ALL),
        Case("POST /api/patterns", "POST", same("/api/patterns"), A,
             lambda r: {"kind": "parrot", "name": f"api-{r}", "router": PARROT, "topic": "#"},
             ok=created),
        Case("GET /api/patterns/{id}", "GET", same(f"/api/patterns/{w.pattern}"), ALL),
        Case("GET /api/tokens", "GET", same("/api/tokens"), ALL),
        Case("POST /api/tokens", "POST", same("/api/tokens"), ALL,
             lambda r: {"name": f"api-{r}-{U}", "rights": {"*": ["read"]}}, ok=(201,)),
        Case("POST /api/tokens", "POST", same("/api/tokens"), O | A,
             lambda r: {"name": f"api-{r}-{U}", "rights": {"jobs-y*": ["consume"]}}, ok=(201,)),
        Case("POST /api/tokens", "POST", same("/api/tokens"), A,
             lambda r: {"name": f"api-{r}-{U}", "rights": {"*": ["publish"]}}, ok=(201,)),
        Case("POST /api/tokens", "POST", same("/api/tokens"), A,
             lambda r: {"name": f"api-{r}-{U}", "rights": {ORDERS: ["manage"]}}, ok=(201,)),
        Case("DELETE /api/tokens/{id}", "DELETE", same(f"/api/tokens/{w.victim}"), A),
        Case("GET /api/definitions", "GET", same("/api/definitions"), A),
        Case("POST /api/definitions", "POST", same("/api/definitions?dry_run=true"), A,
             lambda r: {"xump_definitions": 1}),
        Case("GET /api/definitions/imports/{number}", "GET",
             same("/api/definitions/imports/nope"), A, ok=(404,)),  # a big import's progress
        Case("GET /api/health", "GET", same("/api/health"), ALL),
        Case("POST /api/filters/validate", "POST", same("/api/filters/validate"), ALL,
             lambda r: {"expression": "a = 1"}),
        Case("GET /api/refused", "GET", same("/api/refused"), ALL),
        Case("GET /api/shards", "GET", same("/api/shards"), ALL),
        Case("DELETE /api/refused", "DELETE", same("/api/refused"), A),
        # last: these change what the cases above use
        Case("DELETE /api/tokens/{id}", "DELETE", lambda r: f"/api/tokens/{token(r)}", ALL),
        Case(f"DELETE {s}", "DELETE", lambda r: f"/api/queues/{own(r)}/selectors/4", O | A),
        Case(f"DELETE {s}", "DELETE", same(f"/api/queues/{ORDERS}/selectors/1"), A,
             send_when_allowed=False),
        Case("DELETE /api/patterns/{id}", "DELETE", same(f"/api/patterns/{w.second_pattern}"), A),
        Case(f"DELETE {q}", "DELETE", lambda r: f"/api/queues/jobs-api-{r}-{U}", O | A),
        Case(f"DELETE {q}", "DELETE", same(f"/api/queues/{ORDERS}"), A,
             send_when_allowed=False),
    ]  # fmt: skip


# -- what must not change -------------------------------------------------------------------
def snapshot(w: World) -> dict[str, Any]:
    admin = w.admin
    names = sorted(q["name"] for q in admin.get("/api/queues").json()["queues"] if U in q["name"])
    queues = {}
    for name in names:
        found = admin.get(f"/api/queues/{name}").json()
        waiting = admin.get(f"/api/queues/{name}/waiting").json()["messages"]
        queues[name] = {
            "settings": {k: found.get(k) for k in ("limit", "history", "dead_letter")},
            "depth": found["depth"],
            "history_size": found["history_size"],
            "waiting": [m["mid"] for m in waiting],
            "selectors": [
                (s["id"], s["enabled"], s["when"], s["action"], s["credit"])
                for s in found["selectors"]
            ],
        }
    tokens = sorted(
        (t["id"], t["revoked"], json.dumps(t["rights"], sort_keys=True))
        for t in admin.get("/api/tokens").json()["tokens"]
        if U in t["name"] or U in (t["user"] or "")
    )
    patterns = sorted(p["id"] for p in admin.get("/api/patterns").json()["patterns"]
                      if U in p["router"])  # fmt: skip
    runs = re.findall(r'href="/analytics/(\d+)/"', w.sessions["admin"].get("/analytics/").text)
    refused = admin.get("/api/refused", params={"count": 1}).json()["total"]
    return {"queues": queues, "tokens": tokens, "patterns": patterns, "runs": sorted(runs),
            "refused": refused}  # fmt: skip


def send(w: World, role: str, case: Case) -> httpx.Response:
    client = w.sessions[role]
    body = case.body(role) if case.body else None
    if case.api:
        return client.request(case.method, case.path(role), json=body)
    return client.request(case.method, case.path(role), data=body)


def test_the_matrix_covers_every_console_url_and_api_operation(world) -> None:
    names = set()
    for module, prefix in (("console", ""), ("analytics", "analytics:")):
        text = (ROOT / "xumpweb" / module / "urls.py").read_text()
        names |= {prefix + name for name in re.findall(r'name="([^"]+)"', text)}
    assert {c.key for c in console_cases(world)} == names
    schema = world.admin.get("/api/openapi.json").json()
    operations = {f"{method.upper()} {path}" for path, methods in schema["paths"].items()
                  for method in methods}  # fmt: skip
    assert {c.key for c in api_cases(world)} == operations


def test_a_login_without_a_role_sees_only_a_page_saying_to_ask_an_admin(world) -> None:
    before = snapshot(world)
    client = world.sessions["nobody"]
    for case in console_cases(world):
        if case.key in ("static", "login", "logout"):
            continue
        answer = send(world, "nobody", case)
        assert answer.status_code == 403, (case.key, case.method, answer.status_code)
        assert "ask an administrator" in answer.text
    for case in api_cases(world):
        if case.key in ("GET /api/health", "POST /api/filters/validate"):
            continue
        answer = send(world, "nobody", case)
        if case.key in ("GET /api/queues", "GET /api/patterns"):  # what they may read: none
            assert answer.status_code == 200 and answer.json() in (
                {"queues": [], "total": 0, "next": None}, {"patterns": []})  # fmt: skip
            continue
        assert answer.status_code == 403, (case.key, answer.status_code, answer.text)
    assert client.get("/queues/" + JOBS + "/").status_code == 403
    assert snapshot(world) == before


def test_users_see_their_own_tokens_and_admins_every_token(world) -> None:
    viewer = world.sessions["viewer"].get("/tokens/").text
    assert f"own-viewer-{U}" in viewer and f"own-operator-{U}" not in viewer
    assert f"victim-{U}" not in viewer
    assert "*: read</textarea>" in viewer  # the form offers what the viewer holds
    operator = world.sessions["operator"].get("/tokens/").text
    assert "*: read\njobs*: publish, consume, manage</textarea>" in operator
    admin = world.sessions["admin"].get("/tokens/").text
    assert f"own-viewer-{U}" in admin and f"victim-{U}" in admin and "Owner" in admin
    listed = world.sessions["operator"].get("/api/tokens").json()["tokens"]
    assert {t["user"] for t in listed} == {f"operator-{U}"}


def test_forbidden_requests_answer_403_and_change_nothing(world) -> None:
    before = snapshot(world)
    checked = 0
    for case in console_cases(world) + api_cases(world):
        refused = [role for role in ROLES if role not in case.allowed]
        for role in refused:
            answer = send(world, role, case)
            where = (role, case.key, case.method, case.path(role))
            assert answer.status_code == case.refused, (*where, answer.status_code)
            if case.api:
                assert answer.json()["error"] == "forbidden", where
            else:  # our 403 page (not a CSRF failure), or the token form's error
                wanted = "<h1>Not allowed</h1>" if case.refused == 403 else "you may not give"
                assert wanted in answer.text, where
            checked += 1
        if refused:  # once per case, after every role it refuses (the snapshot is slow)
            assert snapshot(world) == before, (refused, case.key, case.method)
    assert checked > 80


def test_allowed_requests_go_through(world) -> None:
    for case in api_cases(world) + console_cases(world):  # the console's ends with a logout
        if not case.send_when_allowed:
            continue
        for role in ROLES:
            if role not in case.allowed:
                continue
            answer = send(world, role, case)
            assert answer.status_code in case.ok, (role, case.key, case.method,
                                                   case.path(role), answer.text[:300])  # fmt: skip


# -- tokens and WebSockets ---------------------------------------------------------------------
def test_a_token_is_bounded_by_its_owners_role(world) -> None:
    """The operator's token says '*: publish, consume, manage'; the operator's role grants
    jobs* only, so that is all the token may change, by every path (the direct publish path
    included) and on WebSockets."""
    with world.service.client(world.broad) as program:
        assert program.post(f"/api/queues/{JOBS}/publish", json={"body": "x"}).status_code == 202
        refused = program.post(f"/api/queues/{ORDERS}/publish", json={"body": "x"})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
        assert program.get(f"/api/queues/{ORDERS}/waiting").status_code == 200  # a viewer too
        assert program.delete(f"/api/queues/{ORDERS}").status_code == 403
        assert program.get("/api/tokens").status_code == 403  # not an admin's token
    with subscribe(world.service, f"jobs-d-{U}", token=world.broad):
        pass
    with connect(f"{world.service.ws_url}/ws/subscribe/orders-d-{U}/?token={world.broad}") as ws:
        frame, code = closing(ws)
    assert frame["error"] == "forbidden" and code == 4403
    with connect(f"{world.service.ws_url}/ws/publish/?token={world.broad}") as ws:
        assert receive(ws)["type"] == "ready"
        for queue in (JOBS, ORDERS):
            ws.send(json.dumps({"type": "publish", "queue": queue, "message": {"body": "x"}}))
        assert [receive(ws).get("error", "published") for _ in range(2)] == [
            "published", "forbidden"]  # fmt: skip


def test_a_revoked_token_closes_its_open_websockets(world) -> None:
    made = world.admin.post(
        "/api/tokens",
        json={"name": f"live-{U}", "rights": {"*": ["read"], f"live-{U}": ["consume"]}},
    ).json()
    secret, url = made["secret"], world.service.ws_url
    with (
        connect(f"{url}/ws/subscribe/live-{U}/?token={secret}") as subscriber,
        connect(f"{url}/ws/monitor/?token={secret}") as watcher,
    ):
        assert receive(subscriber)["type"] == "subscribed"
        assert receive(watcher)["type"] == "monitor"
        revoked = world.admin.delete(f"/api/tokens/{made['token']['id']}")
        assert revoked.status_code == 200
        started = time.monotonic()
        for socket in (subscriber, watcher):
            frame = next_frame(socket, "error")
            assert frame["error"] == "unauthorized" and "revoked" in frame["detail"]
            with pytest.raises(ConnectionClosed):
                while True:  # monitor frames sent before the close
                    socket.recv(timeout=10)
            assert socket.close_code == 4401
        print(f"both WebSockets closed {time.monotonic() - started:.2f} s after the revocation")


def test_a_user_whose_role_is_taken_away_loses_their_websockets(world) -> None:
    name = f"demoted-{U}"
    made = world.service.manage("shell", "-c", (
        "from django.contrib.auth.models import Group, User\n"
        f"u = User.objects.create_user({name!r}, password={PASSWORD!r})\n"
        "u.groups.add(Group.objects.get(name='viewer'))"))  # fmt: skip
    assert made.returncode == 0, made.stderr
    session = log_in(world.service, name)
    cookie = "; ".join(f"{k}={v}" for k, v in session.cookies.items())
    url = f"{world.service.ws_url}/ws/monitor/"
    with as_console(world.service, url, cookie) as socket:
        assert receive(socket)["type"] == "monitor"
        taken = world.service.manage("shell", "-c", (
            "from django.contrib.auth.models import User\n"
            f"User.objects.get(username={name!r}).groups.clear()"))  # fmt: skip
        assert taken.returncode == 0, taken.stderr
        frame = next_frame(socket, "error")
        assert frame["error"] == "forbidden"
        with pytest.raises(ConnectionClosed):
            while True:
                socket.recv(timeout=10)
        assert socket.close_code == 4403
    session.close()


def test_a_grant_is_a_fence_selectors_and_dead_letters_do_not_cross(world) -> None:
    """The operator manages jobs* only, and may not publish into orders: a selector of a jobs
    queue that copies, moves or delivers there, or takes its target from the message, or
    a dead-letter queue there, put messages into orders all the same; and the dead-letter
    page acted on any queue's message whose x-original-queue header (its publisher's to
    write) named a jobs queue. Each is refused now, and nothing changes."""
    operator, queue = log_in(world.service, f"operator-{U}"), own("fence")  # (a session of
    # its own: the matrix above logs the shared one out)
    assert world.admin.post("/api/queues", json={"name": queue}).status_code == 201
    for settings in ({"action": "copy", "target": ORDERS}, {"action": "deliver", "target": ORDERS},
                     {"action": "move", "target_from": "header:to"}):  # fmt: skip
        page = operator.post(f"/queues/{queue}/selectors/new/", data=selector_form(**settings))
        assert page.status_code == 200 and "You may not" in page.text, settings
        with world.service.client(world.broad) as program:  # the operator's own token
            made = program.post(f"/api/queues/{queue}/selectors",
                                json={"when": "always", "enabled": True, **settings})  # fmt: skip
            assert made.status_code == 403 and made.json()["error"] == "forbidden", made.text
    assert world.admin.get(f"/api/queues/{queue}/selectors").json()["selectors"] == []
    operator.post(f"/queues/{queue}/settings/", data={"history": "7", "dead_letter": ORDERS})
    with world.service.client(world.broad) as program:
        changed = program.patch(f"/api/queues/{queue}", json={"dead_letter": ORDERS})
        made = program.post("/api/queues", json={"name": own("fence2"), "dead_letter": ORDERS})
    assert changed.status_code == 403 and made.status_code == 403
    assert world.admin.get(f"/api/queues/{queue}").json()["dead_letter"] is None
    # a message out of the grant whose publisher says it came from a jobs queue
    elsewhere = f"other-fence-{U}"
    assert world.admin.post("/api/queues", json={"name": elsewhere}).status_code == 201
    forged = {"body": "mine", "headers": {"x-original-queue": JOBS, "x-reason": "rejected"}}
    assert world.admin.post(f"/api/queues/{elsewhere}/publish", json=forged).status_code == 202
    acted = operator.post("/dead-letters/act/", data={"action": "delete",
                                                      "letter": f"{elsewhere}|1"})  # fmt: skip
    assert acted.status_code == 403
    assert world.admin.get(f"/api/queues/{elsewhere}").json()["depth"] == 1
    operator.close()
