"""Typed tables: a TOML table read into a frozen dataclass, with errors that say where.

Every section of a run specification is a dataclass; :func:`parse` checks a
table against its fields' type hints (unknown keys with a "did you mean", wrong
types, missing required keys) and against bounds declared on the field
(:func:`bounded`). Errors name the file, the table, the key, what was found and
what would fix it. Dataclasses rather than pydantic: the schema stays in the
standard library, and integral floats (``20.0``) and 0-d tensors are accepted
through the same number rules as every other input of the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import operator
import re
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import numpy as np

from decentopt._checks import as_count, as_real, unknown_name

__all__ = ["ConfigError", "bounded", "call_value", "check_fields", "parse", "prefixed", "read_call"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message says where and why."""


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
    one_of: tuple[Any, ...] | None = None,
    limits: tuple[float, float] | None = None,
    unit: str = "",
    note: str = "",
    message: str = "",
    **field: Any,
) -> Any:
    """A dataclass field whose value must be ``>= minimum`` or ``> above``, and ``<= maximum``
    or ``< below`` (or ``one_of`` some values); a tuple's every entry must. ``unit`` follows
    the bound in the error and ``note`` says what it is, or ``message`` says it all
    ("names agents by index >= 0"). ``limits=(low, high)``: the range beyond which a number
    means nothing (a clock that overflows), checked first, an infinite number included,
    where the dataclass is built only. :func:`parse` (a specification's tables) and
    :func:`check_fields` (hyper-parameters) check it; ``field``: further arguments of
    ``dataclasses.field`` (``kw_only``)."""
    bounds = {"minimum": minimum, "above": above, "maximum": maximum, "below": below}
    words = {"unit": unit, "note": note, "message": message}
    metadata = {**bounds, "one_of": one_of, "limits": limits, **words}
    return dataclasses.field(default=default, metadata=metadata, **field)


#: Each bound: its words in an interval, its words alone, and whether a value keeps it.
_BOUNDS: dict[str, tuple[str, str, Callable[[Any, Any], bool]]] = {
    "minimum": ("[{}", ">= {}", operator.ge),
    "above": ("({}", "> {}", operator.gt),
    "maximum": ("{}]", "<= {}", operator.le),
    "below": ("{})", "< {}", operator.lt),
}


def _range(metadata: Mapping[str, Any], value: Any = None) -> str:
    """The declared bounds in words (``>= 1``, ``in [0, 1)``); with ``value``, the one it
    breaks (``<= 100``)."""
    declared = [key for key in _BOUNDS if metadata.get(key) is not None]
    if value is not None:
        declared = [key for key in declared if not _BOUNDS[key][2](value, metadata[key])]
    if len(declared) == 2:  # a lower bound, then an upper one
        lower, upper = (_BOUNDS[key][0].format(metadata[key]) for key in declared)
        return f"in {lower}, {upper}"
    return "".join(_BOUNDS[key][1].format(metadata[key]) for key in declared)


def _within(metadata: Mapping[str, Any], value: Any) -> bool:
    bounds = ((keeps, metadata.get(key)) for key, (_, _, keeps) in _BOUNDS.items())
    return all(bound is None or keeps(value, bound) for keeps, bound in bounds)


