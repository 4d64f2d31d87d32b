"""A shot in layers: a place with no one in it, each character's sprite (drawn by the sprite animator,
``decoder/sprite_animator.py``) pasted where its feet stand, the place's foreground over them.

Sprites are on the animator's canvas (``world/sprite_tracks.py``: SPRITE_H x SPRITE_W frame pixels, the feet
at row FEET_ROW of the centre column), premultiplied and untinted; pasting applies the place's light as the
stage does (a character's colour = rgb * light[0] + light[1], so premultiplied: c * light[0] + alpha * light[1]).
Nothing here draws: it places and blends pictures.
"""
from __future__ import annotations

import cv2
import numpy as np

from animegamer.decoder.stage import PlaceView, Sprite
from animegamer.world.sprite_tracks import FEET_ROW, SPRITE_H, SPRITE_W


def cutout_canvas(sprite: Sprite, standing_px: float) -> np.ndarray:
    """A stage cut-out (straight-alpha RGBA cropped to the character) on the animator's canvas: uint8
    (SPRITE_H, SPRITE_W, 4) premultiplied, ``standing_px`` * its height tall, the soles on FEET_ROW, centred (as
    ``world/sprite_tracks.draw_sprite`` draws a character standing: within a pixel)."""
    target = max(4, int(round(standing_px * sprite.height)))
    width = max(1, int(round(sprite.rgba.shape[1] * target / sprite.rgba.shape[0])))
    rgba = sprite.rgba.astype(np.float32)
    premult = np.dstack([rgba[..., :3] * rgba[..., 3:4] / 255.0, rgba[..., 3:4]])
    small = cv2.resize(premult, (width, target), interpolation=cv2.INTER_AREA)
    canvas = np.zeros((SPRITE_H, SPRITE_W, 4), np.float32)
    bottom = FEET_ROW + 1  # the world draws a sole's ink line on the feet row itself
    y0, x0 = bottom - target, SPRITE_W // 2 - width // 2
    ys, xs = slice(max(0, y0), min(SPRITE_H, bottom)), slice(max(0, x0), min(SPRITE_W, x0 + width))
    canvas[ys, xs] = small[ys.start - y0: ys.stop - y0, xs.start - x0: xs.stop - x0]
    return np.clip(canvas.round(), 0, 255).astype(np.uint8)


def paste(frame: np.ndarray, sprite: np.ndarray, feet_x: float, feet_y: float,
          light: tuple[list[float], list[float]] | None) -> None:
    """Blend one premultiplied sprite (SPRITE_H, SPRITE_W, 4) in [0, 1] into ``frame`` (H, W, 3) float32 in
    [0, 255] in place, its canvas's feet point at pixel (feet_x, feet_y); parts outside the frame are cut."""
    h, w = frame.shape[:2]
    y0 = int(round(feet_y)) - FEET_ROW
    x0 = int(round(feet_x)) - SPRITE_W // 2
    ys, xs = slice(max(0, y0), min(h, y0 + SPRITE_H)), slice(max(0, x0), min(w, x0 + SPRITE_W))
    if ys.stop <= ys.start or xs.stop <= xs.start:
        return
    part = sprite[ys.start - y0: ys.stop - y0, xs.start - x0: xs.stop - x0].astype(np.float32)
    colour, alpha = part[..., :3] * 255.0, part[..., 3:4]
    if light is not None:
        colour = colour * np.asarray(light[0], np.float32) + alpha * np.asarray(light[1], np.float32)
    frame[ys, xs] = colour + (1 - alpha) * frame[ys, xs]


def layered_shot(view: PlaceView, sprites: list[np.ndarray], feet: list[np.ndarray],
                 camera: np.ndarray | None = None) -> np.ndarray:
    """uint8 (T, H, W, 3): ``view`` with character k's sprites (T, SPRITE_H, SPRITE_W, 4) in [0, 1] pasted with
    their feet at ``feet[k]`` (T, 2) pixels (x, y; y down), first to last, the place's foreground on top.
    ``camera`` (T,): the view's left edge in the place's near layer per frame (``feet`` then in its pixels), each
    farther layer panning slower by its parallax (``PlaceView.behind``); None: the one-view picture."""
    t = sprites[0].shape[0] if sprites else (1 if camera is None else len(camera))
    w = view.background.shape[1]
    fore = (view.foreground if camera is None else view.wide_foreground).astype(np.float32)
    fore_alpha = fore[..., 3:4] / 255.0
    behind: dict[float, np.ndarray] = {}  # the place at each camera position (a still camera: one)
    out = np.empty((t, *view.background.shape), np.uint8)
    for i in range(t):
        left = 0.0 if camera is None else float(camera[i])
        if left not in behind:
            behind[left] = view.background.astype(np.float32) if camera is None else view.behind(left)
        x0 = int(round(left))  # characters and the near layer: whole pixels
        frame = behind[left].copy()
        for spr, xy in zip(sprites, feet):
            paste(frame, spr[i], float(xy[i, 0]) - x0, float(xy[i, 1]), view.light)
        frame = fore_alpha[:, x0:x0 + w] * fore[:, x0:x0 + w, :3] + (1 - fore_alpha[:, x0:x0 + w]) * frame
        out[i] = np.clip(frame.round(), 0, 255).astype(np.uint8)
    return out
