"""The stage: pictures of each place with no one in it and the characters' reference cut-outs, from
which the game composes a first frame for any cast in any place.

The visual anchors (``decoder/anchors.py``) give a first frame only where a training shot shows the
turn's characters in the turn's place. Elsewhere (two characters never filmed together there, three,
a player's own character) the first frame is composed: the place's picture, each character's cut-out
standing on the place's ground line, spread across the view, in the place's light, the place's
foreground (grass tufts) over their feet. Never a frame of other characters or of another place. The
decoder then draws the shot from it as from any first frame.

The pictures are drawn by the world when the model is packed (``world/stage_art.py``; ``model stage
MODEL`` adds them to a model packed before); a player's own character is cut out of the reference
sheet drawn when it was added (``game/characters.py``). Nothing here draws: it pastes stored pictures.

On disk, ``shot_decoder/stage/``: ``stage.json`` (format, frame size, each place picture's place,
time, ground line and light, each cut-out's name and height) and ``stage.safetensors`` (the pictures
as PNG bytes in one uint8 tensor with their offsets).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from animegamer.core.checkpoint import atomic_dir, load_json, load_safetensors, save_json_atomic, save_safetensors_atomic
from animegamer.world.stage_art import STANDING_FRACTION, WIDE_VIEWS, cast_sprites, place_layers, place_pictures

FORMAT = "animegamer-stage"
FORMAT_VERSION = 1
CONFIG_NAME = "stage.json"
WEIGHTS_NAME = "stage.safetensors"


@dataclass
class PlaceView:
    """One place at one time of day with no one in it."""

    background: np.ndarray  # uint8 (H, W, 3)
    foreground: np.ndarray  # uint8 (H, W, 4): drawn over characters where alpha > 0
    ground: float  # the feet's row, as a fraction of the height
    light: tuple[list[float], list[float]] | None  # a character's colour = rgb * light[0] + light[1]
    # the place several views wide as its parallax layers, back to front: what a camera that follows a character
    # pans across (decoder/layered.py), each layer at its own speed (the sky nearly still) as the world's camera
    # sees it; the last is the near layer, as wide as the place, where the characters stand. None: one view wide
    wide_layers: list[np.ndarray] | None = None  # uint8 (H, w_k, 4) straight alpha, the first opaque
    wide_lights: list[np.ndarray | None] | None = None  # uint8 (H, w_k, 3): light added after layer k, or None
    wide_foreground: np.ndarray | None = None  # uint8 (H, near width, 4)

    @property
    def width(self) -> int:
        """How wide the place a camera pans across is: its near layer's width, or one view."""
        return (self.wide_layers[-1] if self.wide_layers else self.background).shape[1]

    def behind(self, left: float) -> np.ndarray:
        """float32 (H, W, 3) in [0, 255]: the wide place's layers with the view's left edge at ``left`` in the near
        layer (rounded there, where characters are pasted; a farther layer k at left (w_k - W) / (w_near - W),
        blended between its two nearest columns so that a slow layer glides rather than jumps a pixel)."""
        if not self.wide_layers:
            raise ValueError("a camera that moves needs the place's wide layers; this stage has none")
        w, span = self.background.shape[1], self.width - self.background.shape[1]
        out = np.zeros((*self.background.shape[:2], 3), np.float32)
        for k, (layer, light) in enumerate(zip(self.wide_layers, self.wide_lights or [None] * len(self.wide_layers))):
            last = k == len(self.wide_layers) - 1
            at = float(round(left)) if last else (left * (layer.shape[1] - w) / span if span > 0 else 0.0)
            at = min(max(at, 0.0), float(layer.shape[1] - w))
            x0, frac = int(np.floor(at)), at - np.floor(at)
            rgba = _columns(layer, x0, w, frac)  # premultiplied
            out = rgba[..., :3] + (1 - rgba[..., 3:4] / 255.0) * out
            if light is not None:
                out = np.minimum(out + _columns(light, x0, w, frac), 255.0)
        return out


@dataclass
class Sprite:
    """A character's reference cut-out."""

    rgba: np.ndarray  # uint8 (h, w, 4), cropped to the character
    height: float  # the cut-out's height in units of a height-1.0 character's standing height (head to toe)


def positions(n: int) -> list[float]:
    """Where n characters stand across the view (0..1): one in the middle, more spread evenly, close
    enough to be one group (a pair's hug or talk starts from side by side)."""
    if n < 1:
        raise ValueError("positions: at least one character")
    if n == 1:
        return [0.5]
    span = min(0.7, 0.2 * (n - 1))
    return [0.5 - span / 2 + span * i / (n - 1) for i in range(n)]


