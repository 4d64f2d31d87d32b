"""Scenery painters: one function per place paints its sky / far / mid / near layers once.

Called by PlaceScene (place_art.py) before the props are painted on top. Painters draw with the
primitives of prop_art.py, in design units s = H / 96 pixels, from the place's time-tinted palette.
Each layer takes its randomness from its own seeded stream, and a painter consumes the same random
numbers at every time of day, so day, sunset and night show the same houses, trees and hills.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import cv2
import numpy as np

from animegamer.world.place_spec import PlaceSpec
from animegamer.world.prop_art import AUTO, RGB, Layer, PaintCtx, mix, outline_of, shade


def rng_for(seed: int, *tags) -> np.random.Generator:
    """An independent, reproducible random stream per (seed, tags...)."""
    return np.random.default_rng([seed & 0xFFFFFFFF] + [zlib.crc32(str(t).encode()) for t in tags])


def _ridge_y(w: int, base: float, amp: float, wl: float, rng: np.random.Generator, step: float = 2.0,
             sharp: bool = False) -> tuple[np.ndarray, np.ndarray]:
    xs = np.arange(-4.0, w + 6.0, step)
    n = np.zeros_like(xs)
    for k, a in ((1.0, 1.0), (0.47, 0.5), (0.23, 0.25), (0.11, 0.12)):
        n += a * np.sin(2 * np.pi * xs / (wl * k) + rng.uniform(0, 2 * np.pi))
    n /= 1.87
    if sharp:
        n = 1.0 - np.abs(n) * 2.0  # peaks
        n = n * 0.5 + 0.5
    else:
        n = n * 0.5 + 0.5
    return xs, base - amp * n


def _fill_under(L: Layer, xs, ys, col: RGB, bottom: float, line=None):
    pts = list(zip(xs, ys)) + [(xs[-1], bottom), (xs[0], bottom)]
    L.poly(pts, col, line)


def _circles_mask(h: int, w: int, circles, shift_up: float = 0.0, scale: float = 1.0) -> np.ndarray:
    m = np.zeros((h, w), np.uint8)
    for cx, cy, r in circles:
        cv2.circle(m, (int(cx * 8), int((cy - shift_up * r) * 8)), max(1, int(r * scale * 8)), 255, -1, cv2.LINE_AA, 3)
    return m


def _cumulus(L: Layer, cx: float, base: float, width: float, lit: RGB, dark: RGB, rng: np.random.Generator,
             height: float = 0.55, flat: bool = True):
    """A flat-bottomed anime cumulus: shaded body, lit top puffs, no outline."""
    n = int(rng.integers(5, 9))
    circles = []
    for i in range(n):
        t = (i + 0.5) / n
        r = width * (0.10 + 0.16 * np.sin(np.pi * t) ** 0.8) * rng.uniform(0.8, 1.2) * (height / 0.55)
        circles.append((width * (t - 0.5) * 0.9 + width, base - r * rng.uniform(0.2, 0.7) + width * 0.7, r))
    circles.append((width, base - width * 0.25 * (height / 0.55) + width * 0.7, width * 0.22 * (height / 0.55)))
    h, w = int(width * 1.4 + 2), int(width * 2 + 2)
    body = _circles_mask(h, w, circles)
    top = _circles_mask(h, w, circles, shift_up=0.28, scale=0.86)
    cut = int(round(base + width * 0.7))
    if flat:
        body[cut:] = 0
        top[cut:] = 0
    x0, y0 = int(cx - width), int(-width * 0.7)
    L.soft_blob(body, x0, y0, dark)
    L.soft_blob(top, x0, y0, lit)


def _halo(L: Layer, cx: float, cy: float, r: float, col: RGB, strength: float):
    y0, y1 = max(0, int(cy - 3 * r)), min(L.h, int(cy + 3 * r))
    x0, x1 = max(0, int(cx - 3 * r)), min(L.w, int(cx + 3 * r))
    if y1 <= y0 or x1 <= x0:
        return
    yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    g = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))[..., None] * strength
    reg = L.rgb[y0:y1, x0:x1].astype(np.float32)
    L.rgb[y0:y1, x0:x1] = np.clip(reg * (1 - g) + np.asarray(col, np.float32) * g, 0, 255).astype(np.uint8)


def _paint_sky(L: Layer, c: PaintCtx, spec: PlaceSpec, seed: int, n_clouds: int = 4,
               cloud_rows: tuple[float, float] = (0.12, 0.42), grad_to: float | None = None,
               cloud_size: float = 1.0, sun_x: float = 0.7):
    s, H = c.s, c.H
    P = c.pal
    horizon = (grad_to if grad_to is not None else spec.horizon_y) * H
    L.vgradient(0, horizon, P["sky_top"], P["sky_bottom"], gamma=1.25)
    L.fill_rows(horizon, L.h, P["sky_bottom"])
    if c.sunset:
        glow = mix(P["sky_bottom"], (255, 226, 160), 0.55)
        a, b = int(horizon * 0.55), int(horizon)
        t = np.linspace(0, 1, max(1, b - a), dtype=np.float32)[:, None, None] ** 2
        L.rgb[a:b] = np.clip(L.rgb[a:b] * (1 - t * 0.6) + np.asarray(glow, np.float32) * t * 0.6, 0, 255).astype(np.uint8)
    rng = rng_for(seed, spec.key, "sky")
    srng = rng_for(seed, spec.key, "stars")
    if c.night:
        n_st = int(L.w * horizon / (90 * s * s))
        xs, ys = srng.uniform(0, L.w, n_st), srng.uniform(0, horizon * 0.92, n_st) ** 1.0
        br = srng.uniform(0.35, 1.0, n_st)
        for x, y, b in zip(xs, ys, br):
            xi, yi = int(x), int(y)
            col = np.asarray(L.rgb[yi, xi], np.float32)
            L.rgb[yi, xi] = np.clip(col + (255 - col) * b, 0, 255).astype(np.uint8)
            if b > 0.93 and s >= 1:
                star = mix((255, 250, 220), tuple(int(v) for v in col), 0.3)
                L.seg(x - 1.6 * s, y, x + 1.6 * s, y, star, 1)
                L.seg(x, y - 1.6 * s, x, y + 1.6 * s, star, 1)
        mx, my = L.w * sun_x, H * 0.17
        _halo(L, mx, my, 14 * s, (150, 170, 230), 0.35)
        L.circle(mx, my, 6.5 * s, (252, 246, 214), None)
        L.circle(mx + 2 * s, my - 1.5 * s, 1.4 * s, (232, 226, 196), None)
        L.circle(mx - 2 * s, my + 2 * s, 1.0 * s, (232, 226, 196), None)
    elif c.sunset:
        sx, sy = L.w * sun_x, horizon - 9 * s
        _halo(L, sx, sy, 26 * s, (255, 200, 130), 0.55)
        L.circle(sx, sy, 9 * s, (255, 236, 170), None)
    else:
        sx, sy = L.w * sun_x, H * 0.1
        _halo(L, sx, sy, 18 * s, (255, 255, 235), 0.55)
        L.circle(sx, sy, 5 * s, (255, 255, 240), None)
    lit = P["cloud"]
    dark = mix(P["cloud"], P["sky_top"], 0.33) if not c.sunset else mix(P["cloud"], (190, 120, 170), 0.5)
    for i in range(n_clouds):
        cx = L.w * (i + rng.uniform(0.1, 0.9)) / n_clouds
        cy = H * rng.uniform(*cloud_rows)
        width = rng.uniform(14, 26) * s * cloud_size
        _cumulus(L, cx, cy, width, lit, dark, rng)
    for i in range(2):  # thin high streaks
        cx, cy = rng.uniform(0, L.w), H * rng.uniform(0.05, 0.2)
        m = np.zeros((int(6 * s) + 2, int(60 * s) + 2), np.uint8)
        cv2.ellipse(m, (m.shape[1] // 2 * 8, m.shape[0] // 2 * 8), (int(28 * s * 8), int(1.2 * s * 8)), 0, 0, 360, 255, -1, cv2.LINE_AA, 3)
        L.soft_blob(m, int(cx), int(cy), lit, 0.45)


class WindowGrid(NamedTuple):
    """Rows x cols windows of ww x wh from (x0, y0), gapx / gapy apart (pixels)."""

    x0: float
    y0: float
    cols: int
    rows: int
    ww: float
    wh: float
    gapx: float
    gapy: float


def _window_grid(L: Layer, c: PaintCtx, grid: WindowGrid, rng, frame: RGB | None, glass: RGB, lit_p: float = 0.55):
    s = c.s
    x0, y0, cols, rows, ww, wh, gapx, gapy = grid
    for r in range(rows):
        for k in range(cols):
            wx, wy = x0 + k * (ww + gapx), y0 + r * (wh + gapy)
            lit = rng.random() < lit_p
            col = mix(c.pal["light"], (255, 250, 225), 0.2) if (c.night and lit) else glass
            if c.sunset and not lit:
                col = mix(glass, (255, 190, 140), 0.35)
            L.rect(wx, wy, wx + ww, wy + wh, col, frame)
            if not c.night:
                L.seg(wx + ww * 0.25, wy + wh * 0.25, wx + ww * 0.25, wy + wh * 0.55, shade(col, 1.4), max(1, int(0.6 * s)))
            elif lit:
                L.glow(wx + ww / 2, wy + wh / 2, max(ww, wh) * 0.9, (255, 200, 110), 0.35)


def _utility_poles(L: Layer, c: PaintCtx, base: float, spacing: float, rng, top: float):
    s = c.s
    pole = c.tint_fn((120, 110, 100))
    wire = c.tint_fn((60, 60, 70))
    xs = np.arange(rng.uniform(0.2, 0.8) * spacing, L.w, spacing)
    for x in xs:
        L.rect(x - 1.1 * s, top, x + 1.1 * s, base, pole)
        L.rect(x - 6 * s, top + 3 * s, x + 6 * s, top + 4.4 * s, pole)
        L.rect(x - 1.8 * s, top + 9 * s, x + 1.8 * s, top + 12 * s, c.tint_fn((170, 170, 175)))
    for dy, dx in ((3.2, -5), (3.2, 5), (9, 0)):
        pts = []
        for x0, x1 in zip(np.concatenate([[xs[0] - spacing], xs]), np.concatenate([xs, [xs[-1] + spacing]])):
            for t in np.linspace(0, 1, 8):
                pts.append((x0 + dx * s + (x1 - x0) * t, top + dy * s + np.sin(np.pi * t) * 4 * s))
        L.polyline(pts, wire, max(1, int(round(0.5 * s))))


def _town(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=3, cloud_rows=(0.1, 0.3))
    # far: pale skyline with a radio tower
    L, rng = Ls["far"], rng_for(seed, "town", "far")
    x = -5 * s
    far = P["far"]
    while x < L.w:
        bw, bh = rng.uniform(10, 22) * s, rng.uniform(18, 42) * s
        col = mix(far, P["sky_bottom"], rng.uniform(0.0, 0.35))
        L.rect(x, H * 0.68 - bh, x + bw, H * 0.7, col, None)
        wcol = mix(col, P["light"], 0.8) if c.night else shade(col, 1.12)
        for wy in np.arange(H * 0.68 - bh + 3 * s, H * 0.66, 4 * s):
            for wx in np.arange(x + 2 * s, x + bw - 2 * s, 3.5 * s):
                if rng.random() < (0.35 if c.night else 0.5):
                    L.rect(wx, wy, wx + 1.4 * s, wy + 1.6 * s, wcol, None)
        x += bw + rng.uniform(0, 3) * s
    tx = L.w * rng.uniform(0.3, 0.7)
    tcol = mix(c.tint_fn((225, 90, 70)), P["sky_bottom"], 0.35)
    L.poly([(tx - 7 * s, H * 0.6), (tx - 1 * s, H * 0.12), (tx + 1 * s, H * 0.12), (tx + 7 * s, H * 0.6)], tcol, None)
    L.rect(tx - 4.5 * s, H * 0.36, tx + 4.5 * s, H * 0.39, mix(tcol, (255, 255, 255), 0.4), None)
    if c.night:
        L.glow(tx, H * 0.12, 4 * s, (255, 90, 80), 0.9)
    # mid: a row of houses and shops
    L, rng = Ls["mid"], rng_for(seed, "town", "mid")
    base = spec.layers["mid"].base_y * H
    walls = [(245, 232, 205), (250, 210, 200), (205, 232, 210), (200, 220, 240), (250, 225, 170), (235, 215, 235)]
    roofs = [(205, 80, 70), (80, 110, 160), (120, 85, 70), (70, 130, 110), (90, 90, 110)]
    x = -rng.uniform(0, 10) * s
    while x < L.w:
        bw = rng.uniform(26, 40) * s
        floors = int(rng.integers(2, 4))
        fh = 11 * s
        top = base - floors * fh - 3 * s
        wall = c.tint_fn(walls[int(rng.integers(len(walls)))])
        roof = c.tint_fn(roofs[int(rng.integers(len(roofs)))])
        gable = rng.random() < 0.5
        L.rect(x, top, x + bw, base, wall)
        if gable:
            L.poly([(x - 2.5 * s, top + 0.5 * s), (x + bw / 2, top - 9 * s), (x + bw + 2.5 * s, top + 0.5 * s)], roof)
        else:
            L.rect(x - 1 * s, top - 2.5 * s, x + bw + 1 * s, top + 0.5 * s, shade(wall, 0.8))
        L.rect(x + 1, top + 1, x + 3 * s, base, shade(wall, 0.88), None)  # shaded side
        glass = c.tint_fn((150, 195, 230))
        cols = max(2, int((bw - 6 * s) / (9 * s)))
        gap = (bw - 6 * s - cols * 5 * s) / max(1, cols - 1)
        _window_grid(L, c, WindowGrid(x + 3 * s, top + 3.5 * s, cols, floors - 1, 5 * s, 6 * s, gap, fh - 6 * s), rng,
                     c.tint_fn((250, 250, 245)), glass)
        if rng.random() < 0.55:  # shop: awning + big window
            aw = c.tint_fn(roofs[int(rng.integers(len(roofs)))])
            ay = base - fh + 1 * s
            n = int(bw / (4 * s))
            for k in range(n):
                L.poly([(x + k * bw / n, ay), (x + (k + 1) * bw / n, ay), (x + (k + 1) * bw / n, ay + 3.5 * s), (x + k * bw / n, ay + 3.5 * s)],
                       aw if k % 2 == 0 else c.tint_fn((250, 250, 245)), None)
            L.rect(x, ay, x + bw, ay + 3.5 * s, None, outline_of(aw))
            shop = mix(c.pal["light"], (255, 255, 230), 0.3) if c.night else glass
            L.rect(x + 3 * s, ay + 4.5 * s, x + bw * 0.62, base, shop)
            if c.night:
                L.glow(x + bw * 0.35, base - 3 * s, 9 * s, (255, 210, 130), 0.5)
            L.rect(x + bw * 0.7, ay + 4.5 * s, x + bw * 0.7 + 5 * s, base, c.tint_fn((120, 85, 60)))
            rng.random()
        else:
            dx = x + bw * rng.uniform(0.2, 0.7)
            L.rect(dx, base - 8.5 * s, dx + 5 * s, base, c.tint_fn((130, 90, 65)))
        L.rect(x, top, x + bw, base, None)
        x += bw + rng.uniform(0, 6) * s
    _utility_poles(L, c, base, 70 * s, rng, H * 0.16)
    # near: road, curb, sidewalk
    L = Ls["near"]
    y_road, y_curb, y_walk = H * 0.665, H * 0.775, H * 0.795
    L.vgradient(y_road, y_curb, shade(P["ground"], 0.85), P["ground"])
    for x in np.arange(0, L.w, 16 * s):
        L.rect(x, H * 0.715, x + 8 * s, H * 0.725, mix(P["ground"], (255, 255, 255), 0.75), None)
    L.fill_rows(y_curb, y_walk, shade(P["near"], 1.15))
    L.fill_rows(y_curb + 1.5 * s, y_walk, shade(P["near"], 0.8))
    L.vgradient(y_walk, H, P["near"], shade(P["near"], 0.92))
    seam = shade(P["near"], 0.84)
    for yy in (H * 0.86, H * 0.95):
        L.seg(0, yy, L.w, yy, seam, 1)
    for x in np.arange(0, L.w, 14 * s):
        L.seg(x, y_walk, x - 2 * s, H * 0.86, seam, 1)
        L.seg(x + 7 * s, H * 0.86, x + 5 * s, H * 0.95, seam, 1)
    c.anchors["road"] = H * 0.76


def _countryside(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=4, cloud_rows=(0.12, 0.36))
    L, rng = Ls["far"], rng_for(seed, "countryside", "far")
    xs, ys = _ridge_y(L.w, H * 0.5, H * 0.2, 90 * s, rng, sharp=True)
    _fill_under(L, xs, ys, mix(P["far"], P["sky_bottom"], 0.35), H)
    xs, ys = _ridge_y(L.w, H * 0.57, H * 0.1, 60 * s, rng)
    _fill_under(L, xs, ys, P["far"], H)
    L, rng = Ls["mid"], rng_for(seed, "countryside", "mid")
    xs, ys = _ridge_y(L.w, H * 0.62, H * 0.07, 110 * s, rng)
    _fill_under(L, xs, ys, P["mid"], H, None)
    field_cols = [shade(P["mid"], 0.86), mix(P["mid"], c.tint_fn((235, 215, 120)), 0.6), shade(P["mid"], 1.1)]
    for k in range(6):
        off = (k + 1) * 2.6 * s
        x0 = rng.uniform(0, L.w)
        seg = (xs > x0 - 90 * s) & (xs < x0 + 90 * s)
        if seg.sum() < 2:
            continue
        L.polyline(list(zip(xs[seg], ys[seg] + off + 2 * s)), field_cols[k % 3], max(1, int(1.8 * s)))
    for k in range(int(L.w / (30 * s))):  # hedgerow tree clumps on the ridge
        tx = rng.uniform(0, L.w)
        ty = np.interp(tx, xs, ys) + 1 * s
        for j in range(3):
            L.circle(tx + (j - 1) * 3 * s, ty - rng.uniform(1, 3) * s, rng.uniform(2.2, 3.5) * s, shade(P["mid"], 0.6), None)
    for k in range(2):  # farmhouses
        hx = L.w * (0.2 + 0.5 * k + rng.uniform(-0.08, 0.08))
        hy = np.interp(hx, xs, ys) + 4 * s
        wall = c.tint_fn((245, 238, 220))
        L.rect(hx - 9 * s, hy - 9 * s, hx + 9 * s, hy, wall)
        L.poly([(hx - 11 * s, hy - 8.5 * s), (hx - 6 * s, hy - 16 * s), (hx + 6 * s, hy - 16 * s), (hx + 11 * s, hy - 8.5 * s)], P["accent"])
        win = mix(P["light"], (255, 255, 230), 0.3) if c.night else c.tint_fn((140, 180, 215))
        L.rect(hx - 6 * s, hy - 6.5 * s, hx - 2.5 * s, hy - 3 * s, win)
        L.rect(hx + 2 * s, hy - 6 * s, hx + 5.5 * s, hy, c.tint_fn((140, 95, 60)))
        if c.night:
            L.glow(hx - 4 * s, hy - 5 * s, 5 * s, (255, 200, 110), 0.6)
    L = Ls["near"]
    rng = rng_for(seed, "countryside", "near")
    xs, ys = _ridge_y(L.w, H * 0.71, H * 0.015, 40 * s, rng)
    _fill_under(L, xs, ys, P["near"], H, None)
    rxs, rys = _ridge_y(L.w, H * 0.79, H * 0.012, 50 * s, rng)
    pts = list(zip(rxs, rys)) + list(zip(rxs[::-1], (rys + H * 0.15)[::-1]))
    L.poly(pts, P["ground"], None)
    L.polyline(list(zip(rxs, rys)), shade(P["ground"], 0.8), max(1, int(s)))
    for _ in range(int(L.w / (4 * s))):
        gx, gy = rng.uniform(0, L.w), rng.uniform(H * 0.8, H * 0.94)
        L.seg(gx, gy, gx + 2 * s, gy, P["ground_dark"], 1)
    for _ in range(int(L.w / (3 * s))):  # grass tufts on the verges
        gx = rng.uniform(0, L.w)
        gy = rng.choice([rng.uniform(H * 0.72, H * 0.78), rng.uniform(H * 0.955, H)])
        L.poly([(gx - 1.2 * s, gy), (gx, gy - 2.8 * s), (gx + 1.2 * s, gy)], shade(P["near"], 0.8), None)


def _forest(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=2, cloud_rows=(0.15, 0.3))
    L, rng = Ls["far"], rng_for(seed, "forest", "far")
    for row, (top, col) in enumerate([(0.22, mix(P["far"], P["sky_bottom"], 0.45)), (0.34, P["far"])]):
        x = -5 * s
        while x < L.w + 10 * s:
            r = rng.uniform(7, 12) * s
            cy = H * top + rng.uniform(-4, 6) * s
            L.rect(x - 1 * s, cy, x + 1 * s, H, shade(col, 0.85), None)
            L.ellipse(x, cy + r * 0.8, r, r * 1.6, col, None)
            x += r * 1.2
        L.fill_rows(H * (top + 0.22), H, col)
    L, rng = Ls["mid"], rng_for(seed, "forest", "mid")
    base = H * 0.74
    trunk = shade(P["mid"], 0.55)
    trunk = mix(trunk, c.tint_fn((90, 70, 50)), 0.5)
    x = rng.uniform(0, 10) * s
    while x < L.w:
        tw = rng.uniform(3.5, 7) * s
        L.poly([(x - tw, base), (x - tw * 0.7, 0), (x + tw * 0.7, 0), (x + tw, base)], trunk, None)
        L.seg(x + tw * 0.3, base - 2 * s, x + tw * 0.2, H * 0.2, shade(trunk, 1.25), max(1, int(0.8 * s)))
        x += rng.uniform(16, 30) * s
    canopy = P["mid"]
    for k in range(int(L.w / (9 * s)) + 2):  # dense canopy across the top
        cx, cy, r = k * 9 * s + rng.uniform(-3, 3) * s, rng.uniform(0.02, 0.2) * H, rng.uniform(9, 15) * s
        L.circle(cx, cy, r, shade(canopy, 0.8), None)
    for k in range(int(L.w / (12 * s)) + 2):
        cx, cy, r = k * 12 * s + rng.uniform(-3, 3) * s, rng.uniform(0.0, 0.14) * H, rng.uniform(6, 10) * s
        L.circle(cx, cy, r, canopy, None)
        L.circle(cx - r * 0.3, cy - r * 0.35, r * 0.45, shade(canopy, 1.18), None)
    for k in range(int(L.w / (20 * s))):  # undergrowth bushes at the tree line
        bx = rng.uniform(0, L.w)
        L.circle(bx, base - 1 * s, rng.uniform(4, 7) * s, shade(canopy, 0.9), None)
    if not c.night:  # light shafts
        light = (255, 245, 190) if not c.sunset else (255, 190, 120)
        L.light = np.zeros((L.h, L.w, 3), np.float32)
        for k in range(int(L.w / (45 * s)) + 1):
            lx = rng.uniform(0, L.w)
            m = np.zeros((L.h, L.w), np.uint8)
            pts = np.array([[lx, 0], [lx + 6 * s, 0], [lx + 26 * s, base], [lx + 14 * s, base]])
            cv2.fillPoly(m, [np.round(pts * 8).astype(np.int32)], 255, cv2.LINE_AA, 3)
            m = cv2.GaussianBlur(m, (0, 0), 1.5 * s)
            L.light += m[..., None].astype(np.float32) / 255.0 * np.asarray(light, np.float32) * 0.16
    else:
        frng = rng_for(seed, "forest", "fireflies")
        for k in range(int(L.w / (18 * s))):
            fx, fy = frng.uniform(0, L.w), frng.uniform(0.4, 0.8) * H
            L.glow(fx, fy, 2.5 * s, (200, 255, 140), 0.9)
    L, rng = Ls["near"], rng_for(seed, "forest", "near")
    top = H * 0.72
    L.vgradient(top, H, shade(P["ground"], 0.75), P["ground"])
    pxs, pys = _ridge_y(L.w, H * 0.8, H * 0.02, 70 * s, rng)
    path = mix(P["ground"], c.tint_fn((200, 170, 120)), 0.55)
    L.poly(list(zip(pxs, pys)) + list(zip(pxs[::-1], (pys + H * 0.14)[::-1])), path, None)
    for _ in range(int(L.w / (5 * s))):
        mx, my = rng.uniform(0, L.w), rng.uniform(top, H)
        L.ellipse(mx, my, rng.uniform(1, 2.5) * s, 0.6 * s, P["ground_dark"], None)
    for _ in range(int(L.w / (12 * s))):  # ferns along the back edge
        fx = rng.uniform(0, L.w)
        fy = top + rng.uniform(0, 3) * s
        for a in (-60, -30, 0, 30, 60):
            t = np.deg2rad(a - 90)
            L.poly([(fx, fy), (fx + np.cos(t - 0.2) * 5 * s, fy + np.sin(t - 0.2) * 5 * s),
                    (fx + np.cos(t) * 8 * s, fy + np.sin(t) * 8 * s), (fx + np.cos(t + 0.2) * 5 * s, fy + np.sin(t + 0.2) * 5 * s)],
                   shade(P["near"], 1.25), None)
    leaves = P["near"]
    for k in range(int(L.w / (14 * s)) + 2):  # overhanging leaves at the very top
        cx = k * 14 * s + rng.uniform(-4, 4) * s
        L.circle(cx, rng.uniform(-6, 1) * s, rng.uniform(6, 10) * s, leaves, None)
    c.anchors["ground_top"] = top


def _beach(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    hz = spec.horizon_y * H
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=4, cloud_rows=(0.12, 0.38), sun_x=0.55)
    L, rng = Ls["far"], rng_for(seed, "beach", "far")
    L.vgradient(hz, H, P["far"], P["mid"])
    ix = L.w * rng.uniform(0.15, 0.35)
    L.ellipse(ix, hz + 0.5 * s, 16 * s, 5 * s, mix(c.tint_fn((90, 150, 110)), P["sky_bottom"], 0.35), None, a0=180, a1=360)
    sparkle = mix(P["far"], (255, 255, 255), 0.55)
    for _ in range(int(L.w / (5 * s))):
        sx, sy = rng.uniform(0, L.w), rng.uniform(hz + 2 * s, H * 0.62)
        L.seg(sx, sy, sx + rng.uniform(2, 5) * s, sy, sparkle, 1)
    if c.night or c.sunset:  # moon / sun path on the water
        px = L.w * 0.55
        col = (255, 230, 160) if c.sunset else (220, 225, 240)
        for k in range(10):
            yy = hz + 1.5 * s + k * 1.7 * s
            ww = (3 + k * 1.3) * s * rng.uniform(0.6, 1.0)
            L.seg(px - ww, yy, px + ww * 0.6, yy, col, 1)
    c.anchors["sea"] = H * 0.53
    L, rng = Ls["mid"], rng_for(seed, "beach", "mid")
    xs, ys = _ridge_y(L.w, H * 0.585, H * 0.012, 30 * s, rng)
    _fill_under(L, xs, ys, mix(P["mid"], P["far"], 0.25), H, None)
    foam = mix(P["accent"], P["mid"], 0.15)
    L.polyline(list(zip(xs, ys)), foam, max(1, int(1.2 * s)))
    for _ in range(int(L.w / (9 * s))):
        wx, wy = rng.uniform(0, L.w), rng.uniform(H * 0.61, H * 0.7)
        L.ellipse(wx, wy, rng.uniform(2.5, 5) * s, 0.7 * s, mix(P["mid"], (255, 255, 255), 0.35), None, a0=180, a1=360)
    L, rng = Ls["near"], rng_for(seed, "beach", "near")
    xs, ys = _ridge_y(L.w, H * 0.715, H * 0.025, 45 * s, rng)
    wet = shade(P["ground_dark"], 0.9)
    _fill_under(L, xs, ys, wet, H, None)
    _fill_under(L, xs, ys + 2.5 * s, P["ground"], H, None)
    L.polyline(list(zip(xs, ys)), P["accent"], max(1, int(1.5 * s)))
    L.polyline(list(zip(xs, ys - 1.4 * s)), mix(P["accent"], P["mid"], 0.4), 1)
    for _ in range(int(L.w / (2.5 * s))):
        dx, dy = rng.uniform(0, L.w), rng.uniform(H * 0.76, H)
        L.rect(dx, dy, dx + 0.9 * s, dy + 0.6 * s, P["ground_dark"], None)
    shell = [c.tint_fn((250, 200, 200)), c.tint_fn((250, 240, 230))]
    for _ in range(int(L.w / (40 * s))):
        sx, sy = rng.uniform(0, L.w), rng.uniform(H * 0.8, H * 0.98)
        L.ellipse(sx, sy, 1.6 * s, 1.2 * s, shell[int(rng.integers(2))], AUTO, a0=180, a1=360)
    c.anchors["shore"] = float(np.mean(ys))


def _bedroom(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=3, cloud_rows=(0.18, 0.4), grad_to=0.6, cloud_size=0.6, sun_x=0.6)
    L, rng = Ls["far"], rng_for(seed, "bedroom", "far")
    x = 0.0
    while x < L.w:  # rooftops outside
        bw, bh = rng.uniform(12, 24) * s, rng.uniform(4, 12) * s
        col = mix(P["far"], P["sky_bottom"], rng.uniform(0, 0.3))
        L.rect(x, H * 0.46 - bh, x + bw, H * 0.7, col, None)
        L.poly([(x - 1 * s, H * 0.46 - bh), (x + bw / 2, H * 0.46 - bh - 5 * s), (x + bw + 1 * s, H * 0.46 - bh)], shade(col, 0.85), None)
        if c.night and rng.random() < 0.6:
            L.rect(x + bw * 0.3, H * 0.46 - bh + 2 * s, x + bw * 0.3 + 2 * s, H * 0.46 - bh + 4 * s, P["light"], None)
        x += bw
    L, rng = Ls["mid"], rng_for(seed, "bedroom", "mid")
    wall = P["mid"]
    top_wall = H * 0.72
    L.fill_rows(0, top_wall, wall)
    for x in np.arange(0, L.w, 8 * s):  # wallpaper stripes
        L.rect(x, 0, x + 3 * s, top_wall, shade(wall, 1.06) if not c.night else shade(wall, 1.1), None)
    for x in np.arange(4 * s, L.w, 16 * s):
        for y in np.arange(8 * s, top_wall - 8 * s, 12 * s):
            L.circle(x + (y // (12 * s)) % 2 * 8 * s, y, 0.9 * s, shade(wall, 0.92), None)
    a, b = 0, int(top_wall)
    t = np.linspace(0, 1, b - a, dtype=np.float32)
    k = 0.86 + 0.14 * np.clip(t / 0.35, 0, 1) - 0.06 * np.clip((t - 0.75) / 0.25, 0, 1)  # soft room shading
    L.rgb[a:b] = np.clip(L.rgb[a:b].astype(np.float32) * k[:, None, None], 0, 255).astype(np.uint8)
    L.fill_rows(0, 3 * s, shade(wall, 0.8))
    L.fill_rows(3 * s, 4 * s, shade(wall, 1.1))
    L.fill_rows(top_wall - 4 * s, top_wall, c.tint_fn((250, 248, 240)))
    L.seg(0, top_wall - 4 * s, L.w, top_wall - 4 * s, shade(wall, 0.7), 1)
    frame = c.tint_fn((252, 250, 245))
    curtain = P["accent"]
    for wx in (L.w * 0.3, L.w * 0.74):
        x0, x1, y0, y1 = wx - 17 * s, wx + 17 * s, H * 0.12, H * 0.5
        L.alpha[int(y0):int(y1), int(x0):int(x1)] = 0  # hole: the sky layer shows through
        L.rgb[int(y0):int(y1), int(x0):int(x1)] = 0
        t = max(2, int(2 * s))
        L.rect(x0, y0, x1, y1, None, frame, th=t)
        L.seg(wx, y0, wx, y1, frame, t)
        L.seg(x0, (y0 + y1) / 2, x1, (y0 + y1) / 2, frame, max(1, int(1.2 * s)))
        L.rect(x0 - 3 * s, y1, x1 + 3 * s, y1 + 2.5 * s, frame)  # sill
        L.rect(x0 - 9 * s, y0 - 5 * s, x1 + 9 * s, y0 - 3.8 * s, c.tint_fn((170, 130, 90)), None)  # rod
        for side in (-1, 1):
            cx0 = x0 - 8 * s if side < 0 else x1 + 8 * s
            cx1 = x0 + 3 * s if side < 0 else x1 - 3 * s
            pts = [(cx0, y0 - 4 * s), (cx1, y0 - 4 * s), ((cx0 + cx1) / 2 + side * 2 * s, y1 - 6 * s),
                   ((cx0 + cx1) / 2 + side * 1 * s, y1 + 6 * s), (cx0, y1 + 6 * s)]
            L.poly(pts, curtain)
            L.seg((cx0 * 0.6 + cx1 * 0.4), y0 - 3 * s, (cx0 * 0.6 + cx1 * 0.4), y1 + 4 * s, shade(curtain, 0.85), max(1, int(0.8 * s)))
    L = Ls["near"]
    rng = rng_for(seed, "bedroom", "near")
    y0 = H * 0.715
    L.vgradient(y0, H, shade(P["near"], 0.85), P["near"])
    pl = 5 * s
    for k, yy in enumerate(np.arange(y0, H, pl)):
        L.seg(0, yy, L.w, yy, shade(P["near"], 0.78), 1)
        off = rng.uniform(0, 30) * s
        for x in np.arange(off, L.w, 30 * s):
            L.seg(x, yy, x, yy + pl, shade(P["near"], 0.8), 1)
    c.anchors["floor_mid"] = spec.ground_y * H + 1 * s
    c.anchors["wall_art"] = H * 0.3


def _meadow(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=4, cloud_rows=(0.18, 0.45), cloud_size=1.35)
    L, rng = Ls["far"], rng_for(seed, "meadow", "far")
    xs, ys = _ridge_y(L.w, H * 0.56, H * 0.28, 80 * s, rng, step=1.5, sharp=True)
    mcol = mix(P["far"], P["sky_bottom"], 0.2)
    _fill_under(L, xs, ys, mcol, H, None)
    snow = mix(c.tint_fn((250, 252, 255)), mcol, 0.15)
    # snow caps: the part of the ridge above a per-place snow line, with a zigzag lower edge
    line = H * 0.56 - H * 0.28 * 0.72
    above = ys < line
    if above.any():
        zig = line + np.where((np.arange(len(xs)) // 3) % 2 == 0, 1.5, -0.5) * s
        idx = np.where(above)[0]
        runs = np.split(idx, np.where(np.diff(idx) > 1)[0] + 1)
        for r in runs:
            if len(r) < 2:
                continue
            pts = list(zip(xs[r], ys[r])) + list(zip(xs[r][::-1], np.maximum(ys[r], zig[r])[::-1]))
            L.poly(pts, snow, None)
    xs2, ys2 = _ridge_y(L.w, H * 0.6, H * 0.07, 50 * s, rng)
    _fill_under(L, xs2, ys2, mix(P["far"], P["mid"], 0.35), H, None)
    L, rng = Ls["mid"], rng_for(seed, "meadow", "mid")
    xs, ys = _ridge_y(L.w, H * 0.645, H * 0.06, 120 * s, rng)
    _fill_under(L, xs, ys, P["mid"], H, None)
    for k in range(int(L.w / (40 * s))):
        tx = rng.uniform(0, L.w)
        ty = np.interp(tx, xs, ys) + 0.5 * s
        L.rect(tx - 0.6 * s, ty - 5 * s, tx + 0.6 * s, ty, c.tint_fn((110, 80, 60)), None)
        L.circle(tx, ty - 6 * s, 3.2 * s, shade(P["mid"], 0.7), None)
        L.circle(tx - 0.8 * s, ty - 7 * s, 1.4 * s, shade(P["mid"], 0.9), None)
    L, rng = Ls["near"], rng_for(seed, "meadow", "near")
    xs, ys = _ridge_y(L.w, H * 0.69, H * 0.02, 70 * s, rng)
    c.anchors["ground_top"] = H * 0.7
    _fill_under(L, xs, ys, P["near"], H, None)
    a, b = int(H * 0.72), H
    t = np.linspace(0, 1, b - a, dtype=np.float32)[:, None, None]
    L.rgb[a:b] = np.clip(L.rgb[a:b] * (1 - t * 0.35) + np.asarray(P["ground_dark"], np.float32) * t * 0.35, 0, 255).astype(np.uint8)
    flowers = [c.tint_fn(v) for v in ((255, 150, 190), (255, 230, 90), (255, 255, 250), (190, 150, 240), (255, 120, 110))]
    for _ in range(int(L.w * 0.5 / s)):
        fx = rng.uniform(0, L.w)
        fy = H * (0.7 + 0.3 * rng.random() ** 0.8)
        depth = (fy - H * 0.7) / (H * 0.3)
        if rng.random() < 0.5:
            L.seg(fx, fy, fx + rng.uniform(-0.5, 0.5) * s, fy - (1 + 3 * depth) * s, shade(P["near"], 0.75), 1)
        else:
            L.circle(fx, fy, (0.5 + 1.2 * depth) * s, flowers[int(rng.integers(len(flowers)))], None)


def _station(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=3, cloud_rows=(0.16, 0.36))
    L, rng = Ls["far"], rng_for(seed, "station", "far")
    xs, ys = _ridge_y(L.w, H * 0.5, H * 0.1, 70 * s, rng)
    _fill_under(L, xs, ys, mix(P["far"], P["sky_bottom"], 0.3), H, None)
    x = 0.0
    while x < L.w:
        bw, bh = rng.uniform(8, 16) * s, rng.uniform(5, 16) * s
        col = mix(P["far"], c.tint_fn((230, 220, 210)), rng.uniform(0, 0.3))
        L.rect(x, H * 0.58 - bh, x + bw, H, col, None)
        L.rect(x - 0.5 * s, H * 0.58 - bh - 2 * s, x + bw + 0.5 * s, H * 0.58 - bh, shade(col, 0.8), None)
        if c.night and rng.random() < 0.7:
            L.rect(x + 2 * s, H * 0.58 - bh + 2 * s, x + 4 * s, H * 0.58 - bh + 4 * s, P["light"], None)
        x += bw + rng.uniform(0, 4) * s
    L, rng = Ls["mid"], rng_for(seed, "station", "mid")
    top = H * 0.56
    L.fill_rows(top, H, P["mid"])
    L.fill_rows(top, top + 2 * s, shade(P["mid"], 1.15))
    for _ in range(int(L.w * 2 / s)):
        gx, gy = rng.uniform(0, L.w), rng.uniform(top, H)
        L.rect(gx, gy, gx + 0.8 * s, gy + 0.8 * s, shade(P["mid"], rng.uniform(0.8, 1.2)), None)
    sleeper = c.tint_fn((110, 85, 65))
    for x in np.arange(0, L.w, 5 * s):
        L.poly([(x, H * 0.625), (x + 2.5 * s, H * 0.625), (x + 2.8 * s, H * 0.7), (x - 0.3 * s, H * 0.7)], sleeper, None)
    rail = c.tint_fn((150, 150, 160))
    for ry in (0.632, 0.688):
        L.fill_rows(H * ry - 1.1 * s, H * ry + 1.1 * s, shade(rail, 0.7))
        L.fill_rows(H * ry - 1.1 * s, H * ry - 0.3 * s, shade(rail, 1.4))
    _utility_poles(L, c, H * 0.6, 80 * s, rng, H * 0.14)
    c.anchors["rails"] = H * 0.7
    L, rng = Ls["near"], rng_for(seed, "station", "near")
    edge = H * 0.715
    L.fill_rows(edge, edge + 3 * s, shade(P["near"], 0.7))
    L.fill_rows(edge - 1 * s, edge + 0.2 * s, shade(P["near"], 1.1))
    L.vgradient(edge + 3 * s, H, P["near"], P["ground"])
    L.fill_rows(H * 0.77, H * 0.79, P["accent"])
    for x in np.arange(0, L.w, 2.5 * s):
        L.circle(x, H * 0.78, 0.45 * s, shade(P["accent"], 0.8), None)
    for x in np.arange(0, L.w, 22 * s):
        L.seg(x, H * 0.79, x - 4 * s, H, shade(P["ground"], 0.9), 1)
    roof_b = H * 0.1
    roof = c.tint_fn((95, 110, 120))
    L.fill_rows(0, roof_b, shade(roof, 1.2))
    for x in np.arange(0, L.w, 10 * s):
        L.seg(x, 0, x + 3 * s, roof_b, shade(roof, 1.05), 1)
    L.fill_rows(roof_b - 2 * s, roof_b, roof)
    for x in np.arange(12 * s, L.w, 60 * s):  # pillars and lamps
        L.rect(x - 1.8 * s, roof_b, x + 1.8 * s, H * 0.8, c.tint_fn((225, 225, 220)))
        L.rect(x + 14 * s, roof_b, x + 16 * s, roof_b + 2 * s, roof, None)
        lamp = (255, 255, 230) if c.night else c.tint_fn((240, 240, 235))
        L.rect(x + 8 * s, roof_b + 2 * s, x + 22 * s, roof_b + 4 * s, lamp)
        if c.night:
            L.glow(x + 15 * s, roof_b + 5 * s, 14 * s, (230, 240, 255), 0.6)
            L.glow(x + 15 * s, H * 0.85, 18 * s, (230, 235, 255), 0.18)


def _sky_place(c: PaintCtx, spec: PlaceSpec, Ls: dict[str, Layer], seed: int):
    s, H, P = c.s, c.H, c.pal
    _paint_sky(Ls["sky"], c, spec, seed, n_clouds=2, cloud_rows=(0.15, 0.3), grad_to=0.85, cloud_size=0.8, sun_x=0.75)
    dark = mix(P["cloud"], P["sky_top"], 0.3) if not c.sunset else mix(P["cloud"], (190, 120, 170), 0.5)
    for name, rows, size, n_per, lit in (("far", (0.62, 0.72), (8, 14), 40, mix(P["cloud"], P["sky_bottom"], 0.35)),
                                         ("mid", (0.66, 0.8), (14, 22), 55, mix(P["cloud"], P["sky_bottom"], 0.15))):
        L, rng = Ls[name], rng_for(seed, "sky", name)
        n = max(2, int(L.w / (n_per * s)))
        for i in range(n):
            cx = L.w * (i + rng.uniform(0.1, 0.9)) / n
            _cumulus(L, cx, H * rng.uniform(*rows), rng.uniform(*size) * s, lit, mix(dark, P["sky_bottom"], 0.3), rng)
    L, rng = Ls["near"], rng_for(seed, "sky", "near")
    top = H * 0.84
    circles = []
    x = -10 * s
    while x < L.w + 10 * s:
        r = rng.uniform(8, 15) * s
        circles.append((x, top - r * rng.uniform(0.1, 0.6) + 6 * s, r))
        x += r * 1.1
    body = _circles_mask(L.h, L.w, [(cx, cy, r) for cx, cy, r in circles])
    body[int(top):] = 255
    lit = _circles_mask(L.h, L.w, circles, shift_up=0.25, scale=0.85)
    L.soft_blob(body, 0, 0, P["ground_dark"])
    L.soft_blob(lit, 0, 0, P["ground"])
    shadow = _circles_mask(L.h, L.w, [(cx + r * 0.3, cy + r * 1.3, r * 0.9) for cx, cy, r in circles])
    shadow[: int(top)] = 0
    L.soft_blob(shadow, 0, 0, mix(P["ground_dark"], P["ground"], 0.5))
    c.anchors["balloon"] = H * 0.32
    c.anchors["island"] = H * 0.42
    c.anchors["rainbow_base"] = H * 0.7


PAINTERS = {"sky": _sky_place, "town": _town, "countryside": _countryside, "forest": _forest,
            "beach": _beach, "bedroom": _bedroom, "meadow": _meadow, "station": _station}
