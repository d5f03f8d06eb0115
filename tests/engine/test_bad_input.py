"""Bad input raises the specific XumpError with a message a person can act on, and leaves
the engine exactly as it was."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidName,
    InvalidSelector,
    MessageTooLarge,
    NotFound,
    StoreError,
)


@pytest.fixture
def wired(eng: Engine) -> Engine:
    eng.queue_create("orders", history=10)
    eng.queue_create("archive")
    eng.selector_create("orders").when_always().do_deliver("app").enable()
    eng.publish("orders", Message(body=b"one"))
    return eng


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("has space", "whitespace"),
        ("tab\there", "whitespace"),
        ("new\nline", "whitespace"),
        ("bell\x07", "control"),
        ("x" * 201, "201 characters"),
        ("$dead", "reserved"),
        ("$mine", "reserved"),
    ],
)
def test_invalid_queue_names_are_refused(refused, wired: Engine, name: str, why: str) -> None:
    error = refused(wired, InvalidName, wired.queue_create, name)
    assert why in str(error) or why in ("whitespace", "control")


def test_non_string_queue_name_is_refused(refused, wired: Engine) -> None:
    refused(wired, InvalidName, wired.queue_create, 42)


def test_name_of_200_characters_is_accepted(eng: Engine) -> None:
    assert eng.queue_create("q" * 200).name == "q" * 200


def test_recreating_a_queue_with_other_settings_is_refused(refused, wired: Engine) -> None:
    refused(wired, AlreadyExists, wired.queue_create, "orders", history=5, match="orders")
    assert wired.queue_create("orders", history=10).name == "orders"  # same settings: fine


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("queue_fetch", ("nope",)),
        ("queue_delete", ("nope",)),
        ("stats", ("nope",)),
        ("browse", ("nope",)),
        ("peek", ("nope",)),
        ("selectors", ("nope",)),
        ("selector_create", ("nope",)),
        ("selector_fetch", ("orders", 99)),
        ("selector_delete", ("orders", 99)),
        ("selector_fetch", ("nope", 1)),
        ("publish", ("nope", Message())),
        ("confirm", ("orders:1:nothing.1",)),
        ("confirm", ("not a tag",)),
        ("reject", ("orders:9:x.1",)),
        ("store_delete", ("nope",)),
    ],
)
def test_unknown_things_raise_not_found(refused, wired: Engine, call: str, args: tuple) -> None:
    refused(wired, NotFound, getattr(wired, call), *args)


def test_confirming_twice_raises_not_found_the_second_time(refused, eng: Engine) -> None:
    eng.queue_create("q")
    eng.selector_create("q").when_always().do_deliver("app").enable()
    [delivery] = eng.publish("q", Message())
    eng.confirm(delivery)
    refused(eng, NotFound, eng.confirm, delivery, match="not outstanding")


def test_selector_without_when_or_do_cannot_be_enabled(refused, wired: Engine) -> None:
    bare = wired.selector_create("orders")
    refused(wired, InvalidSelector, bare.enable, match="no WHEN")
    bare.when_always()
    refused(wired, InvalidSelector, bare.enable, match="no DO")


@pytest.mark.parametrize("action", ["do_copy", "do_move", "do_bounce"])
def test_copy_move_or_bounce_to_a_missing_queue_is_refused(
    refused, wired: Engine, action: str
) -> None:
    selector = wired.selector_create("orders").when_always()
    refused(wired, NotFound, getattr(selector, action), "missing", match="missing")


def test_copy_into_its_own_queue_is_refused(refused, wired: Engine) -> None:
    selector = wired.selector_create("orders").when_always()
    refused(wired, InvalidSelector, selector.do_copy, "orders")


@pytest.mark.parametrize("credit", [-2, -100, 1.5, "3", None, True])
def test_credit_below_minus_one_or_not_an_integer_is_refused(
    refused, wired: Engine, credit
) -> None:
    selector = wired.selectors("orders")[0]
    refused(wired, InvalidArgument, selector.set_credit, credit)


@pytest.mark.parametrize("credit", [0, -1, 2.0])
def test_topping_up_credit_needs_a_positive_integer(refused, wired: Engine, credit) -> None:
    selector = wired.selectors("orders")[0]
    refused(wired, InvalidArgument, selector.credit, credit)


@pytest.mark.parametrize("body", [42, None, {"a": 1}, ["x"], 1.5])
def test_non_bytes_body_is_refused(refused, wired: Engine, body) -> None:
    refused(wired, InvalidArgument, wired.publish, "orders", Message(body=body), match="body")


def test_str_body_is_encoded_as_utf8(eng: Engine) -> None:
    eng.queue_create("q")
    eng.selector_create("q").when_always().do_deliver("app").enable()
    [delivery] = eng.publish("q", Message(body="héllo"))
    assert delivery.message.body == "héllo".encode()


def test_oversized_body_is_refused(refused, engine_on, store_kind: str) -> None:
    small = engine_on(store_kind, max_body=10)
    small.queue_create("q")
    refused(small, MessageTooLarge, small.publish, "q", Message(body=b"x" * 11), match="limit")
    small.publish("q", Message(body=b"x" * 10))


@pytest.mark.parametrize(
    "headers",
    [
        {"list": [1, 2]},
        {"dict": {"a": 1}},
        {"none": None},
        {"bytes": b"x"},
        {"": 1},
        {"1abc": 1},
        {"has space": 1},
        {"x" * 201: 1},
        {5: "five"},
    ],
)
def test_headers_with_bad_names_or_non_scalar_values_are_refused(
    refused, wired: Engine, headers
) -> None:
    refused(wired, InvalidArgument, wired.publish, "orders", Message(headers=headers))


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (Message(address="a\udfff"), "address holds a lone surrogate (U+DFFF) at index 1"),
        (Message(return_address="\ud800x"), "return_address holds a lone surrogate"),
        (Message(body="text \udfff"), "message body holds a lone surrogate"),
        (Message(headers={"h": "\udfff"}), "header 'h' holds a lone surrogate"),
        (Message(headers={"h\udfff": 1}), "header name of 2 characters contains"),
        (Message(headers={"h": float("nan")}), "header 'h' is not a finite number"),
        (Message(headers={"h": float("inf")}), "header 'h' is not a finite number"),
        (Message(headers={"h": -float("inf")}), "header 'h' is not a finite number"),
        (Message(headers={"h": 2**64}), "header 'h' is an integer beyond 64 bits"),
        (Message(headers={"h": -(2**63) - 1}), "beyond 64 bits"),
        (Message(headers={f"h{n}": n for n in range(1001)}), "1001 headers; the limit is 1000"),
    ],
    ids=["address", "return-address", "text-body", "header-value", "header-name", "nan",
         "infinity", "minus-infinity", "above-64-bits", "below-64-bits", "1001-headers"],
)  # fmt: skip
def test_values_no_later_stage_could_carry_are_refused_without_echoing_them(
    refused, wired: Engine, message: Message, why: str
) -> None:
    """Issue 12: what JSON, Redis or a WebSocket frame cannot carry is refused at publish,
    and the reason says what is wrong without repeating the bytes."""
    error = refused(wired, InvalidArgument, wired.publish, "orders", message)
    assert why in str(error)
    assert not any("\ud800" <= c <= "\udfff" for c in str(error))


def test_values_at_the_edge_of_what_json_carries_are_accepted(wired: Engine) -> None:
    headers = {"u64": 2**64 - 1, "i64": -(2**63), "tiny": 5e-324, "big": 1.7e308, "t": "✓"}
    wired.publish("orders", Message(address="é.✓", headers=headers, body="ünïcode"))
    assert wired.stats("orders")["published"] == 2


def test_headers_that_are_not_a_mapping_are_refused(refused, wired: Engine) -> None:
    refused(wired, InvalidArgument, wired.publish, "orders", Message(headers=[("a", 1)]))


def test_publish_needs_a_message(refused, wired: Engine) -> None:
    refused(wired, InvalidArgument, wired.publish, "orders", b"raw bytes")
    refused(wired, InvalidArgument, wired.publish, "orders", Message(address=5))


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("when_match", ("like", "x")),
        ("when_match", ("regex", "(unclosed")),
        ("when_match", ("topic", 5)),
        ("when_match", ("eq", "x", "bad field")),
        ("when_filter", ("priority >",)),
        ("when_filter", ("",)),
    ],
)
def test_malformed_conditions_are_refused(refused, wired: Engine, method: str, args: tuple) -> None:
    selector = wired.selectors("orders")[0]
    refused(wired, (InvalidSelector, InvalidArgument), getattr(selector, method), *args)


def test_bad_regex_reports_its_column(refused, wired: Engine) -> None:
    selector = wired.selector_create("orders")
    error = refused(wired, InvalidSelector, selector.when_match, "regex", "ab(c")
    assert error.column == 3


def test_bad_filter_reports_its_column(refused, wired: Engine) -> None:
    selector = wired.selector_create("orders")
    error = refused(wired, InvalidSelector, selector.when_filter, "priority = = 5")
    assert error.column == 12


@pytest.mark.parametrize("start", ["middle", 0, -1, 2.5, None])
def test_bad_start_positions_are_refused(refused, wired: Engine, start) -> None:
    refused(wired, InvalidArgument, wired.selectors("orders")[0].start_at, start)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"limit": -1}, InvalidArgument),
        ({"limit": "10"}, InvalidArgument),
        ({"history": -5}, InvalidArgument),
        ({"self_destruct": "yes"}, InvalidArgument),
        ({"dead_letter": "missing"}, NotFound),
        ({"store": "missing"}, NotFound),
    ],
)
def test_bad_queue_settings_are_refused(refused, wired: Engine, kwargs: dict, error) -> None:
    refused(wired, error, wired.queue_create, "new", **kwargs)


def test_browse_arguments_are_checked(refused, wired: Engine) -> None:
    refused(wired, InvalidArgument, wired.browse, "orders", start="middle")
    refused(wired, InvalidArgument, wired.browse, "orders", start="latest", before=3)
    refused(wired, InvalidArgument, wired.browse, "orders", count=-1)
    refused(wired, InvalidArgument, wired.since, "orders", "yesterday")


def test_unknown_store_kind_and_unavailable_stores_are_refused(refused, wired: Engine) -> None:
    refused(wired, InvalidArgument, wired.store_create, "mongo", "m")
    refused(wired, StoreError, wired.store_create, "redis", "r", url="redis://127.0.0.1:1/0")


def test_batch_publish_with_one_bad_message_publishes_none(refused, wired: Engine) -> None:
    batch = [Message(body=b"ok"), Message(body=None), Message(body=b"ok")]
    refused(wired, InvalidArgument, wired.publish_many, "orders", batch)


def test_batch_confirm_with_one_unknown_tag_confirms_none(refused, eng: Engine) -> None:
    eng.queue_create("q")
    eng.selector_create("q").when_always().do_deliver("app").enable()
    deliveries = eng.publish_many("q", [Message(), Message()])
    refused(eng, NotFound, eng.confirm_many, [deliveries[0], "q:1:bogus.9"])
    refused(eng, NotFound, eng.confirm_many, [deliveries[0], deliveries[0]])
    assert eng.confirm_many(deliveries) == []


# wiring numbers have ranges (the catalog's integer columns): out of range is refused before
# anything changes, so the running engine and its catalog never disagree
@pytest.mark.parametrize(
    ("call", "args", "kwargs"),
    [
        ("queue_create", ("big", None, 2**31), {}),
        ("queue_create", ("big", None, None, 2**63), {}),
        ("queue_update", ("orders",), {"limit": 9223372036854775808}),
        ("queue_update", ("orders",), {"history": 2**31}),
        ("set_credit", (2**31,), {}),
        ("set_credit", (-2,), {}),
        ("credit", (2**31,), {}),
        ("start_at", (2**63,), {}),
    ],
)
def test_wiring_numbers_out_of_range_are_refused(
    refused, wired: Engine, call: str, args: tuple, kwargs: dict
) -> None:
    if call in ("set_credit", "credit", "start_at"):
        target = getattr(wired.selector_fetch("orders", 1).set_credit(5), call)
    else:
        target = getattr(wired, call)
    refused(wired, InvalidArgument, target, *args, **kwargs)


def test_wiring_ranges_take_their_largest_values(eng: Engine) -> None:
    info = eng.queue_create("q", limit=2**31 - 1, history=2**31 - 1)
    assert (info.limit, info.history) == (2**31 - 1, 2**31 - 1)
    selector = eng.selector_create("q").set_credit(2**31 - 1).start_at(2**63 - 1)
    assert selector.available_credit == 2**31 - 1


def test_a_pattern_with_credit_out_of_range_builds_nothing(refused, wired: Engine) -> None:
    from engine.patterns import parrot, wolfpack

    refused(wired, InvalidArgument, wolfpack, wired, "jobs", "w1", credit=2**70)
    refused(wired, InvalidArgument, wolfpack, wired, "jobs", "w1", credit=int(-1.67e20))
    # a new router queue, a topic that is refused: no router queue is left behind
    refused(wired, InvalidSelector, parrot, wired, "sub", "a." * 501, router="news")
    refused(wired, InvalidName, wolfpack, wired, "jobs", "w" * 200)


def test_a_filter_with_a_5001_digit_number_is_refused_with_its_column(refused, wired: Engine):
    selector = wired.selector_fetch("orders", 1)
    error = refused(wired, InvalidSelector, selector.when_filter, "n = " + "9" * 5_001)
    assert error.column == 5 and "64 bits" in str(error)


def test_header_names_are_remembered_only_once_they_passed(refused, wired: Engine) -> None:
    """The header-name check remembers names that passed (the router checks every message
    again): a refused name is refused every time, a remembered one is still taken only as
    a plain str, and the memory is bounded."""
    from engine import validation

    for _ in range(2):
        refused(wired, InvalidArgument, wired.publish, "orders", Message(headers={" x": 1}))
    wired.publish("orders", Message(headers={"kept": 1}))
    assert "kept" in validation._known_names
    assert " x" not in validation._known_names

    class Odd(str):
        def __hash__(self) -> int:
            return hash("kept")

        def __eq__(self, other: object) -> bool:
            return True

    with pytest.raises(InvalidArgument):
        validation.check_header_name(Odd(" not a name"))
    before = len(validation._known_names)
    names = [f"n{n}" for n in range(validation.KNOWN_NAMES + 10)]
    for name in names:
        validation.check_header_name(name)
    assert before <= len(validation._known_names) <= validation.KNOWN_NAMES