def _columns(picture: np.ndarray, x0: int, w: int, frac: float) -> np.ndarray:
    """float32 columns [x0 + frac, x0 + frac + w) of ``picture``, linearly between its pixels; an RGBA picture comes
    back premultiplied (colour x alpha / 255, alpha in 0..255), as it is interpolated and composited."""
    a = picture[:, x0:x0 + w].astype(np.float32)
    if picture.shape[2] == 4:
        a[..., :3] *= a[..., 3:] / 255.0
    if frac <= 1e-6:
        return a
    return (1 - frac) * a + frac * _columns(picture, x0 + 1, w, 0.0)


def _png(image: np.ndarray) -> np.ndarray:
    code = cv2.COLOR_RGBA2BGRA if image.shape[2] == 4 else cv2.COLOR_RGB2BGR
    ok, data = cv2.imencode(".png", cv2.cvtColor(np.ascontiguousarray(image), code))
    if not ok:
        raise ValueError("stage: a picture could not be encoded")
    return data.ravel()


def _unpng(data: np.ndarray, channels: int) -> np.ndarray:
    image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if image is None or image.ndim != 3 or image.shape[2] != channels:
        raise ValueError(f"stage: a stored picture is not a {channels}-channel PNG")
    return cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA if channels == 4 else cv2.COLOR_BGR2RGB)


def _check_layers(view: PlaceView, where: str) -> None:
    """ValueError unless the wide layers are as tall as the view, at least as wide, and their lights and foreground
    match them (a stage may come from anyone)."""
    h, w = view.background.shape[:2]
    for k, layer in enumerate(view.wide_layers or []):
        light = (view.wide_lights or [None] * (k + 1))[k]
        if layer.shape[0] != h or layer.shape[1] < w or (light is not None and light.shape[:2] != layer.shape[:2]):
            raise ValueError(f"{where}: wide layer {k} is {layer.shape[:2]}, its light "
                             f"{None if light is None else light.shape[:2]}, the view {(h, w)}")
    if view.wide_foreground is None or view.wide_foreground.shape[:2] != (h, view.width):
        raise ValueError(f"{where}: the wide foreground is not as wide as the near layer ({view.width})")


