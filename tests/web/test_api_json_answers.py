"""Every /api/ answer is JSON, and bad input is a JSON 4xx, never a 500 (issue 12, item 5):
JSON nested thousands deep, huge numbers, unknown paths with any method, a bad Host."""

from __future__ import annotations

import httpx
import pytest

from tests.web.conftest import unique


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def assert_json_error(answer: httpx.Response, *statuses: int) -> dict:
    assert answer.status_code in statuses, (answer.request.url, answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/json"), answer.text[:200]
    # a browser must never sniff an error's text into HTML (issue 21)
    assert answer.headers.get("x-content-type-options") == "nosniff", answer.headers
    error = answer.json()
    assert error["error"] and error["detail"], error
    return error


@pytest.fixture(scope="module")
def queue(service) -> str:
    name = unique("deep")
    with service.client() as client:
        assert client.post("/api/queues", json={"name": name, "history": 10}).status_code == 201
    return name


@pytest.mark.parametrize("depth", [3_000, 100_000])
def test_publishes_nested_thousands_deep_are_refused_with_400(service, queue, depth) -> None:
    bodies = {
        "publish": '{"json": ' + nested(depth) + "}",
        "publish-batch": '{"messages": [{"json": ' + nested(depth) + "}]}",
    }
    headers = {"Content-Type": "application/json"}
    with service.client() as client, httpx.Client(base_url=service.url, timeout=30) as anonymous:
        # the direct path (a known token) and Django's (a session, an unknown token)
        for kind, body in bodies.items():
            error = assert_json_error(
                client.post(f"/api/queues/{queue}/{kind}", content=body, headers=headers), 400
            )
            assert "deep" in error["detail"]
            answer = anonymous.post(f"/api/queues/{queue}/{kind}", content=body, headers=headers)
            assert_json_error(answer, 400, 401)
        assert client.get(f"/api/queues/{queue}").json()["stats"]["published"] == 0


def test_a_json_body_nested_2000_deep_is_refused_and_a_shallow_one_kept(service, queue) -> None:
    with service.client() as client:
        answer = client.post(
            f"/api/queues/{queue}/publish",
            content='{"json": ' + nested(2_000) + "}",
            headers={"Content-Type": "application/json"},
        )
        assert_json_error(answer, 400)
        fine = {"json": {"a": [[{"b": [1, 2, {"c": None}]}]]}}
        assert client.post(f"/api/queues/{queue}/publish", json=fine).status_code == 202


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/queues"),
        ("PATCH", "/api/queues/{queue}"),
        ("POST", "/api/filters/validate"),
        ("POST", "/api/patterns"),
        ("POST", "/api/tokens"),
    ],
)
def test_other_endpoints_refuse_deep_json_with_400(service, queue, method, path) -> None:
    body = '{"name": ' + nested(5_000) + "}"
    with service.client() as client:
        answer = client.request(
            method, path.format(queue=queue), content=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        assert "deep" in assert_json_error(answer, 400)["detail"]


def test_a_filter_with_a_5001_digit_number_is_a_400(service) -> None:
    with service.client() as client:
        for expression in ("a = " + "9" * 5_001, "a = 1." + "5" * 5_001, "a = 1e999999"):
            answer = client.post("/api/filters/validate", json={"expression": expression})
            assert answer.status_code in (200, 400), answer.text
            assert answer.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_unknown_api_paths_answer_json_404_whatever_the_method(service, method) -> None:
    with service.client() as client, httpx.Client(base_url=service.url, timeout=30) as anonymous:
        for caller in (client, anonymous):
            answer = caller.request(method, "/api/no/such/thing", json={"a": 1})
            assert_json_error(answer, 404, 405)


def test_a_bad_host_gets_a_json_400_under_api(service, queue) -> None:
    with service.client() as client:
        for method, path in (("GET", "/api/queues"), ("POST", f"/api/queues/{queue}/publish"),
                             ("GET", "/api/nothing")):  # fmt: skip
            answer = client.request(method, path, json={"body": "x"},
                                    headers={"Host": "evil.example"})  # fmt: skip
            assert_json_error(answer, 400)


def test_the_depth_limit_is_100_levels_strings_aside(service, queue) -> None:
    headers = {"Content-Type": "application/json"}
    with service.client() as client:
        url = f"/api/queues/{queue}/publish"
        # the body object is one level, its json value 99 more: 100 in all, accepted
        ok = client.post(url, content='{"json": ' + nested(99) + "}", headers=headers)
        assert ok.status_code == 202, ok.text
        assert_json_error(client.post(url, content='{"json": ' + nested(100) + "}",
                                      headers=headers), 400)  # fmt: skip
        # brackets inside strings are text, not nesting
        text = {"body": "[" * 5_000 + '\\"{' * 500, "headers": {"h": "]" * 300}}
        assert client.post(url, json=text).status_code == 202


def test_the_openapi_document_names_each_answer_once(service) -> None:
    """Swagger UI refuses a document with a key twice ("duplicated mapping key"), as it
    was when endpoints declared 401 as a number and the error answers as text."""
    import json

    repeated: list[list[str]] = []

    def once(pairs: list) -> dict:
        keys = [key for key, _ in pairs]
        if len(set(keys)) != len(keys):
            repeated.append(keys)
        return dict(pairs)

    answer = httpx.get(service.url + "/api/openapi.json", timeout=30)
    assert answer.status_code == 200
    json.loads(answer.content, object_pairs_hook=once)
    assert repeated == []
