"""The Celery broker transport: kombu's Redis transport with one defect worked around.

Why (celery 5.7.0, kombu 5.7.0): when the worker loses Redis while a BRPOP is waiting and
a task is running (a `route` task, acknowledged late, nearly always runs under traffic),
Consumer.on_connection_error_after_connected first calls `connection.collect()`. That
closes the default channel, whose close starts by reading the pending BRPOP answer: the
read raises ConnectionError, which collect() ignores, and the channel stays open. collect()
then detaches the transport from its connection (`transport.client = None`), and the next
`connection.close()` closes the channel again; this time it gets as far as restoring the
unacknowledged task, which needs a new connection pool, whose parameters come from
`transport.client`: AttributeError "'NoneType' object has no attribute 'hostname'",
which no caller ignores, and the worker exits ("Unrecoverable error").

The channel here finishes closing when the pending read fails (the answer is lost with
the connection either way), and does not try to restore through a detached transport:
the unacknowledged task stays in the broker's unacked set and kombu puts it back after
the visibility timeout (every task here is idempotent; meanwhile each worker's lease
watch starts a router as soon as Redis answers). tests/test_make_run.py restarts Redis under
traffic and checks that the worker lives on.

Settings: CELERY_BROKER_TRANSPORT = "xumpweb.broker:Transport".
"""

from __future__ import annotations

from queue import Empty

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def close(self) -> None:
        if self._in_poll:
            try:
                self._brpop_read()
            except Empty:
                pass
            except self.connection_errors:
                pass  # the broker went away with the answer; close the channel all the same
        if self.connection is not None and self.connection.client is None:
            self.do_restore = False  # detached: restoring would need the connection's URL
        super().close()


class Transport(kombu_redis.Transport):
    Channel = Channel
