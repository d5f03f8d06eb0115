"""Request and response bodies as the OpenAPI schema shows them.

Requests are strict about their keys (an unknown key is a 400, so a typo never passes
silently). The publish endpoints do not validate through these models (see publishing.py:
per-message pydantic costs too much at 20,000 messages a second); their schemas are here
for the documentation only and match what publishing.py accepts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, StrictBool

from engine.validation import MAX_PRIORITIES, MAX_SECONDS, MAX_SEQ, MAX_WIRING

HeaderValue = str | int | float | bool
# the engine's ranges (engine/validation.py), here too so the schema documents them
Count = Annotated[int, Field(ge=0, le=MAX_WIRING)]
Credit = Annotated[int, Field(ge=-1, le=MAX_WIRING, description="-1: unlimited")]
Seq = Annotated[int, Field(ge=1, le=MAX_SEQ)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
# message lifetime (SPEC §8, docs/lifetime.md): the engine checks the same ranges
MaxDeliveries = Annotated[
    int, Field(ge=1, le=MAX_WIRING, description="deliveries before dead-letter; null: no limit")
]
Backoff = Annotated[float, Field(ge=1, le=1000, allow_inf_nan=False)]
Priorities = Annotated[int, Field(ge=1, le=MAX_PRIORITIES)]


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(Schema):
    error: str = Field(description="a stable code, e.g. not_found, invalid_selector")
    detail: str = Field(description="what went wrong, for a person")
    column: int | None = Field(None, description="invalid_selector: where the error is")
    problems: list[str] | None = Field(
        None, description="invalid_definitions: every reason the document cannot be imported"
    )


# -- queues ------------------------------------------------------------------------------
class QueueCreate(Strict):
    name: str
    store: str | None = Field(None, description="default: the service's store (XUMP_STORE)")
    limit: Count | None = Field(None, description="max unprocessed messages; null: unbounded")
    history: Count = Field(0, description="processed messages kept for browsing")
    dead_letter: str | None = None
    self_destruct: StrictBool = False
    journal: StrictBool = Field(True, description="record its events for the archive (pipeline)")
    max_deliveries: MaxDeliveries | None = None
    redelivery_delay: Seconds | None = Field(
        None, description="seconds a rejected/timed-out message waits; null: none"
    )
    redelivery_backoff: Backoff = Field(1.0, description="the wait's multiplier per delivery")
    redelivery_delay_max: Seconds | None = Field(None, description="the wait's cap")
    ttl: Seconds | None = Field(None, description="seconds before unprocessed messages expire")
    priorities: Priorities = Field(1, description="priority levels; fixed at creation")


class QueueUpdate(Strict):
    limit: Count | None = None
    history: Count | None = None
    dead_letter: str | None = None
    self_destruct: StrictBool | None = None
    journal: StrictBool | None = None
    max_deliveries: MaxDeliveries | None = None
    redelivery_delay: Seconds | None = None
    redelivery_backoff: Backoff | None = None
    redelivery_delay_max: Seconds | None = None
    ttl: Seconds | None = None


# -- selectors ---------------------------------------------------------------------------
class MatchIn(Strict):
    operator: Literal["eq", "topic", "prefix", "regex"]
    pattern: str
    field: str = "address"


MATCHES_DOC = (
    "several match conditions, all of which must hold (the first is indexed); instead of "
    "`match`. field: address, return_address, header:<name> or a header name"
)
TARGET_FROM_DOC = (
    "the field (address, return_address, header:<name> or a header name) whose value names "
    "each message's target queue or destination; instead of `target`"
)


class SelectorCreate(Strict):
    when: Literal["match", "filter", "always", "default", "overflow"]
    match: MatchIn | None = None
    matches: list[MatchIn] | None = Field(None, max_length=16, description=MATCHES_DOC)
    filter: str | None = Field(None, description="JMS/SQL-92 expression over headers")
    action: Literal["copy", "move", "deliver", "delete", "bounce"]
    target: str | None = Field(None, description="queue or destination; not for delete")
    target_from: str | None = Field(None, max_length=210, description=TARGET_FROM_DOC)
    start: Literal["current", "head"] | Seq | None = None
    credit: Credit | None = Field(None, description="-1: unlimited (the default)")
    enabled: StrictBool = False


class SelectorUpdate(Strict):
    when: Literal["match", "filter", "always", "default", "overflow"] | None = None
    match: MatchIn | None = None
    matches: list[MatchIn] | None = Field(None, max_length=16, description=MATCHES_DOC)
    filter: str | None = None
    action: Literal["copy", "move", "deliver", "delete", "bounce"] | None = None
    target: str | None = None
    target_from: str | None = Field(None, max_length=210, description=TARGET_FROM_DOC)
    start: Literal["current", "head"] | Seq | None = None
    credit: Credit | None = None
    enabled: StrictBool | None = None


class CreditIn(Strict):
    n: int = Field(
        ge=1, le=MAX_WIRING, description="credit to add (tops up; routes what waited for it)"
    )


# -- messages ----------------------------------------------------------------------------
class PublishIn(Strict):
    """One message; give at most one of body, body_base64 and json (none: empty body)."""

    address: str = ""
    headers: dict[str, HeaderValue] = {}
    body: str | None = Field(None, description="text, stored as UTF-8")
    body_base64: str | None = Field(None, description="binary body, base64")
    json_: Any = Field(None, alias="json", description="any JSON value, stored as JSON text")
    return_address: str | None = None
    ttl: Seconds | None = Field(None, description="seconds until it expires unprocessed")
    delay: Seconds | None = Field(None, description="seconds it is held before routing")
    not_before: float | None = Field(
        None, description="epoch seconds it is held until (instead of delay)"
    )
    priority: Annotated[int, Field(ge=0)] | None = Field(
        None, description="the priority header (higher first on a queue with priorities)"
    )


class PublishBatchIn(Strict):
    messages: list[PublishIn] = Field(description="up to 10,000 messages, published in order")


class MidOut(Schema):
    mid: str


class MidsOut(Schema):
    mids: list[str]


class ConfirmIn(Strict):
    tags: list[str] = Field(min_length=1, max_length=10_000)


class RejectIn(Strict):
    tag: str
    requeue: StrictBool = True


class FilterIn(Strict):
    expression: str


# -- patterns and tokens -----------------------------------------------------------------
class PatternIn(Strict):
    kind: Literal["housecat", "parrot", "wolfpack"]
    name: str = Field(description="recipient, subscriber or worker")
    router: str | None = Field(
        None, description="router or service queue (default: housecat / parrot; required "
        "for wolfpack)"
    )  # fmt: skip
    topic: str = Field("", description="parrot: the topic pattern")
    credit: int = Field(1, ge=-1, le=MAX_WIRING, description="wolfpack: the worker's credit")


class TokenIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    rights: dict[str, list[Literal["read", "publish", "consume", "manage", "metrics"]]] = Field(
        description='queue name or glob -> rights, e.g. {"orders.*": ["publish"]}'
    )
