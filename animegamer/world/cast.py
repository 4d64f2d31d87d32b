"""The cast of the procedural anime world: characters described in YAML.

`load_cast()` reads `data/cast.yaml` (or a user file), validates every field and
returns `CharacterSpec`s; `random_look()` draws the per-session variation (which
outfit palette the character wears today), which no instruction mentions: only the
visual history reveals it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

RGB = tuple[int, int, int]

HAIR_STYLES = ("twin_tails", "long_straight", "bob", "spiky", "ponytail", "short_messy",
               "bun", "braids", "side_swept")
OUTFIT_TYPES = ("dress", "hoodie", "sailor_uniform", "blazer_uniform", "witch_robe",
                "overalls", "kimono", "tshirt_shorts", "coat")
ACCESSORY_TYPES = ("witch_hat", "ribbon", "star_clip", "headphones", "cap", "flower",
                   "glasses", "scarf", "cat_ears", "bag", "sunhat", "beret")
PRONOUNS = ("she", "he", "they")
OUTFIT_KEYS = ("top", "bottom", "accent", "shoes")
HEIGHT_RANGE = (0.7, 1.25)
_HEX = re.compile(r"^#[0-9a-fA-F]{6}$")


@dataclass(frozen=True)
class Accessory:
    type: str
    color: RGB


@dataclass(frozen=True)
class OutfitVariant:
    """An alternative palette: None keeps the default colour."""
    top: RGB | None = None
    bottom: RGB | None = None
    accent: RGB | None = None
    shoes: RGB | None = None
    accessories: dict[str, RGB] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class CharacterSpec:
    name: str
    pronoun: str
    description: str
    height: float
    skin: RGB
    eyes: RGB
    hair_style: str
    hair_color: RGB
    outfit_type: str
    top: RGB
    bottom: RGB
    accent: RGB
    shoes: RGB
    accessories: tuple[Accessory, ...]
    outfit_variants: tuple[OutfitVariant, ...]


@dataclass(frozen=True)
class Look:
    """One session's appearance of a character: variant 0 is the default outfit,
    variant k >= 1 is `spec.outfit_variants[k - 1]`. Colours are resolved here so the
    renderer never looks anything up."""
    variant: int
    top: RGB
    bottom: RGB
    accent: RGB
    shoes: RGB
    accessories: tuple[Accessory, ...]


def hex_to_rgb(value: str) -> RGB:
    return (int(value[1:3], 16), int(value[3:5], 16), int(value[5:7], 16))


class _Checker:
    """Builds error messages that name the file, the character and the field."""

    def __init__(self, source: str, name: str):
        self.source, self.name = source, name

    def fail(self, fld: str, msg: str) -> None:
        raise ValueError(f"{self.source}: character {self.name!r}, field {fld!r}: {msg}")

    def get(self, d: dict, key: str, prefix: str = "") -> Any:
        if not isinstance(d, dict) or key not in d:
            self.fail(prefix + key, "is missing")
        return d[key]

    def color(self, value: Any, fld: str) -> RGB:
        if not isinstance(value, str) or not _HEX.match(value):
            self.fail(fld, f"expected a colour like \"#ff8800\", got {value!r}")
        return hex_to_rgb(value)

    def choice(self, value: Any, fld: str, options: tuple[str, ...]) -> str:
        if value not in options:
            self.fail(fld, f"got {value!r}, expected one of {', '.join(options)}")
        return value

    def no_extra(self, d: dict, allowed: tuple[str, ...], prefix: str = "") -> None:
        extra = sorted(set(d) - set(allowed))
        if extra:
            self.fail(prefix + str(extra[0]), f"unknown field (allowed: {', '.join(allowed)})")


_TOP_KEYS = ("pronoun", "description", "height", "skin", "eyes", "hair", "outfit",
             "accessories", "outfit_variants")


def _parse_character(name: str, raw: Any, source: str) -> CharacterSpec:
    c = _Checker(source, name)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{source}: character names must be non-empty strings, got {name!r}")
    if not isinstance(raw, dict):
        c.fail("(entry)", f"expected a mapping of fields, got {type(raw).__name__}")
    c.no_extra(raw, _TOP_KEYS)
    pronoun = c.choice(c.get(raw, "pronoun"), "pronoun", PRONOUNS)
    description = c.get(raw, "description")
    if not isinstance(description, str) or not description.strip():
        c.fail("description", "expected a non-empty line of text")
    height = c.get(raw, "height")
    if isinstance(height, bool) or not isinstance(height, (int, float)) \
            or not HEIGHT_RANGE[0] <= height <= HEIGHT_RANGE[1]:
        c.fail("height", f"expected a number in {HEIGHT_RANGE[0]}..{HEIGHT_RANGE[1]}, got {height!r}")
    skin = c.color(c.get(raw, "skin"), "skin")
    eyes = c.color(c.get(raw, "eyes"), "eyes")
    hair = c.get(raw, "hair")
    if not isinstance(hair, dict):
        c.fail("hair", "expected {style, color}")
    c.no_extra(hair, ("style", "color"), "hair.")
    hair_style = c.choice(c.get(hair, "style", "hair."), "hair.style", HAIR_STYLES)
    hair_color = c.color(c.get(hair, "color", "hair."), "hair.color")
    outfit = c.get(raw, "outfit")
    if not isinstance(outfit, dict):
        c.fail("outfit", "expected {type, top, bottom, accent, shoes}")
    c.no_extra(outfit, ("type",) + OUTFIT_KEYS, "outfit.")
    outfit_type = c.choice(c.get(outfit, "type", "outfit."), "outfit.type", OUTFIT_TYPES)
    cols = {k: c.color(c.get(outfit, k, "outfit."), f"outfit.{k}") for k in OUTFIT_KEYS}
    acc_raw = raw.get("accessories", [])
    if acc_raw is None:
        acc_raw = []
    if not isinstance(acc_raw, list):
        c.fail("accessories", "expected a list of {type, color}")
    accessories = []
    for i, a in enumerate(acc_raw):
        if not isinstance(a, dict):
            c.fail(f"accessories[{i}]", "expected {type, color}")
        c.no_extra(a, ("type", "color"), f"accessories[{i}].")
        t = c.choice(c.get(a, "type", f"accessories[{i}]."), f"accessories[{i}].type", ACCESSORY_TYPES)
        accessories.append(Accessory(t, c.color(c.get(a, "color", f"accessories[{i}]."),
                                                f"accessories[{i}].color")))
    acc_types = {a.type for a in accessories}
    var_raw = c.get(raw, "outfit_variants")
    # none: the character always wears the default outfit (a player's own, as described or pictured)
    if not isinstance(var_raw, list) or not (len(var_raw) == 0 or 2 <= len(var_raw) <= 4):
        c.fail("outfit_variants", f"expected an empty list or a list of 2..4 palettes, got {var_raw!r}")
    variants = []
    for i, v in enumerate(var_raw):
        f = f"outfit_variants[{i}]"
        if not isinstance(v, dict) or not v:
            c.fail(f, "expected a mapping with some of top/bottom/accent/shoes/accessories")
        c.no_extra(v, OUTFIT_KEYS + ("accessories",), f + ".")
        kw = {k: c.color(v[k], f"{f}.{k}") for k in OUTFIT_KEYS if k in v}
        va = v.get("accessories", {}) or {}
        if not isinstance(va, dict):
            c.fail(f"{f}.accessories", "expected a mapping {accessory type: colour}")
        acc_cols = {}
        for t, col in va.items():
            if t not in acc_types:
                c.fail(f"{f}.accessories.{t}",
                       f"recolours an accessory the character does not wear (wears: {sorted(acc_types)})")
            acc_cols[t] = c.color(col, f"{f}.accessories.{t}")
        variants.append(OutfitVariant(accessories=acc_cols, **kw))
    return CharacterSpec(name=name, pronoun=pronoun, description=description.strip(),
                         height=float(height), skin=skin, eyes=eyes, hair_style=hair_style,
                         hair_color=hair_color, outfit_type=outfit_type, accessories=tuple(accessories),
                         outfit_variants=tuple(variants), **cols)


def parse_cast(data: Any, source: str = "<cast>") -> dict[str, CharacterSpec]:
    """Validate an already-parsed YAML document (a dict with `characters`)."""
    if not isinstance(data, dict) or not isinstance(data.get("characters"), dict):
        raise ValueError(f"{source}: expected a top-level mapping with a `characters:` mapping")
    version = data.get("version", 1)
    if version != 1:
        raise ValueError(f"{source}: unsupported cast file version {version!r} (this code reads 1)")
    chars = data["characters"]
    if not chars:
        raise ValueError(f"{source}: `characters:` is empty")
    return {name: _parse_character(name, raw, source) for name, raw in chars.items()}


_CAST_CACHE: dict[tuple[str, float], dict[str, CharacterSpec]] = {}


def load_cast(path: str | Path | None = None) -> dict[str, CharacterSpec]:
    """Load and validate a cast file (default: the packaged `data/cast.yaml`).

    Cached per (path, modification time): the renderer asks for the cast once per session."""
    p = Path(path) if path is not None else Path(__file__).parent / "data" / "cast.yaml"
    key = (str(p.resolve()), p.stat().st_mtime if p.exists() else 0.0)
    if key not in _CAST_CACHE:
        _CAST_CACHE[key] = _load_cast_uncached(path)
    return _CAST_CACHE[key]


def _load_cast_uncached(path: str | Path | None) -> dict[str, CharacterSpec]:
    if path is None:
        text = resources.files("animegamer.world").joinpath("data/cast.yaml").read_text(encoding="utf-8")
        source = "cast.yaml"
    else:
        text = Path(path).read_text(encoding="utf-8")
        source = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{source}: not valid YAML: {e}") from e
    return parse_cast(data, source)


def default_look(spec: CharacterSpec) -> Look:
    return look_for_variant(spec, 0)


def look_for_variant(spec: CharacterSpec, variant: int) -> Look:
    if not 0 <= variant <= len(spec.outfit_variants):
        raise ValueError(f"character {spec.name!r}: variant {variant} out of range "
                         f"0..{len(spec.outfit_variants)}")
    if variant == 0:
        return Look(0, spec.top, spec.bottom, spec.accent, spec.shoes, spec.accessories)
    v = spec.outfit_variants[variant - 1]
    acc = tuple(Accessory(a.type, v.accessories.get(a.type, a.color)) for a in spec.accessories)
    return Look(variant, v.top or spec.top, v.bottom or spec.bottom, v.accent or spec.accent,
                v.shoes or spec.shoes, acc)


def random_look(spec: CharacterSpec, rng: np.random.Generator) -> Look:
    """The per-session variation: the default outfit or one of the variants, uniformly."""
    return look_for_variant(spec, int(rng.integers(0, len(spec.outfit_variants) + 1)))
