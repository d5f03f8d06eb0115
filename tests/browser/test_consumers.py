"""The consumers page: a subscriber shows when it connects (without a reload: the tables
refresh every 2 s) and goes when it leaves; an operator disconnects one, and its unsettled
deliveries go back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from engine.message import Message
from tests.browser.conftest import axe_scan, make_queue, publish, unique


@contextmanager
def subscriber(console, destination: str) -> Iterator[ClientConnection]:
    url = f"{console.ws_url}/ws/subscribe/{quote(destination, safe='')}/"
    with connect(f"{url}?token={console.admin_token}", open_timeout=10) as socket:
        assert json.loads(socket.recv(timeout=10))["type"] == "subscribed"
        yield socket


def row_of(page, destination: str):
    return page.locator("#subscribers tbody tr", has=page.locator(f'td:text-is("{destination}")'))


def test_a_subscriber_shows_when_it_connects_and_goes_when_it_leaves(page, console, relay):
    queue, destination = make_queue(relay), unique("d")
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip
    page.goto("/consumers/")
    feed = page.locator("#feeds tbody tr", has=page.locator(f'a:text-is("{queue}")'))
    assert "nobody" in feed.inner_text()
    assert row_of(page, destination).count() == 0
    with subscriber(console, destination):
        row = row_of(page, destination)
        row.wait_for()  # the page refreshed itself
        text = row.inner_text()
        assert "token:" in text and "127.0.0.1:" in text and "websocket-json" in text
        page.locator("#feeds tbody tr", has=page.locator(f'a:text-is("{queue}")')).get_by_text(
            "1 subscriber").wait_for()  # fmt: skip
        assert axe_scan(page) == []
    row_of(page, destination).wait_for(state="detached")
    assert not page.errors


def test_disconnect_closes_it_and_its_deliveries_go_back(page, console, relay):
    queue, destination = make_queue(relay), unique("d")
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip
    with subscriber(console, destination) as socket:
        socket.send(json.dumps({"type": "credit", "n": 1}))
        publish(relay, queue, Message(body=b"held by the first"))
        first = json.loads(socket.recv(timeout=10))
        assert first["type"] == "delivery"
        page.goto("/consumers/")
        row = row_of(page, destination)
        row.get_by_text("1", exact=True).first.wait_for()  # in flight
        row.get_by_role("button", name="Disconnect").click()
        page.get_by_text("its unsettled deliveries go back").wait_for()
        frames = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(json.loads(socket.recv(timeout=10)))
        assert closed.value.rcvd.code == 4000
        assert any(f.get("error") == "closed_by_operator" for f in frames)
    with subscriber(console, destination) as second:
        second.send(json.dumps({"type": "credit", "n": 1}))
        again = json.loads(second.recv(timeout=10))
        assert again["redelivered"] and again["message"]["mid"] == first["message"]["mid"]
    row_of(page, destination).wait_for(state="detached")
    page.goto(f"/audit/?q={destination}")
    assert "consumer.close" in page.locator("table.audit").inner_text()
