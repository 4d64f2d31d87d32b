"""Pictures of the world: contact sheets of shots, session videos, the cast sheet."""
from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from animegamer.core.atomic_io import atomic_write
from animegamer.core.video_io import save_gif, save_mp4
from animegamer.world.cast import CharacterSpec, load_cast, random_look
from animegamer.world.character_art import character_portrait
from animegamer.world.character_gen import reference_sheet
from animegamer.world.dataset import WorldDataset

ZOOM = 2
PANEL_W = 330
BG = (24, 26, 34)
FG = (235, 235, 240)
DIM = (150, 155, 170)


def font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def save_png(img: np.ndarray | Image.Image, path: str | os.PathLike) -> Path:
    im = img if isinstance(img, Image.Image) else Image.fromarray(img)
    return atomic_write(path, lambda f: im.save(f, format="PNG"))


def _zoom(frame: np.ndarray, zoom: int = ZOOM) -> np.ndarray:
    return cv2.resize(frame, None, fx=zoom, fy=zoom, interpolation=cv2.INTER_NEAREST)


def _annotation_lines(row: dict) -> list[tuple[str, tuple[int, int, int]]]:
    d, s = row["deltas"], row["states_after"]
    return [
        (f"session {row['session']} turn {row['turn']}  [{row['split']}]", DIM),
        (row["instruction"][:60] + ("..." if len(row["instruction"]) > 60 else ""), FG),
        (f"{', '.join(row['characters'])}: {row['motion_text']}", FG),
        (f"{row['time']} {row['place']}, camera {row['camera']}", FG),
        (f"props: {', '.join(row['props']) or '-'}", DIM),
        (f"flow {row['flow_magnitude']:.2f} -> motion level {row.get('motion_level', '?')}", FG),
        (f"delta st {d['stamina']:+d} so {d['social']:+d} en {d['entertainment']:+d}  "
         f"-> {s['stamina']}/{s['social']}/{s['entertainment']}", DIM),
    ]


def shot_strip(frames: np.ndarray, row: dict | None = None, picks: tuple[float, ...] = (0.0, 0.5, 1.0)) -> np.ndarray:
    """First / middle / last frames side by side (zoomed), with the annotations on the right."""
    t = frames.shape[0]
    tiles = [_zoom(frames[min(t - 1, round(p * (t - 1)))]) for p in picks]
    gap = np.full((tiles[0].shape[0], 4, 3), BG, np.uint8)
    strip = np.concatenate(sum(([x, gap] for x in tiles), [])[:-1], axis=1)
    if row is None:
        return strip
    panel = Image.new("RGB", (PANEL_W, strip.shape[0]), BG)
    draw = ImageDraw.Draw(panel)
    face = font(12)
    for i, (text, color) in enumerate(_annotation_lines(row)):
        draw.text((8, 6 + i * 17), text, fill=color, font=face)
    return np.concatenate([strip, gap, np.asarray(panel)], axis=1)


def contact_sheet(data: str | os.PathLike, out: str | os.PathLike, n_shots: int = 24, columns: int = 2) -> Path:
    """A grid of shots spread over the dataset: first / middle / last frames + annotations."""
    world = WorldDataset(data)
    rows = world.rows
    idx = np.linspace(0, len(rows) - 1, min(n_shots, len(rows))).round().astype(int)
    strips = [shot_strip(world.frames(rows[i]), rows[i]) for i in idx]
    return save_png(stack_strips(strips, columns), out)


def stack_strips(strips: list[np.ndarray], columns: int = 1, pad: int = 8) -> np.ndarray:
    """Equal-sized strips (h, w, 3) in a grid of ``columns``, row by row, on the sheet background."""
    if not strips:
        raise ValueError("stack_strips: no strips")
    h, w = strips[0].shape[:2]
    n_rows = -(-len(strips) // columns)
    sheet = np.full((n_rows * (h + pad) + pad, columns * (w + pad) + pad, 3), BG, np.uint8)
    for k, s in enumerate(strips):
        r, c = divmod(k, columns)
        sheet[pad + r * (h + pad): pad + r * (h + pad) + h, pad + c * (w + pad): pad + c * (w + pad) + w] = s
    return sheet


def _caption_frame(frame: np.ndarray, text: str, zoom: int = 3) -> np.ndarray:
    big = cv2.resize(frame, None, fx=zoom, fy=zoom, interpolation=cv2.INTER_LINEAR)
    bar = Image.new("RGB", (big.shape[1], 40), BG)
    draw = ImageDraw.Draw(bar)
    face = font(13)
    words, line, lines = text.split(), "", []
    for w in words:  # wrap to two lines
        if draw.textlength(line + " " + w, font=face) > big.shape[1] - 12:
            lines.append(line)
            line = w
        else:
            line = (line + " " + w).strip()
    lines.append(line)
    for i, ln in enumerate(lines[:2]):
        draw.text((6, 3 + i * 17), ln, fill=FG, font=face)
    return np.concatenate([big, np.asarray(bar)], axis=0)


def session_video(data: str | os.PathLike, session: int, stem: str | os.PathLike) -> list[Path]:
    """All turns of one session, captioned with their instructions, as GIF and MP4."""

    world = WorldDataset(data)
    turns = [r for r in world.rows if r["session"] == session]
    if not turns:
        raise ValueError(f"session {session} is not in {data} (it has {world.meta['sessions']} sessions)")
    frames = np.stack([_caption_frame(f, f"{r['turn'] + 1}. {r['instruction']}")
                       for r in sorted(turns, key=lambda r: r["turn"]) for f in world.frames(r)])
    stem = Path(stem)
    fps = world.meta["fps"]
    return [save_gif(frames, stem.with_suffix(".gif"), fps=fps), save_mp4(frames, stem.with_suffix(".mp4"), fps=fps)]


def cast_sheet(out: str | os.PathLike, size: int = 160, specs: list[CharacterSpec] | None = None) -> Path:
    """Every character's portrait with its name: the cast's (in a session's outfit), or ``specs``'
    reference pictures (default outfit, plain background)."""

    tiles = []
    for spec in specs if specs is not None else load_cast().values():
        if specs is None:
            portrait = character_portrait(spec, random_look(spec, np.random.default_rng(0)), size)
        else:
            portrait = reference_sheet(spec, size)
        portrait = np.ascontiguousarray(portrait)
        label = Image.new("RGB", (portrait.shape[1], 22), BG)
        ImageDraw.Draw(label).text((6, 3), spec.name, fill=FG, font=font(14))
        tiles.append(np.concatenate([portrait, np.asarray(label)], axis=0))
    return save_png(np.concatenate(tiles, axis=1), out)
