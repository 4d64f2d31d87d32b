"""Characters of the procedural world: cast file, poses, drawing and the motion library."""
from __future__ import annotations

import copy

import cv2
import numpy as np
import pytest
import yaml

from animegamer.world.cast import (CharacterSpec, Look, load_cast, look_for_variant, parse_cast,
                                   random_look)
from animegamer.world.character_art import character_portrait, draw_character
from animegamer.world.motions import ActorFrame, animate, animate_pair, mirror, motion_table, verbs
from animegamer.world.pose import Pose

H, W, SS = 96, 144, 2


@pytest.fixture(scope="module")
def cast() -> dict[str, CharacterSpec]:
    return load_cast()


@pytest.fixture(scope="module")
def raw_cast() -> dict:
    from importlib import resources
    return yaml.safe_load(resources.files("animegamer.world").joinpath("data/cast.yaml").read_text())


def _render(spec, frames, fixed_x=False, scale=0.55):
    out = []
    for f in frames:
        img = np.full((H * SS, W * SS, 3), (200, 228, 250), np.uint8)
        g = int(H * SS * 0.85)
        s = H * SS * scale
        x = W * SS * 0.35 + (0 if fixed_x else f.dx * s)
        draw_character(img, spec, None, f.pose, x, g - f.dy * s, s)
        out.append(cv2.resize(img, (W, H), interpolation=cv2.INTER_AREA).astype(np.float32))
    return out


def _motion(frames) -> float:
    return float(np.mean([np.abs(a - b).mean() for a, b in zip(frames[:-1], frames[1:])]))


# ---- cast ----------------------------------------------------------------------------
def test_cast_loads_and_is_distinct(cast):
    assert len(cast) >= 8
    combos = {(s.hair_style, s.hair_color) for s in cast.values()}
    assert len(combos) == len(cast)
    assert len({s.hair_color for s in cast.values()}) == len(cast)
    assert len({s.outfit_type for s in cast.values()}) >= 7
    assert len({s.hair_style for s in cast.values()}) >= 7
    for s in cast.values():
        assert s.pronoun in ("she", "he", "they") and s.description
        assert 2 <= len(s.outfit_variants) <= 4


def test_random_look_is_seeded_and_covers_variants(cast):
    spec = cast["Qiqi"]
    a = [random_look(spec, np.random.default_rng(i)).variant for i in range(40)]
    b = [random_look(spec, np.random.default_rng(i)).variant for i in range(40)]
    assert a == b
    assert set(a) == set(range(len(spec.outfit_variants) + 1))
    v1 = look_for_variant(spec, 1)
    assert isinstance(v1, Look) and v1.top != spec.top


@pytest.mark.parametrize("path,value,field", [
    (("hair", "style"), "afro_mohawk", "hair.style"),
    (("hair", "color"), "pink", "hair.color"),
    (("height",), 3.0, "height"),
    (("pronoun",), "it", "pronoun"),
    (("outfit", "type"), "spacesuit", "outfit.type"),
    (("outfit_variants",), [{"top": "#ffffff"}], "outfit_variants"),  # one: neither none nor 2..4
    (("hat_size",), 3, "hat_size"),
])
def test_validation_errors_name_character_and_field(raw_cast, path, value, field):
    data = copy.deepcopy(raw_cast)
    d = data["characters"]["Mika"]
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    with pytest.raises(ValueError) as e:
        parse_cast(data, "test.yaml")
    assert "Mika" in str(e.value) and field in str(e.value)


def test_validation_missing_field_and_unknown_accessory(raw_cast):
    data = copy.deepcopy(raw_cast)
    del data["characters"]["Ren"]["skin"]
    with pytest.raises(ValueError, match=r"Ren.*skin.*missing"):
        parse_cast(data)
    data = copy.deepcopy(raw_cast)
    data["characters"]["Ren"]["outfit_variants"][0]["accessories"] = {"witch_hat": "#000000"}
    with pytest.raises(ValueError, match=r"Ren.*witch_hat"):
        parse_cast(data)


def test_load_cast_from_user_file(tmp_path, raw_cast):
    data = copy.deepcopy(raw_cast)
    data["characters"] = {"Nova": data["characters"]["Yuki"]}
    p = tmp_path / "my_cast.yaml"
    p.write_text(yaml.safe_dump(data))
    assert list(load_cast(p)) == ["Nova"]


# ---- poses and motions -----------------------------------------------------------------
def test_motion_vocabulary_is_covered():
    singles, pairs = verbs(pair=False), verbs(pair=True)
    assert len(singles) + len(pairs) == len(motion_table())
    for v in singles:
        fr = animate(v, 17, 8.0, 1.0, 1.0)
        assert len(fr) == 17 and all(isinstance(f, ActorFrame) for f in fr)
    for v in pairs:
        a, b = animate_pair(v, 17, 8.0, 1.0, 1.0)
        assert len(a) == len(b) == 17
        assert all(f.pose.facing == 1 for f in a)
    with pytest.raises(ValueError):
        animate("teleport", 17, 8.0)
    with pytest.raises(ValueError):
        animate("hug", 17, 8.0)


