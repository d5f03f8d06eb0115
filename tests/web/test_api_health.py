"""GET /api/health, the OpenAPI schema and docs, the refused commands, and what answers
under /api/ otherwise."""

from __future__ import annotations

import base64
import time

import httpx

from tests.web.conftest import unique


def test_it_works_without_a_token(service) -> None:
    answer = httpx.get(service.url + "/api/health")
    assert answer.status_code == 200
    report = answer.json()
    assert report["redis"]["ok"] and report["database"]["ok"]
    assert report["workers"]["ok"] and report["workers"]["routing"] == "inline"
    assert report["ok"] is True


def test_the_openapi_schema_lists_the_endpoints(service) -> None:
    answer = httpx.get(service.url + "/api/openapi.json")
    assert answer.status_code == 200
    schema = answer.json()
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    for path, method in [
        ("/api/queues/{queue}/publish", "post"),
        ("/api/queues/{queue}/publish-batch", "post"),
        ("/api/queues/{queue}/history", "get"),
        ("/api/queues/{queue}/waiting", "get"),
        ("/api/queues/{queue}/stats", "get"),
        ("/api/queues", "get"),
        ("/api/queues", "post"),
        ("/api/queues/{queue}", "patch"),
        ("/api/queues/{queue}", "delete"),
        ("/api/queues/{queue}/selectors", "post"),
        ("/api/queues/{queue}/selectors/{id}", "patch"),
        ("/api/queues/{queue}/selectors/{id}/credit", "post"),
        ("/api/confirm", "post"),
        ("/api/reject", "post"),
        ("/api/filters/validate", "post"),
        ("/api/patterns", "post"),
        ("/api/patterns/{id}", "delete"),
        ("/api/tokens", "post"),
        ("/api/tokens/{id}", "delete"),
        ("/api/health", "get"),
        ("/api/refused", "get"),
        ("/api/refused", "delete"),
    ]:
        assert method in paths[path], (path, method)
    body = paths["/api/queues/{queue}/publish-batch"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("/PublishBatchIn")
    assert "PublishIn" in schema["components"]["schemas"]


def test_the_interactive_docs_load(service) -> None:
    answer = httpx.get(service.url + "/api/docs")
    assert answer.status_code == 200
    assert "openapi.json" in answer.text


def test_unknown_routes_answer_a_json_404(service) -> None:
    with service.client() as client:
        for path in ("/api/nothing-here", "/api/queues/a/b/c/unknown-thing/x/", "/api/v2/"):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert answer.json()["error"] == "not_found"


def test_a_wrong_method_answers_a_json_405(service) -> None:
    with service.client() as client:
        answer = client.put("/api/queues")
    assert answer.status_code == 405
    assert answer.json()["error"] == "method_not_allowed"


def test_refused_commands_are_listed_then_cleared(service) -> None:
    """A publish the router refuses after it was accepted (its queue deleted meanwhile) is
    set aside with its messages, readable and clearable by a manage-'*' caller only."""
    from engine.message import Message
    from engine.relay import RelayClient

    gone = unique("gone")
    relay = RelayClient(service.env["XUMP_REDIS_URL"], service.env["XUMP_STORE"])
    try:
        with service.client() as client:
            assert client.post("/api/queues", json={"name": gone}).status_code == 201
            assert client.delete(f"/api/queues/{gone}").status_code == 200
            [mid] = relay.publish_many(gone, [Message(address="a", body=b"\x00lost")])
            deadline = time.monotonic() + 10
            while True:
                listed = client.get("/api/refused", params={"count": 1000}).json()
                mine = [r for r in listed["refused"] if r["command"].get("queue") == gone]
                if mine or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            [entry] = mine
            assert entry["command"]["messages"][0]["mid"] == mid
            assert base64.b64decode(entry["command"]["messages"][0]["body"]) == b"\x00lost"
            assert "does not exist" in entry["error"] and entry["at"] > 0
            assert listed["total"] >= 1
            queue_token = client.post("/api/tokens", json={
                "name": unique("t"), "rights": {gone: ["manage"]}}).json()["secret"]  # fmt: skip
            with service.client(queue_token) as narrow:
                assert narrow.get("/api/refused").status_code == 403
                assert narrow.delete("/api/refused").status_code == 403
            cleared = client.delete("/api/refused").json()["cleared"]
            assert cleared >= 1
            left = client.get("/api/refused", params={"count": 1000}).json()["refused"]
            assert not [r for r in left if r["command"].get("queue") == gone]
    finally:
        relay.close()
