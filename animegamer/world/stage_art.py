"""The stage's pictures, drawn once by the world when a model is packed: each place at each time of
day with no one in it, and each cast member's reference cut-out.

The game composes a first frame from them where no stored training shot shows the turn's characters
together in the turn's place (two never filmed there together, three, a player's own character beside
one of the cast): the place's picture, the characters' cut-outs standing on its ground line in its
light, its foreground over their feet. The world renderer is the training data's source, so it draws
these pictures at pack time and never during play; ``decoder/stage.py`` keeps and composes them.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from animegamer.world.cast import CharacterSpec, default_look, load_cast
from animegamer.world.character_art import PORTRAIT_SCALE, draw_character
from animegamer.world.place_art import TIMES, PlaceScene, load_places, sample_props
from animegamer.world.pose import Pose
from animegamer.world.shot import (
    CHARACTER_SCALE,
    STANDING_HEIGHT,
    SUPERSAMPLE,
    WORLD_WIDTH_FACTOR,
    _camera_path,
    _character_light,
)

WIDE_VIEWS = 3  # the stage's wide place pictures: a run crosses about one view a turn
SPRITE_HEIGHT = 96  # pixel height of a height-1.0 character's cut-out: above its ~40 px in a 96-row frame


@dataclass
class PlacePicture:
    place: str
    time: str
    background: np.ndarray  # uint8 (H, W, 3): the place with no one in it, a static camera at its middle
    foreground: np.ndarray  # uint8 (H, W, 4): what is drawn in front of characters (grass tufts), alpha 0 elsewhere
    ground: float  # where feet stand, as a fraction of the height
    light: tuple[list[float], list[float]] | None  # characters' colour = rgb * light[0] + light[1] (None: as drawn)


def _place_scene(place: str, time: str, height: int, width: int, seed: int, views: float) -> PlaceScene:
    """``place`` at ``time`` with its props (drawn with ``seed``), supersampled, ``views`` views wide."""
    places = load_places()
    if place not in places:
        raise ValueError(f"unknown place {place!r}; the world's: {', '.join(places)}")
    if views < 1 or views > WORLD_WIDTH_FACTOR:
        raise ValueError(f"a place is 1..{WORLD_WIDTH_FACTOR:g} views wide, got {views}")
    rng = np.random.default_rng(seed)
    return PlaceScene(places[place], time, sample_props(places[place], rng), height * SUPERSAMPLE,
                      width * SUPERSAMPLE, world_width_factor=views, seed=seed)


def place_picture(place: str, time: str, height: int = 96, width: int = 144, seed: int = 0) -> PlacePicture:
    """``place`` at ``time`` with its props (drawn with ``seed``), as a static shot of its middle shows it (the
    place several views wide, for a camera that pans: ``place_layers``)."""
    scene = _place_scene(place, time, height, width, seed, WORLD_WIDTH_FACTOR)
    cam = float(_camera_path(scene, "static", np.array([0.5]))[0])
    back = scene.render(cam)
    front = scene.render_foreground(back.copy(), cam)
    alpha = ((front != back).any(-1) * 255).astype(np.uint8)
    size = (width, height)
    background = cv2.resize(back, size, interpolation=cv2.INTER_AREA)
    fore = cv2.resize(np.dstack([front, alpha]), size, interpolation=cv2.INTER_AREA)
    light = _character_light(scene, time)
    return PlacePicture(place, time, background, fore, float(scene.ground_y / scene.height),
                        None if light is None else ([float(v) for v in np.ravel(light[0])],
                                                    [float(v) for v in np.ravel(light[1])]))


@dataclass
class PlaceLayers:
    """A place several views wide as its parallax layers, for a camera that pans across it: each layer moves at its
    own speed (the sky nearly still, the near ground with the characters), as the world's camera sees it."""

    layers: list[np.ndarray]  # uint8 (H, w_k, 4) straight alpha, back to front; the first opaque, the last the near
    # layer, as wide as the place (where characters stand)
    lights: list[np.ndarray | None]  # uint8 (H, w_k, 3): light added after layer k (a lamp's glow), or None
    foreground: np.ndarray  # uint8 (H, near width, 4): drawn in front of characters, alpha 0 elsewhere


