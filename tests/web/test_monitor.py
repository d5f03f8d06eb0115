"""/ws/monitor/ against the running server: what the console's live feed shows, how often,
and who may watch it."""

from __future__ import annotations

import itertools
import time

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.web.conftest import service_with_own_redis, unique
from tests.web.test_subscribe import (
    as_console,
    closing,
    issue_token,
    next_frame,
    receive,
    send,
    subscribe,
    take,
    xump,
)
from xumpweb.live.monitor import EVERY, QUIET_EVERY, RateMeter

__all__ = ["xump"]  # the fixture


CLOCKS = 0.05  # the hub paces itself on the monotonic clock, stamps frames with time.time()


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


def monitor_frames(socket: ClientConnection, count: int, within: float = 30.0) -> list[dict]:
    """The next `count` monitor frames (heartbeats skipped)."""
    deadline = time.monotonic() + within
    return [next_frame(socket, "monitor", deadline - time.monotonic()) for _ in range(count)]


def test_it_pushes_at_most_every_half_second(service, xump):
    """Measured on the server's own clock (each frame's `time`), so a busy test process that
    reads two frames late, back to back, does not count as a fast push."""
    queue = unique()
    xump.call("queue_create", name=queue)
    with monitor(service) as socket:
        frames: list[dict] = []
        deadline = time.monotonic() + 30
        while len(frames) < 6 and time.monotonic() < deadline:
            xump.publish(queue, ["tick"])  # something changes all the time
            try:
                frame = receive(socket, timeout=0.05)
            except TimeoutError:
                continue
            if frame["type"] == "monitor":
                frames.append(frame)
    assert len(frames) == 6
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(frames)]
    assert min(gaps) >= EVERY - CLOCKS, gaps


def test_it_stays_quiet_while_nothing_changes(service, xump):
    """With nothing changing, frames come only as the keep-alive, QUIET_EVERY apart on the
    server's clock (not at every EVERY read), and say the same each time."""
    queue = unique()
    xump.call("queue_create", name=queue)
    with monitor(service) as socket:
        frame_where(socket, lambda f: queue_in(f, queue) is not None)
        same: list[float] = []  # server-clock gaps between two frames saying the same
        last: dict | None = None
        deadline = time.monotonic() + 60
        while len(same) < 3:
            assert time.monotonic() < deadline, "no two frames in a row said the same"
            [frame] = monitor_frames(socket, 1)
            if last is not None and content(frame) == content(last):
                same.append(frame["time"] - last["time"])
            last = frame
    assert min(same) >= QUIET_EVERY - CLOCKS, same


def content(frame: dict) -> list:
    return [frame["queues"], frame["recent"], frame["inbox"], frame["status"]]


def test_a_watch_frame_cuts_frames_to_the_queues_a_page_shows(service, xump):
    """The dashboard shows one page of queues: after it says which, frames carry those
    queues only (tagged with its view number) and totals over every queue."""
    shown, hidden = unique(), unique()
    xump.call("queue_create", name=shown)
    xump.call("queue_create", name=hidden)
    with monitor(service) as socket:
        frame_where(socket, lambda f: queue_in(f, hidden) is not None)  # all, until told
        send(socket, {"type": "watch", "queues": [shown], "view": 7})
        frame = frame_where(socket, lambda f: f.get("view") == 7)
        assert [q["name"] for q in frame["queues"]] == [shown]
        assert frame["totals"]["queues"] >= 2
        xump.publish(hidden, ["a", "b", "c"])
        frame = frame_where(socket, lambda f: f["totals"]["depth"] >= 3)
        assert [q["name"] for q in frame["queues"]] == [shown]
        send(socket, {"type": "watch", "queues": "everything"})  # refused, nothing changes
        refused = next_frame(socket, "error", within=15.0)
        assert refused["type"] == "error" and refused["error"] == "invalid_argument"
        frame = frame_where(socket, lambda f: True)
        assert [q["name"] for q in frame["queues"]] == [shown] and frame["view"] == 7


