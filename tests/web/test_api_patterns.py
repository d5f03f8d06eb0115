"""/api/patterns: build, list, read and remove housecat, parrot and wolfpack patterns."""

from __future__ import annotations

from tests.web.conftest import unique


def test_it_works(service) -> None:
    router, subscriber = unique("news"), unique("bob")
    with service.client() as client:
        parrot = {"kind": "parrot", "name": subscriber, "router": router, "topic": "stock.*"}
        built = client.post("/api/patterns", json=parrot)
        assert built.status_code == 201, built.text
        pattern = built.json()
        assert pattern["queue"] == f"{router}:{subscriber}"
        assert pattern["selectors"]
        assert pattern["id"] in [p["id"] for p in client.get("/api/patterns").json()["patterns"]]
        assert client.get(f"/api/patterns/{pattern['id']}").json()["kind"] == "parrot"
        names = [q["name"] for q in client.get("/api/queues").json()["queues"]]
        assert router in names and pattern["queue"] in names
        client.post(f"/api/queues/{router}/publish", json={"address": "stock.ibm", "body": "1"})
        stats = client.get(f"/api/queues/{pattern['queue']}/stats").json()
        assert stats["published"] == 1
        removed = client.delete(f"/api/patterns/{pattern['id']}")
        assert removed.status_code == 200
        assert client.get(f"/api/patterns/{pattern['id']}").status_code == 404
        names = [q["name"] for q in client.get("/api/queues").json()["queues"]]
        assert pattern["queue"] not in names and router in names


def test_building_the_same_pattern_again_returns_it(service) -> None:
    service_queue = unique("jobs")
    with service.client() as client:
        body = {"kind": "wolfpack", "name": "w1", "router": service_queue, "credit": 2}
        first = client.post("/api/patterns", json=body)
        again = client.post("/api/patterns", json=body)
        assert (first.status_code, again.status_code) == (201, 200)
        assert first.json()["id"] == again.json()["id"]
        assert first.json()["queue"] == f"{service_queue}:w1"
        housecat = client.post("/api/patterns", json={"kind": "housecat", "name": unique("al")})
        assert housecat.status_code == 201 and housecat.json()["router"] == "housecat"


def test_it_validates_input(service) -> None:
    with service.client() as client:
        for body in [
            {"kind": "ferret", "name": "x", "router": "r"},
            {"kind": "wolfpack", "name": "w1"},
            {"kind": "parrot", "name": "x", "router": unique("r")},
            {"kind": "parrot", "name": "has space", "router": unique("r"), "topic": "a"},
            {"kind": "housecat"},
        ]:
            answer = client.post("/api/patterns", json=body)
            assert answer.status_code == 400, (body, answer.text)


def test_it_handles_missing_pattern(service) -> None:
    with service.client() as client:
        assert client.get("/api/patterns/987654").status_code == 404
        assert client.delete("/api/patterns/987654").json()["error"] == "not_found"
