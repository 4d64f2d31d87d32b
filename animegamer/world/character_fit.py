"""A character's parameters read back from a picture of it (analysis by synthesis), so that a character
made from a picture is drawn by the world in every pose and motion, as a described one is.

    fit = fit_character(picture, alpha, start=random_character(seed, "Neko"))
    fit.spec, fit.error, fit.read

The picture shows a character drawn in the world's style (``alpha`` marks the figure), e.g. a reference
sheet saved from the game and uploaded again. Candidates are drawn standing as on the reference sheet and
compared with the picture: in the sheet's own frame when the picture is laid out as one (so a figure the
sheet crops is cropped alike, and the height shows), else with both figures cropped to their silhouettes
and scaled to one size. The cost is the colour distance where both show the figure and a fixed penalty
where only one does.

Colours are not searched: they are read. A candidate is drawn with each colour field in a key colour of
its own (twice, the keys permuted); the pixels that show a field's key both times are the ones it paints
flat, and its colour is the picture's median there. So every shape is judged in its best colours, and
the search is over shapes only: hair style and outfit together (81 pairs, one alone with the other wrong
misleads), then accessories one at a time (on, off, or in place of one worn), then the height. A fit's
``error`` says how well the best candidate redraws the picture (about 0.03-0.08 for the world's own
sheets), so a caller can tell a picture in the world's style from one the generator cannot draw.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import cv2
import numpy as np

from animegamer.world.cast import ACCESSORY_TYPES, HAIR_STYLES, HEIGHT_RANGE, OUTFIT_TYPES, RGB, Accessory, \
    CharacterSpec, default_look
from animegamer.world.character_art import PORTRAIT_SCALE, draw_character
from animegamer.world.character_gen import expected_colours
from animegamer.world.pose import Pose

NORM = 64  # the figure is compared at this height (pixels), centred in a NORM x NORM square
RENDER = 160  # candidates are drawn on a canvas of this size (twice over, then halved)
SUPERSAMPLE = 2  # drawn at twice the size, then halved, as the reference sheet is (so its edges match)
SHEET = 96  # a picture laid out as a reference sheet is compared whole at this size
KEY = (255, 0, 255)  # the background candidates are drawn on: no generated colour is this saturated magenta
# key colours for reading colours: far apart in every channel pair, none near KEY, and neither a key's
# shade (x 0.78) nor its shine (half white) lies within the reading tolerance of another key
REGION_KEYS = ((255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255), (0, 0, 0), (255, 255, 255),
               (128, 0, 0), (0, 128, 0), (0, 0, 128), (128, 128, 0), (0, 128, 128))
ADD_MARGIN = 0.0015  # an accessory is worn only when it lowers the cost this much: a hidden one must not be
MISS = 0.5  # the cost of a pixel where only one of the two silhouettes is
CLOSE_FIT = 0.12  # a fit above this error did not redraw the picture well (the world's own sheets: 0.03-0.08)
MAX_ACCESSORIES = 3
SLOTS = ("hair_color", "skin", "eyes", "top", "bottom", "accent", "shoes")  # top before the three below
UNSEEN_DEFAULTS = ("bottom", "accent", "shoes")
HEIGHTS = tuple(round(float(h), 3) for h in np.arange(HEIGHT_RANGE[0], HEIGHT_RANGE[1] + 1e-6, 0.025))
COARSE_HEIGHTS = HEIGHTS[::4]
PORTRAIT_POSE = Pose(head_turn=-0.15)  # the reference sheet's pose
SHEET_FEET, SHEET_SCALE = 0.93, PORTRAIT_SCALE  # where a reference sheet stands the figure, and its scale


@dataclass
class Fit:
    spec: CharacterSpec
    error: float  # the fitted render against the picture: mean cost per pixel of either silhouette (0 = equal)
    read: list[str]  # what was read from the picture, in words
    seconds: float


def _draw(spec: CharacterSpec, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``spec`` drawn as the reference sheet draws it (twice over, then halved) on a KEY background:
    the picture (size, size, 3) uint8 and where the figure is (bool)."""
    w = size * SUPERSAMPLE
    img = np.empty((w, w, 3), np.uint8)
    img[:] = KEY
    draw_character(img, spec, default_look(spec), PORTRAIT_POSE, w / 2, w * SHEET_FEET, w * SHEET_SCALE)
    img = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
    return img, np.abs(img.astype(np.int16) - np.array(KEY, np.int16)).sum(-1) > 60