class Stage:
    """Place pictures by (place, time) and the cast's cut-outs by name; ``compose`` stands characters in a place."""

    def __init__(self, places: dict[tuple[str, str], PlaceView], sprites: dict[str, Sprite], standing: float) -> None:
        """``standing``: a height-1.0 character's standing height (head to toe) as a fraction of the frame's."""
        if not places:
            raise ValueError("a stage needs at least one place picture")
        sizes = {v.background.shape[:2] for v in places.values()}
        if len(sizes) != 1:
            raise ValueError(f"stage: place pictures of several sizes {sorted(sizes)}")
        self.size: tuple[int, int] = sizes.pop()
        self.places = dict(places)
        self.sprites = dict(sprites)
        self.standing = float(standing)

    def has(self, place: str | None, time: str | None) -> bool:
        return (place, time) in self.places

    def compose(self, place: str, time: str, sprites: list[Sprite]) -> np.ndarray:
        """uint8 (H, W, 3): ``place`` at ``time`` with the characters standing in it, left to right in the
        order given, the right-hand one of several turned towards the others (mirrored)."""
        if (place, time) not in self.places:
            raise KeyError(f"the stage has no picture of the {place} at {time}")
        view = self.places[(place, time)]
        canvas = view.background.astype(np.float32)
        h, w = self.size
        bottom = int(round(view.ground * h))
        for k, (sprite, x) in enumerate(zip(sprites, positions(len(sprites)))):
            rgba = sprite.rgba[:, ::-1] if len(sprites) > 1 and k == len(sprites) - 1 else sprite.rgba
            target = max(4, int(round(self.standing * h * sprite.height)))
            width = max(1, int(round(rgba.shape[1] * target / rgba.shape[0])))
            small = cv2.resize(np.ascontiguousarray(rgba), (width, target), interpolation=cv2.INTER_AREA).astype(np.float32)
            y0, x0 = bottom - target, int(round(x * w)) - width // 2
            ys = slice(max(0, y0), min(h, bottom))
            xs = slice(max(0, x0), min(w, x0 + width))
            if ys.stop <= ys.start or xs.stop <= xs.start:
                continue
            part = small[ys.start - y0: ys.stop - y0, xs.start - x0: xs.stop - x0]
            rgb, alpha = part[..., :3], part[..., 3:4] / 255.0
            if view.light is not None:  # characters take the place's light, as drawn ones do
                rgb = np.clip(rgb * np.asarray(view.light[0], np.float32) + np.asarray(view.light[1], np.float32), 0, 255)
            canvas[ys, xs] = alpha * rgb + (1 - alpha) * canvas[ys, xs]
        fore = view.foreground.astype(np.float32)
        alpha = fore[..., 3:4] / 255.0
        canvas = alpha * fore[..., :3] + (1 - alpha) * canvas
        return np.clip(canvas.round(), 0, 255).astype(np.uint8)

    # -- saving ------------------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path) -> Path:
        pictures: list[np.ndarray] = []
        places = []
        for (place, time), v in self.places.items():
            pictures += [_png(v.background), _png(v.foreground)]
            lights = v.wide_lights or [None] * len(v.wide_layers or [])
            places.append({"place": place, "time": time, "ground": v.ground, "light": v.light}
                          | ({"layers": [x is not None for x in lights]} if v.wide_layers else {}))
        sprites = []
        for name, s in self.sprites.items():
            pictures.append(_png(s.rgba))
            sprites.append({"name": name, "height": s.height})
        for v in self.places.values():  # after the cut-outs: a stage saved before wide pictures reads the same
            if v.wide_layers:
                pictures += [_png(x) for x in v.wide_layers]
                pictures += [_png(x) for x in v.wide_lights or [] if x is not None]
                pictures.append(_png(v.wide_foreground))
        offsets = np.cumsum([0] + [len(p) for p in pictures]).astype(np.int64)
        with atomic_dir(directory) as tmp:
            save_safetensors_atomic({"pictures": torch.from_numpy(np.concatenate(pictures)),
                                     "offsets": torch.from_numpy(offsets)}, tmp / WEIGHTS_NAME)
            save_json_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "size": list(self.size),
                              "standing": self.standing, "places": places, "sprites": sprites}, tmp / CONFIG_NAME)
        return Path(directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> Stage:
        directory = Path(directory)
        meta: dict[str, Any] = load_json(directory / CONFIG_NAME)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{directory}: expected {FORMAT} v{FORMAT_VERSION}, found {meta.get('format')} "
                             f"v{meta.get('format_version')}")
        tensors = load_safetensors(directory / WEIGHTS_NAME)
        data, offsets = tensors["pictures"].numpy(), tensors["offsets"].tolist()
        chunks = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        wide_pictures = sum(len(p["layers"]) + sum(map(bool, p["layers"])) + 1 if isinstance(p.get("layers"), list)
                            else 2 * bool(p.get("wide")) for p in meta["places"])
        if len(chunks) != 2 * len(meta["places"]) + len(meta["sprites"]) + wide_pictures:
            raise ValueError(f"{directory}: {len(chunks)} pictures for {len(meta['places'])} places "
                             f"({wide_pictures} of their wide layers) and {len(meta['sprites'])} cut-outs")
        first = 2 * len(meta["places"])
        sprites = {s["name"]: Sprite(_unpng(chunks[first + i], 4), float(s["height"]))
                   for i, s in enumerate(meta["sprites"])}
        wide = iter(chunks[first + len(meta["sprites"]):])
        places = {}
        for i, p in enumerate(meta["places"]):
            light = tuple(p["light"]) if p.get("light") is not None else None
            view = PlaceView(_unpng(chunks[2 * i], 3), _unpng(chunks[2 * i + 1], 4), float(p["ground"]), light)
            if isinstance(p.get("layers"), list):
                view.wide_layers = [_unpng(next(wide), 4) for _ in p["layers"]]
                view.wide_lights = [_unpng(next(wide), 3) if lit else None for lit in p["layers"]]
                view.wide_foreground = _unpng(next(wide), 4)
            elif p.get("wide"):  # a stage packed before the layers: its wide picture, one layer that pans as a whole
                picture = _unpng(next(wide), 3)
                view.wide_layers = [np.dstack([picture, np.full(picture.shape[:2], 255, np.uint8)])]
                view.wide_lights = [None]
                view.wide_foreground = _unpng(next(wide), 4)
            if view.wide_layers:
                _check_layers(view, f"{directory}: the {p['place']} at {p['time']}")
            places[(p["place"], p["time"])] = view
        return cls(places, sprites, float(meta["standing"]))


def world_stage(size: tuple[int, int]) -> Stage:
    """The stage the world draws (world/stage_art.py) at a decoder's frame size (height, width): every place
    at every time of day with no one in it (one view, and WIDE_VIEWS wide for a camera that follows a character
    in layers, as its parallax layers), and the cast's cut-outs."""
    h, w = size
    views = {}
    for p in place_pictures(h, w):
        wide = place_layers(p.place, p.time, h, w, views=WIDE_VIEWS)
        views[(p.place, p.time)] = PlaceView(p.background, p.foreground, p.ground, p.light, wide.layers, wide.lights,
                                             wide.foreground)
    return Stage(views, {n: Sprite(rgba, height) for n, (rgba, height) in cast_sprites().items()}, STANDING_FRACTION)
