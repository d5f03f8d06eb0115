"""/api/queues: list, create, read, change, delete, stats; each change is audited."""

from __future__ import annotations

import json

from tests.web.conftest import unique


def audit_entries(service, subject: str) -> list[dict]:
    done = service.manage(
        "shell", "-c",
        "import json\nfrom xumpweb.wiring.models import AuditEvent\n"
        f"print(json.dumps(list(AuditEvent.objects.filter(subject={subject!r}).order_by('id')"
        ".values('who', 'action', 'before', 'after'))))",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_it_works(service) -> None:
    name = unique()
    with service.client() as client:
        created = client.post("/api/queues", json={"name": name, "history": 10, "limit": 5})
        assert created.status_code == 201, created.text
        queue = created.json()
        assert (queue["name"], queue["history"], queue["limit"]) == (name, 10, 5)
        assert queue["store"] == service.env["XUMP_STORE"] and queue["depth"] == 0
        listed = client.get("/api/queues", params={"prefix": name}).json()["queues"]
        assert name in [q["name"] for q in listed]
        mine = next(q for q in listed if q["name"] == name)
        assert mine["stats"]["published"] == 0
        read = client.get(f"/api/queues/{name}").json()
        assert read["selectors"] == [] and read["limit"] == 5
        changed = client.patch(f"/api/queues/{name}", json={"limit": None, "history": 20})
        assert changed.status_code == 200, changed.text
        assert (changed.json()["limit"], changed.json()["history"]) == (None, 20)
        assert client.get(f"/api/queues/{name}/stats").json()["depth"] == 0
        deleted = client.delete(f"/api/queues/{name}")
        assert deleted.status_code == 200
        assert client.get(f"/api/queues/{name}").status_code == 404
    actions = [(e["who"], e["action"]) for e in audit_entries(service, name)]
    assert actions == [("token:tests", "queue.create"), ("token:tests", "queue.update"),
                       ("token:tests", "queue.delete")]  # fmt: skip


def test_creating_the_same_queue_again_is_idempotent(service) -> None:
    name = unique()
    with service.client() as client:
        assert client.post("/api/queues", json={"name": name, "history": 3}).status_code == 201
        again = client.post("/api/queues", json={"name": name, "history": 3})
        assert again.status_code == 200 and again.json()["name"] == name
        other = client.post("/api/queues", json={"name": name, "history": 4})
        assert other.status_code == 409 and other.json()["error"] == "already_exists"


def test_it_validates_names_and_settings(service) -> None:
    with service.client() as client:
        for body, code in [
            ({"name": "has space"}, "invalid_name"),
            ({"name": "$reserved"}, "invalid_name"),
            ({"name": ""}, "invalid_name"),
            ({"name": unique(), "history": -1}, "invalid_argument"),
            ({"name": unique(), "limit": "lots"}, "invalid_request"),
            ({"name": unique(), "dead_letter": unique("nowhere")}, None),
            ({"name": unique(), "colour": "blue"}, "invalid_request"),
            ({"name": unique(), "store": unique("nostore")}, "not_found"),
        ]:
            answer = client.post("/api/queues", json=body)
            assert 400 <= answer.status_code < 500, (body, answer.text)
            if code:
                assert answer.json()["error"] == code, (body, answer.text)


def test_it_handles_missing_queue(service) -> None:
    missing = unique("missing")
    with service.client() as client:
        for method, path, body in [
            ("GET", f"/api/queues/{missing}", None),
            ("PATCH", f"/api/queues/{missing}", {"history": 1}),
            ("DELETE", f"/api/queues/{missing}", None),
            ("GET", f"/api/queues/{missing}/stats", None),
        ]:
            answer = client.request(method, path, json=body)
            assert answer.status_code == 404, (method, path)
            assert (
                answer.json()
                == {"error": "not_found", "detail": f"queue {missing!r} does not exist"}
                or answer.json()["error"] == "not_found"
            )


def test_a_patch_with_nothing_to_change_is_refused(service) -> None:
    name = unique()
    with service.client() as client:
        client.post("/api/queues", json={"name": name})
        answer = client.patch(f"/api/queues/{name}", json={})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_argument"


def test_the_list_is_paged_with_a_total_and_a_cursor(service) -> None:
    """Issue 21: GET /api/queues answered every queue at once (5.5 MB for 10,000) and
    ignored `limit`. Pages go by name: `limit` (default 100, at most 1000), `after` the
    `next` of the page before, `prefix` to narrow it; `total` counts every match."""
    prefix = unique("paged") + "-"
    names = [f"{prefix}{n:02}" for n in range(45)]
    with service.client() as client:
        for name in names:
            assert client.post("/api/queues", json={"name": name}).status_code == 201
        seen, after, pages = [], None, 0
        while True:
            query = {"prefix": prefix, "limit": 20} | ({"after": after} if after else {})
            page = client.get("/api/queues", params=query).json()
            assert page["total"] == 45 and len(page["queues"]) <= 20
            seen += [q["name"] for q in page["queues"]]
            pages += 1
            after = page["next"]
            if after is None:
                break
        assert (seen, pages) == (names, 3)
        first = client.get("/api/queues", params={"prefix": prefix}).json()
        assert len(first["queues"]) == 45 and first["next"] is None  # the default page: 100
        for bad in ({"limit": 0}, {"limit": 1001}):
            refused = client.get("/api/queues", params=bad)
            assert refused.status_code == 400, refused.text
