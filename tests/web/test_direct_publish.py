"""Token publishes answered by api/direct.py give what Django's whole handling gives.

Two servers on the session's redis-server: `service` (the direct path on, the default) and
one with XUMP_DIRECT_PUBLISH=0. The same requests go to both, good and bad; the answers
(status, JSON, headers) must be the same, and what each published must be in its queue.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from tests.web.conftest import start_service, trace_lines, unique
from tests.web.test_subscribe import send, subscribe, take, xump

__all__ = ["xump"]  # the fixture

SAME_HEADERS = (
    "content-type",
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
    "content-security-policy",
    "strict-transport-security",  # the requests say they came over HTTPS (a proxy's header)
)
MID = re.compile(r'"r[0-9a-f]+-\d+"')
# both servers as behind a proxy that ends TLS: a request with X-Forwarded-Proto: https is
# secure, and its answer carries Strict-Transport-Security
BEHIND_TLS = {"XUMP_HTTPS": "1", "XUMP_PROXY_SSL_HEADER": "1"}


@pytest.fixture(scope="module")
def through_django(redis_server, tmp_path_factory):
    running = start_service(
        redis_server.url, tmp_path_factory.mktemp("django-publish"), "inline",
        XUMP_DIRECT_PUBLISH="0", XUMP_MAX_BODY="1000", **BEHIND_TLS,
    )  # fmt: skip
    yield running
    running.close()


@pytest.fixture(scope="module")
def direct(redis_server, tmp_path_factory):
    running = start_service(
        redis_server.url, tmp_path_factory.mktemp("direct-publish"), "inline",
        XUMP_MAX_BODY="1000", **BEHIND_TLS,
    )  # fmt: skip
    yield running
    running.close()


def setup(service, queue: str) -> dict[str, str]:
    """The queues and tokens the requests below name, made alike on one server."""
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        full = client.post("/api/queues", json={"name": f"{queue}-full", "limit": 1})
        assert full.status_code == 201
        tokens = {"admin": service.admin_token}
        for name, rights in (("reader", {"*": ["consume"]}), ("writer", {queue: ["publish"]})):
            issued = client.post("/api/tokens", json={"name": unique(name), "rights": rights})
            tokens[name] = issued.json()["secret"]
        return tokens


def requests(queue: str) -> list[tuple[str, str, str, bytes]]:
    """(token name, what, path, body)"""
    one, batch = f"/api/queues/{queue}/publish", f"/api/queues/{queue}/publish-batch"
    return [
        ("admin", "text body", one, b'{"body": "hello", "address": "a.b"}'),
        ("writer", "JSON body and headers", one,
         b'{"json": {"n": 1}, "headers": {"kind": "x", "size": 3}}'),
        ("admin", "base64 body", one, b'{"body_base64": "AAEC"}'),
        ("admin", "a batch", batch, b'{"messages": [{"body": "1"}, {"body": "2"}]}'),
        ("admin", "malformed JSON", one, b'{"body": '),
        ("admin", "not an object", one, b"[1, 2]"),
        ("admin", "unknown field", one, b'{"body": "x", "colour": "red"}'),
        ("admin", "two bodies", one, b'{"body": "x", "json": 1}'),
        ("admin", "bad base64", one, b'{"body_base64": "%%%"}'),
        ("admin", "bad header value", one, b'{"body": "x", "headers": {"h": [1]}}'),
        ("admin", "address not a string", one, b'{"body": "x", "address": 5}'),
        ("admin", "body over XUMP_MAX_BODY", one, b'{"body": "' + b"x" * 1001 + b'"}'),
        ("admin", "empty batch", batch, b'{"messages": []}'),
        ("admin", "bad message in a batch", batch, b'{"messages": [{"body": "1"}, 7]}'),
        ("admin", "NaN header", one, b'{"body": "x", "headers": {"h": NaN}}'),
        ("admin", "1e999 header", one, b'{"body": "x", "headers": {"h": 1e999}}'),
        ("admin", "header beyond 64 bits", one, b'{"headers": {"h": 18446744073709551616}}'),
        ("admin", "lone surrogate address", one, b'{"body": "p", "address": "a\\udfff"}'),
        ("admin", "lone surrogate in a batch", batch,
         b'{"messages": [{"body": "1"}, {"body": "\\ud800"}]}'),
        ("admin", "a batch over 64 KiB (read in a thread) with a bad message at its end", batch,
         b'{"messages": [' + b'{"body": "' + b"y" * 100 + b'"}, ' * 700 + b'{"body": 5}]}'),
        ("admin", "JSON nested 5,000 deep", one, b'{"json": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("admin", "unknown queue", f"/api/queues/{queue}-nope/publish", b'{"body": "x"}'),
        ("admin", "full queue", f"/api/queues/{queue}-full/publish-batch",
         b'{"messages": [{"body": "1"}, {"body": "2"}]}'),
        ("reader", "no publish right", one, b'{"body": "x"}'),
        ("writer", "right on another queue", f"/api/queues/{queue}-full/publish", b'{"body": "x"}'),
        ("unknown", "unknown token", one, b'{"body": "x"}'),
    ]  # fmt: skip


def test_every_answer_is_the_same_down_both_paths(direct, through_django) -> None:
    queue = unique("pub")
    tokens = {"direct": setup(direct, queue), "django": setup(through_django, queue)}
    tokens["direct"]["unknown"] = tokens["django"]["unknown"] = "xump_00000000_nope"
    for who, what, path, body in requests(queue):
        answers = {}
        for name, service in (("direct", direct), ("django", through_django)):
            answers[name] = httpx.post(
                service.url + path, content=body,
                headers={"Authorization": f"Bearer {tokens[name][who]}",
                         "Content-Type": "application/json", "X-Forwarded-Proto": "https"},
            )  # fmt: skip
        mine, theirs = answers["direct"], answers["django"]
        assert mine.status_code == theirs.status_code, what
        assert MID.sub('"mid"', mine.text) == MID.sub('"mid"', theirs.text), what
        for header in SAME_HEADERS:
            assert mine.headers.get(header) == theirs.headers.get(header), (what, header)
        assert mine.status_code < 500, what
    for service in (direct, through_django):  # the four good requests published five
        with service.client() as client:
            waiting = client.get(f"/api/queues/{queue}/waiting").json()["messages"]
        assert [m["body"] for m in waiting] == ["hello", '{"n":1}', "\x00\x01\x02", "1", "2"]


def test_the_direct_path_serves_token_publishes_and_hands_on_the_rest(direct) -> None:
    """Told apart by the server log: Django logs every 4xx answer ("Not Found: <path>"),
    the direct path leaves that to the access log."""
    queue = unique("pub")
    log = Path(direct.env["XUMP_TEST_DIR"]) / "server.log"
    with direct.client() as client:
        published = client.post(f"/api/queues/{queue}/publish", json={"body": "x"})
        bad_host = client.post(
            f"/api/queues/{queue}/publish", json={"body": "x"}, headers={"Host": "evil.example"}
        )
        listed = client.get(f"/api/queues/{queue}")
    assert published.status_code == listed.status_code == 404
    assert bad_host.status_code == 400  # Django's DisallowedHost answer, as before
    deadline = time.monotonic() + 5
    while f"Not Found: /api/queues/{queue}" not in log.read_text():  # Django's, for the GET
        assert time.monotonic() < deadline, "Django logged nothing"
        time.sleep(0.05)
    assert f"Not Found: /api/queues/{queue}/publish" not in log.read_text()


def test_requests_at_once_are_each_answered_with_their_own_mids_in_order(direct) -> None:
    """Many requests at once, single and batched, on connections of their own: the direct
    path gathers what arrives together into its appends (the group commit), and each
    request is still answered with its own mids, and the queue holds every message, each
    connection's in the order it sent them."""
    import concurrent.futures

    queue = unique("many")
    with direct.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201

    def sender(n: int) -> list[tuple[str, str]]:
        sent = []
        with httpx.Client(base_url=direct.url, timeout=30, headers={
                "Authorization": f"Bearer {direct.admin_token}"}) as client:  # fmt: skip
            for k in range(10):
                if k % 3 == 2:
                    bodies = [f"{n}-{k}-a", f"{n}-{k}-b"]
                    batch = {"messages": [{"body": b} for b in bodies]}
                    answer = client.post(f"/api/queues/{queue}/publish-batch", json=batch)
                    assert answer.status_code == 202, answer.text
                    sent += zip(answer.json()["mids"], bodies, strict=True)
                else:
                    answer = client.post(f"/api/queues/{queue}/publish", json={"body": f"{n}-{k}"})
                    assert answer.status_code == 202, answer.text
                    sent.append((answer.json()["mid"], f"{n}-{k}"))
        return sent

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        sent = list(pool.map(sender, range(20)))
    with direct.client() as client:
        waiting = client.get(f"/api/queues/{queue}/waiting", params={"count": 1000}).json()
    held = [(m["mid"], m["body"]) for m in waiting["messages"]]
    assert sorted(held) == sorted(pair for one in sent for pair in one)
    for one in sent:  # each connection's messages in the order it sent them
        mine = set(one)
        assert [pair for pair in held if pair in mine] == one


