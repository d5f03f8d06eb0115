"""SPEC §12 over HTTP: POST /api/queues/{queue}/explain."""

from __future__ import annotations

from tests.web.conftest import unique
from tests.web.test_api_conditions import three_conditions


def make_queue(client, **settings) -> str:
    name = unique()
    assert client.post("/api/queues", json={"name": name, **settings}).status_code == 201
    return name


def issue(service, rights: dict) -> str:
    with service.client() as client:
        made = client.post("/api/tokens", json={"name": unique("t"), "rights": rights})
        assert made.status_code == 201, made.text
        return made.json()["secret"]


def test_explain_gives_verdicts_and_changes_nothing(service) -> None:
    with service.client() as client:
        queue, target = make_queue(client), make_queue(client)
        client.post(f"/api/queues/{queue}/selectors", json=three_conditions(client, target))
        before = client.get(f"/api/queues/{queue}/stats").json()
        said = client.post(
            f"/api/queues/{queue}/explain",
            json={"address": "orders.new", "return_address": "shop", "headers": {"tier": "gold"}},
        )
        assert said.status_code == 200, said.text
        verdict = said.json()["steps"][0]["selectors"][0]
        assert verdict["condition"] == 2 and "return_address" in verdict["reason"]
        said = client.post(
            f"/api/queues/{queue}/explain",
            json={"address": "orders.new", "return_address": "desk", "headers": {"tier": "gold"}},
        )
        assert [s["queue"] for s in said.json()["steps"]] == [queue, target]
        assert client.get(f"/api/queues/{queue}/stats").json() == before


def test_explain_refuses_bad_bodies_unknown_queues_and_callers_without_read(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        deep = b'{"headers": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        answer = client.post(f"/api/queues/{queue}/explain", content=deep)
        assert answer.status_code == 400
        surrogate = rb'{"headers": {"h": "\ud800"}}'
        answer = client.post(f"/api/queues/{queue}/explain", content=surrogate)
        assert answer.status_code == 400
        assert client.post(f"/api/queues/{queue}/explain", json={"bogus": 1}).status_code == 400
        assert client.post(f"/api/queues/{unique()}/explain", json={}).status_code == 404
    other = issue(service, {"elsewhere": ["read"]})
    with service.client(other) as stranger:
        assert stranger.post(f"/api/queues/{queue}/explain", json={}).status_code == 403
