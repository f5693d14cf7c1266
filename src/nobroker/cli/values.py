"""What the words of a command line stand for: JSON values, seconds, counts; and the CLI's own failures.

Owns: CommandError, UsageError and InputError (the failures that are not the
library's), parse_json_value and reading a payload from standard input, the
argparse types that check numbers as they are parsed, and ALL (``dlq
--requeue`` with no id). Imports: jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from ..jobs import MAX_PAYLOAD_BYTES

_PLAIN_WORD = re.compile(r"\w[\w.:/@+\-]*\Z")


# ---------------------------------------------------------------- failures
class CommandError(Exception):
    """A user-facing failure outside the library's errors; exit 1, one line."""


class UsageError(CommandError):
    """The command line asks for something that cannot be meant; exit 2, one line."""


class InputError(ValueError):
    """Text on the command line (a payload, a result) that cannot be used."""


# ---------------------------------------------------------------- JSON input
class _DuplicateKeyError(ValueError):
    pass


class _NonFiniteError(ValueError):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _refuse_constant(name: str) -> NoReturn:
    raise _NonFiniteError(name)


def parse_json_value(text: str, *, what: str = "payload") -> Any:
    """The value a command-line argument stands for.

    JSON first. Text that is not JSON but is one plain word (``hello``,
    ``photo.jpg``, ``ada@example.com``) is taken as that string, so the common
    case needs no shell quoting. Duplicate keys and NaN/Infinity are refused:
    JSON readers disagree about them, and the queue must store exactly what
    was meant.
    """
    stripped = text.strip()
    try:
        return json.loads(stripped, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except _DuplicateKeyError as exc:
        raise InputError(
            f"{what} has the key {json.dumps(exc.args[0])} twice in one object; "
            "JSON readers disagree about which value wins, so nobroker refuses it. Keep one."
        ) from None
    except _NonFiniteError as exc:
        raise InputError(
            f"{what} contains {exc.args[0]}, which is not JSON; use null or a string such as \"{exc.args[0]}\""
        ) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to read as JSON") from None
    except json.JSONDecodeError as exc:
        if _PLAIN_WORD.match(stripped):
            return stripped
        raise InputError(
            f"{what} is not valid JSON ({exc.msg} at character {exc.pos}); "
            f"to send text, quote it as a JSON string, e.g. '\"hello world\"'"
        ) from None
    except ValueError as exc:  # e.g. an integer longer than Python will convert
        raise InputError(f"{what} cannot be read as JSON: {exc}") from None


def read_stdin_payload(what: str) -> str:
    # One byte over the limit is enough to know the payload is too large,
    # without reading an endless pipe into memory.
    text = sys.stdin.read(MAX_PAYLOAD_BYTES + 1)
    if len(text) > MAX_PAYLOAD_BYTES:
        raise InputError(f"{what} on standard input is larger than the {MAX_PAYLOAD_BYTES:,}-byte limit")
    if not text.strip():
        raise InputError(f"{what} on standard input is empty")
    return text


# ---------------------------------------------------------------- argument types
def seconds_arg(*, allow_zero: bool) -> Callable[[str], float]:
    bound = ">= 0" if allow_zero else "> 0"

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds {bound}, got {text!r}")
        return value

    convert.__name__ = "seconds"
    return convert


def seconds_in(low: float, high: float) -> Callable[[str], float]:
    at_least = seconds_arg(allow_zero=False)

    def convert(text: str) -> float:
        value = at_least(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number of seconds from {low:g} to {high:g}, got {text!r}")
        return value

    convert.__name__ = "seconds"
    return convert


nonneg_float = seconds_arg(allow_zero=True)
positive_float = seconds_arg(allow_zero=False)


def int_at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return value

    convert.__name__ = "int"
    return convert


def int_in(low: int, high: int) -> Callable[[str], int]:
    at_least = int_at_least(low)

    def convert(text: str) -> int:
        value = at_least(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high:,}, got {text!r}")
        return value

    convert.__name__ = "int"
    return convert


port = int_in(0, 65535)


class _All:
    """Marks ``dlq --requeue`` given without an id: requeue the whole DLQ."""

    def __repr__(self) -> str:
        return "ALL"


ALL = _All()
