"""The live path's Redis client (xumpweb/live/lean_redis.py) against a real redis-server:
pipelined calls answered in order, refusals raised after the whole call was read, the
connection's loss and a timeout failing every call in flight and the next call connecting
again, AUTH and SELECT from the URL."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time

import pytest
import redis
from redis.exceptions import ConnectionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from tests.conftest import RedisServer, free_port
from xumpweb.live.lean_redis import LeanRedis, evalsha


def run(coroutine):  # type: ignore[no-untyped-def]
    """`coroutine`'s result, run on a loop of its own in a thread of its own (a test
    before it on this worker may have left a loop running in this thread: Playwright's)."""
    outcome: list = []

    def main() -> None:
        try:
            outcome.append((True, asyncio.run(coroutine)))
        except BaseException as problem:  # handed to the test's thread
            outcome.append((False, problem))

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    done, value = outcome[0]
    if not done:
        raise value
    return value


def test_calls_made_at_once_are_answered_each_with_its_own_replies(redis_server) -> None:
    async def main() -> list:
        client = LeanRedis(redis_server.url)
        try:
            await client.execute(("DEL", "lean:list"))
            calls = [
                client.execute(
                    ("RPUSH", "lean:list", str(n)), ("LLEN", "lean:list"), ("ECHO", f"call {n}")
                )
                for n in range(200)
            ]
            return await asyncio.gather(*calls)
        finally:
            await client.aclose()

    answers = run(main())
    assert [answer[2] for answer in answers] == [f"call {n}".encode() for n in range(200)]
    # each RPUSH's length is the LLEN right after it: the calls' commands were not mixed
    assert all(answer[0] == answer[1] for answer in answers)
    assert sorted(answer[0] for answer in answers) == list(range(1, 201))
    assert redis.Redis.from_url(redis_server.url).llen("lean:list") == 200


def test_replies_are_redis_pys_and_a_refusal_is_raised_after_the_whole_call(
    redis_server,
) -> None:
    async def main() -> tuple:
        client = LeanRedis(redis_server.url)
        try:
            await client.execute(("SET", "lean:text", "a"))
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await client.execute(("LPUSH", "lean:text", "x"), ("SET", "lean:after", "1"))
            # the connection stays in step: the next call gets its own replies
            got = await client.execute(("GET", "lean:after"), ("GET", "lean:none"),
                                       ("EVAL", "return {1, 'two', {3}}", 0))  # fmt: skip
            futures = await client.send(("INCR", "lean:text"), ("PING",))
            refused, pong = [await future for future in futures]
            return got, refused, pong
        finally:
            await client.aclose()

    got, refused, pong = run(main())
    assert got == [b"1", None, [1, b"two", [3]]]
    assert isinstance(refused, ResponseError) and pong == b"PONG"


def test_a_lost_connection_fails_the_calls_in_flight_and_the_next_call_connects(
    tmp_path,
) -> None:
    server = RedisServer(tmp_path)
    server.start()

    async def main() -> None:
        client = LeanRedis(server.url, timeout=None)
        await client.execute(("DEL", "lean:wait"))
        blocked = asyncio.ensure_future(client.execute(("BLPOP", "lean:wait", 0)))
        behind = asyncio.ensure_future(client.execute(("PING",)))
        await asyncio.sleep(0)
        # the BLPOP is on the server when a second client sees it blocked
        other = LeanRedis(server.url)
        for _ in range(500):
            (clients,) = await other.execute(("CLIENT", "LIST"))
            if b"cmd=blpop" in clients:
                break
            await asyncio.sleep(0.01)
        await other.aclose()
        server.kill()
        for call in (blocked, behind):
            with pytest.raises(ConnectionError):
                await call
        with pytest.raises(ConnectionError):  # nobody listens: refused, not hung
            await client.execute(("PING",))
        server.start()
        assert await client.execute(("PING",)) == [b"PONG"]
        await client.aclose()

    try:
        run(main())
    finally:
        server.stop()


def test_a_call_not_answered_in_time_fails_with_a_timeout_and_the_client_recovers(
    tmp_path,
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:

        async def main() -> list:
            client = LeanRedis(server.url, timeout=0.5)
            await client.execute(("PING",))
            server.process.send_signal(signal.SIGSTOP)
            try:
                first = asyncio.ensure_future(client.execute(("SET", "lean:held", "1")))
                second = asyncio.ensure_future(client.execute(("PING",), timeout=None))
                outcomes = await asyncio.gather(first, second, return_exceptions=True)
            finally:
                server.process.send_signal(signal.SIGCONT)
            outcomes.append(await client.execute(("PING",)))
            await client.aclose()
            return outcomes

        first, second, after = run(main())
        assert isinstance(first, RedisTimeout)
        # the second call was pipelined behind the first on the connection that went
        assert isinstance(second, RedisTimeout)
        assert after == [b"PONG"]
    finally:
        server.stop()


def test_auth_and_select_come_from_the_url(tmp_path) -> None:
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--dir", str(tmp_path), "--requirepass", "s3cret"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        admin = redis.Redis(port=port, password="s3cret", db=3)
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the redis-server did not start"
                time.sleep(0.02)

        async def main() -> None:
            good = LeanRedis(f"redis://:s3cret@127.0.0.1:{port}/3")
            await good.execute(("SET", "lean:db", "three"))
            await good.aclose()
            wrong = LeanRedis(f"redis://:nope@127.0.0.1:{port}/0")
            with pytest.raises(ConnectionError, match="refused"):
                await wrong.execute(("PING",))

        run(main())
        assert admin.get("lean:db") == b"three"
        assert redis.Redis(port=port, password="s3cret", db=0).get("lean:db") is None
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_scripts_go_by_sha_and_are_loaded_again_after_a_flush(redis_server) -> None:
    body = "return redis.call('INCRBY', KEYS[1], ARGV[1])"

    async def main() -> list:
        admin = redis.Redis.from_url(redis_server.url)
        admin.script_flush()
        admin.delete("lean:counted")
        client = LeanRedis(redis_server.url, scripts=(body,))
        outcomes: list = [await client.execute(evalsha(body, ["lean:counted"], [2]))]
        admin.script_flush()  # an operator flushes the scripts while the client is connected
        try:
            await client.execute(("PING",), evalsha(body, ["lean:counted"], [3]))
        except ResponseError as refused:
            outcomes.append(type(refused).__name__)
        outcomes.append(await client.execute(evalsha(body, ["lean:counted"], [5])))
        outcomes.append(await client.script(body, ["lean:counted"], [7]))
        admin.script_flush()
        outcomes.append(await client.script(body, ["lean:counted"], [11]))  # by its text
        await client.aclose()
        return outcomes

    assert run(main()) == [[2], "NoScriptError", [7], 14, 25]
