"""/ws/monitor/ against the running server: what the console's live feed shows, how often,
and who may watch it."""

from __future__ import annotations

import itertools
import time

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.web.conftest import unique
from tests.web.test_subscribe import (
    Xump,
    closing,
    issue_token,
    receive,
    send,
    session_cookie,
    subscribe,
    take,
)


@pytest.fixture
def xump(service):
    found = Xump(service)
    yield found
    found.close()


def monitor(service, token: str | None = None):
    return connect(f"{service.ws_url}/ws/monitor/?token={token or service.admin_token}")


def frame_where(socket: ClientConnection, check, within: float = 15.0) -> dict:
    """The first monitor frame for which `check(frame)` holds."""
    deadline = time.monotonic() + within
    while True:
        frame = receive(socket, timeout=max(0.1, deadline - time.monotonic()))
        assert frame["type"] in ("monitor", "heartbeat"), frame
        if frame["type"] == "monitor" and check(frame):
            return frame


def queue_in(frame: dict, name: str) -> dict | None:
    return next((q for q in frame["queues"] if q["name"] == name), None)


def test_it_pushes_depth_and_publish_rates(service, xump):
    queue = unique()
    xump.call("queue_create", name=queue)  # no selector: messages wait, depth grows
    with monitor(service) as socket:
        frame_where(socket, lambda f: queue_in(f, queue) is not None)
        xump.publish(queue, [f"m{n}" for n in range(300)])
        frame = frame_where(socket, lambda f: queue_in(f, queue)["rates"]["published"] > 0)
        shown = queue_in(frame, queue)
        assert shown["counters"]["published"] > 0 and shown["rates"]["published"] > 0
        frame = frame_where(socket, lambda f: queue_in(f, queue)["depth"] == 300)
        shown = queue_in(frame, queue)
        assert shown["history_size"] == 0 and shown["outstanding"] == 0
        assert frame["inbox"] == 0 and isinstance(frame["time"], float)
        # with nothing more published, the rate falls back to zero
        frame_where(socket, lambda f: queue_in(f, queue)["rates"]["published"] == 0)


def test_it_shows_recent_deliveries_and_delivery_rates(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with monitor(service) as socket, subscribe(service, destination) as subscriber:
        send(subscriber, {"type": "credit", "n": 1000, "batch": 100})
        mids = xump.publish(queue, [f"m{n}" for n in range(200)])
        found = take(subscriber, 200)
        send(subscriber, {"type": "ack", "tags": [d["tag"] for d in found]})
        frame = frame_where(socket, lambda f: mids[-1] in {r["mid"] for r in f["recent"]})
        [recent] = [r for r in frame["recent"] if r["mid"] == mids[-1]]
        assert recent["destination"] == destination and recent["queue"] == queue
        frame_where(socket, lambda f: queue_in(f, queue)["counters"]["confirmed"] == 200)


def test_it_pushes_at_most_every_half_second(service, xump):
    queue = unique()
    xump.call("queue_create", name=queue)
    with monitor(service) as socket:
        receive(socket)
        arrivals = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            xump.publish(queue, ["tick"])  # something changes all the time
            try:
                frame = receive(socket, timeout=0.05)
            except TimeoutError:
                continue
            if frame["type"] == "monitor":
                arrivals.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(arrivals) >= 3
    assert min(gaps) > 0.4


def test_it_stays_quiet_while_nothing_changes(service, xump):
    with monitor(service) as socket:
        receive(socket)
        time.sleep(1.5)  # let what the previous tests did settle
        while True:  # drain what was sent meanwhile
            try:
                receive(socket, timeout=0.6)
            except TimeoutError:
                break
        started = time.monotonic()
        frame = receive(socket, timeout=10)
    assert frame["type"] == "monitor"
    assert time.monotonic() - started > 3  # the keep-alive push, about every 5 s


def test_only_tokens_with_manage_on_everything_may_watch(service):
    for rights in ({"*": ["publish", "consume"]}, {"orders": ["manage"]}):
        with monitor(service, issue_token(service, rights)) as socket:
            frame, code = closing(socket)
        assert frame["error"] == "forbidden" and code == 4403
    with monitor(service, "xump_bad_token") as socket:
        frame, code = closing(socket)
    assert frame["error"] == "unauthorized" and code == 4401
    with connect(f"{service.ws_url}/ws/monitor/") as socket:
        send(socket, {"type": "auth", "token": service.admin_token})
        assert receive(socket)["type"] == "monitor"


def test_the_console_session_may_watch(service):
    cookie = session_cookie(service)
    url = f"{service.ws_url}/ws/monitor/"
    with connect(url, origin=service.url, additional_headers={"Cookie": cookie}) as socket:
        assert receive(socket)["type"] == "monitor"
    with connect(url, origin=service.url) as socket:
        send(socket, {"type": "heartbeat"})
        with pytest.raises(TimeoutError):
            receive(socket, timeout=0.5)  # no session, no token: nothing shown
