"""The JSON codec every stored value goes through, on both storages.

Owns: the one compact ASCII encoder (compact_json), its checks (dump_json:
JSON at all, within a size limit, nested at most MAX_JSON_DEPTH deep),
stored_json (the text and the value every reader gets back from it: keys
that collide as text refused), and decoding that never depends on the
caller's stack depth (load_json, on_fresh_stack). Imports: errors, jobs
(the limits).

Nothing here touches a file or a clock.
"""

from __future__ import annotations

import _thread
import json
import json.scanner
import re
from collections.abc import Callable
from itertools import accumulate, chain, repeat
from operator import is_
from typing import Any, TypeVar

from .errors import SerializationError
from .jobs import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES

T = TypeVar("T")

# ---------------------------------------------------------------- JSON
_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"), check_circular=True)
# The C encoder built once, without the per-call setup of JSONEncoder.encode and without
# the circular-reference table: a cycle ends in RecursionError, and the checking encoder
# above then says which it was. Same output byte for byte; None where the C part is missing.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_FAST_ENCODE = (
    _make_c_encoder(None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
    if _make_c_encoder is not None
    else None
)


def on_fresh_stack(call: Callable[[], T]) -> T:
    """``call()`` on a thread of its own: the whole recursion limit, whatever the caller's depth.

    For the rare retry after a RecursionError. The C JSON codec spends one
    frame of the caller's budget per level of nesting, so a value that is
    fine at the top of a stack fails inside a deep one; a fresh thread's
    stack holds any value within MAX_JSON_DEPTH.
    """
    # _thread, not threading: starting it takes no Python frames of the caller's budget,
    # which may be nearly spent (that is why we are here).
    outcome: list[Any] = []
    finished = _thread.allocate_lock()
    finished.acquire()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller, re-raised there
            outcome.append((False, exc))
        finally:
            finished.release()

    _thread.start_new_thread(run, ())
    finished.acquire()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def compact_json(value: Any) -> str:
    """Compact, ASCII-only JSON text; raises what json.dumps raises (TypeError, ValueError, RecursionError).

    Its output never depends on the caller's stack depth (see on_fresh_stack).
    """
    if _FAST_ENCODE is None:
        try:
            return _ENCODER.encode(value)
        except RecursionError:
            return on_fresh_stack(lambda: _ENCODER.encode(value))
    try:
        return "".join(_FAST_ENCODE(value, 0))
    except RecursionError:
        # A cycle, or deep, or only a deep caller: the checking encoder tells a cycle
        # apart, and on a fresh stack the caller's depth no longer counts.
        return on_fresh_stack(lambda: _ENCODER.encode(value))


_decode = json.JSONDecoder().decode
#: The C scanner straight, without JSONDecoder.decode's Python-level wrapper (framing.py's
#: decoding of every record when a queue opens uses it too): scan_once(text, 0) -> (value, end).
scan_once = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def load_json(text: str) -> Any:
    """The value JSON ``text`` holds (ValueError if it is not JSON), whatever the caller's stack depth.

    RecursionError only for nesting deeper than a fresh stack holds, which
    nothing nobroker encodes ever is.
    """
    try:
        return _decode(text)
    except RecursionError:
        return on_fresh_stack(lambda: _decode(text))


# A nesting level takes two characters of JSON at least ("[" and "]").
_SHALLOW_CHARS = 2 * (MAX_JSON_DEPTH + 1)
# A string in compact ASCII JSON (what compact_json writes), in the unrolled form that is fast on long ones.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of compact JSON ``text`` nest (0 for a scalar)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _too_deep(text: str) -> bool:
    """Is ``text`` nested deeper than MAX_JSON_DEPTH? Cheap answers first: most payloads are short."""
    if len(text) < _SHALLOW_CHARS or text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return False
    return json_depth(text) > MAX_JSON_DEPTH


