"""What a place of the world is (parsed from data/places.yaml) and what a per-session prop is."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from animegamer.world.prop_art import RGB


class PlaceSpecError(ValueError):
    """places.yaml is malformed; the message names the field and what it got."""


@dataclass(frozen=True)
class LayerSpec:
    parallax: float
    base_y: float
    desc: str


@dataclass(frozen=True)
class PlaceSpec:
    key: str
    names: tuple[str, ...]
    indoor: bool
    has_ground: bool
    ground_y: float
    water_y: float | None
    horizon_y: float
    prop_scale: float
    palettes: dict[str, dict[str, RGB]]  # time -> complete palette (missing keys already tinted)
    layers: dict[str, LayerSpec]
    props: dict[str, tuple[str, ...]]  # prop kind -> colour options
    colors: dict[str, RGB] = field(repr=False, default_factory=dict)  # shared colour table
    prop_kinds: dict[str, dict] = field(repr=False, default_factory=dict)  # shared kind table
    time_tints: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(repr=False, default_factory=dict)

    @property
    def display_name(self) -> str:
        return self.names[0]

    def tint(self, c: RGB, time: str) -> RGB:
        if time not in self.time_tints:
            return c
        mul, add = self.time_tints[time]
        return tuple(int(np.clip(c[i] * mul[i] + add[i], 0, 255)) for i in range(3))  # type: ignore[return-value]


@dataclass(frozen=True)
class PropInstance:
    """One per-session prop. x is a fraction of its layer's width (for `near`, the world x)."""

    kind: str
    color: str  # colour name from places.yaml `colors`, "" for colourless kinds
    x: float
    layer: str
    display: str = ""

    def describe(self) -> str:
        name = self.display or self.kind.replace("_", " ")
        return f"{self.color} {name}" if self.color else name
