"""POST /api/filters/validate: the selector builder's check as you type."""

from __future__ import annotations


def test_it_works(service) -> None:
    with service.client() as client:
        expression = "priority > 5 AND region IN ('eu', 'us')"
        answer = client.post("/api/filters/validate", json={"expression": expression})
    assert answer.status_code == 200 and answer.json() == {"ok": True}


def test_it_names_the_column_of_an_error(service) -> None:
    with service.client() as client:
        answer = client.post("/api/filters/validate", json={"expression": "a = = 1"})
    assert answer.status_code == 400
    error = answer.json()
    assert error["error"] == "invalid_selector" and error["column"] == 5
    assert "column 5" in error["detail"]


def test_it_validates_the_request(service) -> None:
    with service.client() as client:
        assert client.post("/api/filters/validate", json={"expression": 5}).status_code == 400
        assert client.post("/api/filters/validate", json={}).status_code == 400
        assert client.post("/api/filters/validate", content=b"{").status_code == 400
    anonymous = service.client(token="xump_nobody_nothing")
    assert anonymous.post("/api/filters/validate", json={"expression": "a"}).status_code == 401
