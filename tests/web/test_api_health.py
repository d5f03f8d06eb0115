"""GET /api/health, the OpenAPI schema and docs, and what answers under /api/ otherwise."""

from __future__ import annotations

import httpx


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
