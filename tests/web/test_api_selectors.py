"""/api/queues/{queue}/selectors: list, create, read, change, delete, credit."""

from __future__ import annotations

from tests.web.conftest import unique


def make_queue(client, **settings) -> str:
    name = unique()
    assert client.post("/api/queues", json={"name": name, **settings}).status_code == 201
    return name


def test_it_works(service) -> None:
    with service.client() as client:
        queue, target = make_queue(client), make_queue(client)
        created = client.post(f"/api/queues/{queue}/selectors", json={
            "when": "match", "match": {"operator": "topic", "pattern": "a.*"},
            "filter": "priority > 5", "action": "move", "target": target, "credit": 2,
        })  # fmt: skip
        assert created.status_code == 201, created.text
        selector = created.json()
        assert (selector["id"], selector["enabled"], selector["credit"]) == (1, False, 2)
        assert selector["match"] == {"operator": "topic", "pattern": "a.*", "field": "address"}
        assert selector["filter"] == "priority > 5" and selector["target"] == target
        words = f"address matches topic a.* and filter priority > 5 → move to {target}"
        assert selector["description"] == selector["describe"] == words
        listed = client.get(f"/api/queues/{queue}/selectors").json()["selectors"]
        assert [s["id"] for s in listed] == [1]
        assert client.get(f"/api/queues/{queue}/selectors/1").json()["action"] == "move"
        enabled = client.patch(f"/api/queues/{queue}/selectors/1", json={"enabled": True})
        assert enabled.status_code == 200 and enabled.json()["enabled"] is True
        deleted = client.delete(f"/api/queues/{queue}/selectors/1")
        assert deleted.status_code == 200
        assert client.get(f"/api/queues/{queue}/selectors/1").status_code == 404


def test_credit_routes_what_waited(service) -> None:
    with service.client() as client:
        queue, target = make_queue(client), make_queue(client)
        made = client.post(f"/api/queues/{queue}/selectors", json={
            "when": "always", "action": "move", "target": target, "credit": 0,
            "enabled": True})  # fmt: skip
        number = made.json()["id"]
        client.post(f"/api/queues/{queue}/publish-batch",
                    json={"messages": [{"body": "1"}, {"body": "2"}]})  # fmt: skip
        assert client.get(f"/api/queues/{queue}/stats").json()["depth"] == 2
        topped = client.post(f"/api/queues/{queue}/selectors/{number}/credit", json={"n": 1})
        assert topped.status_code == 200, topped.text
        assert client.get(f"/api/queues/{queue}/stats").json()["depth"] == 1
        moved = client.get(f"/api/queues/{target}/waiting").json()["messages"]
        assert [m["body"] for m in moved] == ["1"]


def test_a_bad_filter_is_refused_with_its_column(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        answer = client.post(f"/api/queues/{queue}/selectors", json={
            "when": "filter", "filter": "a = = 1", "action": "delete"})  # fmt: skip
        assert answer.status_code == 400
        error = answer.json()
        assert error["error"] == "invalid_selector" and error["column"] == 5
        assert "column 5" in error["detail"]
        assert client.get(f"/api/queues/{queue}/selectors").json()["selectors"] == []


def test_a_refused_change_keeps_the_old_settings(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        client.post(f"/api/queues/{queue}/selectors", json={
            "when": "filter", "filter": "x > 1", "action": "delete", "enabled": True})  # fmt: skip
        answer = client.patch(f"/api/queues/{queue}/selectors/1", json={"filter": "x >"})
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_selector"
        kept = client.get(f"/api/queues/{queue}/selectors/1").json()
        assert (kept["filter"], kept["enabled"]) == ("x > 1", True)


def test_it_handles_missing_selector(service) -> None:
    with service.client() as client:
        queue = make_queue(client)
        for method, path, body in [
            ("GET", f"/api/queues/{queue}/selectors/9", None),
            ("PATCH", f"/api/queues/{queue}/selectors/9", {"enabled": True}),
            ("DELETE", f"/api/queues/{queue}/selectors/9", None),
            ("POST", f"/api/queues/{queue}/selectors/9/credit", {"n": 1}),
            ("GET", f"/api/queues/{unique('missing')}/selectors", None),
        ]:
            answer = client.request(method, path, json=body)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"] == "not_found"


def test_a_patch_may_change_the_filter_or_target_alone(service) -> None:
    with service.client() as client:
        queue, first, second = make_queue(client), make_queue(client), make_queue(client)
        client.post(f"/api/queues/{queue}/selectors", json={
            "when": "match", "match": {"operator": "eq", "pattern": "k"}, "filter": "x > 1",
            "action": "copy", "target": first})  # fmt: skip
        changed = client.patch(f"/api/queues/{queue}/selectors/1",
                               json={"filter": "x > 2", "target": second})  # fmt: skip
        assert changed.status_code == 200, changed.text
        selector = changed.json()
    assert (selector["filter"], selector["target"], selector["action"]) == ("x > 2", second, "copy")
    assert selector["match"] == {"operator": "eq", "pattern": "k", "field": "address"}
