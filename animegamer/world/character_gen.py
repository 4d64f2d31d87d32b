"""New characters for the world: every character is a set of parameters (`CharacterSpec`), so any
number can be drawn, rendered in every pose and motion, and shown on a reference sheet.

    spec = random_character(seed=12, name="Neko")          # the same seed, the same character
    entry = character_entry(spec)                           # the cast.yaml form; parse_cast reads it back
    sheet = reference_sheet(spec)                           # uint8 (128, 128, 3), front view, plain background

The ten named characters of `data/cast.yaml` are ten fixed parameter sets. Drawn characters use
seeds below ``HELD_OUT_SEED`` for training and from it up for evaluation (`held_out_characters`),
so a held-out character has never been seen in training. Colours are drawn in HSV with the
saturation and value the cast uses (saturated, readable at 96 x 144), hair hues spread over the
circle, skin from a range of tones; the description is written from the drawn parameters.
"""
from __future__ import annotations

import colorsys
from typing import Any

import numpy as np

from animegamer.world.cast import (
    ACCESSORY_TYPES,
    HAIR_STYLES,
    OUTFIT_KEYS,
    OUTFIT_TYPES,
    RGB,
    CharacterSpec,
    default_look,
    parse_cast,
)
from animegamer.world.character_art import character_portrait

HELD_OUT_SEED = 1_000_000  # drawn characters with a seed at or above this are kept for evaluation
SKIN_TONES: tuple[RGB, ...] = ((255, 224, 196), (246, 208, 176), (234, 188, 150), (204, 150, 112),
                              (168, 116, 84), (120, 82, 58))
HUE_NAMES = ((15, "red"), (40, "orange"), (65, "yellow"), (160, "green"), (200, "teal"), (250, "blue"),
             (285, "purple"), (345, "pink"), (360, "red"))
REFERENCE_BACKGROUND = (236, 236, 236)


def _hex(c: RGB) -> str:
    return "#{:02x}{:02x}{:02x}".format(*c)


def _hsv(h: float, s: float, v: float) -> RGB:
    r, g, b = colorsys.hsv_to_rgb(h % 1.0, s, v)
    return (round(r * 255), round(g * 255), round(b * 255))


def colour_name(c: RGB) -> str:
    """A plain word for a colour (for descriptions): black, white, grey, brown or a hue."""
    h, s, v = colorsys.rgb_to_hsv(*(x / 255 for x in c))
    if v < 0.22:
        return "black"
    if s < 0.15:
        return "white" if v > 0.85 else "grey"
    if 0.03 < h < 0.12 and v < 0.6:
        return "brown"
    deg = h * 360
    return next(name for limit, name in HUE_NAMES if deg <= limit)


def random_character(seed: int, name: str) -> CharacterSpec:
    """A character drawn from ``seed`` (deterministic), named ``name``."""
    rng = np.random.default_rng([int(seed), 27])
    pronoun = str(rng.choice(["she", "he", "they"], p=[0.45, 0.45, 0.1]))
    hair_hue = rng.random()
    natural = rng.random() < 0.35
    hair = _hsv(rng.uniform(0.03, 0.1), rng.uniform(0.3, 0.7), rng.uniform(0.15, 0.5)) if natural \
        else _hsv(hair_hue, rng.uniform(0.45, 0.85), rng.uniform(0.6, 0.95))
    top_hue = rng.random()

    def garment(offset: float, sat: tuple[float, float] = (0.45, 0.85), val: tuple[float, float] = (0.5, 0.95)) -> RGB:
        return _hsv(top_hue + offset, rng.uniform(*sat), rng.uniform(*val))

    cols = {"top": garment(0.0), "bottom": garment(rng.uniform(0.35, 0.65), val=(0.3, 0.7)),
            "accent": garment(rng.uniform(0.1, 0.25), val=(0.85, 1.0)),
            "shoes": garment(0.5, sat=(0.1, 0.5), val=(0.15, 0.45))}
    n_acc = int(rng.choice([0, 1, 2], p=[0.3, 0.5, 0.2]))
    acc_types = [str(t) for t in rng.choice(ACCESSORY_TYPES, size=n_acc, replace=False)]
    accessories = [{"type": t, "color": _hex(garment(rng.uniform(0, 1)))} for t in acc_types]
    variants = []
    for _ in range(2):
        shift = rng.uniform(0.2, 0.8)
        v: dict[str, Any] = {"top": _hex(_hsv(top_hue + shift, rng.uniform(0.45, 0.85), rng.uniform(0.5, 0.95))),
                             "bottom": _hex(_hsv(top_hue + shift + 0.5, rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7)))}
        if acc_types:
            v["accessories"] = {acc_types[0]: _hex(_hsv(top_hue + shift + 0.25, 0.7, 0.9))}
        variants.append(v)
    entry = {
        "pronoun": pronoun, "description": "", "height": round(float(rng.uniform(0.8, 1.15)), 3),
        "skin": _hex(SKIN_TONES[int(rng.integers(len(SKIN_TONES)))]),
        "eyes": _hex(_hsv(rng.random(), rng.uniform(0.5, 0.9), rng.uniform(0.45, 0.85))),
        "hair": {"style": str(rng.choice(HAIR_STYLES)), "color": _hex(hair)},
        "outfit": {"type": str(rng.choice(OUTFIT_TYPES)), **{k: _hex(cols[k]) for k in OUTFIT_KEYS}},
        "accessories": accessories, "outfit_variants": variants,
    }
    entry["description"] = describe(entry)
    return parse_cast({"characters": {name: entry}}, f"random_character(seed={seed})")[name]