def test_a_revoked_token_is_refused_at_its_next_publish(direct) -> None:
    """The direct path remembers what a token stood for until any token changes."""
    queue = unique("rev")
    with direct.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        rights = {queue: ["publish"]}
        issued = client.post("/api/tokens", json={"name": unique("t"), "rights": rights}).json()
    headers = {"Authorization": f"Bearer {issued['secret']}"}
    url = f"{direct.url}/api/queues/{queue}/publish"
    assert httpx.post(url, json={"body": "1"}, headers=headers).status_code == 202
    assert httpx.post(url, json={"body": "2"}, headers=headers).status_code == 202  # remembered
    with direct.client() as client:
        assert client.delete(f"/api/tokens/{issued['token']['id']}").status_code in (200, 204)
    refused = httpx.post(url, json={"body": "3"}, headers=headers)
    assert refused.status_code == 401, refused.text


# -- the bench's trace (engine/relay/trace.py) -------------------------------------------------
def test_a_traced_http_publish_gathers_each_hops_stamp_and_an_untraced_one_none(service, xump):
    """bench/service_bench.py's hop table for the HTTP single publish: a message published
    with `xump-trace` is delivered with the web process's recv= and learn= stamps, and the
    store's trace channel says when its inbox append and routing step came back and when
    its delivery frame was written; one without it has neither."""
    from engine.relay.trace import TRACE, parse_header

    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    headers = {"Authorization": f"Bearer {service.admin_token}"}
    url = f"{service.url}/api/queues/{queue}/publish"
    with trace_lines(service) as read_lines:
        with subscribe(service, destination) as sub:
            send(sub, {"type": "credit", "n": 10})
            sent = time.time()
            assert httpx.post(url, json={"body": "plain"}, headers=headers).status_code == 202
            answer = httpx.post(url, json={"body": "traced", "headers": {TRACE: "on"}},
                                headers=headers)  # fmt: skip
            assert answer.status_code == 202, answer.text
            plain, traced = take(sub, 2)
        assert traced["message"]["mid"] == answer.json()["mid"]
        lines = read_lines(traced["message"]["mid"])
    assert plain["message"]["body"] == "plain" and TRACE not in plain["message"]["headers"]
    stamps = parse_header(traced["message"]["headers"][TRACE])
    assert set(lines) == {"inbox", "step", "write"}, lines
    assert sent <= stamps["recv"] <= lines["inbox"]
    assert stamps["recv"] <= lines["step"]
    # the append's answer and the delivery reach the same process on two connections: on
    # a busy event loop it may take up the delivery first, so learn follows recv, not
    # the inbox stamp
    assert stamps["recv"] <= stamps["learn"] <= lines["write"] <= time.time()


