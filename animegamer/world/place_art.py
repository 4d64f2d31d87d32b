"""The places (backgrounds) of the procedural anime world and their per-session props.

A place is painted once per (place, time of day, props, size, seed) into four parallax layers
(sky, far, mid, near), each wider than the view; `PlaceScene.render(camera_x)` then only crops and
mask-copies them (well under a millisecond at 192x288).

Screen-coordinate convention (the shot composer relies on it)
-------------------------------------------------------------
* camera_x in [0, 1]: 0 shows the left end of the place, 1 the right end (values are clipped).
* A layer with parallax p is `layer_w = W + round(p * (world_px - W))` pixels wide, where
  `world_px = round(W * world_width_factor)` is the width of the near layer. Its view offset is
  `round(camera_x * (layer_w - W))` pixels. So the near layer moves by (world_px - W) pixels over the
  full camera range, farther layers proportionally less, the sky almost not at all.
* World x in [0, 1] is a fraction of a layer's width; for the near layer (where characters and most
  props stand) `to_screen_x(x, camera_x) = x * world_px - round(camera_x * (world_px - W))`,
  in pixels of the (possibly supersampled) frame, pixel i covering [i, i + 1). The view shows
  world x in [camera_x * (1 - W / world_px), camera_x * (1 - W / world_px) + W / world_px].
* `camera_x_for(world_x)` is the inverse for a follow camera (the camera that centres world_x).
* Rows: `ground_y` (feet), `water_y` (swimmers' water line) and `horizon_y` are pixel rows.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import yaml

from animegamer.world.place_spec import LayerSpec, PlaceSpec, PlaceSpecError, PropInstance
from animegamer.world.prop_art import PROP_PAINTERS, RGB, Layer, PaintCtx, hex_rgb, mix, shade
from animegamer.world.scenery_art import PAINTERS, rng_for

PLACE_KEYS = ("sky", "town", "countryside", "forest", "beach", "bedroom", "meadow", "station")
TIMES = ("day", "sunset", "night")
LAYERS = ("sky", "far", "mid", "near")
PROP_LAYERS = ("far", "mid", "near")
DEFAULT_PATH = Path(__file__).parent / "data" / "places.yaml"
FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------------
def _need(d: dict, key: str, where: str):
    if not isinstance(d, dict) or key not in d:
        raise PlaceSpecError(f"{where}: missing field '{key}'")
    return d[key]


def _color(v, where: str) -> RGB:
    if not (isinstance(v, str) and len(v) == 7 and v[0] == "#"):
        raise PlaceSpecError(f"{where}: expected a colour '#rrggbb', got {v!r}")
    try:
        return hex_rgb(v)
    except ValueError:
        raise PlaceSpecError(f"{where}: expected a colour '#rrggbb', got {v!r}") from None


def _frac(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
        raise PlaceSpecError(f"{where}: expected a number in [0, 1], got {v!r}")
    return float(v)


def _scale(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.25 <= float(v) <= 4.0:
        raise PlaceSpecError(f"{where}: expected a number in [0.25, 4], got {v!r}")
    return float(v)


def _bool(v, where: str) -> bool:
    if not isinstance(v, bool):
        raise PlaceSpecError(f"{where}: expected true/false, got {v!r}")
    return v


def parse_places(doc: dict) -> dict[str, PlaceSpec]:
    """Validate a parsed places.yaml document and build the PlaceSpecs."""
    if not isinstance(doc, dict):
        raise PlaceSpecError(f"places.yaml: expected a mapping at top level, got {type(doc).__name__}")
    version = _need(doc, "version", "places.yaml")
    if version != FORMAT_VERSION:
        raise PlaceSpecError(f"places.yaml: version: expected {FORMAT_VERSION}, got {version!r}")
    colors = {k: _color(v, f"colors.{k}") for k, v in _need(doc, "colors", "places.yaml").items()}
    pal_keys = list(_need(doc, "palette_keys", "places.yaml"))
    tints = {}
    for t in ("sunset", "night"):
        tt = _need(_need(doc, "time_tints", "places.yaml"), t, "time_tints")
        mul, add = _need(tt, "mul", f"time_tints.{t}"), _need(tt, "add", f"time_tints.{t}")
        if len(mul) != 3 or len(add) != 3:
            raise PlaceSpecError(f"time_tints.{t}: mul and add need 3 numbers, got {mul!r} / {add!r}")
        tints[t] = (tuple(float(v) for v in mul), tuple(float(v) for v in add))
    kinds = _need(doc, "prop_kinds", "places.yaml")
    for k, kd in kinds.items():
        where = f"prop_kinds.{k}"
        if k not in PROP_PAINTERS:
            raise PlaceSpecError(f"{where}: no painter for this kind (known: {sorted(PROP_PAINTERS)})")
        if _need(kd, "layer", where) not in PROP_LAYERS:
            raise PlaceSpecError(f"{where}.layer: expected one of {PROP_LAYERS}, got {kd['layer']!r}")
        _need(kd, "display", where)
        _bool(_need(kd, "colorless", where), f"{where}.colorless")

    places_doc = _need(doc, "places", "places.yaml")
    if set(places_doc) != set(PLACE_KEYS):
        raise PlaceSpecError(f"places: expected exactly {sorted(PLACE_KEYS)}, got {sorted(places_doc)} "
                             f"(missing {sorted(set(PLACE_KEYS) - set(places_doc))}, "
                             f"unknown {sorted(set(places_doc) - set(PLACE_KEYS))})")
    out: dict[str, PlaceSpec] = {}
    for key in PLACE_KEYS:
        p, w = places_doc[key], f"places.{key}"
        names = _need(p, "names", w)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise PlaceSpecError(f"{w}.names: expected a non-empty list of strings, got {names!r}")
        water = _need(p, "water_y", w)
        pals_doc = _need(p, "palettes", w)
        if set(pals_doc) != set(TIMES):
            raise PlaceSpecError(f"{w}.palettes: expected exactly {list(TIMES)}, got {sorted(pals_doc)}")
        day = {k: _color(v, f"{w}.palettes.day.{k}") for k, v in pals_doc["day"].items()}
        missing = [k for k in pal_keys if k not in day]
        if missing:
            raise PlaceSpecError(f"{w}.palettes.day: missing colours {missing}")
        spec_tmp = PlaceSpec(key, (), False, True, 0, None, 0, 1.0, {}, {}, {}, time_tints=tints)
        palettes = {"day": day}
        for t in ("sunset", "night"):
            given = {k: _color(v, f"{w}.palettes.{t}.{k}") for k, v in (pals_doc[t] or {}).items()}
            for req in ("sky_top", "sky_bottom", "cloud"):
                if req not in given:
                    raise PlaceSpecError(f"{w}.palettes.{t}: missing colour '{req}'")
            unknown = [k for k in given if k not in pal_keys]
            if unknown:
                raise PlaceSpecError(f"{w}.palettes.{t}: unknown colour keys {unknown} (known: {pal_keys})")
            palettes[t] = {k: given.get(k, spec_tmp.tint(day[k], t)) for k in pal_keys}
        layers_doc = _need(p, "layers", w)
        if set(layers_doc) != set(LAYERS):
            raise PlaceSpecError(f"{w}.layers: expected exactly {list(LAYERS)}, got {sorted(layers_doc)}")
        layers = {ln: LayerSpec(_frac(_need(layers_doc[ln], "parallax", f"{w}.layers.{ln}"), f"{w}.layers.{ln}.parallax"),
                                _frac(_need(layers_doc[ln], "base_y", f"{w}.layers.{ln}"), f"{w}.layers.{ln}.base_y"),
                                str(_need(layers_doc[ln], "desc", f"{w}.layers.{ln}")))
                  for ln in LAYERS}
        if layers["near"].parallax != 1.0:
            raise PlaceSpecError(f"{w}.layers.near.parallax: must be 1.0 (it defines world units), got {layers['near'].parallax}")
        props_doc = _need(p, "props", w)
        if not isinstance(props_doc, dict) or len(props_doc) < 2:
            raise PlaceSpecError(f"{w}.props: expected at least 2 prop kinds, got {props_doc!r}")
        props = {}
        for kind, opts in props_doc.items():
            pw = f"{w}.props.{kind}"
            if kind not in kinds:
                raise PlaceSpecError(f"{pw}: unknown prop kind (add it to prop_kinds; known: {sorted(kinds)})")
            if not isinstance(opts, list) or not opts:
                raise PlaceSpecError(f"{pw}: expected a non-empty list of colour names, got {opts!r}")
            for o in opts:
                if o not in colors:
                    raise PlaceSpecError(f"{pw}: unknown colour {o!r} (known: {sorted(colors)})")
            if kinds[kind]["colorless"] and opts != ["none"]:
                raise PlaceSpecError(f"{pw}: kind is colorless, its colour list must be [none], got {opts!r}")
            props[kind] = tuple(opts)
        out[key] = PlaceSpec(
            key=key, names=tuple(names), indoor=_bool(_need(p, "indoor", w), f"{w}.indoor"),
            has_ground=_bool(_need(p, "has_ground", w), f"{w}.has_ground"),
            ground_y=_frac(_need(p, "ground_y", w), f"{w}.ground_y"),
            water_y=None if water is None else _frac(water, f"{w}.water_y"),
            horizon_y=_frac(_need(p, "horizon_y", w), f"{w}.horizon_y"),
            prop_scale=_scale(p.get("prop_scale", 1.0), f"{w}.prop_scale"),
            palettes=palettes, layers=layers, props=props, colors=colors, prop_kinds=dict(kinds), time_tints=tints)
    return out


_CACHE: dict[str, dict[str, PlaceSpec]] = {}


def load_places(path: str | Path | None = None) -> dict[str, PlaceSpec]:
    """Load and validate places.yaml (the packaged one by default). Raises PlaceSpecError."""
    p = Path(path) if path is not None else DEFAULT_PATH
    k = str(p.resolve())
    if k not in _CACHE:
        try:
            doc = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise PlaceSpecError(f"{p}: not valid YAML: {e}") from None
        _CACHE[k] = parse_places(doc)
    return _CACHE[k]


def place_for_text(text: str, places: dict[str, PlaceSpec] | None = None) -> str | None:
    """The place key whose display name or synonym occurs in free text (longest match wins)."""
    places = places or load_places()
    t = f" {text.lower()} "
    best, best_len = None, 0
    for key, spec in places.items():
        for n in (key,) + spec.names:
            if f" {n.lower()}" in t and len(n) > best_len:
                best, best_len = key, len(n)
    return best


# ---------------------------------------------------------------------------------------------
# Props
# ---------------------------------------------------------------------------------------------
def sample_props(place: PlaceSpec, rng: np.random.Generator, n: int | None = None) -> list[PropInstance]:
    """2-4 distinct props for a session, spread across the world so a view usually shows one or two.

    Positions are stratified: prop i of n sits in the i-th slice of [0.06, 0.94] (shuffled kinds).
    """
    kinds = list(place.props)
    if n is None:
        n = int(rng.integers(2, 5))
    n = max(0, min(n, len(kinds)))
    chosen = [kinds[i] for i in rng.choice(len(kinds), size=n, replace=False)] if n else []
    lo, hi = 0.06, 0.94
    out = []
    for i, kind in enumerate(chosen):
        x = lo + (hi - lo) * (i + rng.uniform(0.2, 0.8)) / n
        opts = place.props[kind]
        col = opts[int(rng.integers(len(opts)))]
        kd = place.prop_kinds[kind]
        out.append(PropInstance(kind=kind, color="" if kd["colorless"] else col, x=float(x),
                                layer=kd["layer"], display=kd["display"]))
    return out


def describe_props(props: list[PropInstance]) -> list[str]:
    """Caption words for props, e.g. ["purple car", "bench"]."""
    return [p.describe() for p in props]




# ---------------------------------------------------------------------------------------------
# The scene: pre-rendered layers + fast per-frame compositing
# ---------------------------------------------------------------------------------------------
class _Compiled:
    """A finished layer ready for masked copies: rgb, bool mask, row runs, optional additive light."""

    def __init__(self, L: Layer, parallax: float, opaque: bool = False):
        L.finish()
        self.rgb = L.rgb
        self.mask = np.where(L.alpha >= 128, 255, 0).astype(np.uint8)  # cv2.copyTo mask (SIMD, ~50x np.copyto)
        self.parallax = parallax
        self.width = L.w
        m = self.mask > 0
        kind = np.where(m.all(1), 2, np.where(m.any(1), 1, 0)) if not opaque else np.full(L.h, 2)
        self.runs: list[tuple[int, int, int]] = []
        y = 0
        while y < L.h:
            k = int(kind[y])
            e = y
            while e < L.h and kind[e] == k:
                e += 1
            if k:
                self.runs.append((y, e, k))
            y = e
        self.cover_from = L.h  # first row of the fully opaque run that reaches the bottom
        if self.runs and self.runs[-1][2] == 2 and self.runs[-1][1] == L.h:
            self.cover_from = self.runs[-1][0]
        self.light = None
        if L.light is not None and L.light.max() > 0.5:
            lt = np.clip(L.light, 0, 255).astype(np.uint8)
            rows = np.where(lt.reshape(L.h, -1).max(1) > 0)[0]
            self.light = lt
            self.light_rows = (int(rows[0]), int(rows[-1]) + 1)

    def clip_runs(self, limit: int):
        self.runs = [(a, min(b, limit), k) for a, b, k in self.runs if a < limit]


class PlaceScene:
    """A place at one time of day with its session props, pre-rendered for fast panning."""

    def __init__(self, place: PlaceSpec, time: str, props: list[PropInstance], height: int, width: int,
                 world_width_factor: float = 2.5, seed: int = 0):
        if time not in TIMES:
            raise ValueError(f"time: expected one of {TIMES}, got {time!r}")
        if world_width_factor < 1.0:
            raise ValueError(f"world_width_factor: expected >= 1, got {world_width_factor}")
        self.place, self.time, self.props = place, time, list(props)
        self.H, self.W = int(height), int(width)
        self.height, self.width = self.H, self.W
        self.world_px = float(max(self.W, int(round(self.W * world_width_factor))))
        self.ground_y = place.ground_y * self.H
        self.water_y = None if place.water_y is None else place.water_y * self.H
        self.horizon_y = place.horizon_y * self.H
        self._widths = {ln: self.W + int(round(place.layers[ln].parallax * (self.world_px - self.W))) for ln in LAYERS}
        ctx = PaintCtx(H=self.H, W=self.W, time=time, pal=place.palettes[time],
                       colors={k: place.tint(v, time) for k, v in place.colors.items()},
                       rng=rng_for(seed, place.key), tint_fn=lambda col: place.tint(col, time))
        ctx.base = {ln: place.layers[ln].base_y * self.H for ln in LAYERS}
        t = max(1, int(round(self.H / 96)))
        layers = {ln: Layer(self.H, self._widths[ln], t, opaque=(ln == "sky")) for ln in LAYERS}
        PAINTERS[place.key](ctx, place, layers, seed)
        ctx.scale = place.prop_scale
        for ln in PROP_LAYERS:
            for p in sorted((p for p in self.props if p.layer == ln), key=lambda p: p.x):
                fn = PROP_PAINTERS[p.kind]
                col = ctx.colors.get(p.color or "none", ctx.colors["none"])
                fn(layers[ln], ctx, p.x * self._widths[ln], ctx.base[ln], col)
        ctx.scale = 1.0
        self.shore_y = ctx.anchors.get("shore")
        self._front = self._paint_front(ctx, seed)
        self._layers = [_Compiled(layers["sky"], place.layers["sky"].parallax, opaque=True)]
        self._layers += [_Compiled(layers[ln], place.layers[ln].parallax) for ln in PROP_LAYERS]
        # rows hidden behind a nearer fully opaque band never need to be copied
        limit = self.H
        for comp in reversed(self._layers):
            comp.clip_runs(limit)
            limit = min(limit, comp.cover_from)

    def _paint_front(self, c: PaintCtx, seed: int) -> _Compiled | None:
        """Things in front of the characters: low grass tufts / ferns at the bottom edge."""
        if self.place.key not in ("meadow", "forest"):
            return None
        s, H = c.s, c.H
        L = Layer(self.H, int(self.world_px), max(1, int(round(s))))
        rng = rng_for(seed, self.place.key, "front")
        col = shade(c.pal["near"], 0.7) if self.place.key == "meadow" else shade(c.pal["near"], 1.2)
        for _ in range(int(L.w / (9 * s))):
            gx = rng.uniform(0, L.w)
            for k in range(int(rng.integers(3, 6))):
                dx = (k - 2) * 1.6 * s
                hgt = rng.uniform(4, 7) * s
                L.poly([(gx + dx - 1 * s, H + 1), (gx + dx + rng.uniform(-2, 2) * s, H - hgt), (gx + dx + 1 * s, H + 1)], col, None)
        return _Compiled(L, 1.0)

    # -- coordinates --------------------------------------------------------------------------
    def layer_offset(self, layer: str, camera_x: float) -> int:
        w = self._widths[layer]
        return int(round(min(1.0, max(0.0, float(camera_x))) * (w - self.W)))

    def to_screen_x(self, world_x: float, camera_x: float, layer: str = "near") -> float:
        """Screen x (pixels) of world_x (fraction of `layer`'s width) at camera camera_x."""
        return world_x * self._widths[layer] - self.layer_offset(layer, camera_x)

    def to_world_x(self, screen_x: float, camera_x: float) -> float:
        return (screen_x + self.layer_offset("near", camera_x)) / self.world_px

    def camera_x_for(self, world_x: float, layer: str = "near") -> float:
        """The camera_x that centres world_x of `layer` (clipped to [0, 1]); for follow cameras."""
        w = self._widths[layer]
        span = w - self.W
        if span <= 0:
            return 0.5
        return float(min(1.0, max(0.0, (world_x * w - self.W / 2) / span)))

    def visible_props(self, camera_x: float, margin: float = 0.0) -> list[PropInstance]:
        """Props whose anchor lies inside the view (+ margin pixels)."""
        out = []
        for p in self.props:
            x = self.to_screen_x(p.x, camera_x, p.layer)
            if -margin <= x < self.W + margin:
                out.append(p)
        return out

    def layer_pictures(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """The painted layers back to front (sky, far, mid, near), each (rgb (H, w, 3) uint8, coverage (H, w) uint8
        0/255, additive light (H, w, 3) uint8 or None), as ``render`` composites them: the layer ``w`` wide offset
        ``round(camera_x * (w - W))``, its light added after it."""
        return [(c.rgb, c.mask, c.light) for c in self._layers]

    def front_picture(self) -> tuple[np.ndarray, np.ndarray] | None:
        """What is drawn in front of characters (grass tufts), as the near layer wide: (rgb, coverage 0/255), or None
        where the place has nothing there."""
        return None if self._front is None else (self._front.rgb, self._front.mask)

    # -- rendering ------------------------------------------------------------------------------
    def render(self, camera_x: float) -> np.ndarray:
        """The HxWx3 uint8 RGB background at camera_x (see the module docstring)."""
        cx = min(1.0, max(0.0, float(camera_x)))
        W = self.W
        out = np.empty((self.H, W, 3), np.uint8)
        for comp in self._layers:
            o = int(round(cx * (comp.width - W)))
            for a, b, k in comp.runs:
                if k == 2:
                    out[a:b] = comp.rgb[a:b, o:o + W]
                else:
                    cv2.copyTo(comp.rgb[a:b, o:o + W], comp.mask[a:b, o:o + W], out[a:b])
            if comp.light is not None:  # a layer's own light, before nearer layers cover it
                a, b = comp.light_rows
                band = out[a:b]
                cv2.add(band, comp.light[a:b, o:o + W], dst=band)
        return out

    def render_foreground(self, canvas: np.ndarray, camera_x: float) -> np.ndarray:
        """Draw in-front-of-character details (grass tufts, ferns) onto canvas in place; returns it."""
        if self._front is None:
            return canvas
        f = self._front
        o = int(round(min(1.0, max(0.0, float(camera_x))) * (f.width - self.W)))
        for a, b, k in f.runs:
            cv2.copyTo(f.rgb[a:b, o:o + self.W], f.mask[a:b, o:o + self.W], canvas[a:b])
        return canvas

    def render_water_front(self, canvas: np.ndarray, camera_x: float, x0: int, x1: int,
                           opacity: float = 0.8) -> np.ndarray:
        """Cover a swimmer below the water line: columns [x0, x1) of canvas, rows water_y..shore.

        Call after drawing a swimming character; a no-op for places without water.
        """
        if self.water_y is None:
            return canvas
        a = int(round(self.water_y))
        b = int(round(self.shore_y if self.shore_y is not None else self.H))
        x0, x1 = max(0, int(x0)), min(self.W, int(x1))
        if x1 <= x0 or b <= a:
            return canvas
        bg = self.render(camera_x)[a:b, x0:x1].astype(np.float32)
        reg = canvas[a:b, x0:x1].astype(np.float32)
        canvas[a:b, x0:x1] = (bg * opacity + reg * (1 - opacity)).astype(np.uint8)
        foam = np.asarray(mix(self.place.palettes[self.time]["accent"], (255, 255, 255), 0.3), np.uint8)
        th = max(1, int(round(self.H / 96)))
        canvas[a:a + th, x0:x1] = foam
        return canvas
