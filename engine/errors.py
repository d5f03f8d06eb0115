"""Errors the engine raises, one class per kind of user mistake.

Every error carries a message a person can act on. Catching `XumpError` catches them all;
the web service maps each class to one HTTP status.
"""

from __future__ import annotations


class XumpError(Exception):
    """Base class of every error the engine raises on purpose."""


class NotFound(XumpError):
    """A queue, selector, store or delivery tag that does not exist."""


class AlreadyExists(XumpError):
    """A queue or store created under a name that is taken by something different."""


class InvalidName(XumpError):
    """A queue, store, destination or header name that breaks the naming rules."""


class InvalidArgument(XumpError):
    """A value of the wrong type or range (credit below -1, non-bytes body, ...)."""


class InvalidSelector(XumpError):
    """A selector that cannot be configured: a malformed expression or pattern, or an
    incomplete selector (no WHEN or no DO) being enabled.

    `column` is the 1-based position of the error in the expression, when there is one.
    """

    def __init__(self, message: str, column: int | None = None) -> None:
        super().__init__(message)
        self.column = column


class QueueFull(XumpError):
    """A publish refused because the queue holds `limit` unprocessed messages and it has
    neither an overflow selector nor a dead-letter queue."""


class Changed(XumpError):
    """An operation confirmed on what a dry run saw (e.g. `expect` messages) found
    something else: nothing was done; look again."""


class MessageTooLarge(InvalidArgument):
    """A body larger than the engine's `max_body`."""


class InternalError(XumpError):
    """A defect, not a refusal: something failed that should not have (the server log has
    it). The web service answers it 500 internal_error."""


class StoreError(XumpError):
    """A storage back-end failed or is unreachable."""


class NotWritten(StoreError):
    """A write that failed before any of it was written, for certain (unlike a connection
    lost while a command was on its way, which may or may not have been applied)."""


class LeaseLost(NotWritten):
    """A commit refused because this process no longer holds the store's lease (it expired
    and another process took it): nothing of it was written."""


class GapMoved(NotWritten):
    """A commit refused because the check its writer set (RedisStore.expect_gap) did not
    hold: nothing of it was written."""


class InboxFull(StoreError):
    """A publish refused because the shared store's inbox already holds its limit of
    commands (routing is slower than publishing, or stopped): publish again later."""


class StoreFull(StoreError):
    """A write refused because Redis is out of memory (its `maxmemory`, with no eviction)."""