def raw_post(service, head: str, body: bytes = b"") -> int:
    """The status of a POST sent as it is written (`head`: the request line's path and the
    header lines), on a connection of its own."""
    import socket

    host, port = service.url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(f"POST {head}\r\n\r\n".encode() + body)
        answer = connection.recv(65536)
    return int(answer.split(b" ", 2)[1])


def test_a_header_sent_twice_is_answered_as_django_answers_it(direct, through_django) -> None:
    """Django joins a header sent twice; the direct path took the last one, so a second
    Host got past the allowed hosts and a second Authorization chose the token."""
    queue = unique("twice")
    tokens = {"direct": setup(direct, queue), "django": setup(through_django, queue)}
    body = b'{"body": "x"}'
    for what, lines in (
        ("two Hosts, a bad one first", ["Host: evil.example", "Host: 127.0.0.1"]),
        ("two Authorizations, a bad one first", ["Host: 127.0.0.1", "Authorization: Bearer x"]),
    ):
        statuses = {}
        for name, service in (("direct", direct), ("django", through_django)):
            token = f"Authorization: Bearer {tokens[name]['admin']}"
            head = "\r\n".join([f"/api/queues/{queue}/publish HTTP/1.1", *lines, token,
                                 f"Content-Length: {len(body)}", "Connection: close"])  # fmt: skip
            statuses[name] = raw_post(service, head, body)
        assert statuses["direct"] == statuses["django"] != 202, (what, statuses)


def test_a_body_is_read_only_for_a_token_it_knows(direct) -> None:
    """The direct path read a body (up to 64 MB) into memory before it looked at the token,
    so anybody could make the server hold it: with a token it does not know, the request
    goes to Django, which spools a big body to a file."""
    pid = direct.processes["server"].pid

    def resident() -> int:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status)[1]) * 1024

    import socket

    size, chunk = 40 * 1024 * 1024, b"x" * (1024 * 1024)
    host, port = direct.url.rsplit("/", 1)[1].split(":")
    before = resident()
    held = []
    try:
        for _ in range(4):
            connection = socket.create_connection((host, int(port)), timeout=30)
            held.append(connection)
            connection.sendall(
                b"POST /api/queues/anything/publish HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer not-a-token\r\n"
                + f"Content-Length: {size}\r\n\r\n".encode()
            )
            for _ in range(size // len(chunk) - 1):  # the last MB never comes
                connection.sendall(chunk)
        # sent: all but what the sockets' buffers hold (a few MB) was read by the server
        grown = resident() - before
    finally:
        for connection in held:
            connection.close()
    assert grown < 64 * 1024 * 1024, f"the server grew by {grown >> 20} MB"
