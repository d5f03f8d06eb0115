"""/api/health on the Redis it is given: one that refuses writes (maxmemory reached with
noeviction) is not ok, and the durability of what it was configured with is reported."""

from __future__ import annotations

import httpx
import pytest
import redis

from tests.conftest import RedisServer
from tests.web.conftest import start_service


@pytest.fixture
def made(tmp_path):
    """`made(*redis settings)` -> (service, redis server), both stopped at the end."""
    started = []

    def make(*settings: str):
        number = len(started)
        (tmp_path / f"redis{number}").mkdir()
        (tmp_path / f"service{number}").mkdir()
        server = RedisServer(tmp_path / f"redis{number}", *settings)
        server.start()
        started.append(server)
        running = start_service(server.url, tmp_path / f"service{number}", "inline")
        started.append(running)
        return running, server

    yield make
    for thing in reversed(started):
        thing.close() if hasattr(thing, "close") else thing.stop()


def test_it_reports_durable_redis_as_durable(service) -> None:
    report = httpx.get(service.url + "/api/health").json()
    assert report["durability"] == {"appendonly": "yes", "appendfsync": "always", "durable": True}
    assert report["warnings"] == [] and report["ok"] is True


def test_it_warns_when_a_202_does_not_mean_on_disk_then_fails_when_redis_refuses_writes(made):
    service, server = made("--appendfsync", "everysec")
    answer = httpx.get(service.url + "/api/health")
    report = answer.json()
    assert answer.status_code == 200 and report["redis"]["ok"] is True
    assert report["durability"]["durable"] is False
    assert report["durability"]["appendfsync"] == "everysec"
    [warning] = report["warnings"]
    assert "everysec" in warning and "can be lost" in warning
    # Redis full: it still answers PING, but refuses every write. Its limit is set under
    # what it uses (filling it up to a limit a little above left room for a small write
    # whenever one of the service's keys expired in between: the health check's probe
    # then got in, and the test failed once in a fresh-clone run)
    client = redis.Redis(port=server.port)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", client.info("memory")["used_memory"] // 2)
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        client.set("filler", b"x" * 1024)
    answer = httpx.get(service.url + "/api/health")
    report = answer.json()
    assert answer.status_code == 503 and report["ok"] is False
    assert report["redis"]["ok"] is False
    assert "refuses writes" in report["redis"]["detail"]
    assert "maxmemory" in report["redis"]["detail"]
    # room again: healthy again
    client.config_set("maxmemory", 0)
    assert httpx.get(service.url + "/api/health").json()["redis"]["ok"] is True
    client.close()


def test_it_says_unknown_when_redis_forbids_config(made):
    service, _ = made("--rename-command", "CONFIG", "")
    report = httpx.get(service.url + "/api/health").json()
    assert report["redis"]["ok"] is True
    durability = report["durability"]
    assert durability["appendonly"] == "unknown" and durability["durable"] is None
    assert "CONFIG GET refused" in report["warnings"][0]
