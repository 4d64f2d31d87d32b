"""Drawing primitives and the prop painters of the procedural anime world.

place_art.py paints the scenery of each place with these primitives and calls one painter per
sampled prop. Everything here draws ONCE into a layer image when a PlaceScene is built; nothing
here runs per frame.

Style: flat cel colours, a darker outline of the same hue on solid objects (none on far scenery),
one lighter highlight shape per object. Sizes are in "design units": 1 unit = frame height / 96,
so the same code draws a 96x144 frame and its 2x supersampled 192x288 version alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import cv2
import numpy as np

RGB = tuple[int, int, int]

_SHIFT = 3  # cv2 fixed-point bits: shapes are placed with 1/8 pixel precision (smooth small shapes)
_ONE = 1 << _SHIFT
AUTO = "auto"  # outline colour chosen from the fill colour


def hex_rgb(h: str) -> RGB:
    h = h.lstrip("#")
    return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))


def mix(a: RGB, b: RGB, t: float) -> RGB:
    return tuple(int(round(a[i] + (b[i] - a[i]) * t)) for i in range(3))  # type: ignore[return-value]


def shade(c: RGB, k: float) -> RGB:
    """k < 1 darkens, k > 1 lightens towards white."""
    if k <= 1.0:
        return tuple(int(v * k) for v in c)  # type: ignore[return-value]
    return mix(c, (255, 255, 255), min(1.0, k - 1.0))


def outline_of(c: RGB) -> RGB:
    # anime line art: a dark, slightly cool version of the fill rather than pure black
    return (int(c[0] * 0.32 + 12), int(c[1] * 0.30 + 10), int(c[2] * 0.34 + 22))


def _fx(pts) -> np.ndarray:
    return np.round(np.asarray(pts, dtype=np.float64) * _ONE).astype(np.int32).reshape(-1, 2)


class Layer:
    """An RGBA painting surface (rgb + coverage alpha) plus an optional additive light image.

    Shapes are anti-aliased; finish() un-premultiplies edge pixels drawn over transparency and
    turns alpha into a hard mask (the compositor copies with a mask: fast, and the 2x supersampled
    render is downsampled afterwards, which restores soft edges).
    """

    def __init__(self, h: int, w: int, t: int, opaque: bool = False):
        self.h, self.w, self.t = h, w, t
        self.rgb = np.zeros((h, w, 3), np.uint8)
        self.alpha = np.full((h, w), 255 if opaque else 0, np.uint8)
        self.light: np.ndarray | None = None  # float32 HxWx3, added on top after compositing

    # -- shapes -------------------------------------------------------------------------------
    def poly(self, pts, fill: RGB | None, line: RGB | str | None = AUTO, th: int | None = None):
        p = [_fx(pts)]
        if fill is not None:
            cv2.fillPoly(self.rgb, p, fill, cv2.LINE_AA, _SHIFT)
            cv2.fillPoly(self.alpha, p, 255, cv2.LINE_AA, _SHIFT)
        self._outline(p, fill, line, th, closed=True)

    def polyline(self, pts, color: RGB, th: int | None = None, closed: bool = False):
        p = [_fx(pts)]
        th = th or self.t
        cv2.polylines(self.rgb, p, closed, color, th, cv2.LINE_AA, _SHIFT)
        cv2.polylines(self.alpha, p, closed, 255, th, cv2.LINE_AA, _SHIFT)

    def _outline(self, p, fill, line, th, closed):
        if line is None or (line == AUTO and fill is None):
            return
        col = outline_of(fill) if line == AUTO else line
        th = th or self.t
        cv2.polylines(self.rgb, p, closed, col, th, cv2.LINE_AA, _SHIFT)
        cv2.polylines(self.alpha, p, closed, 255, th, cv2.LINE_AA, _SHIFT)

    def rect(self, x0, y0, x1, y1, fill: RGB | None, line: RGB | str | None = AUTO, th=None):
        self.poly([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], fill, line, th)

    def ellipse(self, cx, cy, rx, ry, fill: RGB | None, line: RGB | str | None = AUTO,
                angle: float = 0.0, a0: float = 0.0, a1: float = 360.0, th=None):
        c = (int(round(cx * _ONE)), int(round(cy * _ONE)))
        ax = (max(1, int(round(rx * _ONE))), max(1, int(round(ry * _ONE))))
        if fill is not None:
            cv2.ellipse(self.rgb, c, ax, angle, a0, a1, fill, -1, cv2.LINE_AA, _SHIFT)
            cv2.ellipse(self.alpha, c, ax, angle, a0, a1, 255, -1, cv2.LINE_AA, _SHIFT)
        if line is not None and not (line == AUTO and fill is None):
            col = outline_of(fill) if line == AUTO else line
            th = th or self.t
            cv2.ellipse(self.rgb, c, ax, angle, a0, a1, col, th, cv2.LINE_AA, _SHIFT)
            cv2.ellipse(self.alpha, c, ax, angle, a0, a1, 255, th, cv2.LINE_AA, _SHIFT)

    def circle(self, cx, cy, r, fill: RGB | None, line: RGB | str | None = AUTO, th=None):
        self.ellipse(cx, cy, r, r, fill, line, th=th)

    def seg(self, x0, y0, x1, y1, color: RGB, th: int | None = None):
        th = th or self.t
        a, b = (int(round(x0 * _ONE)), int(round(y0 * _ONE))), (int(round(x1 * _ONE)), int(round(y1 * _ONE)))
        cv2.line(self.rgb, a, b, color, th, cv2.LINE_AA, _SHIFT)
        cv2.line(self.alpha, a, b, 255, th, cv2.LINE_AA, _SHIFT)

    def fill_rows(self, y0: float, y1: float, color: RGB):
        a, b = max(0, int(round(y0))), min(self.h, int(round(y1)))
        self.rgb[a:b] = color
        self.alpha[a:b] = 255

    def vgradient(self, y0: float, y1: float, top: RGB, bottom: RGB, gamma: float = 1.0):
        a, b = max(0, int(round(y0))), min(self.h, int(round(y1)))
        if b <= a:
            return
        t = (np.linspace(0.0, 1.0, b - a, dtype=np.float32) ** gamma)[:, None]
        col = np.asarray(top, np.float32) * (1 - t) + np.asarray(bottom, np.float32) * t
        self.rgb[a:b] = np.round(col).astype(np.uint8)[:, None, :]
        self.alpha[a:b] = 255

    def soft_blob(self, mask: np.ndarray, x0: int, y0: int, color: RGB, opacity: float = 1.0):
        """Blend `color` through an 8-bit coverage mask placed at (x0, y0) (clipped to the layer)."""
        h, w = mask.shape
        xa, ya, xb, yb = max(0, x0), max(0, y0), min(self.w, x0 + w), min(self.h, y0 + h)
        if xb <= xa or yb <= ya:
            return
        m = mask[ya - y0:yb - y0, xa - x0:xb - x0].astype(np.float32)[..., None] * (opacity / 255.0)
        reg = self.rgb[ya:yb, xa:xb].astype(np.float32)
        old_a = self.alpha[ya:yb, xa:xb].astype(np.float32)[..., None] / 255.0
        # "over" onto premultiplied-by-coverage colour so fresh transparent areas get the pure colour
        new_a = m + old_a * (1 - m)
        out = (np.asarray(color, np.float32) * m + reg * (1 - m))
        out = np.where(old_a > 0, out, np.asarray(color, np.float32) * m)
        self.rgb[ya:yb, xa:xb] = np.clip(out, 0, 255).astype(np.uint8)
        self.alpha[ya:yb, xa:xb] = np.clip(new_a[..., 0] * 255, 0, 255).astype(np.uint8)

    def glow(self, cx: float, cy: float, r: float, color: RGB, strength: float = 1.0):
        """Additive soft light (lamps, lit windows, the moon): applied over everything behind it."""
        if self.light is None:
            self.light = np.zeros((self.h, self.w, 3), np.float32)
        x0, x1 = max(0, int(cx - 2.5 * r)), min(self.w, int(cx + 2.5 * r) + 1)
        y0, y1 = max(0, int(cy - 2.5 * r)), min(self.h, int(cy + 2.5 * r) + 1)
        if x1 <= x0 or y1 <= y0:
            return
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
        g = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * (0.6 * r) ** 2)) * strength
        self.light[y0:y1, x0:x1] += g[..., None] * np.asarray(color, np.float32)[None, None]

    # -- finishing ------------------------------------------------------------------------------
    def finish(self) -> None:
        a = self.alpha
        part = (a > 0) & (a < 255)
        if part.any():
            af = a[part].astype(np.float32)[:, None] / 255.0
            self.rgb[part] = np.clip(self.rgb[part].astype(np.float32) / af, 0, 255).astype(np.uint8)


@dataclass
class PaintCtx:
    """What a painter needs to know: sizes, the time-tinted palette and colour table, the rng."""

    H: int
    W: int
    time: str
    pal: dict[str, RGB]
    colors: dict[str, RGB]  # already tinted for the time of day
    rng: np.random.Generator
    base: dict[str, float] = field(default_factory=dict)  # layer -> base row in pixels
    anchors: dict[str, float] = field(default_factory=dict)  # place-specific rows (road, rails, sea)
    tint_fn: Callable[[RGB], RGB] = lambda c: c  # day colour -> colour at this time of day
    scale: float = 1.0  # extra size factor (props in a close-up interior are drawn bigger)

    @property
    def s(self) -> float:
        return self.H / 96.0 * self.scale

    @property
    def night(self) -> bool:
        return self.time == "night"

    @property
    def sunset(self) -> bool:
        return self.time == "sunset"


PropPainter = Callable[[Layer, PaintCtx, float, float, RGB], None]
PROP_PAINTERS: dict[str, PropPainter] = {}


def painter(name: str):
    def deco(fn: PropPainter) -> PropPainter:
        PROP_PAINTERS[name] = fn
        return fn
    return deco


# Fixed colours of prop details (tinted per time of day through fix())
WOOD = (150, 100, 62)
DARKWOOD = (105, 70, 45)
METAL = (70, 74, 88)
GLASS = (170, 215, 240)
TYRE = (45, 45, 55)
LEAF = (70, 160, 72)
LEAF_DARK = (40, 110, 60)
SAND = (236, 208, 150)
STONE = (160, 160, 165)
CREAM = (248, 240, 220)
WARM_LIGHT = (255, 214, 120)


def fix(c: PaintCtx, col: RGB) -> RGB:
    """A fixed detail colour (wood, tyres, glass) as seen at the scene's time of day."""
    return c.tint_fn(col)