def normalise(rgb: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The figure cropped to its silhouette and scaled to NORM pixels tall (or wide, if wider), centred:
    float32 RGB (NORM, NORM, 3) and its mask (NORM, NORM) of 0 / 1."""
    ys, xs = np.nonzero(alpha > 127)
    if len(ys) == 0:
        raise ValueError("the picture shows no figure")
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    h, w = y1 - y0, x1 - x0
    k = NORM / max(h, w)
    nh, nw = max(1, round(h * k)), max(1, round(w * k))
    inter = cv2.INTER_AREA if k < 1 else cv2.INTER_LINEAR
    rgb_n = cv2.resize(np.ascontiguousarray(rgb[y0:y1, x0:x1]), (nw, nh), interpolation=inter).astype(np.float32)
    a_n = cv2.resize((alpha[y0:y1, x0:x1] > 127).astype(np.float32), (nw, nh), interpolation=inter)
    out_rgb = np.zeros((NORM, NORM, 3), np.float32)
    out_a = np.zeros((NORM, NORM), np.float32)
    oy, ox = (NORM - nh) // 2, (NORM - nw) // 2
    out_rgb[oy:oy + nh, ox:ox + nw] = rgb_n
    out_a[oy:oy + nh, ox:ox + nw] = a_n > 0.5
    return out_rgb, out_a


def sheet_layout(alpha: np.ndarray) -> bool:
    """Whether a picture is laid out as a reference sheet: square, the figure centred and standing at
    SHEET_FEET of the height. Such a picture is compared whole, so a figure it crops (a tall hat) is
    cropped alike in every candidate, and its height can be read."""
    h, w = alpha.shape
    ys, xs = np.nonzero(alpha > 127)
    if len(ys) == 0 or abs(h - w) > 0.05 * max(h, w):
        return False
    return abs((ys.max() + 1) / h - SHEET_FEET) < 0.03 and abs((xs.min() + xs.max() + 1) / 2 / w - 0.5) < 0.12


class _Target:
    """The picture, normalised, and the renders of the candidates compared with it: in the sheet's own
    frame when it is laid out as one, else with both figures cropped to their silhouettes and scaled."""

    def __init__(self, picture: np.ndarray, alpha: np.ndarray) -> None:
        if picture.ndim != 3 or picture.shape[2] != 3 or alpha.shape != picture.shape[:2]:
            raise ValueError(f"fit_character needs an RGB picture and its figure's mask, got {picture.shape}, "
                             f"{alpha.shape}")
        self.sheet = sheet_layout(alpha)
        if self.sheet:
            self.rgb = cv2.resize(picture, (SHEET, SHEET), interpolation=cv2.INTER_AREA).astype(np.float32)
            self.mask = (cv2.resize((alpha > 127).astype(np.float32), (SHEET, SHEET), interpolation=cv2.INTER_AREA)
                         > 0.5).astype(np.float32)
        else:
            self.rgb, self.mask = normalise(picture, alpha)

    def render(self, spec: CharacterSpec) -> tuple[np.ndarray, np.ndarray]:
        """The candidate drawn and normalised like the picture: float32 (rgb, mask)."""
        img, fg = _draw(spec, SHEET if self.sheet else RENDER)
        if self.sheet:
            return img.astype(np.float32), fg.astype(np.float32)
        return normalise(img, fg.astype(np.uint8) * 255)

    def cost(self, spec: CharacterSpec) -> float:
        rgb, mask = self.render(spec)
        both = (mask > 0) & (self.mask > 0)
        either = (mask > 0) | (self.mask > 0)
        inner = cv2.erode(both.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)  # edges mix backgrounds
        colour = np.abs(rgb - self.rgb).mean(-1)[inner].sum() / 255.0 * both.sum() / max(1, inner.sum())
        return float((colour + MISS * (either & ~both).sum()) / max(1, either.sum()))

    def read_colours(self, spec: CharacterSpec) -> CharacterSpec:
        """``spec`` with every colour that shows read off the picture: each colour field is drawn in a key
        colour of its own, twice with the keys permuted; a pixel that shows a field's key both times is
        painted flat (unshaded) by that field, and the field's colour is the picture's median there. A
        garment colour that does not show (a dress hides the bottom) is what the generator would draw
        with the top read (`expected_colours`), not the start's."""
        fields = [(f, 0) for f in SLOTS] + [("accessory", i) for i in range(len(spec.accessories))]
        hits = []
        for shift in (0, 1):
            keyed = spec
            keys = [REGION_KEYS[(j * 5 + shift * 3) % len(REGION_KEYS)] for j in range(len(fields))]
            for (f, i), key in zip(fields, keys):
                keyed = _with_colour(keyed, f, i, key)
            rgb, _ = self.render(keyed)
            level = np.rint(rgb / 127.5)  # every key's channels are 0, 128 or 255
            code = np.where((np.abs(rgb - level * 127.5) < 24).all(-1), (level * [9, 3, 1]).sum(-1), -1)
            hits.append([code == _code(key) for key in keys])
        for j, (f, i) in enumerate(fields):
            flat = hits[0][j] & hits[1][j] & (self.mask > 0)
            eroded = flat & cv2.erode(flat.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
            where = eroded if eroded.sum() >= 4 else flat
            if where.sum() >= 2:
                med = np.median(self.rgb[where], axis=0)
                spec = _with_colour(spec, f, i, (int(round(med[0])), int(round(med[1])), int(round(med[2]))))
            elif f in UNSEEN_DEFAULTS:
                spec = _with_colour(spec, f, i, expected_colours(spec.top)[f])
        return spec


def _code(key: RGB) -> int:
    return sum(round(v / 127.5) * w for v, w in zip(key, (9, 3, 1)))


def _with_colour(spec: CharacterSpec, field: str, index: int, colour: RGB) -> CharacterSpec:
    if field == "accessory":
        acc = list(spec.accessories)
        acc[index] = Accessory(acc[index].type, colour)
        return dataclasses.replace(spec, accessories=tuple(acc))
    return dataclasses.replace(spec, **{field: colour})


def _exact_height(alpha: np.ndarray, spec: CharacterSpec) -> float:
    """The height of ``spec`` on a sheet-laid-out picture, finer than the search's steps: its figure's
    height in the picture's own pixels against the same character's at height 1 drawn at that size
    (everything of a character scales with its height). A figure the sheet crops keeps ``spec``'s."""
    ys = np.nonzero((alpha > 127).any(1))[0]
    if ys.min() <= 0:
        return spec.height
    size = alpha.shape[0]
    _, unit = _draw(dataclasses.replace(spec, height=1.0), size)
    rows = np.nonzero(unit.any(1))[0]
    if rows.min() <= 0:
        return spec.height
    h = (ys.max() - ys.min() + 1) / (rows.max() - rows.min() + 1)
    return round(float(np.clip(h, *HEIGHT_RANGE)), 3) if abs(h - spec.height) < 0.05 else spec.height


def fit_character(picture: np.ndarray, alpha: np.ndarray, start: CharacterSpec, rounds: int = 3) -> Fit:
    """The generator's parameters that best redraw the figure of ``picture`` (uint8 RGB) that ``alpha``
    (uint8, 255 = the figure) marks, starting from ``start`` (its name and pronoun are kept, its height too
    unless the picture is laid out as a reference sheet, which shows it; it gets no outfit variants)."""
    t0 = time.perf_counter()
    t = _Target(picture, alpha)

    seen: dict[tuple, tuple[float, CharacterSpec]] = {}

    def judged(cand: CharacterSpec) -> tuple[float, CharacterSpec]:
        # every candidate in its best colours, so shapes are compared fairly; the colours read depend on
        # the shapes only, so a shape judged once is judged
        shape = (cand.hair_style, cand.outfit_type, tuple(a.type for a in cand.accessories), cand.height)
        if shape not in seen:
            cand = t.read_colours(cand)
            seen[shape] = (t.cost(cand), cand)
        return seen[shape]

    def grid(spec: CharacterSpec) -> tuple[float, CharacterSpec]:
        # hair and outfit together: one alone, with the other wrong, often misleads
        return min((judged(dataclasses.replace(spec, hair_style=h, outfit_type=o)) for h in HAIR_STYLES
                    for o in OUTFIT_TYPES), key=lambda x: x[0])

    def heights(spec: CharacterSpec) -> tuple[float, CharacterSpec]:
        return min((judged(dataclasses.replace(spec, height=h)) for h in HEIGHTS), key=lambda x: x[0])

    # a picture shows one outfit: the character always wears it (no variants for other sessions)
    spec = dataclasses.replace(start, accessories=(), outfit_variants=())
    if t.sheet:  # the scale first: in the sheet's frame every other comparison depends on it
        best, spec = heights(spec)
    best, spec = grid(spec)
    for _ in range(rounds):
        before = best
        for kind in ACCESSORY_TYPES:
            have = [a.type for a in spec.accessories]
            if kind in have:
                c, cand = judged(dataclasses.replace(spec, accessories=tuple(a for a in spec.accessories
                                                                               if a.type != kind)))
                if c < best + ADD_MARGIN:  # fewer accessories for the same picture
                    spec, best = cand, c
                continue
            # another accessory in place of one worn (two accessories of one place, such as hats, compete),
            # or one more
            trials = [dataclasses.replace(spec, accessories=tuple(Accessory(kind, (128, 128, 128)) if a.type == other
                                                                  else a for a in spec.accessories))
                      for other in have]
            if len(have) < MAX_ACCESSORIES:
                trials.append(dataclasses.replace(spec, accessories=spec.accessories +
                                                  (Accessory(kind, (128, 128, 128)),)))
            for n, cand in enumerate(trials):
                # in a sheet's frame a hat's top is the figure's: an accessory is tried at several heights
                c, cand = min((judged(dataclasses.replace(cand, height=h)) for h in
                               sorted({cand.height, *COARSE_HEIGHTS})), key=lambda x: x[0]) if t.sheet else judged(cand)
                if c < best - (ADD_MARGIN if n == len(have) else 0):
                    spec, best = cand, c
        for search in (grid, heights) if t.sheet else (grid,):
            c, cand = search(spec)
            if c < best:
                spec, best = cand, c
        if best >= before - 1e-4:
            break
    if t.sheet:
        spec = dataclasses.replace(spec, height=_exact_height(alpha, spec))
    read = [f"{spec.hair_style.replace('_', ' ')} hair", spec.outfit_type.replace("_", " ")] + \
        [a.type.replace("_", " ") for a in spec.accessories]
    return Fit(spec, best, read, time.perf_counter() - t0)