def _switch(value: Any, what: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{what} must be true or false; got {value!r}")
    return bool(value)


def _whole(value: Any, what: str) -> int:
    """A whole number of 64 bits, what torch and numpy take."""
    out = as_count(value, what, minimum=-(2**63))
    if out >= 2**63:
        raise ValueError(f"{what} must be <= 2**63 - 1 (64 bits); got {out}")
    return out


def _whole_numbers(value: Any, what: str) -> tuple[int, ...]:
    return tuple(_whole(entry, what) for entry in value)


#: How :func:`check_fields` reads a field by its annotation.
_READERS = {"float": as_real, "int": _whole, "tuple[int,...]": _whole_numbers, "bool": _switch}


def check_fields(obj: Any, who: str = "") -> None:
    """Check and normalise a frozen dataclass's fields where it is built (``__post_init__``):
    each number, whole number (of 64 bits), tuple of them and switch by its annotation
    (``float``, ``int``, ``tuple[int, ...]``, ``bool``, ``| None`` allowed), then against
    its declared limits and bounds (:func:`bounded`). Errors are one line naming ``who``
    (else the object's ``name``: ``__post_init__ = check_fields``) and the field: a
    ``TypeError`` for a value of another type, a ``ValueError`` for one out of bounds."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        hint = str(f.type).replace(" ", "")
        if not f.init or (value is None and hint.endswith("|None")):
            continue
        meta = f.metadata
        note = f" ({meta['note']})" if meta.get("note") else ""
        said = meta.get("unit", "") + note
        what = f"{who or obj.name}: {f.name}"
        limits = meta.get("limits")
        read = _READERS.get(hint.removesuffix("|None"))
        if limits is not None:
            value = as_real(value, what, finite=False)
            if math.isnan(value):
                raise ValueError(f"{what} must be a number; got {value!r}")
            if not limits[0] <= value <= limits[1]:
                low, high = limits
                raise ValueError(f"{what} must be >= {low:g} and <= {high:g}{said}; got {value!r}")
        elif read is not None:
            value = read(value, what)
        object.__setattr__(obj, f.name, value)
        for entry in value if isinstance(value, tuple) else (value,):
            choices = meta.get("one_of")
            if choices is not None and entry not in choices:
                raise ValueError(
                    f"{what} must be one of {', '.join(map(repr, choices))}; got {entry!r}"
                )
            if not _within(meta, entry):
                must = meta.get("message") or f"must be {_range(meta)}{said}"
                raise ValueError(f"{what} {must}; got {entry}")


@contextlib.contextmanager
def prefixed(
    owner: str,
    errors: type[Exception] | tuple[type[Exception], ...] = (TypeError, ValueError),
    into: type[Exception] | None = None,
) -> Iterator[None]:
    """The block's ``errors`` said as ``owner``'s (``choco: unknown compression ...``), in one
    line without the frames inside: of the same type, or ``into`` (a :class:`ConfigError`)."""
    try:
        yield
    except errors as exc:
        raise (into or type(exc))(f"{owner}: {exc}") from None


def _kind(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if origin in (tuple, list):
        return "a list of " + {int: "whole numbers", float: "numbers", str: "strings"}.get(
            get_args(hint)[0], "values"
        )
    if origin in (Union, types.UnionType):
        return " or ".join(_kind(a) for a in get_args(hint) if a is not type(None))
    return {
        int: "a whole number",
        float: "a number",
        str: "a string",
        bool: "true or false",
        dict: "a table",
    }.get(hint, getattr(hint, "__name__", str(hint)))


def _convert(hint: Any, value: Any, where: str, key: str) -> Any:
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin is Literal:
        if value not in get_args(hint):
            raise ConfigError(f"{where}: " + unknown_name(key, value, get_args(hint)))
        return value
    if origin in (Union, types.UnionType):
        for option in get_args(hint):
            try:
                return _convert(option, value, where, key)
            except ConfigError:
                # a table read as its dataclass: that table's own error says what is wrong
                if dataclasses.is_dataclass(option) and isinstance(value, dict):
                    raise
                continue
    elif origin is tuple and isinstance(value, list | tuple):
        try:
            return tuple(_convert(get_args(hint)[0], v, where, key) for v in value)
        except ConfigError:
            pass
    elif origin is dict and isinstance(value, dict):  # each value by the declared type
        return {k: _convert(get_args(hint)[1], v, where, f"{key}.{k}") for k, v in value.items()}
    elif dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return parse(hint, value, f"{where.split(' [')[0]} [{key}]")
    elif hint is int:
        try:
            return as_count(value, key, minimum=-(2**63))
        except TypeError:
            pass
    elif hint is float:
        try:
            return as_real(value, key)
        except (TypeError, ValueError):
            pass
    elif origin is None and isinstance(value, hint):
        return value
    raise ConfigError(f"{where}: '{key}' must be {_kind(hint)}, found {value!r}")


def parse(cls: type[T], table: dict[str, Any], where: str) -> T:
    """``cls(**table)`` after checking keys, types and declared bounds."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table of keys, found {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    hints = get_type_hints(cls)
    for key in table:
        if key not in fields:
            raise ConfigError(f"{where}: {unknown_name('key', key, fields)}")
    missing = [name for name, f in fields.items() if name not in table and _required(f)]
    if missing:  # every one at once: a run of many processes is not restarted key by key
        keys = ", ".join(f"'{name}'" for name in missing)
        plural = "s" if len(missing) > 1 else ""
        raise ConfigError(f"{where}: missing required key{plural} {keys}")
    values = {}
    for name, given in table.items():
        value = _convert(hints[name], given, where, name)
        if isinstance(value, int | float) and not _within(fields[name].metadata, value):
            bound = _range(fields[name].metadata, value)
            raise ConfigError(f"{where}: '{name}' must be {bound}, found {value}")
        values[name] = value
    with prefixed(where, into=ConfigError):  # the dataclass's own cross-field checks
        return cls(**values)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_CALL = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\((.*)\))?\s*", re.S)
