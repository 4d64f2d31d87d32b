"""A character's animation drawn alone, frame by frame, on a canvas that follows its feet: the training data of
the sprite animator (``decoder/sprite_animator.py``), made by the world (the stand-in for a film), never in play.

A shot's characters are drawn exactly as ``shot.render_turn`` draws them (same poses, looks, speed, amplitude and
phase), each on its own transparent canvas of SPRITE_H x SPRITE_W frame pixels whose row FEET_ROW, column
SPRITE_W / 2 is where the feet stand; the way the feet travel (a walk's stride, a jump's lift) is kept apart as
an offset per frame. Canvases are in frame pixels of a FRAME_H-row frame, so a sprite pastes into a shot without
scaling, and facing right (a left-facing shot's track is mirrored back): the animator learns one direction and
play mirrors what it draws.

The colours are premultiplied by the coverage (drawn on black; the coverage is where drawing on black and on
white differ), untinted: the place's light is applied when a sprite is pasted into a place, as the stage does.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import cv2
import numpy as np

from animegamer.world import rules
from animegamer.world.cast import CharacterSpec, Look, load_cast
from animegamer.world.character_art import body_matrix, draw_character
from animegamer.world.motion_catalog import load_motions
from animegamer.world.motions import PAIR_GAP, ActorFrame, motion_table
from animegamer.world.pose import Pose
from animegamer.world.sessions import TurnPlan, plan_session
from animegamer.world.shot import CHARACTER_SCALE, GROUP_SPACING, SUPERSAMPLE, TRAVEL_SCALE, actor_animations

FRAME_H = 96  # the shots' height the canvas is measured in
SPRITE_H, SPRITE_W = 80, 80  # room for a dancer's raised arms, a sleeper lying down, a broom (measured extents)
FEET_ROW = 66  # the ground line inside the canvas: a fall or a swim reaches ~13 px below it
SCALE_PX = CHARACTER_SCALE * FRAME_H  # pixel height of a height-1.0 character in the frame
# Where a pair's partner stands at frame 0, to the right of its subject, in frame pixels: as the world's shot stands
# it, its verb's PAIR_GAP heights (7.9 px a hug, 17.8 px a chase, after TRAVEL_SCALE); a partner's offsets are
# counted from there. PAIR_START_PX, their mean, is where play stands a pair whose verb it does not know.
PAIR_START_PX = float(np.mean(list(PAIR_GAP.values()))) * TRAVEL_SCALE * SCALE_PX
GROUP_GAP_PX = GROUP_SPACING * SCALE_PX  # frame pixels between the feet of neighbours who do a verb of one together


def pair_gap_px(verb: str | None) -> float:
    """Frame pixels between a pair's subject and its partner at frame 0 for ``verb`` (None or not a verb of two:
    PAIR_START_PX). Partners' tracks once started from PAIR_START_PX for every verb and stepped to their verb's gap
    at frame 1, a move the world's shots do not make: a hug or a talk read one level more motion than asked
    (docs/layers.md, "The level through the network")."""
    return PAIR_GAP[verb] * TRAVEL_SCALE * SCALE_PX if verb in PAIR_GAP else PAIR_START_PX


@dataclass
class SpriteTrack:
    """One character through one shot, facing right."""

    name: str
    role: int  # 0 alone, 1 the subject of a pair action, 2 its partner
    rgba: np.ndarray  # uint8 (T, SPRITE_H, SPRITE_W, 4): premultiplied colour and coverage
    offset: np.ndarray  # float32 (T, 2) in frame pixels: x the feet's move from frame 0 (+x right; a pair's
    # partner's from ``pair_gap_px(verb)`` right of its subject's start), y their lift above the ground line (+y up)
    standing: np.ndarray  # uint8 (SPRITE_H, SPRITE_W, 4): the same character and look standing, front view
    body: np.ndarray  # float32 (T, 2, 3): where each frame puts the body (``sprite_body``)
    standing_body: np.ndarray  # float32 (2, 3): where the standing picture puts it
    marks: np.ndarray  # uint8 (T, SPRITE_H, SPRITE_W): how much each pixel is the verb's marks (``verb_marks``)


def sprite_body(spec: CharacterSpec, pose: Pose) -> np.ndarray:
    """float32 (2, 3): the body frame of ``draw_sprite``'s picture in canvas pixels (``character_art.body_matrix``
    at the supersampled size, then the area downsampling's coordinates: a supersampled pixel u lands at
    (u - (ss - 1) / 2) / ss). Two frames' matrices give the whole body's move between them (a lean to lying, a
    sit's drop), which the sprite animator learns as one affine warp before its per-pixel flow."""
    ss = SUPERSAMPLE
    m = body_matrix(spec, pose, SPRITE_W * ss / 2, FEET_ROW * ss, SCALE_PX * ss)
    m[:, 2] -= (ss - 1) / 2
    return (m / ss).astype(np.float32)


def draw_sprite(spec: CharacterSpec, look: Look | None, pose: Pose) -> np.ndarray:
    """uint8 (SPRITE_H, SPRITE_W, 4): one pose on the canvas, premultiplied colour and coverage."""
    ss = SUPERSAMPLE
    canvases = []
    for value in (0, 255):
        canvas = np.full((SPRITE_H * ss, SPRITE_W * ss, 3), value, np.uint8)
        draw_character(canvas, spec, look, pose, SPRITE_W * ss / 2, FEET_ROW * ss, SCALE_PX * ss)
        canvases.append(canvas.astype(np.float32))
    black, white = canvases
    alpha = np.clip(255.0 - (white - black).max(-1), 0, 255)
    small = cv2.resize(np.dstack([black, alpha]), (SPRITE_W, SPRITE_H), interpolation=cv2.INTER_AREA)
    return np.clip(small.round(), 0, 255).astype(np.uint8)


def verb_marks(spec: CharacterSpec, look: Look | None, pose: Pose, rgba: np.ndarray) -> np.ndarray:
    """uint8 (SPRITE_H, SPRITE_W): where ``rgba`` (``draw_sprite``'s picture of ``pose``) differs from the same pose
    drawn without its held item (food, a book) and its effect (zzz, notes, hearts, sparkles, sweat, dust): the
    marks that name an eater, a sleeper or a singer in a few pixels, which the animator's loss weighs apart
    (``SpriteAnimatorConfig.mark_weight``). A broom stays: it is drawn with the body it carries."""
    item = pose.item if pose.item == "broom" else "none"
    if item == pose.item and pose.effect == "none":
        return np.zeros(rgba.shape[:2], np.uint8)
    bare = draw_sprite(spec, look, replace(pose, item=item, effect="none"))
    return np.abs(rgba.astype(np.int16) - bare.astype(np.int16)).max(-1).astype(np.uint8)


def _offsets(track: list[ActorFrame], start: float | None = None) -> np.ndarray:
    """(T, 2) the feet in frame pixels: x their move from ``start`` (None: from frame 0; frame 0's is zero), y their
    lift above the ground line (a broom flies 35-45 px up from its first frame on: kept from frame 0 too, else play
    flew every broom on the ground line, docs/layers.md)."""
    dx = np.array([f.dx for f in track]) * TRAVEL_SCALE * SCALE_PX  # shot._tracks' travel, in frame pixels
    dy = np.array([f.dy for f in track]) * SCALE_PX
    out = np.stack([dx - (dx[0] if start is None else start), dy], axis=1).astype(np.float32)
    out[0, 0] = 0.0
    return out


def turn_tracks(turn: TurnPlan, cast: dict[str, CharacterSpec], n_frames: int, fps: float,
                phase: float) -> list[SpriteTrack]:
    """Each actor of ``turn`` as ``shot.render_turn`` animates it (the same arguments), facing right."""
    verb = turn.action.verb
    pair = bool(motion_table()[verb]["pair"])
    out = []
    for k, (actor, track) in enumerate(zip(turn.actors, actor_animations(turn, n_frames, fps, phase, pair))):
        spec = cast[actor.name]
        role = k + 1 if pair else 0
        rgba = np.stack([draw_sprite(spec, actor.look, f.pose) for f in track])
        facing = track[0].pose.facing  # the partner of a pair faces the subject
        standing = Pose(head_turn=-0.15, facing=facing)
        stand = draw_sprite(spec, actor.look, standing)
        body = np.stack([sprite_body(spec, f.pose) for f in track])
        marks = np.stack([verb_marks(spec, actor.look, f.pose, picture) for f, picture in zip(track, rgba)])
        out.append(SpriteTrack(actor.name, role, rgba, _offsets(track, pair_gap_px(verb) if role == 2 else None), stand,
                               body, sprite_body(spec, standing), marks))
    return out


def shot_phase(row: dict[str, Any]) -> float:
    """The phase (radians) ``shot.render_session`` animated a rendered world turn at."""
    return (int(row["session"]) * 7 + int(row["turn"])) % 10 / 10


def other_adverb(row: dict[str, Any]) -> str:
    """Another adverb than the row's own, the same for the same row (its seed, session and turn choose it)."""
    others = sorted(set(load_motions()[1]) - {row["adverb"]})
    rng = np.random.default_rng([int(row["seed"]), int(row["session"]), int(row["turn"])])
    return others[int(rng.integers(len(others)))]


def row_tracks(row: dict[str, Any], n_turns: int, n_frames: int = 17, fps: float = 8,
               cast_file: str | None = None, phase: float | None = None,
               adverb: str | None = None) -> list[SpriteTrack]:
    """The sprite tracks of a rendered world turn (a ``turns.jsonl`` row of a session of ``n_turns`` turns),
    re-planned from its seed as ``shot.render_session`` planned and rendered it (``phase``: another start in the
    motion's cycle, radians; None: the shot's own). ``adverb``: played in that adverb's manner instead (its speed
    and amplitude, the turn's own stamina), as the world would have played the turn asked so. Raises ValueError if
    the plan does not give the row's action (a row of another cast or world version)."""
    plan = plan_session(int(row["seed"]), int(row["session"]), n_turns, row.get("split"), cast_file,
                        float(row.get("groups", 0.0)))
    if not 0 <= int(row["turn"]) < len(plan.turns):
        raise ValueError(f"turn {row['turn']} of session {row['session']}: the plan has {len(plan.turns)} turns")
    turn = plan.turns[int(row["turn"])]
    a = turn.action
    if (a.verb, a.adverb, list(a.characters)) != (row["motion"], row["adverb"], list(row["characters"])):
        raise ValueError(f"session {row['session']} turn {row['turn']}: re-planned {a.verb} {a.adverb} "
                         f"{list(a.characters)}, the row says {row['motion']} {row['adverb']} {row['characters']}")
    if phase is None:
        phase = shot_phase(row)
    if adverb is not None:
        speed, amplitude = rules.played_manner(load_motions()[1][adverb], turn.states_before["stamina"])
        turn = replace(turn, speed=speed, amplitude=amplitude)
    return turn_tracks(turn, load_cast(cast_file), n_frames, fps, phase)


def session_lengths(rows: list[dict[str, Any]]) -> dict[tuple[int, int], int]:
    """(seed, session) -> how many turns the rows show of it (its length, when every turn is there)."""
    out: dict[tuple[int, int], int] = {}
    for r in rows:
        key = (int(r["seed"]), int(r["session"]))
        out[key] = max(out.get(key, 0), int(r["turn"]) + 1)
    return out
