"""STOMP /topic/ destinations on a fresh service (its own Redis: the topic router queue does
not exist until STOMP needs it): a SEND to a topic nobody subscribes to is accepted and
goes nowhere, and a subscriber receives only what is published while it is subscribed."""

from __future__ import annotations

import queue
import time

import pytest
import stomp

from tests.web.conftest import service_with_own_redis


class Frames(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: queue.Queue = queue.Queue()

    def on_message(self, frame) -> None:
        self.frames.put(("MESSAGE", frame))

    def on_receipt(self, frame) -> None:
        self.frames.put(("RECEIPT", frame))

    def on_error(self, frame) -> None:
        self.frames.put(("ERROR", frame))

    def next(self, timeout: float = 30.0) -> tuple[str, str]:
        """The next frame: (command, its receipt-id or body)."""
        command, frame = self.frames.get(timeout=timeout)
        if command == "MESSAGE":
            return command, frame.body
        if command == "ERROR":
            return command, f"{frame.headers.get('message')}: {frame.body}"
        return command, frame.headers["receipt-id"]

    def quiet(self, seconds: float = 1.5) -> bool:
        time.sleep(seconds)
        return self.frames.empty()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A service and its STOMP port, on a redis-server of their own."""
    # the loop resumes the generator after the tests, which stops the service and its
    # redis-server (closing the generator instead would skip that and leave them running)
    for running, _ in service_with_own_redis(tmp_path_factory.mktemp("topics")):
        yield running, running.start_stomp()


def connect(fresh) -> tuple[stomp.Connection, Frames]:
    service, port = fresh
    connection = stomp.Connection([("127.0.0.1", port)])
    frames = Frames()
    connection.set_listener("", frames)
    connection.connect("tests", service.admin_token, wait=True)
    return connection, frames


def test_a_send_to_a_topic_nobody_subscribes_to_is_accepted_and_dropped(fresh):
    connection, frames = connect(fresh)
    connection.send("/topic/first.news", "nobody listens", receipt="sent")
    assert frames.next() == ("RECEIPT", "sent")
    connection.subscribe("/topic/first.*", id="1", receipt="subscribed")
    assert frames.next() == ("RECEIPT", "subscribed")
    assert frames.quiet()  # what was sent before the subscription never comes
    connection.send("/topic/first.news", "now", receipt="again")
    assert sorted([frames.next(), frames.next()]) == [("MESSAGE", "now"), ("RECEIPT", "again")]
    connection.disconnect()


def test_a_subscriber_gets_nothing_published_while_nobody_subscribed(fresh):
    connection, frames = connect(fresh)
    connection.subscribe("/topic/idle.*", id="1", receipt="subscribed")
    assert frames.next() == ("RECEIPT", "subscribed")
    connection.unsubscribe("1", receipt="gone")
    assert frames.next() == ("RECEIPT", "gone")  # the router has no subscriber now
    connection.send("/topic/idle.news", "while nobody listened", receipt="sent")
    assert frames.next() == ("RECEIPT", "sent")
    connection.subscribe("/topic/idle.*", id="2", receipt="back")
    assert frames.next() == ("RECEIPT", "back")
    assert frames.quiet()
    connection.disconnect()