def expected_colours(top: RGB) -> dict[str, RGB]:
    """What `random_character` draws, on average, for the bottom, the accent and the shoes of a character
    whose top is ``top`` (their hue offsets from the top's and the middles of their saturation and value
    ranges): the colours to assume where a picture of the character does not show them."""
    hue = colorsys.rgb_to_hsv(*(x / 255 for x in top))[0]
    return {"bottom": _hsv(hue + 0.5, 0.65, 0.5), "accent": _hsv(hue + 0.175, 0.65, 0.925),
            "shoes": _hsv(hue + 0.5, 0.3, 0.3)}


NOUNS = {"tshirt_shorts": "T-shirt and shorts", "twin_tails": "twin-tailed", "long_straight": "long straight",
         "short_messy": "short messy", "side_swept": "side-swept", "bob": "bobbed", "bun": "bunned",
         "braids": "braided", "ponytail": "ponytailed"}
PLURAL = {"headphones", "glasses", "cat_ears", "overalls", "tshirt_shorts"}


def _noun(word: str) -> str:
    return NOUNS.get(word, word.replace("_", " "))


def _a(word: str, text: str) -> str:
    """``text`` with its article: none for a plural thing (glasses), else a / an."""
    return text if word in PLURAL else f"{'an' if text[0] in 'aeiou' else 'a'} {text}"


def describe(entry: dict[str, Any]) -> str:
    """One line from the parameters: 'a girl with long straight pink hair in a blue hoodie, with a ribbon'."""
    who = {"she": "a girl", "he": "a boy", "they": "a kid"}[entry["pronoun"]]
    hair_col = colour_name(_rgb(entry["hair"]["color"]))
    outfit = entry["outfit"]["type"]
    top = colour_name(_rgb(entry["outfit"]["top"]))
    text = f"{who} with {_noun(entry['hair']['style'])} {hair_col} hair in {_a(outfit, f'{top} {_noun(outfit)}')}"
    if entry["accessories"]:
        text += ", with " + " and ".join(_a(a["type"], _noun(a["type"])) for a in entry["accessories"])
    return text


def _rgb(h: str) -> RGB:
    return (int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16))


def character_entry(spec: CharacterSpec) -> dict[str, Any]:
    """The cast.yaml form of ``spec`` (``parse_cast({"characters": {name: entry}})`` gives it back)."""
    variants = []
    for v in spec.outfit_variants:
        d: dict[str, Any] = {k: _hex(getattr(v, k)) for k in OUTFIT_KEYS if getattr(v, k) is not None}
        if v.accessories:
            d["accessories"] = {t: _hex(c) for t, c in v.accessories.items()}
        variants.append(d)
    return {"pronoun": spec.pronoun, "description": spec.description, "height": spec.height,
            "skin": _hex(spec.skin), "eyes": _hex(spec.eyes),
            "hair": {"style": spec.hair_style, "color": _hex(spec.hair_color)},
            "outfit": {"type": spec.outfit_type, **{k: _hex(getattr(spec, k)) for k in OUTFIT_KEYS}},
            "accessories": [{"type": a.type, "color": _hex(a.color)} for a in spec.accessories],
            "outfit_variants": variants}


def reference_sheet(spec: CharacterSpec, size: int = 128) -> np.ndarray:
    """The character's reference picture: standing, front view, default outfit, plain background."""
    return character_portrait(spec, default_look(spec), size=size, background=REFERENCE_BACKGROUND)


def held_out_characters(n: int) -> list[CharacterSpec]:
    """``n`` characters never drawn for training (seeds from ``HELD_OUT_SEED``), named Held01, Held02, ..."""
    return [random_character(HELD_OUT_SEED + i, f"Held{i + 1:02d}") for i in range(n)]
