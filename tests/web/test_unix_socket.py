"""The service on a Redis reached by its unix socket (XUMP_REDIS_URL=unix:///path?db=N,
README: Configuration): the web process, the Celery worker (its broker the same socket,
as kombu's redis+socket:// URL) and the router all use it, and a message goes through."""

from __future__ import annotations

from contextlib import closing
from urllib.parse import quote

import pytest
import redis

from engine import Message
from tests.web.conftest import delivering_queue, django_script, start_service, take_from_relay


def test_the_service_routes_on_a_redis_reached_by_its_unix_socket(tmp_path, unix_redis):
    server, socket_path = unix_redis
    service = start_service(f"unix://{socket_path}?db=2", tmp_path, "worker")
    try:
        service.start_worker()
        with closing(service.relay()) as relay:
            queue, destination = delivering_queue(relay)
            relay.publish_many(queue, [Message(body=b"%d" % n) for n in range(20)])
            found = take_from_relay(relay, destination, 20, within=60)
            assert [d.message.body for d in found] == [b"%d" % n for n in range(20)]
        by_socket = redis.Redis(unix_socket_path=socket_path, db=2)
        # the worker's broker is the same server and database, by the socket (kombu's keys)
        assert any(key.startswith(b"_kombu") for key in by_socket.keys("*"))
        # and nothing of the service reaches it by TCP: the one TCP client is this look
        looking = redis.Redis.from_url(server.url)
        by_tcp = [c for c in looking.client_list() if not c["addr"].startswith("/")]
        assert [c["cmd"] for c in by_tcp] == ["client|list"]
        looking.close()
        by_socket.close()
    finally:
        service.close()


BROKER = """
import json
import django
django.setup()
from django.conf import settings
from kombu import Connection

with Connection(settings.XUMP_BROKER_URL) as connection:
    connection.connect()
    client = connection.default_channel.client
    print(json.dumps({"ping": client.ping(), "db": client.connection_pool.connection_kwargs["db"]}))
"""


@pytest.mark.parametrize("form", ["query", "netloc"])
def test_celerys_broker_reaches_a_password_protected_socket(tmp_path, unix_redis, form):
    """Both of redis-py's forms of a password in a unix:// URL (the query's `password=`,
    the `:password@` before the path) reach Celery's broker, whose kombu URL takes it
    before the path only; a password with URL characters in it stays whole."""
    server, socket_path = unix_redis
    password = "s&cr=t/:@"
    redis.Redis.from_url(server.url).config_set("requirepass", password)
    quoted = quote(password, safe="")
    url = {"query": f"unix://{socket_path}?db=4&password={quoted}",
           "netloc": f"unix://:{quoted}@{socket_path}?db=4"}[form]  # fmt: skip
    assert django_script(url, tmp_path, BROKER) == {"ping": True, "db": 4}