def test_motions_are_deterministic_and_phase_varies():
    assert animate("dance", 17, 8, 1.3, 1.2, phase=0.5) == animate("dance", 17, 8, 1.3, 1.2, phase=0.5)
    assert animate("dance", 17, 8, 1.3, 1.2, phase=0.5) != animate("dance", 17, 8, 1.3, 1.2, phase=2.0)
    assert animate_pair("chase", 9, 8) == animate_pair("chase", 9, 8)


def test_travel_and_height():
    for v in ("walk", "run", "swim", "fly_broom"):
        slow, fast = animate(v, 17, 8, 0.45, 1.0), animate(v, 17, 8, 2.1, 1.0)
        expect = motion_table()[v]["travel"] * 2.0
        assert abs(animate(v, 17, 8)[-1].dx - expect) < 1e-6
        assert fast[-1].dx > slow[-1].dx * 3
    fly = animate("fly_broom", 17, 8)
    assert all(0.7 <= f.dy <= 1.6 for f in fly)
    jump = animate("jump", 17, 8, 1.0, 1.0)
    assert max(f.dy for f in jump) > 0.25 and min(f.dy for f in jump) == 0.0
    fall = animate("fall", 17, 8, 0.45, 1.0)
    assert fall[-1].pose.lean >= 80          # ends on the ground even when played slowly
    assert mirror(fall)[-1].dx == -fall[-1].dx and mirror(fall)[-1].pose.facing == -1


def test_pair_placement():
    a, b = animate_pair("talk_with", 17, 8)
    assert 0.4 < b[0].dx - a[0].dx < 0.9 and b[0].pose.facing == -1
    a, b = animate_pair("chase", 17, 8)
    assert b[-1].dx > a[-1].dx and b[0].pose.facing == 1 and a[-1].dx > 2.0


def test_pose_validation():
    with pytest.raises(ValueError, match="eyes"):
        Pose(eyes="sparkly")
    with pytest.raises(ValueError, match="facing"):
        Pose(facing=0)


# ---- drawing -------------------------------------------------------------------------
def test_draw_character_changes_pixels_inside_bbox(cast):
    for spec in cast.values():
        img = np.full((H * SS, W * SS, 3), 255, np.uint8)
        scale = 100.0
        x, g = 144.0, 170.0
        draw_character(img, spec, None, Pose(), x, g, scale)
        changed = np.any(img != 255, axis=2)
        ys, xs = np.nonzero(changed)
        assert changed.sum() > 500, spec.name
        hpx = scale * spec.height
        assert xs.min() >= x - 0.9 * hpx and xs.max() <= x + 0.9 * hpx, spec.name
        assert ys.max() <= g + 2 and ys.min() >= g - 1.25 * hpx, spec.name


def test_draw_character_near_edges_and_all_verbs(cast):
    spec = cast["Aiko"]
    for v in verbs(pair=False):
        for f in animate(v, 5, 8, 1.5, 1.4):
            for x in (-30.0, 150.0, 300.0):
                img = np.zeros((96, 144, 3), np.uint8)
                draw_character(img, spec, None, f.pose, x, 90.0, 60.0, water_y=60.0 if v == "swim" else None)
                assert img.shape == (96, 144, 3) and img.dtype == np.uint8


def test_draw_is_deterministic_and_look_changes_pixels(cast):
    spec = cast["Kaito"]
    frames = animate("wave", 3, 8)
    a = _render(spec, frames)
    b = _render(spec, frames)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    imgs = []
    for v in range(len(spec.outfit_variants) + 1):
        img = np.zeros((192, 288, 3), np.uint8)
        draw_character(img, spec, look_for_variant(spec, v), Pose(), 144, 170, 100)
        imgs.append(img)
    assert not np.array_equal(imgs[0], imgs[1])


def test_portrait(cast):
    p = character_portrait(cast["Mika"], None, 64)
    assert p.shape == (64, 64, 3) and p.dtype == np.uint8 and p.std() > 10


@pytest.mark.parametrize("verb", ["run", "dance", "wave", "walk", "talk", "eat"])
def test_faster_means_more_pixel_motion(cast, verb):
    spec = cast["Ren"]
    slow = _motion(_render(spec, animate(verb, 17, 8, 0.45, 0.7), fixed_x=True))
    fast = _motion(_render(spec, animate(verb, 17, 8, 2.1, 1.6), fixed_x=True))
    assert fast > slow * 1.3, (verb, slow, fast)
    assert slow > 0


@pytest.mark.parametrize("verb", ["wave", "dance", "jump"])
def test_bigger_amplitude_means_more_pixel_motion(cast, verb):
    spec = cast["Sora"]
    small = _motion(_render(spec, animate(verb, 17, 8, 1.0, 0.55)))
    big = _motion(_render(spec, animate(verb, 17, 8, 1.0, 1.6)))
    assert big > small * 1.15, (verb, small, big)
