"""Renders planned turns into pixels: place + props + characters + camera, 17 frames a shot.

Frames are drawn at SUPERSAMPLE x the output size and downsampled with area averaging, which
gives clean anti-aliased outlines at 96x144. A place scene (its pre-rendered parallax layers)
is kept while the session stays in the place, so the same props are drawn in the same spots.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import cv2
import numpy as np

from animegamer.world import rules
from animegamer.world.cast import CharacterSpec, load_cast, random_look
from animegamer.world.character_art import draw_character
from animegamer.world.instructions import Action, motion_text
from animegamer.world.motion_catalog import load_motions
from animegamer.world.motions import ActorFrame, animate, animate_pair, mirror
from animegamer.world.place_art import PlaceScene, describe_props, load_places, sample_props
from animegamer.world.sessions import ActorState, SessionPlan, TurnPlan, plan_session

SUPERSAMPLE = 2
CHARACTER_SCALE = 0.46  # pixel height of a height-1.0 character, as a fraction of the frame height
WORLD_WIDTH_FACTOR = 4.0  # a place is this many views wide: room for a run to the far side
STANDING_HEIGHT = 0.9  # a height-1.0 character standing, head to toe, in units of CHARACTER_SCALE
# Shrinks the animations' travel: at 8 fps a full-speed run moved the background 15 px a frame
# under a follow camera, more than DIS flow tracks on flat anime backgrounds (faster runs then
# MEASURED slower). At 0.35 a wild run moves ~10 px a frame and flow grows with speed again.
TRAVEL_SCALE = 0.35
EDGE = 0.04  # characters stay this far (world units) from the ends of a place
PAN_LAG = 0.6  # a pan moves steadily at this fraction of the character's mean speed
# Who do a verb of one together stand this far apart (character heights, centre to centre): a lying or sleeping
# body is about 0.9 of one wide, so two side by side never overlap (play's `layered.apart` also keeps them apart)
GROUP_SPACING = 1.2


@dataclass
class Shot:
    frames: np.ndarray  # (T, H, W, 3) uint8 RGB
    row: dict  # the annotations of the turn (see turn_row)


def _camera_path(scene: PlaceScene, camera: str, x_track: np.ndarray) -> np.ndarray:
    """Camera position (0..1) per frame: `follow` keeps the protagonist where it starts on
    screen, `pan` moves steadily behind it, `static` stays."""
    n = len(x_track)
    w = scene.width
    # Screen x is linear in (world x, camera x): solve for the camera that puts x_track[0] near
    # the centre (slightly behind, so a runner has room ahead).
    s0 = scene.to_screen_x(x_track[0], 0.0)
    ds_dcam = scene.to_screen_x(x_track[0], 1.0) - s0
    ds_dx = scene.to_screen_x(1.0, 0.0) - scene.to_screen_x(0.0, 0.0)
    if camera in ("follow", "pan"):  # start behind the centre: room ahead of the character
        target = w * (0.5 - (0.15 if camera == "follow" else 0.25) * np.sign(x_track[-1] - x_track[0]))
    else:
        target = w * 0.5
    cam0 = float(np.clip((target - s0) / ds_dcam, 0.0, 1.0))
    if camera == "follow":
        cams = cam0 - (x_track - x_track[0]) * ds_dx / ds_dcam
    elif camera == "pan":  # steady, slower than the character: it drifts across the frame
        steady = np.linspace(0.0, 1.0, n) * (x_track[-1] - x_track[0])
        cams = cam0 - PAN_LAG * steady * ds_dx / ds_dcam
    else:
        cams = np.full(n, cam0)
    return np.clip(cams, 0.0, 1.0)


def _tracks(frames: list[ActorFrame], x0: float, scale_px: float, px_per_world: float) -> tuple[np.ndarray, np.ndarray]:
    """World x and pixel lift per frame from the animation's dx, dy (character heights)."""
    dx = np.array([f.dx for f in frames]) * TRAVEL_SCALE * scale_px / px_per_world
    dy = np.array([f.dy for f in frames]) * scale_px
    return x0 + dx, dy