def test_only_tokens_that_read_every_queue_may_watch(service):
    for rights in ({"*": ["publish"]}, {"orders": ["manage"]}, {"orders*": ["read"]}):
        with monitor(service, issue_token(service, rights)) as socket:
            frame, code = closing(socket)
        assert frame["error"] == "forbidden" and code == 4403
    for rights in ({"*": ["read"]}, {"*": ["consume"]}):  # consume and manage include read
        with monitor(service, issue_token(service, rights)) as socket:
            assert receive(socket)["type"] == "monitor"
    with monitor(service, "xump_bad_token") as socket:
        frame, code = closing(socket)
    assert frame["error"] == "unauthorized" and code == 4401
    with connect(f"{service.ws_url}/ws/monitor/") as socket:
        send(socket, {"type": "auth", "token": service.admin_token})
        assert receive(socket)["type"] == "monitor"


def test_the_console_session_may_watch(service):
    url = f"{service.ws_url}/ws/monitor/"
    with as_console(service, url) as socket:
        assert receive(socket)["type"] == "monitor"
    with connect(url, origin=service.url) as socket:
        send(socket, {"type": "heartbeat"})
        with pytest.raises(TimeoutError):
            receive(socket, timeout=0.5)  # no session, no token: nothing shown


@pytest.fixture
def lonely(tmp_path):
    """A service on a redis-server of its own, which the test kills and starts again."""
    yield from service_with_own_redis(tmp_path)


def test_it_says_redis_is_down_and_since_when_instead_of_falling_silent(lonely):
    lonely, redis_server = lonely
    with monitor(lonely) as socket:
        frame = frame_where(socket, lambda f: f["snapshot_time"] is not None)
        assert frame["status"] == {"redis": {"ok": True}, "routing": {"ok": True}}
        redis_server.kill()
        down = frame_where(socket, lambda f: not f["status"]["redis"]["ok"])
        assert "queues" not in down  # the numbers it had are not repeated as news
        assert down["status"]["redis"]["since"] > frame["time"]  # the first failed read
        assert down["status"]["redis"]["detail"]
        assert down["snapshot_time"] >= frame["snapshot_time"]  # the last one it read
        [again] = monitor_frames(socket, 1)  # not silent while it lasts
        assert again["status"]["redis"]["since"] == down["status"]["redis"]["since"]
        redis_server.start()
        frame_where(socket, lambda f: f["status"]["redis"]["ok"] and f["status"]["routing"]["ok"])


def test_a_burst_into_a_queue_made_between_two_snapshots_shows_as_a_rate():
    """A queue first seen with 50 published, in the snapshot after one that had no such
    queue, was made (empty) in between: 50 in 0.5 s is 100/s, not no rate at all. (The
    topology page's thick edges waited for a rate that never came when a queue was made and
    filled before the router's next snapshot.) A queue in the first snapshot read has none."""
    meter = RateMeter()
    stats = dict.fromkeys(("published", "delivered", "confirmed"), 0)
    first = meter.rates({"time": 10.0, "queues": [{"name": "old", "stats": stats}]}, 10.1)
    assert first["old"]["published"] == 0
    burst = dict(stats, published=50)
    second = {"time": 10.5, "queues": [{"name": "old", "stats": stats},
                                       {"name": "new", "stats": burst}]}  # fmt: skip
    assert meter.rates(second, 10.6)["new"]["published"] == 100.0
    # read again (no newer snapshot yet): the rate stands, not counted twice
    assert meter.rates(second, 10.7)["new"]["published"] == 100.0
    third = {"time": 11.0, "queues": [{"name": "old", "stats": stats},
                                      {"name": "new", "stats": burst}]}  # fmt: skip
    assert meter.rates(third, 11.1)["new"]["published"] == 0
    # a meter that starts on a snapshot knows no earlier counters: no rate yet
    assert RateMeter().rates(second, 10.6)["new"]["published"] == 0