def _small(rgb: np.ndarray, coverage: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A supersampled layer (rgb, coverage 0/255) -> uint8 RGBA at ``size`` (w, h), area-averaged premultiplied (the
    edges' coverage becomes alpha, as the world's downsampled frame blends them)."""
    a = coverage.astype(np.float32)[..., None] / 255.0
    small = cv2.resize(np.dstack([rgb.astype(np.float32) * a, a * 255.0]), size, interpolation=cv2.INTER_AREA)
    alpha = small[..., 3:4]
    colour = np.where(alpha > 0, small[..., :3] * 255.0 / np.maximum(alpha, 1e-3), 0)
    return np.dstack([np.clip(colour, 0, 255), alpha]).round().astype(np.uint8)


def place_layers(place: str, time: str, height: int = 96, width: int = 144, seed: int = 0,
                 views: int = 3) -> PlaceLayers:
    """``place`` at ``time`` with its props (drawn with ``seed``), ``views`` views wide, as its parallax layers: the
    near layer ``views`` x ``width`` wide, each farther one narrower by its parallax (``place_art``'s convention),
    so that a camera whose view's left edge is x in the near layer shows layer k from x (w_k - W) / (w_near - W)."""
    return scene_layers(_place_scene(place, time, height, width, seed, views), height)


def scene_layers(scene: PlaceScene, height: int) -> PlaceLayers:
    """A supersampled place scene's parallax layers at ``height`` pixels (``place_layers``'s: the stage's, or a world
    shot's own scene, its props and seed, for comparing the two)."""
    layers, lights = [], []
    for rgb, coverage, light in scene.layer_pictures():
        size = (int(round(rgb.shape[1] / SUPERSAMPLE)), height)
        layers.append(_small(rgb, coverage if layers else np.full_like(coverage, 255), size))
        lights.append(None if light is None else cv2.resize(light, size, interpolation=cv2.INTER_AREA))
    near = layers[-1].shape[1]
    front = scene.front_picture()
    foreground = (np.zeros((height, near, 4), np.uint8) if front is None
                  else _small(front[0], front[1], (near, height)))
    return PlaceLayers(layers, lights, foreground)


def place_pictures(height: int = 96, width: int = 144, seed: int = 0) -> list[PlacePicture]:
    """Every place of the world at every time of day (``place_picture``)."""
    return [place_picture(p, t, height, width, seed) for p in load_places() for t in TIMES]


def character_sprite(spec: CharacterSpec, height: int = SPRITE_HEIGHT) -> tuple[np.ndarray, float]:
    """The character standing, front view, default look: uint8 RGBA cropped to it (hair and hat
    included), drawn so that a height-1.0 character stands ``height`` pixels head to toe; and the
    cut-out's height in those units (its spec's height times a little for the hair). Drawn on black and
    on white: where the two agree the drawing is opaque, their difference is its coverage at the edges."""
    ss = SUPERSAMPLE
    scale = height * ss / STANDING_HEIGHT
    size = int(round(scale * 1.4 * max(1.0, spec.height)))
    canvases = []
    for value in (0, 255):
        canvas = np.full((size, size, 3), value, np.uint8)
        draw_character(canvas, spec, default_look(spec), Pose(head_turn=-0.15), size / 2, size * 0.95, scale)
        canvases.append(canvas.astype(np.float32))
    black, white = canvases
    alpha = np.clip(255.0 - (white - black).max(-1), 0, 255)
    small = cv2.resize(np.dstack([black, alpha]), (size // ss, size // ss), interpolation=cv2.INTER_AREA)
    a = small[..., 3:4]
    rgb = np.where(a > 0, small[..., :3] * 255.0 / np.maximum(a, 1e-3), 0)  # the black canvas is premultiplied
    sprite = np.dstack([np.clip(rgb, 0, 255), a]).round().astype(np.uint8)
    ys, xs = np.nonzero(sprite[..., 3] > 8)
    if not len(ys):
        raise ValueError(f"{spec.name}: nothing drawn")
    return sprite[ys.min():ys.max() + 1, xs.min():xs.max() + 1], float(ys.max() + 1 - ys.min()) / height


def cast_sprites(cast_file: str | None = None, height: int = SPRITE_HEIGHT) -> dict[str, tuple[np.ndarray, float]]:
    """Each cast member's cut-out and its height (``character_sprite``)."""
    return {name: character_sprite(spec, height) for name, spec in load_cast(cast_file).items()}


def portrait_standing_px(size: int) -> float:
    """How tall a height-1.0 character stands, head to toe, in a ``character_portrait`` of ``size``
    pixels (a reference sheet): the unit of a cut-out's height."""
    return size * PORTRAIT_SCALE * STANDING_HEIGHT


STANDING_FRACTION = CHARACTER_SCALE * STANDING_HEIGHT  # a height-1.0 character's standing height / frame height
