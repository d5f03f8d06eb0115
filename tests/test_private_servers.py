"""The servers the tests start are their own, even when another process took their port."""

from __future__ import annotations

import redis

from tests.conftest import RedisServer


def test_a_redis_server_whose_port_is_taken_moves_to_another(tmp_path):
    """Tests run in several processes, so a port found free can be taken before the
    private redis-server binds it; then the other process's server answered the ping and
    became 'ours', its data ours to flush. Here the port is taken by another private
    server on purpose."""
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = RedisServer(tmp_path / "first")
    first.start()
    try:
        second = RedisServer(tmp_path / "second")
        second.port, second.url = first.port, first.url  # as if the same free port was found
        second.start()
        try:
            assert second.port != first.port
            answered = redis.Redis.from_url(second.url).info("server")["process_id"]
            assert answered == second.process.pid
            assert redis.Redis.from_url(first.url).info("server")["process_id"] == first.process.pid
        finally:
            second.stop()
    finally:
        first.stop()
