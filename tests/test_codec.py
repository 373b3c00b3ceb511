"""Payloads travel as JSON objects; what cannot, is refused with an error that says why."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import redis

from taskq.broker import Broker
from taskq.codec import (
    MAX_DEPTH,
    MAX_READ_DEPTH,
    EncodedResult,
    args_payload,
    decode_payload,
    decode_result,
    depth,
    encode_payload,
    encode_result,
    read_json,
    result_problem,
)
from taskq.errors import InvalidTaskError, PayloadError, PayloadTooLargeError, ResultError
from taskq.settings import Settings

LIMIT = 1_048_576
UNICODE = {"greeting": "héllo wörld ✓ 你好 🎉", "ключ": ["ß", "\u0000", "\U0001f600"]}


def encode(payload: Any, max_bytes: int = LIMIT) -> str:
    return encode_payload(payload, max_bytes)


def message_of(payload: Any) -> str:
    with pytest.raises(PayloadError) as caught:
        encode(payload)
    return str(caught.value)


class TestEncodingRefusesWhatJsonCannotCarry:
    def test_a_set_is_refused_naming_its_type(self) -> None:
        assert "set" in message_of({"ids": {1, 2}})

    def test_bytes_are_refused_naming_their_type(self) -> None:
        assert "bytes" in message_of({"blob": b"\x00\x01"})

    @pytest.mark.parametrize("value", [datetime.now(UTC), Decimal("1.5"), b"ab", {1, 2}])
    def test_a_value_json_cannot_carry_is_refused_saying_how_to_pass_it(
        self, value: object
    ) -> None:
        message = message_of({"args": [value]})
        assert type(value).__name__ in message
        assert "pass JSON values" in message and ".isoformat()" in message

    @pytest.mark.parametrize("value", [datetime.now(UTC), Decimal("1.5"), b"ab", {1, 2}])
    def test_a_return_value_json_cannot_carry_is_refused_saying_how_to_return_it(
        self, value: object
    ) -> None:
        with pytest.raises(ResultError) as refused:
            encode_result({"at": value}, LIMIT)
        message = str(refused.value)
        assert type(value).__name__ in message
        assert "return JSON values" in message and ".isoformat()" in message

    @pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
    def test_nan_and_infinity_are_refused_as_having_no_json_form(self, number: float) -> None:
        assert "NaN and infinity have no JSON form" in message_of({"x": [1.0, number]})

    def test_a_dict_that_contains_itself_is_refused_as_circular(self) -> None:
        loop: dict[str, Any] = {"name": "loop"}
        loop["self"] = loop
        assert "Circular reference" in message_of(loop)

    def test_a_payload_nested_too_deeply_is_refused(self) -> None:
        deep: dict[str, Any] = {}
        for _ in range(100_000):
            deep = {"d": deep}
        assert "nests too deeply" in message_of(deep)

    def test_a_payload_past_the_depth_a_worker_reads_is_refused_at_the_call(self) -> None:
        deep: Any = 1
        for _ in range(MAX_DEPTH):
            deep = [deep]
        encode_payload({"d": deep[0]}, 10**6)  # just at the limit
        assert message_of({"d": deep}) == (f"payload nests {MAX_DEPTH + 1} levels deep, over "
                                           f"the limit of {MAX_DEPTH}")

    def test_the_depth_is_counted_whole_however_deep_and_wide(self) -> None:
        # 2,500 lists 1,000 deep: counted in one walk, not a pass per level.
        deep = "[" + ",".join(["[" * 999 + "0" + "]" * 999] * 2500) + "]"
        assert depth(deep) == 1000
        nested: Any = 0
        for _ in range(499):
            nested = [nested]
        assert message_of({"d": nested}) == (
            f"payload nests 500 levels deep, over the limit of {MAX_DEPTH}")

    def test_brackets_inside_strings_are_no_nesting(self) -> None:
        text = '{"a":"' + "[{\\\"[" * 500 + '","b":[[1]]}'
        assert depth(text) == 3
        assert depth(encode_payload({"a": "[{[" * 500, "b": [[{}]]}, LIMIT)) == 4

    def test_the_depth_read_from_the_text_is_the_values_on_random_payloads(self) -> None:
        rng = random.Random(1)
        leaves = [1, "x[", "}{", 'q"[', "b\\]", "", "ü[{"]
        key_ends = ["", "[", '"', "\\"]

        def value(levels: int) -> Any:
            if levels == 0 or rng.random() < 0.15:
                return rng.choice(leaves)
            if rng.random() < 0.5:
                return [value(levels - 1) for _ in range(rng.randrange(4))]
            return {"k" + str(i) + rng.choice(key_ends): value(levels - 1)
                    for i in range(rng.randrange(4))}

        def levels_of(v: Any) -> int:
            inner = v.values() if isinstance(v, dict) else v if isinstance(v, list) else []
            return 0 if not isinstance(v, dict | list) else 1 + max(map(levels_of, inner),
                                                                     default=0)

        for _ in range(500):
            core = value(rng.randrange(1, 10))
            for _ in range(rng.choice([0, 195, 230])):
                core = [core]
            payload = {"p": core, "pad": [[] for _ in range(rng.choice([1, 250]))]}
            text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
            want, got = levels_of(payload), depth(text)
            if text.count("[") + text.count("{") <= MAX_DEPTH:
                assert got == 0 and want <= MAX_DEPTH
            elif want <= MAX_DEPTH:
                assert got == want, text[:80]
            else:
                assert got > MAX_DEPTH

    @pytest.mark.parametrize("payload", [[1, 2], "text", 3, (1,)])
    def test_a_payload_that_is_not_a_dict_is_refused_naming_its_type(self, payload: Any) -> None:
        message = message_of(payload)
        assert "must be a JSON object" in message
        assert type(payload).__name__ in message

    def test_every_payload_error_is_an_invalid_task_error(self) -> None:
        assert issubclass(PayloadError, InvalidTaskError)
        assert issubclass(PayloadTooLargeError, PayloadError)

    def test_no_payload_encodes_as_an_empty_object(self) -> None:
        assert encode(None) == "{}"


class TestKeysJsonWouldMerge:
    @pytest.mark.parametrize(("keys", "merged"), [
        ((1, "1"), "1"), ((None, "null"), "null"), ((True, "true"), "true"),
        ((1.5, "1.5"), "1.5"), (("x", -3, "-3"), "-3"),
    ])  # fmt: skip
    def test_two_keys_that_become_one_are_refused_naming_it(
        self, keys: tuple[Any, ...], merged: str
    ) -> None:
        value = dict.fromkeys(keys, "v")
        said = f"two keys of one dict would both be {merged!r} in it, and one would be lost"
        with pytest.raises(PayloadError, match=re.escape(said)):
            encode({"deep": [{"inner": value}]})
        with pytest.raises(ResultError, match=re.escape(said)):
            encode_result(("x", value), LIMIT)

    def test_keys_that_stay_apart_as_text_are_kept(self) -> None:
        assert json.loads(encode({"m": {1: "a", 2: "b", None: "c", "x": "d"}})) == {
            "m": {"1": "a", "2": "b", "null": "c", "x": "d"}}


class TestSizeLimit:
    def test_a_payload_at_the_limit_is_accepted(self) -> None:
        text = encode({"a": "x" * 10}, max_bytes=18)
        assert len(text.encode()) == 18

    def test_a_payload_one_byte_over_is_refused_giving_size_and_limit(self) -> None:
        with pytest.raises(PayloadTooLargeError) as caught:
            encode({"a": "x" * 11}, max_bytes=18)
        message = str(caught.value)
        assert "19 bytes" in message
        assert "limit of 18 bytes" in message
        assert "TASKQ_MAX_PAYLOAD_BYTES" in message

    def test_size_is_counted_in_utf8_bytes_not_characters(self) -> None:
        with pytest.raises(PayloadTooLargeError, match="20 bytes"):
            encode({"a": "é" * 6}, max_bytes=19)

    def test_the_broker_enforces_taskq_max_payload_bytes_and_creates_nothing(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        small = dataclasses.replace(settings, max_payload_bytes=64)
        broker = Broker.from_settings(small, "limited")
        with pytest.raises(PayloadTooLargeError, match="over the limit of 64 bytes"):
            broker.enqueue("big", payload={"text": "x" * 100})
        assert broker.task("big") is None
        assert broker.counts().ready == 0
        assert broker.enqueue("small", payload={"text": "x"}).created


class TestRoundTrips:
    def test_unicode_round_trips_through_encode_and_decode(self) -> None:
        assert decode_payload(encode(UNICODE)) == UNICODE

    def test_unicode_is_stored_as_text_not_escapes(self) -> None:
        assert "你好" in encode(UNICODE)

    def test_unicode_round_trips_through_redis(self, broker: Broker) -> None:
        broker.enqueue("u1", payload=UNICODE)
        assert broker.payload("u1") == UNICODE

    def test_numbers_booleans_and_nulls_round_trip(self) -> None:
        payload = {"i": 2**62, "f": 0.1, "t": True, "n": None, "nested": {"l": [1, [2]]}}
        assert decode_payload(encode(payload)) == payload

    def test_call_arguments_are_carried_as_args_and_kwargs(self) -> None:
        assert args_payload((1, "a"), {"k": [2]}) == {"args": [1, "a"], "kwargs": {"k": [2]}}

    def test_a_nan_argument_is_refused_naming_it(self) -> None:
        with pytest.raises(PayloadError, match="argument nan has no JSON form"):
            args_payload((float("nan"),), {})


class TestDecoding:
    def test_json_nested_too_deeply_raises_payload_and_result_errors(self) -> None:
        deep = "[" * 100_000 + "]" * 100_000
        with pytest.raises(PayloadError, match="cannot be decoded: it nests too deeply"):
            decode_payload('{"args": ' + deep + "}")
        with pytest.raises(ResultError, match="cannot be decoded: it nests too deeply"):
            decode_result(deep)

    def test_json_one_level_past_the_readers_limit_is_refused_before_it_is_read(
        self,
    ) -> None:
        # Python could read it; refusing it unread keeps the reader's recursion, and any
        # finalizer the collector runs meanwhile, far from the stack's limit. Readers
        # take three levels more than writers write: a handed-on result's wrapping.
        at = "[" * MAX_READ_DEPTH + "]" * MAX_READ_DEPTH
        assert read_json(at) is not None
        past = "[" * (MAX_READ_DEPTH + 1) + "]" * (MAX_READ_DEPTH + 1)
        with pytest.raises(RecursionError, match="it nests too deeply"):
            read_json(past)
        with pytest.raises(PayloadError, match="it nests too deeply"):
            decode_payload(('{"args": ' + past[1:-1] + "}").encode())
        with pytest.raises(ResultError, match="it nests too deeply"):
            decode_result(past)
        assert result_problem(past) == "it nests too deeply"
        at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
        innermost = read_json(at_limit)
        for _ in range(MAX_DEPTH - 1):
            innermost = innermost[0]
        assert innermost == []

    @pytest.mark.parametrize("text", ["{not json", "{'single': 1}", b"\xff\xfe{"])
    def test_invalid_json_raises_payload_error(self, text: str | bytes) -> None:
        with pytest.raises(PayloadError, match="not valid JSON"):
            decode_payload(text)

    @pytest.mark.parametrize(("text", "why"), [
        ('{"args": [NaN]}', "NaN has no JSON form"),
        ('{"kwargs": {"x": -Infinity}}', "-Infinity has no JSON form"),
        ('{"args": [1e999]}', "1e999 is past a float's range"),
    ])
    def test_what_the_producer_refuses_to_encode_is_refused_when_read(
        self, text: str, why: str
    ) -> None:
        """Written by other code or by hand, it reached the handler as nan or inf."""
        with pytest.raises(PayloadError, match=f"not valid JSON: {re.escape(why)}"):
            decode_payload(text)

    @pytest.mark.parametrize(("text", "kind"), [("[1, 2]", "list"), ('"s"', "str"), ("7", "int")])
    def test_json_that_is_not_an_object_raises_payload_error(self, text: str, kind: str) -> None:
        with pytest.raises(PayloadError, match=f"is a JSON {kind}, not an object"):
            decode_payload(text)

    @pytest.mark.parametrize("text", [None, "", b""])
    def test_nothing_stored_decodes_as_an_empty_payload(self, text: str | bytes | None) -> None:
        assert decode_payload(text) == {}

    def test_bytes_decode_like_text(self) -> None:
        assert decode_payload(json.dumps({"a": "é"}).encode()) == {"a": "é"}

    def test_a_corrupt_stored_payload_raises_payload_error_when_read(
        self, broker: Broker, client: redis.Redis
    ) -> None:
        broker.enqueue("c1", payload={"ok": True})
        client.hset(broker.keys.task("c1"), "payload", "[1, 2, 3]")
        with pytest.raises(PayloadError, match="JSON list"):
            broker.payload("c1")


class TestResults:
    @pytest.mark.parametrize("value", [None, 0, 1.5, "é", [1, "two"], {"a": {"b": None}}, True])
    def test_any_json_value_round_trips(self, value: Any) -> None:
        assert decode_result(encode_result(value, LIMIT)) == value

    def test_none_is_the_json_null(self) -> None:
        assert encode_result(None, 4) == "null"

    @pytest.mark.parametrize(("value", "reason"), [
        ({1, 2}, "cannot be encoded as JSON"),
        (float("nan"), "NaN and infinity have no JSON form"),
        ("\ud800", "lone surrogate"),
        ("é" * 3, "8 bytes as JSON, over the limit of 7 bytes"),
    ])  # fmt: skip
    def test_a_value_that_cannot_be_kept_says_why(self, value: Any, reason: str) -> None:
        with pytest.raises(ResultError, match=reason):
            encode_result(value, 7)


class TestResultText:
    def test_what_encode_result_makes_is_taken_as_it_is(self) -> None:
        # Read again in another stack, a value nested nearly as deep as Python allows
        # could fail to decode, and the worker's ack would be refused.
        assert type(encode_result({"a": [1]}, 100)) is EncodedResult
        assert type(encode_result(None, 100)) is EncodedResult
        assert result_problem(EncodedResult("[" * 100_000)) is None

    def test_other_text_must_be_one_json_value(self) -> None:
        assert result_problem('{"a": [1, 2.5, "x", null]}') is None
        assert result_problem("5, 100") == "not valid JSON: Extra data: line 1 column 2 (char 1)"
        assert result_problem("[Infinity]") == "not valid JSON: Infinity has no JSON form"
