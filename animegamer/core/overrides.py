"""Named overrides of a typed config: a YAML file of fields and ``KEY=VALUE`` pairs from the command line.

A part's config dataclass holds its shipped values as defaults (or a preset does); a run that differs, an
ablation of the paper's table or a step of an old recipe, names only what it changes, in one small file
(``--config FILE``) or inline (``--set KEY=VALUE``), as nanoGPT's configurator does. Every key must be a
field of the config and every value of the field's kind, so a typo fails before minutes of encoding rather
than training the wrong thing silently. Nested configs take a mapping (``train: {lr: 1e-4}``) or a dotted
key (``train.lr=1e-4``).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from animegamer.core.errors import UserFacingError

C = TypeVar("C")
MAX_FILE_BYTES = 64 * 1024  # an override file is a handful of lines


def load_override_file(path: str | Path) -> dict[str, Any]:
    """A YAML mapping of field -> value, checked to be one."""
    p = Path(path)
    if not p.is_file():
        raise UserFacingError(f"config override {p}: no such file")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise UserFacingError(f"config override {p}: over {MAX_FILE_BYTES} bytes; an override names a few fields")
    try:
        d = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UserFacingError(f"config override {p}: not YAML ({e})") from None
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise UserFacingError(f"config override {p}: a mapping of field: value, got {type(d).__name__}")
    return d


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """``["a=1", "train.lr=1e-4"]`` -> ``{"a": 1, "train": {"lr": 1e-4}}`` (values read as YAML scalars)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise UserFacingError(f"--set {pair!r}: expected KEY=VALUE")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        *parents, leaf = key.strip().split(".")
        node = out
        for name in parents:
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                raise UserFacingError(f"--set {pair!r}: {name} is given both as a value and as a config")
        node[leaf] = value
    return out


def apply_overrides(config: C, overrides: dict[str, Any], where: str = "config") -> C:
    """``config`` (a dataclass) with ``overrides`` replacing its fields, each checked against the field's type."""
    if not overrides:
        return config
    hints = typing.get_type_hints(type(config))
    names = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for key, value in overrides.items():
        if key not in names:
            raise UserFacingError(f"{where}: no field {key!r} in {type(config).__name__} (fields: {', '.join(sorted(names))})")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            changes[key] = apply_overrides(current, value, f"{where}.{key}")
        else:
            changes[key] = _coerce(value, hints[key], f"{where}.{key}")
    try:
        return dataclasses.replace(config, **changes)
    except (TypeError, ValueError) as e:  # the config's own checks
        raise UserFacingError(f"{where}: {e}") from None


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the annotated type: a list for a tuple, an int for a float; anything else is an error."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, where)
            except UserFacingError:
                continue
        raise UserFacingError(f"{where}: {value!r} is not {hint}")
    if origin is tuple and isinstance(value, (list, tuple)):
        item = args[0] if args else Any
        return tuple(_coerce(v, item, where) for v in value)
    if hint is Any:
        return value
    if hint is float and isinstance(value, (int, str)) and not isinstance(value, bool):
        try:  # YAML reads 1e-4 (no dot) as a string
            return float(value)
        except ValueError:
            pass
    if isinstance(hint, type) and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise UserFacingError(f"{where}: {value!r} is not {getattr(hint, '__name__', hint)}")
