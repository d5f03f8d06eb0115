"""Bad input to every endpoint: malformed JSON, wrong types, unknown queues, oversized
bodies, bad selector expressions, missing and foreign tokens. Each is a 4xx JSON error
and changes nothing."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from tests.web.conftest import unique

OVERSIZED = base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()
# values no later stage could carry (issue 12): refused at the door
HOSTILE = ({"address": "a\udfff"}, {"return_address": "\udfff"}, {"body": "\udfff"},
           {"headers": {"x": float("nan")}}, {"headers": {"x": float("inf")}},
           {"headers": {"x": 2**64}}, {"headers": {"x": "\udfff"}}, {"headers": {"x\udfff": 1}},
           {"json": [float("nan")]})  # fmt: skip


@pytest.fixture(scope="module")
def world(service):
    """A queue with a selector and a pattern, and a token whose rights lie elsewhere."""
    queue, target = unique("bad"), unique("bad")
    with service.client() as client:
        client.post("/api/queues", json={"name": queue, "history": 10})
        client.post("/api/queues", json={"name": target})
        client.post(f"/api/queues/{queue}/selectors", json={
            "when": "filter", "filter": "n > 1", "action": "move", "target": target,
            "enabled": True})  # fmt: skip
        client.post(f"/api/queues/{queue}/publish", json={"body": "kept"})
        pattern = client.post("/api/patterns", json={"kind": "housecat", "name": unique("hc"),
                                                     "router": unique("hcr")}).json()  # fmt: skip
        foreign = client.post("/api/tokens", json={
            "name": unique("foreign"), "rights": {"elsewhere": ["publish", "consume", "manage"]},
        }).json()  # fmt: skip
    return {"queue": queue, "target": target, "pattern": pattern["id"],
            "foreign": foreign["secret"], "token_id": foreign["token"]["id"]}  # fmt: skip


def endpoints(w: dict) -> list[tuple[str, str, object]]:
    """Every endpoint that needs a caller, with a body it would accept."""
    q = w["queue"]
    return [
        ("POST", f"/api/queues/{q}/publish", {"body": "x"}),
        ("POST", f"/api/queues/{q}/publish-batch", {"messages": [{"body": "x"}]}),
        ("GET", f"/api/queues/{q}/history", None),
        ("GET", f"/api/queues/{q}/waiting", None),
        ("GET", f"/api/queues/{q}/stats", None),
        ("GET", f"/api/queues/{q}", None),
        ("PATCH", f"/api/queues/{q}", {"history": 3}),
        ("DELETE", f"/api/queues/{q}", None),
        ("POST", "/api/queues", {"name": unique()}),
        ("GET", "/api/queues", None),
        ("GET", f"/api/queues/{q}/selectors", None),
        ("POST", f"/api/queues/{q}/selectors", {"when": "always", "action": "delete"}),
        ("GET", f"/api/queues/{q}/selectors/1", None),
        ("PATCH", f"/api/queues/{q}/selectors/1", {"credit": 5}),
        ("DELETE", f"/api/queues/{q}/selectors/1", None),
        ("POST", f"/api/queues/{q}/selectors/1/credit", {"n": 1}),
        ("POST", "/api/confirm", {"tags": [f"{q}:1:1"]}),
        ("POST", "/api/reject", {"tag": f"{q}:1:1", "requeue": True}),
        ("POST", "/api/filters/validate", {"expression": "a = 1"}),
        ("GET", "/api/patterns", None),
        ("POST", "/api/patterns", {"kind": "housecat", "name": unique("x")}),
        ("GET", f"/api/patterns/{w['pattern']}", None),
        ("DELETE", f"/api/patterns/{w['pattern']}", None),
        ("GET", "/api/tokens", None),
        ("POST", "/api/tokens", {"name": "x", "rights": {}}),
        ("DELETE", f"/api/tokens/{w['token_id']}", None),
        ("GET", "/api/refused", None),
        ("DELETE", "/api/refused", None),
    ]


def state(service) -> dict:
    """What the API shows, minus counters that move on their own (rates, timestamps)."""
    with service.client() as client:
        listed = client.get("/api/queues", params={"limit": 1000}).json()
        queues = listed["queues"]
        selectors = {q["name"]: client.get(f"/api/queues/{q['name']}/selectors").json()
                     for q in queues}  # fmt: skip
        return {
            "total": listed["total"],
            "queues": queues,
            "selectors": selectors,
            "patterns": client.get("/api/patterns").json(),
            "tokens": [(t["id"], t["revoked"]) for t in client.get("/api/tokens").json()["tokens"]],
        }


def assert_error(answer: httpx.Response, *statuses: int) -> None:
    assert answer.status_code in statuses, (answer.request.method, answer.request.url,
                                            answer.status_code, answer.text)  # fmt: skip
    error = answer.json()
    assert set(error) >= {"error", "detail"} and error["detail"], error


def test_every_endpoint_refuses_bad_input_and_changes_nothing(service, world) -> None:
    before = state(service)
    table = endpoints(world)
    anonymous = httpx.Client(base_url=service.url, timeout=30)
    foreign = service.client(world["foreign"])
    admin = service.client()
    unknown = service.client("xump_deadbeef_not-a-secret")
    with anonymous, foreign, admin, unknown:
        for method, path, body in table:
            # no token, an unknown token
            assert_error(anonymous.request(method, path, json=body), 401)
            assert_error(unknown.request(method, path, json=body), 401)
            # a token whose rights are for another queue (lists only show what it may see)
            open_to_all = (method == "GET" and path in ("/api/queues", "/api/patterns")) or (
                path == "/api/filters/validate"
            )
            if not open_to_all:
                assert_error(foreign.request(method, path, json=body), 403)
            if body is not None:
                # malformed JSON, a JSON value of the wrong kind, wrong types inside
                malformed = admin.request(method, path, content=b'{"body": "x",',
                                          headers={"Content-Type": "application/json"})  # fmt: skip
                assert_error(malformed, 400)
                assert_error(admin.request(method, path, json=[1, 2]), 400)
                wrong = {key: {"nested": [1]} for key in body} if isinstance(body, dict) else 5
                assert_error(admin.request(method, path, json=wrong), 400)
        # unknown queues: every endpoint under /api/queues/<name>
        missing = unique("missing")
        for method, path, body in table:
            if f"/api/queues/{world['queue']}" in path:
                swapped = path.replace(world["queue"], missing)
                assert_error(admin.request(method, swapped, json=body), 404)
        assert_error(admin.post("/api/confirm", json={"tags": [f"{missing}:1:1"]}), 404)
        # oversized bodies
        queue = world["queue"]
        assert_error(admin.post(f"/api/queues/{queue}/publish",
                                json={"body_base64": OVERSIZED}), 413)  # fmt: skip
        assert_error(admin.post(f"/api/queues/{queue}/publish-batch",
                                json={"messages": [{"body": "ok"}, {"body_base64": OVERSIZED}]}),
                     413)  # fmt: skip
        too_many = {"messages": [{"body": "x"}] * 10_001}
        assert_error(admin.post(f"/api/queues/{queue}/publish-batch", json=too_many), 400)
        # bad messages: header names and values, bodies given twice, bad base64
        for message in ({"headers": {"1st": "x"}}, {"headers": {"h": [1]}}, {"headers": "h"},
                        {"body": "a", "json": 1}, {"body_base64": "***"}, {"body": 5},
                        {"address": 5}, {"return_address": 1}, {"colour": "red"}, []):  # fmt: skip
            assert_error(admin.post(f"/api/queues/{queue}/publish", json=message), 400)
            batch = {"messages": [{"body": "fine"}, message]}
            answer = admin.post(f"/api/queues/{queue}/publish-batch", json=batch)
            assert_error(answer, 400)
            assert "messages[1]" in answer.json()["detail"]
        # values no later stage could carry: written by hand (clients refuse to write them)
        for message in HOSTILE:
            raw = json.dumps(message).encode()  # NaN, Infinity, \udfff escapes
            batch = b'{"messages": [{"body": "fine"}, ' + raw + b"]}"
            for path, content in (("publish", raw), ("publish-batch", batch)):
                answer = admin.post(f"/api/queues/{queue}/{path}", content=content,
                                    headers={"Content-Type": "application/json"})  # fmt: skip
                assert_error(answer, 400)
                assert "\\udfff" not in answer.text.lower()  # the reason, not the bytes
        # bad selector expressions, with the column
        for settings in ({"when": "filter", "filter": "n > > 1", "action": "delete"},
                         {"when": "filter", "filter": "n IN ()", "action": "delete"}):  # fmt: skip
            answer = admin.post(f"/api/queues/{queue}/selectors", json=settings)
            assert_error(answer, 400)
            assert answer.json()["error"] == "invalid_selector" and "column" in answer.json()
        answer = admin.patch(f"/api/queues/{queue}/selectors/1", json={"filter": "n >"})
        assert_error(answer, 400)
        assert answer.json()["column"] == 4
        bad = admin.post(
            "/api/queues/" + queue + "/selectors",
            json={
                "when": "match",
                "match": {"operator": "regex", "pattern": "("},
                "action": "delete",
            },
        )
        assert_error(bad, 400)
        bad = admin.post(
            "/api/queues/" + queue + "/selectors",
            json={"when": "always", "action": "move", "target": "has space"},
        )
        assert_error(bad, 400)
    assert state(service) == before