def _box(x: float, ground_y: float, h: float, shape: tuple[int, ...]) -> tuple[slice, slice]:
    """A generous box around a character standing at (x, ground_y), `h` pixels tall."""
    y0, y1 = int(max(0, ground_y - 1.6 * h)), int(min(shape[0], ground_y + 0.3 * h))
    x0, x1 = int(max(0, x - 1.0 * h)), int(min(shape[1], x + 1.0 * h))
    return slice(y0, max(y0, y1)), slice(x0, max(x0, x1))


def _character_light(scene: PlaceScene, time: str) -> tuple[np.ndarray, np.ndarray] | None:
    tints = scene.place.time_tints
    if time not in tints:
        return None
    mul, add = (np.asarray(v, np.float32) for v in tints[time])
    return 0.5 + 0.5 * mul, 0.5 * add


def actor_animations(turn: TurnPlan, n_frames: int, fps: float, phase: float, pair: bool) -> list[list[ActorFrame]]:
    """Each actor's animation of ``turn``, facing right: a pair action's subject and partner, else the verb of
    one for each actor (one, or a group who each play it side by side: ``sessions.plan_session``'s groups)."""
    verb = turn.action.verb
    if pair:
        return list(animate_pair(verb, n_frames, fps, turn.speed, turn.amplitude, phase=phase))
    return [animate(verb, n_frames, fps, turn.speed, turn.amplitude, phase=phase)] * len(turn.actors)


def render_turn(turn: TurnPlan, scene: PlaceScene, cast: dict, n_frames: int, fps: float,
                height: int, width: int, phase: float) -> tuple[np.ndarray, list[float], list[int]]:
    """Render one shot; returns frames and each actor's end position and facing.

    Animations face right with dx > 0 to the right (motions.py); a left-facing shot mirrors
    every track, which also mirrors where the partner of a pair action stands.
    """
    motions, _ = load_motions()
    motion = motions[turn.action.verb]
    scale_px = CHARACTER_SCALE * scene.height
    px_per_world = abs(scene.to_screen_x(1.0, 0.0) - scene.to_screen_x(0.0, 0.0))
    lead = turn.actors[0]
    x0 = float(lead.x)
    tracks = actor_animations(turn, n_frames, fps, phase, motion.pair)
    group = not motion.pair and len(turn.actors) > 1
    facing = lead.facing
    # Travelling actions head for the side of the place with room (unless the plan flips it
    # and there is room that way too).
    reach = max(abs(f.dx) for track in tracks for f in track) * TRAVEL_SCALE * scale_px / px_per_world
    if motion.travel > 0 or reach > 0.02:
        facing = 1 if x0 < 0.5 else -1
        if turn.flip and (x0 - reach > EDGE if facing == 1 else x0 + reach < 1 - EDGE):
            facing = -facing
    if facing == -1:
        tracks = [mirror(t) for t in tracks]
    apart = GROUP_SPACING * scale_px / px_per_world if group else 0.0  # world units between neighbours
    half = apart * (len(tracks) - 1) / 2
    middle = float(np.clip(x0, EDGE + half, 1 - EDGE - half)) if group else x0
    xs, dys = [], []
    for k, track in enumerate(tracks):
        x, dy = _tracks(track, middle + k * apart - half, scale_px, px_per_world)
        xs.append(np.clip(x, EDGE, 1 - EDGE))
        dys.append(dy)
    # the camera frames a group by its middle, one actor or a pair by the first
    cams = _camera_path(scene, turn.camera, np.mean(xs, axis=0) if group else xs[0])
    out = np.empty((n_frames, height, width, 3), np.uint8)
    light = _character_light(scene, turn.action.time)
    for t in range(n_frames):
        canvas = scene.render(float(cams[t]))
        for k, actor in enumerate(turn.actors):
            sx = scene.to_screen_x(float(xs[k][t]), float(cams[t]))
            gy = scene.ground_y - dys[k][t]
            # Only the box around the character can change: compare there, not the whole frame.
            box = _box(sx, gy, scale_px * cast[actor.name].height, canvas.shape) if light is not None else None
            before = canvas[box].copy() if box is not None else None
            draw_character(canvas, cast[actor.name], actor.look, tracks[k][t].pose, sx, gy, scale_px,
                           water_y=scene.water_y)
            if box is not None:  # characters take the scene's light, half as strongly as the scenery
                region = canvas[box]
                drawn = (region != before).any(axis=-1)
                region[drawn] = np.clip(region[drawn] * light[0] + light[1], 0, 255).astype(np.uint8)
        scene.render_foreground(canvas, float(cams[t]))
        out[t] = cv2.resize(canvas, (width, height), interpolation=cv2.INTER_AREA)
    return out, [float(x[-1]) for x in xs], [facing] * len(tracks) if group else [facing, -facing][: len(tracks)]