_KEY = re.compile(r"([A-Za-z_]\w*)\s*=(.*)", re.S)
_MARKS = re.compile(r"'[^']*'|\"[^\"]*\"|[(),]")


def call_value(text: str) -> Any:
    """An argument of :func:`read_call`: quoted text, a number, true or false, else the text."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def read_call(
    spec: object, table: Mapping[str, type[T]], what: str, examples: str, instance: str
) -> tuple[str, type[T], dict[str, Any]]:
    """Text ``NAME(ARGS)`` naming a dataclass of ``table`` (a gossip, a compression
    operator): the name, the class and its arguments by field, each read by
    :func:`call_value`. Bare values set the fields that are not keyword-only, in their
    order, before the first ``KEY=VALUE``. Errors are one line, with ``examples`` of the
    text and ``instance``, what else ``spec`` may be."""
    if not isinstance(spec, str):
        raise TypeError(
            f"{what} must be text such as {examples} or {instance}; "
            f"got {type(spec).__name__} {spec!r}"
        )
    match = _CALL.fullmatch(spec)
    if match is None:
        raise ValueError(f"{what} {spec!r}: write NAME or NAME(ARGS), e.g. {examples}")
    name = match.group(1).lower()
    text = match.group(2) or ""
    if name not in table:
        raise ValueError(unknown_name(what, name, table))
    parts: list[str] = []
    depth = 0  # split at the commas outside () and quotes
    start = 0
    for mark in _MARKS.finditer(text):  # a quoted text passed over whole
        if mark.group() in ("(", ")"):
            depth += 1 if mark.group() == "(" else -1
        elif mark.group() == "," and depth == 0:
            parts.append(text[start : mark.start()])
            start = mark.end()
    args: list[tuple[str | None, str]] = []
    for part in filter(None, (p.strip() for p in [*parts, text[start:]])):
        key = _KEY.fullmatch(part)
        args.append((key.group(1), key.group(2).strip()) if key else (None, part))
    init = [f for f in dataclasses.fields(table[name]) if f.init]  # type: ignore[arg-type]
    fields = [f.name for f in init]
    order = [f.name for f in init if not f.kw_only]
    kwargs: dict[str, Any] = {}
    for k, (key, raw) in enumerate(args):
        if key is None and not order:
            named = f" (or {name}({fields[0]}=...) for its {fields[0]})" if fields else ""
            raise ValueError(
                f"{what} {spec!r}: {name} takes no value in parentheses; write {name!r}{named}"
            )
        if key is None and (k >= len(order) or any(a[0] for a in args[:k])):
            raise ValueError(
                f"{what} {spec!r}: {name} takes {', '.join(order)} by position; name the "
                f"argument {raw!r} (KEY=VALUE)"
            )
        kwargs[key or order[k]] = call_value(raw)
    for key in (key for key in kwargs if key not in fields):
        raise ValueError(f"{what} {spec!r}: {unknown_name(f'{name} argument', key, fields)}")
    return name, table[name], kwargs