def dump_json(value: Any, *, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> str:
    """Compact JSON text for ``value``, or SerializationError saying why not.

    ASCII-only on purpose: lone surrogates survive as escapes, and the bytes
    are the same whichever language writes them.
    """
    if isinstance(value, str) and len(value) > limit:
        # Every character is at least one byte of JSON: refuse without a copy of it.
        raise SerializationError(
            f"{what} is a string of {len(value):,} characters; the limit is {limit:,} bytes of JSON. "
            "Store large data elsewhere and enqueue a reference to it."
        )
    try:
        text = compact_json(value)
    except RecursionError:
        text = None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serialisable: {exc}") from None
    if text is None or _too_deep(text):
        raise SerializationError(
            f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (arrays and objects); flatten it"
        )
    if len(text) > limit:
        raise SerializationError(
            f"{what} is {len(text):,} bytes as JSON; the limit is {limit:,}. "
            "Store large data elsewhere and enqueue a reference to it."
        )
    return text


def _dump_json_many(values: list[Any], what: str) -> tuple[str, list[str]]:
    """(``dump_json`` of the list, of each value): one encoding, checked as a whole; dump_json
    value by value only on a miss (its error names why)."""
    if _FAST_ENCODE is not None:
        join = "".join
        try:
            whole = join(_FAST_ENCODE(values, 0))
        except (TypeError, ValueError, RecursionError):
            whole = ""
        if whole:
            # All dicts: each text cut out of the array at the "},{" between them (a NUL marks
            # each: our ASCII JSON has none, control characters are escaped; two "},{" never
            # overlap), one per value unless one held a "},{" of its own. Else each encoded alone.
            texts = whole[1:-1].replace("},{", "}\x00{").split("\x00")
            if len(texts) != len(values) or not all(map(isinstance, values, repeat(dict))):
                texts = [join(_FAST_ENCODE(value, 0)) for value in values]
            if max(map(len, texts), default=0) < _SHALLOW_CHARS or all(
                len(text) <= MAX_PAYLOAD_BYTES and not _too_deep(text) for text in texts
            ):
                return whole, texts
    texts = [dump_json(value, what=what) for value in values]
    return "[" + ",".join(texts) + "]", texts


class _KeysCollide(ValueError):
    """Two keys of one object that JSON text cannot tell apart (the key is their text)."""


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Our encoder writes each key of a dict once, so a repeated key in its text
    # can only be two keys that became the same string (1 and "1", True and "true").
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _KeysCollide(key)
            seen.add(key)
    return out


_STORED = json.JSONDecoder(object_pairs_hook=_distinct_keys)
#: Values that come back from their JSON text as themselves (exact types only: not subclasses).
_SELF_DECODING = frozenset({str, int, float, bool, type(None)})
_STR_KEYS = frozenset({str})


def _decode_stored(text: str, what: str) -> Any:
    """The value ``text`` (our own compact JSON) holds, whatever the caller's stack depth (as load_json).

    The plain C decoder first, then the proof that no two keys of an object
    collided: the value encodes back to ``text`` exactly (a collision keeps
    one of the two pairs, so its text would be shorter). Only a value that
    does not is decoded again with the checking hook, a Python call per
    object, which says which keys collided.
    """
    try:
        value, end = scan_once(text, 0)  # the C scanner straight: our own text has no whitespace to skip
    except (StopIteration, RecursionError):
        return _decode_checking(text, what)
    if end == len(text) and compact_json(value) == text:
        return value
    return _decode_checking(text, what)


def _decode_checking(text: str, what: str) -> Any:
    """``_decode_stored`` with a check of every object's keys (SerializationError naming a collision)."""
    try:
        try:
            return _STORED.decode(text)
        except RecursionError:
            return on_fresh_stack(lambda: _STORED.decode(text))
    except _KeysCollide as exc:
        raise SerializationError(
            f"{what} has two keys that are both {json.dumps(str(exc))} as JSON text (keys become strings: "
            "1 and \"1\", or True and \"true\", collide); make the keys distinct strings"
        ) from None


def stored_json(value: Any, *, what: str = "payload", limit: int = MAX_PAYLOAD_BYTES) -> tuple[str, Any]:
    """(JSON text of ``value``, the value every reader gets back from it): what is stored, exactly.

    The second is decoded from the text, not the caller's object: a tuple
    comes back as a list, a key 1 as "1", and later changes to the caller's
    object change nothing. Keys that collide as text: SerializationError.
    """
    text = dump_json(value, what=what, limit=limit)
    kind = type(value)
    if kind in _SELF_DECODING:
        return text, value
    if kind is dict and _STR_KEYS.issuperset(map(type, value)) and _SELF_DECODING.issuperset(map(type, value.values())):
        # The common payload, an object of plain values under plain string keys: no two
        # keys can collide, and each value reads back as itself, so a shallow copy is
        # exactly what decoding the text would give (without a decode and a re-encode).
        return text, dict(value)
    return text, _decode_stored(text, what)


def stored_json_many(values: list[Any], *, what: str = "payload") -> tuple[list[str], list[Any]]:
    """``stored_json`` of every value (enqueue_many's): the list encoded once and decoded once
    (dicts of plain values copied instead); a batch whose keys collide is checked value by
    value, so the error names the payload."""
    copies = _plain_copies(values)
    if copies is not None:
        return _dump_json_many(copies, what)[1], copies
    whole, texts = _dump_json_many(values, what)
    try:
        decoded, end = scan_once(whole, 0)  # the C scanner straight: our own text has no whitespace to skip
    except (StopIteration, RecursionError):
        decoded, end = [], -1
    if end == len(whole) and compact_json(decoded) == whole:  # else keys collided: a collision keeps one pair of two
        return texts, decoded
    return texts, [stored_json(value, what=f"{what} {i}")[1] for i, value in enumerate(values)]


def _plain_copies(values: list[Any]) -> list[dict[str, Any]] | None:
    """A copy of each value if all are dicts of str to str, int, float, bool or None (exact types).

    JSON gives such a dict back equal and of the same types, so its copy is
    what decoding would give, and its keys cannot collide. The copies are what
    gets encoded: a later change to a payload cannot part text and value.
    """
    if not all(map(is_, map(type, values), repeat(dict))):
        return None
    copies = list(map(dict.copy, values))
    keys, plain = set(map(type, chain.from_iterable(copies))), set(map(type, chain.from_iterable(map(dict.values, copies))))
    return copies if keys <= {str} and plain <= _SELF_DECODING else None