def render_cutout(sprite: np.ndarray, place: str, time: str, seed: int = 0, height: int = 96, width: int = 144,
                  x: float = 0.5) -> np.ndarray:
    """One frame of ``place`` at ``time`` with a cut-out character standing in it: ``sprite`` is uint8
    RGBA (h, w, 4), alpha 0 where there is no character; it is scaled to a standing character's height
    and stood on the ground at ``x`` (0..1 across the view), in the scene's light."""
    places = load_places()
    if place not in places or sprite.ndim != 3 or sprite.shape[2] != 4:
        raise ValueError(f"render_cutout needs a known place and an RGBA sprite, got {place!r}, {sprite.shape}")
    rng = np.random.default_rng(seed)
    scene = PlaceScene(places[place], time, sample_props(places[place], rng), height * SUPERSAMPLE,
                       width * SUPERSAMPLE, world_width_factor=WORLD_WIDTH_FACTOR, seed=seed)
    cam = float(_camera_path(scene, "static", np.array([x]))[0])  # where a static shot of x looks
    canvas = scene.render(cam)
    target = max(8, round(CHARACTER_SCALE * scene.height * STANDING_HEIGHT))
    w = max(1, round(sprite.shape[1] * target / sprite.shape[0]))
    small = cv2.resize(sprite, (w, target), interpolation=cv2.INTER_AREA)
    cx, bottom = round(scene.to_screen_x(x, cam)), round(scene.ground_y)
    y0, x0 = bottom - target, cx - w // 2
    ys, xs = slice(max(0, y0), min(canvas.shape[0], bottom)), slice(max(0, x0), min(canvas.shape[1], x0 + w))
    part = small[ys.start - y0: ys.stop - y0, xs.start - x0: xs.stop - x0]
    alpha = part[..., 3:4].astype(np.float32) / 255.0
    rgb = part[..., :3].astype(np.float32)
    light = _character_light(scene, time)
    if light is not None:  # the character takes the scene's light, as drawn characters do
        rgb = np.clip(rgb * light[0] + light[1], 0, 255)
    region = canvas[ys, xs].astype(np.float32)
    canvas[ys, xs] = (alpha * rgb + (1 - alpha) * region).astype(np.uint8)
    scene.render_foreground(canvas, cam)
    return cv2.resize(canvas, (width, height), interpolation=cv2.INTER_AREA)


def caption(turn: TurnPlan) -> str:
    """What the first frame shows, in words: the CLIP tower's training text."""
    motions, _ = load_motions()
    a = turn.action
    who = " and ".join(a.characters)
    verb = motions[a.verb].ing
    props = ", ".join(describe_props(turn.props))
    return f"{who} {(a.adverb + ' ') if a.adverb else ''}{verb}, {a.time} {a.place}" + (f", {props}" if props else "")


def turn_row(plan: SessionPlan, turn: TurnPlan) -> dict:
    a = turn.action
    return {
        "session": plan.index, "turn": turn.turn, "split": plan.split, "seed": plan.seed,
        "instruction": turn.instruction, "template_id": turn.template_id,
        "characters": list(a.characters), "motion": a.verb, "adverb": a.adverb, "motion_text": motion_text(a),
        "place": a.place, "time": a.time, "props": describe_props(turn.props),
        "place_changed": turn.place_changed, "time_changed": turn.time_changed, "camera": turn.camera,
        "looks": {act.name: act.look.variant for act in turn.actors},
        "deltas": turn.deltas, "states_before": turn.states_before, "states_after": turn.states_after,
        "caption": caption(turn),
        **({"groups": plan.groups} if plan.groups else {}),  # re-planned from (sprite_tracks.row_tracks)
    }