# ---------------------------------------------------------------------------------------------
# Street / town props
# ---------------------------------------------------------------------------------------------
@painter("car")
def _car(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    y = c.anchors.get("road", y)
    wr = 3.6 * s
    L.poly([(x - 19 * s, y - 3 * s), (x - 19 * s, y - 9 * s), (x - 16 * s, y - 11 * s), (x - 9 * s, y - 11.5 * s),
            (x - 5 * s, y - 17 * s), (x + 8 * s, y - 17 * s), (x + 13 * s, y - 11.5 * s), (x + 18 * s, y - 10.5 * s),
            (x + 19.5 * s, y - 7 * s), (x + 19 * s, y - 3 * s)], col)
    glass = fix(c, GLASS)
    if c.night:
        glass = shade(glass, 0.6)
    L.poly([(x - 7.5 * s, y - 11.5 * s), (x - 4.2 * s, y - 15.6 * s), (x + 1 * s, y - 15.6 * s), (x + 1 * s, y - 11.5 * s)], glass)
    L.poly([(x + 2.6 * s, y - 11.5 * s), (x + 2.6 * s, y - 15.6 * s), (x + 7.4 * s, y - 15.6 * s), (x + 11 * s, y - 11.5 * s)], glass)
    L.seg(x - 17 * s, y - 8.2 * s, x + 17 * s, y - 8.2 * s, shade(col, 1.35), max(1, int(s)))  # body highlight
    L.seg(x + 1.8 * s, y - 11 * s, x + 1.8 * s, y - 4 * s, outline_of(col), max(1, int(s * 0.6)))  # door
    for wx in (x - 11 * s, x + 11 * s):
        L.circle(wx, y - 3 * s, wr, fix(c, TYRE))
        L.circle(wx, y - 3 * s, wr * 0.45, fix(c, (190, 190, 200)), None)
    L.ellipse(x + 18.3 * s, y - 8.5 * s, 1.1 * s, 1.4 * s, (255, 240, 170), None)
    L.ellipse(x - 18.6 * s, y - 8.5 * s, 0.8 * s, 1.3 * s, (230, 60, 60), None)
    if c.night:
        L.glow(x + 22 * s, y - 8 * s, 7 * s, (255, 230, 150), 0.7)


@painter("bench")
def _bench(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    m = fix(c, METAL)
    for dx in (-8 * s, 8 * s):
        L.rect(x + dx - 0.8 * s, y - 7 * s, x + dx + 0.8 * s, y, m)
    L.rect(x - 11 * s, y - 15 * s, x + 11 * s, y - 12 * s, col)
    L.rect(x - 11 * s, y - 11 * s, x + 11 * s, y - 9.5 * s, col)
    L.rect(x - 12 * s, y - 8 * s, x + 12 * s, y - 6 * s, shade(col, 1.15))
    for dx in (-8 * s, 8 * s):
        L.rect(x + dx - 0.6 * s, y - 15 * s, x + dx + 0.6 * s, y - 7 * s, m, None)


@painter("lamp_post")
def _lamp_post(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    pole = fix(c, (60, 80, 78))
    L.rect(x - 2 * s, y - 2.5 * s, x + 2 * s, y, pole)
    L.rect(x - 0.9 * s, y - 36 * s, x + 0.9 * s, y - 2 * s, pole)
    lit = (255, 236, 160) if c.night else fix(c, (250, 245, 225))
    L.poly([(x - 3.5 * s, y - 36 * s), (x + 3.5 * s, y - 36 * s), (x + 2.5 * s, y - 41 * s), (x - 2.5 * s, y - 41 * s)], lit, pole)
    L.poly([(x - 4.5 * s, y - 41 * s), (x + 4.5 * s, y - 41 * s), (x, y - 44 * s)], pole)
    if c.night:
        L.glow(x, y - 38 * s, 10 * s, (255, 210, 120), 1.0)
        L.glow(x, y - 6 * s, 12 * s, (255, 200, 110), 0.25)


@painter("vending_machine")
def _vending(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.rect(x - 7 * s, y - 27 * s, x + 7 * s, y, col)
    win = (250, 250, 235) if c.night else fix(c, (225, 240, 250))
    L.rect(x - 5.5 * s, y - 25 * s, x + 5.5 * s, y - 12 * s, win)
    drink = [(230, 70, 70), (70, 150, 230), (250, 200, 60), (90, 190, 100), (240, 140, 60)]
    for r in range(3):
        for k in range(5):
            dc = fix(c, drink[(r + k) % 5]) if not c.night else drink[(r + k) % 5]
            L.rect(x - 4.8 * s + k * 2.05 * s, y - 24 * s + r * 4 * s, x - 3.6 * s + k * 2.05 * s, y - 21.5 * s + r * 4 * s, dc, None)
    L.rect(x - 5.5 * s, y - 10 * s, x + 1 * s, y - 8 * s, shade(col, 0.6), None)
    L.rect(x - 5 * s, y - 5 * s, x + 5 * s, y - 2 * s, shade(col, 0.55), None)
    if c.night:
        L.glow(x, y - 18 * s, 11 * s, (210, 235, 255), 0.8)


@painter("mailbox")
def _mailbox(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.rect(x - 1.5 * s, y - 6 * s, x + 1.5 * s, y, fix(c, METAL))
    L.rect(x - 4.5 * s, y - 17 * s, x + 4.5 * s, y - 6 * s, col)
    L.ellipse(x, y - 17 * s, 4.5 * s, 3 * s, col, AUTO, a0=180, a1=360)
    L.rect(x - 3 * s, y - 14.5 * s, x + 3 * s, y - 13.3 * s, outline_of(col), None)
    L.seg(x - 2.8 * s, y - 17.5 * s, x - 2.8 * s, y - 8 * s, shade(col, 1.35), max(1, int(s)))


@painter("bicycle")
def _bicycle(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    th = max(1, int(round(1.0 * s)))
    r = 5 * s
    tyre = fix(c, TYRE)
    for wx in (x - 8 * s, x + 8 * s):
        L.circle(wx, y - r, r, None, tyre, th=max(1, int(round(1.3 * s))))
        L.circle(wx, y - r, 0.8 * s, tyre, None)
    bx, by = x - 1 * s, y - r
    L.polyline([(x - 8 * s, by), (bx, by), (x + 5 * s, y - 11 * s), (x - 3 * s, y - 11 * s), (x - 8 * s, by)], col, th)
    L.polyline([(bx, by), (x - 3.5 * s, y - 13 * s)], col, th)
    L.polyline([(x + 8 * s, by), (x + 5.5 * s, y - 14 * s)], col, th)
    L.rect(x - 5.5 * s, y - 14.2 * s, x - 1.5 * s, y - 13 * s, tyre, None)
    L.polyline([(x + 4 * s, y - 14.5 * s), (x + 7.5 * s, y - 15 * s)], tyre, th)


# ---------------------------------------------------------------------------------------------
# Plants
# ---------------------------------------------------------------------------------------------
@painter("round_tree")
def _round_tree(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    trunk = fix(c, WOOD)
    L.poly([(x - 2.2 * s, y), (x - 1.5 * s, y - 20 * s), (x + 1.5 * s, y - 20 * s), (x + 2.2 * s, y)], trunk)
    L.seg(x, y - 16 * s, x + 5 * s, y - 22 * s, trunk, max(1, int(1.3 * s)))
    blobs = [(-7, -26, 8), (6, -27, 8.5), (0, -34, 9.5), (-9, -33, 6.5), (9, -34, 6.5), (0, -24, 7)]
    dark = shade(col, 0.72)
    for bx, by, br in blobs:
        L.circle(x + bx * s, y + by * s, br * s, dark)
    for bx, by, br in blobs:
        L.circle(x + bx * s, y + by * s - 0.6 * s, br * s * 0.9, col, None)
    hl = shade(col, 1.28)
    for bx, by, br in blobs[1:4]:
        L.circle(x + (bx - 2) * s, y + (by - 2.5) * s, br * s * 0.42, hl, None)


@painter("pine_tree")
def _pine_tree(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.rect(x - 1.6 * s, y - 8 * s, x + 1.6 * s, y, fix(c, DARKWOOD))
    for k, (w, top, bot) in enumerate([(13, -26, -6), (10.5, -36, -17), (8, -45, -27)]):
        L.poly([(x - w * s, y + bot * s), (x, y + top * s), (x + w * s, y + bot * s)], col)
        L.poly([(x - w * 0.1 * s, y + (top + 3) * s), (x - w * 0.7 * s, y + (bot - 0.5) * s),
                (x - w * 0.2 * s, y + (bot - 0.5) * s)], shade(col, 1.25), None)


@painter("palm_tree")
def _palm_tree(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    trunk = fix(c, (176, 130, 80))
    pts = [(x + 0.25 * (k ** 1.6) * s, y - k * 4.2 * s) for k in range(10)]
    for (x0, y0), (x1, y1) in zip(pts[:-1], pts[1:]):
        L.poly([(x0 - 2 * s, y0), (x1 - 1.7 * s, y1), (x1 + 1.7 * s, y1), (x0 + 2 * s, y0)], trunk)
    tx, ty = pts[-1]
    leaf = fix(c, (60, 160, 70))
    for ang in (-160, -125, -90, -55, -20, 200):
        a = np.deg2rad(ang)
        ex, ey = tx + np.cos(a) * 16 * s, ty + np.sin(a) * 7 * s + 6 * s
        mx, my = tx + np.cos(a) * 8 * s, ty + np.sin(a) * 8 * s - 1.5 * s
        L.poly([(tx, ty), (mx, my - 2.2 * s), (ex, ey), (mx, my + 1.5 * s)], leaf)
    L.circle(tx - 1 * s, ty + 1.5 * s, 1.6 * s, fix(c, (120, 80, 40)))
    L.circle(tx + 1.5 * s, ty + 1.8 * s, 1.6 * s, fix(c, (120, 80, 40)))


@painter("flower_bush")
def _flower_bush(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    g = fix(c, LEAF)
    for bx, by, br in [(-6, -5, 5.5), (5, -5, 6), (0, -9, 6.5), (-2, -4, 5)]:
        L.circle(x + bx * s, y + by * s, br * s, g)
    L.rect(x - 11 * s, y - 3 * s, x + 11 * s, y, None, None)
    rng = np.random.default_rng(int(x * 7 + 3))
    for _ in range(9):
        fx, fy = x + rng.uniform(-9, 9) * s, y + rng.uniform(-13, -3) * s
        L.circle(fx, fy, 1.5 * s, col, None)
        L.circle(fx, fy, 0.55 * s, (255, 236, 140), None)


@painter("plant_pot")
def _plant_pot(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    g = fix(c, LEAF)
    for ang in (-70, -35, 0, 35, 70, -90, 90):
        a = np.deg2rad(ang - 90)
        ex, ey = x + np.cos(a) * 11 * s, y - 8 * s + np.sin(a) * 11 * s
        L.poly([(x, y - 8 * s), (x + np.cos(a + 0.5) * 5 * s, y - 8 * s + np.sin(a + 0.5) * 5 * s), (ex, ey),
                (x + np.cos(a - 0.5) * 5 * s, y - 8 * s + np.sin(a - 0.5) * 5 * s)], g)
    L.poly([(x - 5 * s, y - 9 * s), (x + 5 * s, y - 9 * s), (x + 3.8 * s, y), (x - 3.8 * s, y)], col)
    L.rect(x - 5.5 * s, y - 10 * s, x + 5.5 * s, y - 8 * s, shade(col, 1.15))


# ---------------------------------------------------------------------------------------------
# Beach
# ---------------------------------------------------------------------------------------------
@painter("beach_umbrella")
def _umbrella(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.seg(x + 2 * s, y, x - 1 * s, y - 24 * s, fix(c, (235, 235, 230)), max(1, int(1.2 * s)))
    cx, cy, r, hgt = x - 1.2 * s, y - 22 * s, 15 * s, 9 * s
    white = fix(c, (250, 250, 245))
    # dome = upper half ellipse; stripes = sectors fanning from the apex, clipped to the dome
    ph, pw = int(hgt + 4 * s), int(2 * r + 4 * s)
    ox, oy = int(cx - r - 2 * s), int(cy - hgt - 2 * s)
    dome = np.zeros((ph, pw), np.uint8)
    ctr = (int((cx - ox) * 8), int((cy - oy) * 8))
    cv2.ellipse(dome, ctr, (int(r * 8), int(hgt * 8)), 0, 180, 360, 255, -1, cv2.LINE_AA, 3)
    L.soft_blob(dome, ox, oy, white)
    apex = np.array([cx - ox, cy - hgt - oy])
    n = 6
    for k in range(0, n, 2):
        hem = [np.array([cx - r + 2 * r * (k + j) / n - ox, cy - oy]) for j in (0, 1)]
        far = [apex + (h - apex) * 3 for h in hem]
        sect = np.zeros_like(dome)
        cv2.fillPoly(sect, [np.round(np.array([apex, far[0], far[1]]) * 8).astype(np.int32)], 255, cv2.LINE_AA, 3)
        L.soft_blob(np.minimum(sect, dome), ox, oy, col)
    L.ellipse(cx, cy, r, hgt, None, outline_of(col), a0=180, a1=360)
    L.seg(cx - r, cy, cx + r, cy, outline_of(col))
    L.circle(cx, cy - hgt, 1.2 * s, col)


@painter("sandcastle")
def _sandcastle(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    sand = fix(c, (224, 186, 118))
    L.rect(x - 9 * s, y - 7 * s, x + 9 * s, y, sand)
    for tx, h in ((-7, 13), (0, 17), (7, 13)):
        L.rect(x + (tx - 2.5) * s, y - h * s, x + (tx + 2.5) * s, y - 6 * s, sand)
        for k in (-2.5, -0.8, 0.9):
            L.rect(x + (tx + k) * s, y - (h + 1.6) * s, x + (tx + k + 1.6) * s, y - h * s, sand)
    L.ellipse(x, y - 2.6 * s, 1.8 * s, 2.6 * s, shade(sand, 0.6), None, a0=180, a1=360)
    L.rect(x, y - 2.6 * s, x, y, None, None)
    L.seg(x, y - 18.6 * s, x, y - 24 * s, fix(c, DARKWOOD))
    L.poly([(x, y - 24 * s), (x + 5 * s, y - 22.5 * s), (x, y - 21 * s)], fix(c, (230, 70, 70)))


@painter("surfboard")
def _surfboard(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.ellipse(x, y - 13 * s, 3.8 * s, 14 * s, col, angle=8)
    L.ellipse(x, y - 13 * s, 0.8 * s, 12 * s, fix(c, (250, 250, 245)), None, angle=8)


@painter("beach_ball")
def _beach_ball(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    r = 6 * s
    cx, cy = x, y - r
    L.circle(cx, cy, r, fix(c, (250, 250, 245)))
    for k, a0 in enumerate((200, 320, 80)):
        cc = col if k != 1 else fix(c, (250, 210, 60)) if col != fix(c, (250, 210, 60)) else fix(c, (60, 120, 220))
        L.ellipse(cx, cy, r * 0.98, r * 0.98, cc, None, a0=a0, a1=a0 + 60)
        L.poly([(cx, cy), (cx + np.cos(np.deg2rad(a0)) * r * 0.97, cy + np.sin(np.deg2rad(a0)) * r * 0.97),
                (cx + np.cos(np.deg2rad(a0 + 60)) * r * 0.97, cy + np.sin(np.deg2rad(a0 + 60)) * r * 0.97)], cc, None)
    L.circle(cx, cy, r, None, outline_of(col))
    L.circle(cx - 1.5 * s, cy - 1.8 * s, 0.9 * s, (255, 255, 255), None)


@painter("boat")
def _boat(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s * 0.8
    y = c.anchors.get("sea", y)
    L.poly([(x - 9 * s, y - 4 * s), (x + 9 * s, y - 4 * s), (x + 6 * s, y), (x - 6 * s, y)], col)
    L.seg(x, y - 4 * s, x, y - 19 * s, fix(c, DARKWOOD), max(1, int(c.s * 0.8)))
    L.poly([(x + 0.8 * s, y - 18 * s), (x + 8 * s, y - 5.5 * s), (x + 0.8 * s, y - 5.5 * s)], fix(c, (250, 250, 245)))
    L.poly([(x - 0.8 * s, y - 15 * s), (x - 6 * s, y - 5.5 * s), (x - 0.8 * s, y - 5.5 * s)], shade(col, 1.3))


@painter("kite")
def _kite(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    kx, ky = x + 8 * s, c.H * 0.22
    string = fix(c, (240, 240, 240))
    pts = [(x + (kx - x) * t, y - 3 * s + (ky - y + 3 * s) * t + np.sin(t * np.pi) * 6 * s) for t in np.linspace(0, 1, 12)]
    L.polyline(pts, string, max(1, int(0.6 * s)))
    L.seg(x - 1 * s, y, x + 1 * s, y - 3 * s, fix(c, DARKWOOD))
    L.poly([(kx, ky - 7 * s), (kx + 5 * s, ky), (kx, ky + 8 * s), (kx - 5 * s, ky)], col)
    L.poly([(kx, ky - 7 * s), (kx + 5 * s, ky), (kx, ky)], shade(col, 1.3), None)
    tail = [(kx + np.sin(t * 6) * 2.5 * s, ky + 8 * s + t * 12 * s) for t in np.linspace(0, 1, 8)]
    L.polyline(tail, string, max(1, int(0.6 * s)))
    for tx, ty in tail[2::2]:
        L.poly([(tx - 1.6 * s, ty - 1 * s), (tx + 1.6 * s, ty + 1 * s), (tx + 1.6 * s, ty - 1 * s), (tx - 1.6 * s, ty + 1 * s)], col, None)


# ---------------------------------------------------------------------------------------------
# Sky things
# ---------------------------------------------------------------------------------------------
@painter("hot_air_balloon")
def _balloon(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("balloon", c.H * 0.3)
    r = 9 * s
    white = fix(c, (250, 248, 240))
    L.poly([(x - r * 0.62, cy + r * 0.75), (x - 3 * s, cy + r + 5 * s), (x + 3 * s, cy + r + 5 * s), (x + r * 0.62, cy + r * 0.75)], col)
    L.circle(x, cy, r, col)
    for k, off in enumerate((-0.55, 0.0, 0.55)):
        if k == 1:
            L.ellipse(x, cy, r * 0.28, r * 0.98, white, None)
        else:
            L.ellipse(x + off * r * 0.9, cy, r * 0.14, r * 0.9, shade(col, 1.35), None)
    L.circle(x, cy, r, None, outline_of(col))
    rope = fix(c, DARKWOOD)
    L.seg(x - 3 * s, cy + r + 5 * s, x - 2.4 * s, cy + r + 8 * s, rope, max(1, int(0.6 * s)))
    L.seg(x + 3 * s, cy + r + 5 * s, x + 2.4 * s, cy + r + 8 * s, rope, max(1, int(0.6 * s)))
    L.rect(x - 2.6 * s, cy + r + 8 * s, x + 2.6 * s, cy + r + 11.5 * s, fix(c, (170, 120, 70)))


@painter("birds")
def _birds(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("birds", c.H * 0.22)
    rng = np.random.default_rng(int(x) + 11)
    lc = col if sum(col) < 300 else outline_of(col)
    for k in range(5):
        bx, by, b = x + (k - 2) * 6 * s + rng.uniform(-2, 2) * s, cy + abs(k - 2) * 3 * s + rng.uniform(-1.5, 1.5) * s, rng.uniform(1.6, 2.4) * s
        pts = [(bx - b * 1.6, by - b * 0.6), (bx - b * 0.7, by - b * 0.9), (bx, by), (bx + b * 0.7, by - b * 0.9), (bx + b * 1.6, by - b * 0.6),
               (bx + b * 0.7, by - b * 0.3), (bx, by + b * 0.5), (bx - b * 0.7, by - b * 0.3)]
        L.poly(pts, col, lc, th=max(1, int(0.7 * s)))


@painter("airship")
def _airship(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("airship", c.H * 0.26)
    L.poly([(x - 16 * s, cy), (x - 21 * s, cy - 6 * s), (x - 19 * s, cy), (x - 21 * s, cy + 6 * s)], shade(col, 0.8))
    L.ellipse(x, cy, 17 * s, 6.5 * s, col)
    L.ellipse(x - 2 * s, cy - 2.5 * s, 11 * s, 2 * s, shade(col, 1.3), None)
    for k in (-8, 0, 8):
        L.seg(x + k * s, cy - 6 * s, x + k * s, cy + 6 * s, shade(col, 0.8), max(1, int(0.6 * s)))
    L.ellipse(x, cy, 17 * s, 6.5 * s, None, outline_of(col))
    L.rect(x - 4 * s, cy + 6.5 * s, x + 4 * s, cy + 9.5 * s, fix(c, (120, 90, 70)))
    L.rect(x - 3 * s, cy + 7.3 * s, x + 3 * s, cy + 8.4 * s, (255, 230, 150) if c.night else fix(c, GLASS), None)


@painter("floating_island")
def _island(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("island", c.H * 0.36)
    rock = fix(c, (150, 120, 100))
    L.poly([(x - 16 * s, cy), (x + 16 * s, cy), (x + 9 * s, cy + 7 * s), (x + 3 * s, cy + 16 * s), (x - 2 * s, cy + 18 * s),
            (x - 7 * s, cy + 9 * s)], rock)
    L.poly([(x + 3 * s, cy + 2 * s), (x + 9 * s, cy + 3 * s), (x + 3 * s, cy + 14 * s)], shade(rock, 0.75), None)
    L.ellipse(x, cy, 16.5 * s, 3 * s, fix(c, LEAF))
    L.rect(x + 11 * s, cy + 1 * s, x + 12.6 * s, cy + 18 * s, fix(c, (200, 235, 255)), None)  # little waterfall
    _round_tree(L, c, x - 5 * s, cy - 1 * s, fix(c, LEAF))
    L.rect(x + 4 * s, cy - 7 * s, x + 10 * s, cy - 1 * s, fix(c, CREAM))
    L.poly([(x + 3 * s, cy - 7 * s), (x + 7 * s, cy - 11 * s), (x + 11 * s, cy - 7 * s)], fix(c, (200, 70, 60)))


@painter("rainbow")
def _rainbow(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("rainbow_base", c.H * 0.62)
    bands = [(235, 90, 90), (245, 160, 80), (245, 225, 100), (110, 200, 110), (100, 160, 235), (150, 110, 210)]
    th = max(1, int(round(1.6 * s)))
    for k, b in enumerate(bands):
        r = (40 - k * 1.5) * s
        bb = mix(fix(c, b), c.pal["sky_bottom"], 0.65 if c.night else 0.35)
        L.ellipse(x, cy, r, r * 0.9, None, bb, a0=180, a1=360, th=th)


# ---------------------------------------------------------------------------------------------
# Bedroom
# ---------------------------------------------------------------------------------------------
@painter("bed")
def _bed(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    wood = fix(c, WOOD)
    L.rect(x - 24 * s, y - 22 * s, x - 20 * s, y, wood)  # headboard
    L.ellipse(x - 22 * s, y - 22 * s, 2 * s, 2 * s, wood)
    L.rect(x + 20 * s, y - 12 * s, x + 23 * s, y, wood)
    L.rect(x - 20 * s, y - 8 * s, x + 20 * s, y - 2 * s, wood)
    L.rect(x - 20 * s, y - 13 * s, x + 20 * s, y - 8 * s, fix(c, (250, 250, 245)))
    L.ellipse(x - 15 * s, y - 14 * s, 4.5 * s, 2.5 * s, fix(c, (250, 250, 245)))
    L.poly([(x - 9 * s, y - 15 * s), (x + 20.5 * s, y - 15 * s), (x + 21 * s, y - 5.5 * s), (x - 9 * s, y - 5.5 * s)], col)
    L.poly([(x - 9 * s, y - 15 * s), (x - 5 * s, y - 15 * s), (x - 5 * s, y - 5.5 * s), (x - 9 * s, y - 5.5 * s)], shade(col, 1.3))
    L.seg(x - 1 * s, y - 13.6 * s, x + 18 * s, y - 13.6 * s, shade(col, 1.25), max(1, int(s)))


@painter("desk")
def _desk(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.rect(x - 12 * s, y - 16 * s, x + 12 * s, y - 14 * s, col)
    L.rect(x - 11 * s, y - 14 * s, x - 9 * s, y, col)
    L.rect(x + 3 * s, y - 14 * s, x + 11 * s, y, col)
    for k in (0, 1):
        L.rect(x + 4 * s, y - 13 * s + k * 6 * s, x + 10 * s, y - 8 * s + k * 6 * s, shade(col, 1.12))
    L.rect(x - 6 * s, y - 18.5 * s, x + 0 * s, y - 16 * s, fix(c, (90, 140, 220)))  # books
    L.rect(x - 5.5 * s, y - 20.5 * s, x - 0.5 * s, y - 18.5 * s, fix(c, (235, 110, 110)))
    L.poly([(x + 3 * s, y - 16 * s), (x + 10 * s, y - 16 * s), (x + 9 * s, y - 23 * s), (x + 2.5 * s, y - 23 * s)], fix(c, (80, 80, 95)))
    L.poly([(x + 3.8 * s, y - 16.8 * s), (x + 9.2 * s, y - 16.8 * s), (x + 8.4 * s, y - 22 * s), (x + 3.4 * s, y - 22 * s)],
           (120, 190, 255) if c.night else fix(c, (170, 210, 240)), None)
    if c.night:
        L.glow(x + 6 * s, y - 19 * s, 7 * s, (120, 180, 255), 0.5)


@painter("poster")
def _poster(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("wall_art", c.H * 0.33)
    L.rect(x - 7 * s, cy - 9 * s, x + 7 * s, cy + 9 * s, fix(c, (250, 250, 245)))
    L.rect(x - 5.8 * s, cy - 7.8 * s, x + 5.8 * s, cy + 5.5 * s, col, None)
    star = [(x + np.cos(np.deg2rad(-90 + k * 36)) * (4 if k % 2 == 0 else 1.8) * s,
             cy - 1.5 * s + np.sin(np.deg2rad(-90 + k * 36)) * (4 if k % 2 == 0 else 1.8) * s) for k in range(10)]
    L.poly(star, fix(c, (255, 245, 200)), None)
    L.rect(x - 4.5 * s, cy + 6.5 * s, x + 4.5 * s, cy + 7.5 * s, shade(col, 0.6), None)


@painter("lamp")
def _lamp(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    m = fix(c, (200, 180, 140))
    L.ellipse(x, y - 1 * s, 5 * s, 1.5 * s, m)
    L.rect(x - 0.7 * s, y - 28 * s, x + 0.7 * s, y - 1 * s, m)
    shade_col = mix(col, (255, 240, 190), 0.35) if c.night else col
    L.poly([(x - 4 * s, y - 28 * s), (x + 4 * s, y - 28 * s), (x + 2.5 * s, y - 36 * s), (x - 2.5 * s, y - 36 * s)], shade_col)
    if c.night:
        L.glow(x, y - 30 * s, 16 * s, (255, 200, 120), 1.0)
        L.glow(x, y - 10 * s, 18 * s, (255, 190, 110), 0.3)


@painter("bookshelf")
def _bookshelf(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.rect(x - 9 * s, y - 34 * s, x + 9 * s, y, col)
    books = [(230, 90, 90), (90, 140, 225), (245, 200, 70), (110, 185, 110), (190, 120, 210), (245, 150, 80)]
    rng = np.random.default_rng(int(x) + 5)
    for k in range(3):
        top, bot = y - 32 * s + k * 10.5 * s, y - 24 * s + k * 10.5 * s
        L.rect(x - 7.5 * s, top, x + 7.5 * s, bot + 1 * s, shade(col, 0.55), None)
        bx = x - 7 * s
        while bx < x + 6 * s:
            bw = rng.uniform(1.3, 2.3) * s
            bh = rng.uniform(5.5, 8) * s
            L.rect(bx, bot + 1 * s - bh, bx + bw, bot + 1 * s, fix(c, books[rng.integers(6)]), None)
            bx += bw + 0.3 * s
    L.rect(x - 9 * s, y - 34 * s, x + 9 * s, y, None)


@painter("rug")
def _rug(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    cy = c.anchors.get("floor_mid", y + 5 * s)
    L.ellipse(x, cy, 24 * s, 4.5 * s, col)
    L.ellipse(x, cy, 19 * s, 3.2 * s, None, shade(col, 1.35), th=max(1, int(s)))
    L.ellipse(x, cy, 12 * s, 1.8 * s, shade(col, 0.85), None)


# ---------------------------------------------------------------------------------------------
# Station
# ---------------------------------------------------------------------------------------------
@painter("train")
def _train(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    y = c.anchors.get("rails", y)
    body = fix(c, (236, 236, 232))
    h = 24 * s
    for car in (-1, 0, 1):
        x0, x1 = x + (car * 44 - 21) * s, x + (car * 44 + 21) * s
        L.rect(x0, y - h, x1, y - 2.5 * s, body)
        L.rect(x0, y - 9 * s, x1, y - 6 * s, col, None)  # coloured stripe
        L.rect(x0, y - h - 1.5 * s, x1, y - h + 1.5 * s, shade(body, 0.75), None)
        win = (255, 230, 150) if c.night else fix(c, (120, 160, 200))
        for k in range(4):
            wx = x0 + (3 + k * 10) * s
            if k == 2:
                L.rect(wx, y - h + 4 * s, wx + 5 * s, y - 3 * s, shade(body, 0.85))  # door
                L.rect(wx + 1 * s, y - h + 5 * s, wx + 4 * s, y - 14 * s, win, None)
            else:
                L.rect(wx, y - h + 5 * s, wx + 7 * s, y - 13 * s, win)
                if c.night:
                    L.glow(wx + 3.5 * s, y - h + 9 * s, 5 * s, (255, 220, 140), 0.35)
        L.rect(x0, y - h, x1, y - 2.5 * s, None)
        for wx in (x0 + 5 * s, x0 + 10 * s, x1 - 10 * s, x1 - 5 * s):
            L.circle(wx, y - 2 * s, 2 * s, fix(c, TYRE), None)


@painter("station_sign")
def _station_sign(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    m = fix(c, METAL)
    for dx in (-10, 10):
        L.rect(x + (dx - 0.8) * s, y - 26 * s, x + (dx + 0.8) * s, y, m)
    white = (250, 250, 240) if c.night else fix(c, (250, 250, 245))
    L.rect(x - 13 * s, y - 30 * s, x + 13 * s, y - 19 * s, white)
    L.rect(x - 12.5 * s, y - 22.5 * s, x + 12.5 * s, y - 19.5 * s, col, None)
    ink = fix(c, (50, 50, 60))
    for k in range(4):
        L.rect(x + (-7 + k * 3.8) * s, y - 28 * s, x + (-4.6 + k * 3.8) * s, y - 24.5 * s, ink, None)
    if c.night:
        L.glow(x, y - 25 * s, 12 * s, (230, 240, 255), 0.35)


@painter("clock")
def _clock(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    m = fix(c, METAL)
    L.rect(x - 0.9 * s, y - 30 * s, x + 0.9 * s, y, m)
    L.circle(x, y - 34 * s, 5.5 * s, m)
    L.circle(x, y - 34 * s, 4.3 * s, fix(c, (250, 250, 240)), None)
    ink = (40, 40, 50)
    L.seg(x, y - 34 * s, x, y - 37.2 * s, ink, max(1, int(0.7 * s)))
    L.seg(x, y - 34 * s, x + 2.2 * s, y - 33 * s, ink, max(1, int(0.7 * s)))


# ---------------------------------------------------------------------------------------------
# Countryside / forest / meadow
# ---------------------------------------------------------------------------------------------
@painter("haystack")
def _haystack(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    hay = fix(c, (232, 196, 90))
    L.ellipse(x, y, 11 * s, 14 * s, hay, a0=180, a1=360)
    L.seg(x - 11 * s, y, x + 11 * s, y, outline_of(hay))
    dk = shade(hay, 0.78)
    for k in (-6, -2, 2, 6):
        L.seg(x + k * s, y - 1 * s, x + k * 0.6 * s, y - 12 * s, dk, max(1, int(0.6 * s)))
    L.ellipse(x - 3 * s, y - 9 * s, 3 * s, 2.5 * s, shade(hay, 1.25), None)


@painter("windmill")
def _windmill(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.poly([(x - 7 * s, y), (x - 4.5 * s, y - 26 * s), (x + 4.5 * s, y - 26 * s), (x + 7 * s, y)], col)
    L.poly([(x - 5.5 * s, y - 26 * s), (x, y - 32 * s), (x + 5.5 * s, y - 26 * s)], fix(c, (120, 80, 60)))
    L.rect(x - 1.5 * s, y - 6 * s, x + 1.5 * s, y, fix(c, DARKWOOD))
    hub = (x, y - 25 * s)
    sail = fix(c, (235, 225, 200))
    for k in range(4):
        a = np.deg2rad(20 + k * 90)
        d = np.array([np.cos(a), np.sin(a)])
        n = np.array([-d[1], d[0]])
        p0 = np.array(hub) + d * 3 * s
        p1 = np.array(hub) + d * 17 * s
        L.poly([p0, p1, p1 + n * 4.5 * s, p0 + n * 4.5 * s], sail)
        L.seg(hub[0], hub[1], *(np.array(hub) + d * 17 * s), fix(c, DARKWOOD), max(1, int(0.8 * s)))
    L.circle(*hub, 1.5 * s, fix(c, DARKWOOD))


@painter("fence")
def _fence(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    for k in range(-3, 4):
        px = x + k * 6 * s
        L.poly([(px - 1.2 * s, y), (px - 1.2 * s, y - 10 * s), (px, y - 11.5 * s), (px + 1.2 * s, y - 10 * s), (px + 1.2 * s, y)], col)
    for ry in (-8, -4):
        L.rect(x - 19 * s, y + (ry - 0.8) * s, x + 19 * s, y + (ry + 0.8) * s, col)


@painter("scarecrow")
def _scarecrow(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    wood = fix(c, WOOD)
    L.rect(x - 0.9 * s, y - 26 * s, x + 0.9 * s, y, wood)
    L.rect(x - 11 * s, y - 21 * s, x + 11 * s, y - 19.5 * s, wood)
    L.poly([(x - 8 * s, y - 22 * s), (x + 8 * s, y - 22 * s), (x + 5 * s, y - 10 * s), (x - 5 * s, y - 10 * s)], col)
    L.circle(x, y - 26 * s, 3.8 * s, fix(c, (232, 210, 160)))
    hat = fix(c, (215, 180, 90))
    L.ellipse(x, y - 29 * s, 7.5 * s, 1.8 * s, hat)
    L.ellipse(x, y - 29.5 * s, 3.8 * s, 3.5 * s, hat, a0=180, a1=360)
    L.seg(x - 1.5 * s, y - 26.5 * s, x - 1.5 * s, y - 26 * s, (40, 40, 50))
    L.seg(x + 1.5 * s, y - 26.5 * s, x + 1.5 * s, y - 26 * s, (40, 40, 50))


@painter("tractor")
def _tractor(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    L.rect(x - 8 * s, y - 13 * s, x + 11 * s, y - 6 * s, col)
    L.rect(x - 9 * s, y - 22 * s, x - 1 * s, y - 13 * s, None, outline_of(col))
    L.rect(x - 9.5 * s, y - 23 * s, x - 0.5 * s, y - 21.5 * s, col)
    L.rect(x - 9 * s, y - 21.5 * s, x - 8 * s, y - 13 * s, col, None)
    L.rect(x - 2 * s, y - 21.5 * s, x - 1 * s, y - 13 * s, col, None)
    L.rect(x + 6 * s, y - 17 * s, x + 7.5 * s, y - 13 * s, fix(c, METAL))
    tyre = fix(c, TYRE)
    L.circle(x - 6 * s, y - 7 * s, 7 * s, tyre)
    L.circle(x - 6 * s, y - 7 * s, 3 * s, fix(c, (235, 200, 70)), None)
    L.circle(x + 8 * s, y - 4 * s, 4 * s, tyre)
    L.circle(x + 8 * s, y - 4 * s, 1.8 * s, fix(c, (235, 200, 70)), None)


@painter("mushroom")
def _mushroom(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s * 1.5  # storybook-sized: the cap colour must read at 96x144
    stem = fix(c, CREAM)
    white = fix(c, (255, 255, 250))
    for dx, k in ((-5, 0.7), (0, 1.0), (5, 0.6)):
        cx = x + dx * s
        L.poly([(cx - 2 * k * s, y), (cx - 1.5 * k * s, y - 8 * k * s), (cx + 1.5 * k * s, y - 8 * k * s), (cx + 2 * k * s, y)], stem)
        L.ellipse(cx, y - 8 * k * s, 6 * k * s, 5.5 * k * s, col, a0=180, a1=360)
        L.seg(cx - 6 * k * s, y - 8 * k * s, cx + 6 * k * s, y - 8 * k * s, outline_of(col))
        for ddx, ddy in ((-2.8, -2), (1.5, -4), (3.5, -1.5)):
            L.circle(cx + ddx * k * s, y + (-8 + ddy) * k * s, 0.9 * k * s, white, None)
    if c.night:
        L.glow(x, y - 6 * s, 9 * s, col, 0.35)


@painter("stump")
def _stump(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    wood = fix(c, WOOD)
    L.poly([(x - 8 * s, y), (x - 6 * s, y - 8 * s), (x + 6 * s, y - 8 * s), (x + 8 * s, y)], wood)
    L.ellipse(x, y - 8 * s, 6 * s, 2 * s, fix(c, (215, 175, 120)))
    L.ellipse(x, y - 8 * s, 3 * s, 0.9 * s, None, fix(c, (170, 125, 80)), th=max(1, int(0.6 * s)))
    L.seg(x - 3 * s, y - 6 * s, x - 3.5 * s, y - 1 * s, outline_of(wood), max(1, int(0.6 * s)))
    L.circle(x + 5 * s, y - 1.5 * s, 2.2 * s, fix(c, LEAF))


@painter("signpost")
def _signpost(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    wood = fix(c, WOOD)
    L.rect(x - 1 * s, y - 24 * s, x + 1 * s, y, wood)
    board = fix(c, (210, 160, 100))
    L.poly([(x - 9 * s, y - 22 * s), (x + 6 * s, y - 22 * s), (x + 9 * s, y - 19.5 * s), (x + 6 * s, y - 17 * s), (x - 9 * s, y - 17 * s)], board)
    L.poly([(x + 8 * s, y - 15 * s), (x - 6 * s, y - 15 * s), (x - 9 * s, y - 12.5 * s), (x - 6 * s, y - 10 * s), (x + 8 * s, y - 10 * s)], board)
    ink = outline_of(board)
    L.seg(x - 6 * s, y - 19.5 * s, x + 3 * s, y - 19.5 * s, ink, max(1, int(0.6 * s)))
    L.seg(x - 4 * s, y - 12.5 * s, x + 5 * s, y - 12.5 * s, ink, max(1, int(0.6 * s)))


@painter("stone_lantern")
def _stone_lantern(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    st = fix(c, STONE)
    L.rect(x - 5 * s, y - 3 * s, x + 5 * s, y, st)
    L.rect(x - 1.8 * s, y - 12 * s, x + 1.8 * s, y - 3 * s, st)
    L.rect(x - 5 * s, y - 14 * s, x + 5 * s, y - 12 * s, st)
    L.rect(x - 3.8 * s, y - 20 * s, x + 3.8 * s, y - 14 * s, st)
    lit = (255, 215, 120) if c.night else shade(st, 0.45)
    L.rect(x - 2 * s, y - 18.5 * s, x + 2 * s, y - 15.5 * s, lit, None)
    L.poly([(x - 8 * s, y - 20 * s), (x + 8 * s, y - 20 * s), (x + 3 * s, y - 24 * s), (x - 3 * s, y - 24 * s)], st)
    L.circle(x, y - 25 * s, 1.5 * s, st)
    if c.night:
        L.glow(x, y - 17 * s, 10 * s, (255, 200, 110), 0.9)


@painter("stream")
def _stream(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    """A brook winding from the back of the ground towards the viewer (perspective: widens)."""
    s = c.s
    top = c.anchors.get("ground_top", y - 14 * s)
    bot = float(c.H) + 2
    water = fix(c, (105, 185, 235))
    bank = fix(c, (120, 100, 70))
    n = 24
    ys = np.linspace(top, bot, n)
    t = (ys - top) / (bot - top)
    cx = x + np.sin(t * 4.0 + 0.6) * (3 + 14 * t) * s
    hw = (1.5 + 13 * t ** 1.2) * s
    bw = hw + (0.6 + 1.8 * t) * s
    L.poly(list(zip(cx - bw, ys)) + list(zip(cx + bw, ys))[::-1], bank, None)
    L.poly(list(zip(cx - hw, ys)) + list(zip(cx + hw, ys))[::-1], water, None)
    deep = shade(water, 0.85)
    L.poly(list(zip(cx - hw * 0.35, ys)) + list(zip(cx + hw * 0.15, ys))[::-1], deep, None)
    hl = shade(water, 1.5)
    for k in range(4, n - 1, 4):
        L.seg(cx[k] - hw[k] * 0.6, ys[k], cx[k] - hw[k] * 0.1, ys[k], hl, max(1, int(0.8 * s)))
        L.seg(cx[k + 1] + hw[k] * 0.15, ys[k + 1], cx[k + 1] + hw[k] * 0.5, ys[k + 1], hl, max(1, int(0.8 * s)))
    stone = fix(c, STONE)
    for k in (n // 3, 2 * n // 3):
        L.ellipse(cx[k] + bw[k], ys[k], 2.2 * s * (0.5 + t[k]), 1.4 * s * (0.5 + t[k]), stone)


@painter("picnic_blanket")
def _picnic(L: Layer, c: PaintCtx, x: float, y: float, col: RGB) -> None:
    s = c.s
    white = fix(c, (250, 250, 245))
    x0, x1, y0, y1 = x - 14 * s, x + 14 * s, y - 1 * s, y + 5 * s
    n = 6
    for i in range(n):
        for j in range(2):
            fx0, fx1 = x0 + (x1 - x0) * i / n, x0 + (x1 - x0) * (i + 1) / n
            fy0, fy1 = y0 + (y1 - y0) * j / 2, y0 + (y1 - y0) * (j + 1) / 2
            sk = -3 * s * (j / 2)
            sk1 = -3 * s * ((j + 1) / 2)
            L.poly([(fx0 + sk, fy0), (fx1 + sk, fy0), (fx1 + sk1, fy1), (fx0 + sk1, fy1)], col if (i + j) % 2 == 0 else white, None)
    L.poly([(x0, y0), (x1, y0), (x1 - 3 * s, y1), (x0 - 3 * s, y1)], None, outline_of(col))
    basket = fix(c, (190, 140, 80))
    L.rect(x + 4 * s, y - 5 * s, x + 11 * s, y + 0.5 * s, basket)
    L.ellipse(x + 7.5 * s, y - 5 * s, 3 * s, 3 * s, None, outline_of(basket), a0=180, a1=360)
