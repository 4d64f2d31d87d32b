"""Places (backgrounds) and per-session props of the procedural world: fast checks."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import yaml

from animegamer.world.place_art import (
    DEFAULT_PATH, PLACE_KEYS, TIMES, PlaceScene, PlaceSpecError, PropInstance, describe_props, load_places,
    parse_places, place_for_text, sample_props,
)

H, W = 48, 72  # small frames keep the suite fast; art scales with H


@pytest.fixture(scope="module")
def places():
    return load_places()


def _prop(spec, kind, color=None, x=0.5):
    kd = spec.prop_kinds[kind]
    col = "" if kd["colorless"] else (color or spec.props[kind][0])
    return PropInstance(kind, col, x, kd["layer"], kd["display"])


def test_vocabulary_and_fields(places):
    assert set(places) == set(PLACE_KEYS)
    for key, spec in places.items():
        assert len(spec.props) >= 4, key
        assert set(spec.palettes) == set(TIMES)
        assert spec.names[0]
    assert places["beach"].water_y is not None and places["town"].water_y is None
    assert places["sky"].has_ground is False
    assert set(places["town"].props["car"]) >= {"red", "blue", "purple", "yellow", "green", "white"}


@pytest.mark.parametrize("key", PLACE_KEYS)
def test_all_times_render(places, key):
    spec = places[key]
    props = sample_props(spec, np.random.default_rng(0))
    means = {}
    for t in TIMES:
        sc = PlaceScene(spec, t, props, H, W, seed=3)
        img = sc.render(0.3)
        assert img.shape == (H, W, 3) and img.dtype == np.uint8
        assert img.std() > 5, f"{key}/{t} is nearly flat"
        out = sc.render_foreground(img.copy(), 0.3)
        assert out.shape == img.shape
        means[t] = img.astype(np.float32).mean()
    assert means["night"] < means["day"] - 25, means
    assert 0 < sc.ground_y <= H and sc.world_px == round(W * 2.5)


def test_places_are_distinct(places):
    imgs = {k: PlaceScene(places[k], "day", [], H, W).render(0.5).astype(np.float32) for k in PLACE_KEYS}
    for a in PLACE_KEYS:
        for b in PLACE_KEYS:
            if a < b:
                assert np.abs(imgs[a] - imgs[b]).mean() > 10, (a, b)


def test_deterministic_for_seed(places):
    spec = places["town"]
    props = sample_props(spec, np.random.default_rng(5))
    a = PlaceScene(spec, "day", props, H, W, seed=1).render(0.4)
    b = PlaceScene(spec, "day", props, H, W, seed=1).render(0.4)
    c = PlaceScene(spec, "day", props, H, W, seed=2).render(0.4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    # the layout does not depend on the time of day (same houses at night)
    d = PlaceScene(spec, "night", props, H, W, seed=1)
    assert d._layers[2].mask.sum() > 0


def _best_shift(a: np.ndarray, b: np.ndarray, max_shift: int) -> int:
    """The k minimising |b[:, x] - a[:, x + k]| (content moves left when the camera pans right)."""
    errs = [np.abs(a[:, k:].astype(np.float32) - b[:, :b.shape[1] - k]).mean() for k in range(max_shift)]
    return int(np.argmin(errs))


def test_pan_parallax(places):
    spec = places["countryside"]
    sc = PlaceScene(spec, "day", [], 96, 144, seed=0)
    a, b = sc.render(0.4), sc.render(0.5)
    assert not np.array_equal(a, b)
    near = _best_shift(a[int(96 * 0.8):int(96 * 0.95)], b[int(96 * 0.8):int(96 * 0.95)], 40)
    far = _best_shift(a[int(96 * 0.42):int(96 * 0.5)], b[int(96 * 0.42):int(96 * 0.5)], 40)
    assert near == sc.layer_offset("near", 0.5) - sc.layer_offset("near", 0.4)
    assert near > far + 5, (near, far)
    assert sc.layer_offset("sky", 1.0) < sc.layer_offset("far", 1.0) < sc.layer_offset("mid", 1.0) < sc.layer_offset("near", 1.0)


def test_screen_mapping(places):
    sc = PlaceScene(places["meadow"], "day", [], 96, 144)
    assert sc.to_screen_x(0.0, 0.0) == 0.0
    assert sc.to_screen_x(1.0, 1.0) == pytest.approx(144.0)
    for x in (0.2, 0.5, 0.8):
        cam = sc.camera_x_for(x)
        assert sc.to_screen_x(x, cam) == pytest.approx(72.0, abs=1.0)
        assert sc.to_world_x(sc.to_screen_x(x, cam), cam) == pytest.approx(x)
    assert sc.camera_x_for(0.0) == 0.0 and sc.camera_x_for(1.0) == 1.0


def test_prop_appears_where_mapped(places):
    spec = places["town"]
    p = _prop(spec, "lamp_post", x=0.45)
    cam = 0.3
    with_p = PlaceScene(spec, "day", [p], 96, 144).render(cam).astype(np.int16)
    without = PlaceScene(spec, "day", [], 96, 144).render(cam).astype(np.int16)
    cols = np.where(np.abs(with_p - without).sum(axis=(0, 2)) > 0)[0]
    assert len(cols) > 0
    sx = PlaceScene(spec, "day", [p], 96, 144).to_screen_x(p.x, cam)
    assert cols.min() - 2 <= sx <= cols.max() + 2


def test_sample_props_deterministic_and_valid(places):
    for key, spec in places.items():
        a = sample_props(spec, np.random.default_rng(11))
        b = sample_props(spec, np.random.default_rng(11))
        assert a == b
        assert 2 <= len(a) <= 4
        assert len({p.kind for p in a}) == len(a)
        for p in a:
            assert p.kind in spec.props
            assert p.color == "" or p.color in spec.props[p.kind]
            assert 0.0 < p.x < 1.0
        xs = sorted(p.x for p in a)
        assert all(b - a > 0.05 for a, b in zip(xs, xs[1:]))
    assert len(sample_props(places["town"], np.random.default_rng(0), n=3)) == 3
    seen = {tuple(describe_props(sample_props(places["town"], np.random.default_rng(s)))) for s in range(20)}
    assert len(seen) > 10


def test_describe_props():
    props = [PropInstance("car", "purple", 0.3, "near", "car"), PropInstance("bench", "", 0.6, "near", "bench")]
    assert describe_props(props) == ["purple car", "bench"]


def test_props_mostly_visible(places):
    rng = np.random.default_rng(0)
    shown, total = 0, 0
    for key, spec in places.items():
        for _ in range(5):
            sc = PlaceScene(spec, "day", sample_props(spec, rng), 24, 36)
            for cam in np.linspace(0, 1, 9):
                total += 1
                shown += bool(sc.visible_props(cam, margin=4))
    assert shown / total > 0.85, shown / total


def test_every_prop_is_visible_and_colours_differ(places):
    for key, spec in places.items():
        base = PlaceScene(spec, "day", [], H, W, seed=0)
        for kind, opts in spec.props.items():
            p = _prop(spec, kind)
            cam = base.camera_x_for(p.x, p.layer)
            a = PlaceScene(spec, "day", [p], H, W, seed=0).render(cam)
            assert not np.array_equal(a, base.render(cam)), f"{key}: {kind} not visible"
            if len(opts) > 1:
                q = _prop(spec, kind, color=opts[1])
                b = PlaceScene(spec, "day", [q], H, W, seed=0).render(cam)
                assert not np.array_equal(a, b), f"{key}: {kind} {opts[0]} vs {opts[1]} look the same"


def test_purple_car_stays_purple(places):
    spec = places["town"]
    p = _prop(spec, "car", "purple", x=0.5)
    sc = PlaceScene(spec, "day", [p], 96, 144)
    img = sc.render(0.5).astype(np.int16)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    purple = (b > g + 40) & (r > g + 20)
    assert purple.sum() > 30


def test_water_front(places):
    sc = PlaceScene(places["beach"], "day", [], 96, 144)
    canvas = np.zeros((96, 144, 3), np.uint8)
    out = sc.render_water_front(canvas.copy(), 0.5, 40, 60)
    changed = np.where(np.abs(out.astype(np.int16) - canvas).sum(axis=(0, 2)) > 0)[0]
    assert changed.min() >= 40 and changed.max() < 60
    rows = np.where(np.abs(out.astype(np.int16) - canvas).sum(axis=(1, 2)) > 0)[0]
    assert rows.min() == int(round(sc.water_y))
    town = PlaceScene(places["town"], "day", [], H, W)
    assert np.array_equal(town.render_water_front(canvas[:H, :W].copy(), 0.5, 0, W), canvas[:H, :W])


def test_render_is_fast(places):
    sc = PlaceScene(places["forest"], "night", sample_props(places["forest"], np.random.default_rng(0)), 192, 288)
    for c in (0.0, 0.5):
        sc.render(c)
    t0 = time.perf_counter()
    n = 100
    for c in np.linspace(0, 1, n):
        sc.render(c)
    ms = (time.perf_counter() - t0) / n * 1000
    assert ms < 3.0, f"render {ms:.2f} ms (budget 1 ms; generous bound for a noisy machine)"


def test_place_for_text(places):
    assert place_for_text("walk down the streets", places) == "town"
    assert place_for_text("swim at the seaside", places) == "beach"
    assert place_for_text("fly above the clouds", places) == "sky"
    assert place_for_text("read in my room", places) == "bedroom"
    assert place_for_text("nothing here", places) is None


def _doc():
    return yaml.safe_load(DEFAULT_PATH.read_text())


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d["places"].pop("beach"), "missing ['beach']"),
    (lambda d: d["places"].__setitem__("castle", copy.deepcopy(d["places"]["town"])), "unknown ['castle']"),
    (lambda d: d["places"]["town"]["palettes"]["day"].__setitem__("sky_top", "blue"), "places.town.palettes.day.sky_top"),
    (lambda d: d["places"]["town"]["palettes"]["night"].pop("cloud"), "places.town.palettes.night: missing colour 'cloud'"),
    (lambda d: d["places"]["town"]["props"].__setitem__("dragon", ["red"]), "places.town.props.dragon: unknown prop kind"),
    (lambda d: d["places"]["town"]["props"].__setitem__("car", ["plaid"]), "unknown colour 'plaid'"),
    (lambda d: d["places"]["beach"]["props"].__setitem__("sandcastle", ["red"]), "colorless"),
    (lambda d: d["places"]["sky"]["layers"]["far"].__setitem__("parallax", 1.7), "places.sky.layers.far.parallax"),
    (lambda d: d["places"]["meadow"].__setitem__("ground_y", "low"), "places.meadow.ground_y"),
    (lambda d: d["places"]["forest"].pop("names"), "places.forest: missing field 'names'"),
    (lambda d: d.__setitem__("version", 9), "version"),
    (lambda d: d["prop_kinds"]["car"].__setitem__("layer", "front"), "prop_kinds.car.layer"),
])
def test_yaml_validation_errors(mutate, needle):
    d = _doc()
    mutate(d)
    with pytest.raises(PlaceSpecError) as e:
        parse_places(d)
    assert needle in str(e.value)


def test_load_bad_file(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("places: [unclosed")
    with pytest.raises(PlaceSpecError, match="not valid YAML"):
        load_places(bad)