def render_session(seed: int, index: int, n_turns: int, height: int = 96, width: int = 144,
                   n_frames: int = 17, fps: int = 8, split: str | None = None,
                   cast_file: str | None = None, groups: float = 0.0) -> Iterator[Shot]:
    """Plan and render session `index` turn by turn (positions carry over between turns).
    ``split`` overrides the split of the index (e.g. "test": held-out templates for evaluation);
    ``cast_file``: who plays (a cast file; default: the world's cast); ``groups``: plan_session's."""
    plan = plan_session(seed, index, n_turns, split, cast_file, groups)
    cast = load_cast(cast_file)
    places = load_places()
    scene: PlaceScene | None = None
    scene_key = None
    x_prev, facing_prev = 0.5, 1
    for turn in plan.turns:
        key = (turn.action.place, turn.action.time, tuple(map(repr, turn.props)))
        if key != scene_key:
            scene = PlaceScene(places[turn.action.place], turn.action.time, turn.props,
                               height * SUPERSAMPLE, width * SUPERSAMPLE,
                               world_width_factor=WORLD_WIDTH_FACTOR, seed=seed * 100003 + index)
            scene_key = key
        if turn.actors[0].x is None:
            turn.actors[0].x = x_prev
            turn.actors[0].facing = facing_prev
        for a in turn.actors[1:]:
            a.x = turn.actors[0].x
        frames, ends, facings = render_turn(turn, scene, cast, n_frames, fps, height, width,
                                            phase=(index * 7 + turn.turn) % 10 / 10)
        x_prev, facing_prev = ends[0], facings[0]
        yield Shot(frames=frames, row=turn_row(plan, turn))


def render_action(action: Action, seed: int = 0, camera: str | None = None, stamina: int = 50, height: int = 96,
                  width: int = 144, n_frames: int = 17, fps: int = 8,
                  extra_cast: dict[str, CharacterSpec] | None = None) -> np.ndarray:
    """Render one action (who, verb, adverb, place, time) outside any session (tests, demos, ground truth for a
    given action). ``extra_cast``: characters beyond the cast file's (e.g. drawn by world/character_gen.py)."""
    characters, verb, adverb, place, time = action.characters, action.verb, action.adverb, action.place, action.time
    cast, places = {**load_cast(), **(extra_cast or {})}, load_places()
    motions, adverbs = load_motions()
    unknown = [c for c in characters if c not in cast]
    if unknown or verb not in motions or adverb not in adverbs or place not in places:
        raise ValueError(f"unknown character/verb/adverb/place in {characters, verb, adverb, place}")
    rng = np.random.default_rng(seed)
    props = sample_props(places[place], rng)
    actors = [ActorState(c, random_look(cast[c], rng), 0.5, 1) for c in characters]
    deltas = rules.action_deltas(motions[verb], adverbs[adverb]).as_dict()
    camera = camera or ("follow" if motions[verb].travel > 0 else "static")
    states = {"stamina": stamina, "social": 50, "entertainment": 50}
    speed, amplitude = rules.played_manner(adverbs[adverb], stamina)
    turn = TurnPlan(
        turn=0, action=Action(characters=tuple(characters), verb=verb, adverb=adverb, place=place, time=time),
        instruction="", template_id="", place_changed=True, time_changed=True, props=props, actors=actors,
        camera=camera, states_before=states, deltas=deltas, states_after=rules.apply_deltas(states, deltas),
        speed=speed, amplitude=amplitude, flip=False,
    )
    scene = PlaceScene(places[place], time, props, height * SUPERSAMPLE, width * SUPERSAMPLE,
                       world_width_factor=WORLD_WIDTH_FACTOR, seed=seed)
    frames, _, _ = render_turn(turn, scene, cast, n_frames, fps, height, width, phase=(seed % 10) / 10)
    return frames
