"""JSON payload encoding, with the size limit and errors that say what was wrong."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from taskq.errors import PayloadError, PayloadTooLargeError, ResultError

Payload = dict[str, Any]

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

# The deepest a payload or result may nest. Python's JSON reader recurses once per
# level, and a worker (or a producer reading a result) reads deeper in its stack than
# the writer wrote: near Python's own limit, a payload written could not be read back,
# and its task went to the DLQ.
MAX_DEPTH = 200
# What a reader takes: a workflow hands a step's result on inside the next step's
# payload (its object and `args` list), and a group's results inside one more list, so
# a value written at MAX_DEPTH is read back three levels deeper.
MAX_READ_DEPTH = MAX_DEPTH + 3
# What the depth is read from: brackets, and the quotes and backslashes that say which
# brackets are inside strings (so no bracket there counts).
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"\\')
# depth's walk: each byte a step up a level (an opening bracket), down one (a closing
# bracket) or none.
_STEP = tuple(1 if c in b"[{" else -1 if c in b"]}" else 0 for c in range(256))
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
TOO_DEEP = "it nests too deeply"
_TEXT = {str}
# What a refused argument's or return value's message suggests, after "pass" or
# "return": how to convert the values a user most often gives.
JSON_VALUES = ("JSON values (dict with str keys, list, str, int, float, bool, None): "
               "a datetime as .isoformat(), a Decimal or UUID as str(), bytes as base64 "
               "text, a set as a list, a dataclass as dataclasses.asdict()")
_SCALARS = {str, int, float, bool, type(None)}


def depth(text: str) -> int:
    """How deep the JSON `text` nests (1 for a flat list or object), or 0 when it holds
    too few brackets to nest past MAX_DEPTH (counted in C: the usual payload).

    Counted on bytes as far as it can be: all but brackets, quotes and backslashes
    dropped, the strings' contents (every other piece between quotes) dropped, then
    one walk over the brackets left finds the deepest running sum of +1 per opening
    and -1 per closing one, in time linear in the text whatever its depth."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    marks = text.encode("utf-8", "surrogatepass").translate(None, _NOT_STRUCTURE)
    if b"\\" in marks:  # an escaped quote or backslash: strings cannot be cut at quotes
        return _scanned_depth(text)
    brackets = b"".join(marks.split(b'"')[::2])
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} has no JSON form")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is past a float's range, and has no JSON form")
    return value


# Python's reader takes NaN, Infinity and numbers past a float's range (read as inf),
# which no JSON has and taskq never writes: this one refuses them, as a ValueError.
STRICT = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)
_LENIENT = json.JSONDecoder()


def read_json(text: str | bytes, decoder: json.JSONDecoder = _LENIENT) -> Any:
    """`text` decoded by `decoder`. Text nesting past MAX_READ_DEPTH raises the
    RecursionError reading it could, found before reading: the reader recurses once
    per level, and near the stack's limit whatever the collector finalizes meanwhile (a
    dropped connection's close) fails too, printed as an unraisable exception."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")  # a UnicodeDecodeError is a ValueError, as from json
    if depth(text) > MAX_READ_DEPTH:
        raise RecursionError(TOO_DEEP)
    return decoder.decode(text)


def _scanned_depth(text: str) -> int:
    level = deepest = 0
    for token in _STRING_OR_BRACKET.findall(text):
        if token in ("[", "{"):
            level += 1
            deepest = max(deepest, level)
        elif token in ("]", "}"):
            level -= 1
    return deepest


def colliding_key(value: Any) -> str | None:
    """A key JSON gives two keys of one dict in `value` (`1` and `"1"` both become
    "1"; a reader keeps the last and the other is lost), or None. `value` is one the
    encoder took, so it holds no cycle."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is dict or isinstance(item, dict):
            if set(map(type, item)) - _TEXT and (key := _repeated_key(item)) is not None:
                return key
            push(item.values())
        elif kind is list or isinstance(item, (list, tuple)):
            push(item)
    return None


def _repeated_key(item: dict[Any, Any]) -> str | None:
    pairs = json.loads(_encoder.encode(dict.fromkeys(item, 0)), object_pairs_hook=list)
    keys = [k for k, _ in pairs]
    return next((k for k in keys if keys.count(k) > 1), None)


