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
    # the place several views wide, its middle view near ``background``: what a camera that follows a character
    # pans across (decoder/layered.py); None: the place is one view wide
    wide: np.ndarray | None = None  # uint8 (H, k W, 3)
    wide_foreground: np.ndarray | None = None  # uint8 (H, k W, 4)


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
            places.append({"place": place, "time": time, "ground": v.ground, "light": v.light,
                           "wide": v.wide is not None})
        sprites = []
        for name, s in self.sprites.items():
            pictures.append(_png(s.rgba))
            sprites.append({"name": name, "height": s.height})
        for v in self.places.values():  # after the cut-outs: a stage saved before wide pictures reads the same
            if v.wide is not None:
                pictures += [_png(v.wide), _png(v.wide_foreground)]
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
        n_wide = sum(bool(p.get("wide")) for p in meta["places"])
        if len(chunks) != 2 * len(meta["places"]) + len(meta["sprites"]) + 2 * n_wide:
            raise ValueError(f"{directory}: {len(chunks)} pictures for {len(meta['places'])} places "
                             f"({n_wide} wide) and {len(meta['sprites'])} cut-outs")
        first = 2 * len(meta["places"])
        sprites = {s["name"]: Sprite(_unpng(chunks[first + i], 4), float(s["height"]))
                   for i, s in enumerate(meta["sprites"])}
        wide = iter(chunks[first + len(meta["sprites"]):])
        places = {}
        for i, p in enumerate(meta["places"]):
            light = tuple(p["light"]) if p.get("light") is not None else None
            view = PlaceView(_unpng(chunks[2 * i], 3), _unpng(chunks[2 * i + 1], 4), float(p["ground"]), light)
            if p.get("wide"):
                view.wide, view.wide_foreground = _unpng(next(wide), 3), _unpng(next(wide), 4)
                if view.wide.shape[0] != view.background.shape[0] or view.wide.shape[1] < view.background.shape[1] \
                        or view.wide_foreground.shape[:2] != view.wide.shape[:2]:
                    raise ValueError(f"{directory}: the wide picture of the {p['place']} at {p['time']} is "
                                     f"{view.wide.shape[:2]}, its view {view.background.shape[:2]}")
            places[(p["place"], p["time"])] = view
        return cls(places, sprites, float(meta["standing"]))