def encode_payload(payload: Payload | None, max_bytes: int) -> str:
    """JSON text of `payload` (an object), or raise `PayloadError` saying why it can't be."""
    if payload is None:
        return "{}"
    if not isinstance(payload, dict):
        raise PayloadError(
            f"payload must be a JSON object (a dict), not {type(payload).__name__}"
        )
    try:
        text = _encoder.encode(payload)
    except TypeError as e:
        raise PayloadError(f"payload cannot be encoded as JSON: {_describe(e)}; "
                           f"pass {JSON_VALUES}") from e
    except (ValueError, RecursionError) as e:
        raise PayloadError(f"payload cannot be encoded as JSON: {_describe(e)}") from e
    if (key := colliding_key(payload)) is not None:
        raise PayloadError(f"payload cannot be encoded as JSON: two keys of one dict would "
                           f"both be {key!r} in it, and one would be lost")
    if (levels := depth(text)) > MAX_DEPTH:
        raise PayloadError(f"payload nests {levels} levels deep, over the limit of "
                           f"{MAX_DEPTH}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise PayloadError(
            f"payload cannot be encoded as UTF-8: it holds a lone surrogate ({e.reason} at "
            f"character {e.start} of its JSON)"
        ) from e
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"payload is {size} bytes as JSON, over the limit of {max_bytes} bytes "
            "(TASKQ_MAX_PAYLOAD_BYTES)"
        )
    return text


class EncodedResult(str):
    """A result's JSON text as `encode_result` made it, which the Broker takes as it is;
    other text it checks first (`result_problem`)."""

    __slots__ = ()


NULL_RESULT = EncodedResult("null")


def encode_result(value: Any, max_bytes: int) -> EncodedResult:
    """JSON text of a handler's return value (any JSON value), or `ResultError` saying
    why it cannot be kept."""
    if value is None:
        return NULL_RESULT  # what most handlers return: a tenth of the encoder's cost
    try:
        text = _encoder.encode(value)
    except (TypeError, ValueError, RecursionError) as e:
        raise ResultError(f"the return value cannot be encoded as JSON: {_describe(e)}; "
                          f"return {JSON_VALUES}") from e
    if (key := colliding_key(value)) is not None:
        raise ResultError(f"the return value cannot be encoded as JSON: two keys of one dict "
                          f"would both be {key!r} in it, and one would be lost")
    if (levels := depth(text)) > MAX_DEPTH:
        raise ResultError(f"the return value nests {levels} levels deep, over the limit of "
                          f"{MAX_DEPTH}")
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise ResultError(f"the return value cannot be encoded as UTF-8: it holds a lone "
                          f"surrogate ({e.reason} at character {e.start} of its JSON)") from e
    if size > max_bytes:
        raise ResultError(f"the return value is {size} bytes as JSON, over the limit of "
                          f"{max_bytes} bytes (TASKQ_MAX_RESULT_BYTES)")
    return EncodedResult(text)


def decode_result(text: str) -> Any:
    """The value stored as JSON `text` by `encode_result`."""
    try:
        return read_json(text)
    except (ValueError, RecursionError) as e:
        raise ResultError(f"stored result cannot be decoded: {_read_error(e)}") from e


def result_problem(text: str) -> str | None:
    """Why `text` is not a result as `encode_result` writes it (one JSON value, no NaN
    or Infinity), or None if it is one (or `encode_result` made it: read again, a value
    nested nearly as deep as Python allows could fail in another stack). A result acked
    through the Broker by other code than taskq's worker is read by producers and handed
    to a workflow's next stage as its text: refused here, it can neither fail the reader
    nor add arguments there."""
    if type(text) is EncodedResult or text == "null":
        return None
    try:
        read_json(text, STRICT)
    except (ValueError, RecursionError) as e:
        return _read_error(e)
    return None


def decode_payload(text: str | bytes | None) -> Payload:
    """The payload stored as `text`; raise `PayloadError` if it is not a JSON object, or
    holds what the producer refuses to encode (NaN, Infinity): written by other code or
    by hand, it would reach the handler, and its effect, as a value no producer sends."""
    if text is None or text in ("", b""):
        return {}
    try:
        value = read_json(text, STRICT)
    except (ValueError, RecursionError) as e:
        # The worker decodes deeper in its stack than the producer encoded, so a payload
        # nested nearly as deep as Python allows can be encoded and not decoded.
        raise PayloadError(f"stored payload cannot be decoded: {_read_error(e)}") from e
    if not isinstance(value, dict):
        raise PayloadError(f"stored payload is a JSON {type(value).__name__}, not an object")
    return value


def _read_error(error: Exception) -> str:
    if isinstance(error, RecursionError):
        return TOO_DEEP
    return f"not valid JSON: {error}"


def _describe(error: Exception) -> str:
    if isinstance(error, RecursionError):
        return "it nests too deeply (or refers to itself)"
    message = str(error)
    if "Out of range float" in message:
        return "NaN and infinity have no JSON form"
    return message


def args_payload(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Payload:
    """The payload that carries a function call's arguments."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, float) and not math.isfinite(value):
            raise PayloadError(f"argument {value!r} has no JSON form")
    return {"args": list(args), "kwargs": kwargs}
