"""Play in layers: a scene is a place at a time of day and the characters in it, each as a sprite where its feet
stand; a turn is drawn by the sprite animator (``decoder/sprite_animator.py``) for the characters who act and
pasted into the place (``decoder/layers.py``).

A scene starts from the stage (``decoder/stage.py``): the place's picture with no one in it and each character's
cut-out standing where ``stage.positions`` puts it, the right-hand one of several turned towards the others (as
``Stage.compose`` stands them). Every later frame of a turn is the animator's. Each character keeps its last drawn
sprite, where its feet ended and what it did: one who goes on with the same verb is drawn on from the pose it holds
(frames 1..16; frame 0 is what the player saw); one who starts a verb (the stage stood it, or it did something else
last turn) is drawn from its reference cut-out, already in the verb's pose at frame 0, where it stands, as every
world shot of a verb starts in its pose: the world's films hold no move from one verb's pose into another's to
learn, and from the last pose of another verb the evaluator named the new one far less often (docs/layers.md, "A
scene that goes on"). Who does not act holds its pose (one who sat down stays sitting); at a new shot, one who
would stand under who acts steps clear of them (``step_aside``). A turn that starts a verb is a new shot, framed
as the world frames one: who acts in the middle of the view (``framed``); one that goes on keeps the camera.
Nothing here calls the world's renderer.

The animator draws facing the way the world's tracks face (alone or the subject of a pair: right; a pair's
partner: left); a character facing the other way is mirrored in and its drawing mirrored back. A character whose
travel would take it out of the view turns round first, as the world's travellers head for the side with room.
Several who start a verb of one together are a group, as the world draws one: they face the way the first of them
goes, stand at least the world's group spacing apart (``apart``) and the camera frames their middle.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache

import cv2
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import load as load_np
from safetensors.numpy import save as save_np

from animegamer.decoder.layers import cutout_canvas, layered_shot
from animegamer.decoder.sprite_animator import SpriteAnimator, to_unit
from animegamer.decoder.stage import PlaceView, Sprite, Stage, positions
from animegamer.world.motion_catalog import load_motions
from animegamer.world.sprite_tracks import FRAME_H, GROUP_GAP_PX, SPRITE_H, SPRITE_W, pair_gap_px

EDGE = 0.08  # a character's feet stay this far (a share of the view's width) from the place's ends
TRAVELS_PX = 4.0  # a character whose feet move this far in a turn is followed by the camera
FOLLOW = 0.15  # a new shot's traveller starts this share of the width behind the view's middle (room ahead)
INK = 0.5  # a sprite's coverage from which a pixel counts as the character's (apart: who covers whom)
MARGIN_PX = 2.0  # the least gap apart leaves between two characters' ink
MARK_GAP_PX = 6  # a blot this near a character's body is its own (a verb's marks: notes, laugh lines), not a smudge
MAX_ACTORS = 64  # a saved scene holds at most this many characters (a game's most)
MAX_LIFT_PX = 1000.0  # a saved character's lift is a height in the picture, not anything a blob says
MAX_LAYERS_BYTES = MAX_ACTORS * SPRITE_H * SPRITE_W * 4 + 64 * 1024  # a saved scene's blob: its sprites and header


@dataclass
class ActorLayer:
    name: str
    sprite: np.ndarray  # uint8 (SPRITE_H, SPRITE_W, 4), premultiplied, as the player sees it now
    x: float  # the feet's column in the place's picture (its wide one where the stage has it), in pixels
    facing: int  # +1 right, -1 left: the way the sprite faces
    # what it did last turn, in the pose it holds now: None as the stage stood it, "" a verb play did not read
    verb: str | None = None
    lift: float = 0.0  # how far its feet are above the place's ground line now, in pixels (a broom flies ~40 up)


@dataclass
class LayeredScene:
    place: str
    time: str
    actors: list[ActorLayer] = field(default_factory=list)
    camera: float = 0.0  # the view's left edge in the place's picture (its wide one where the stage has it)

    def names(self) -> list[str]:
        return [a.name for a in self.actors]

    def to_bytes(self) -> bytes:
        """The scene as one safetensors blob (the sprites) with its metadata (place, time, names, feet, facing, verb,
        lift)."""
        meta = {"place": self.place, "time": self.time, "camera": repr(float(self.camera)),
                "actors": json.dumps([{"name": a.name, "x": a.x, "facing": a.facing, "verb": a.verb, "lift": a.lift}
                                      for a in self.actors])}
        return save_np({f"sprite{i}": np.ascontiguousarray(a.sprite) for i, a in enumerate(self.actors)}, meta)

    @classmethod
    def from_bytes(cls, data: bytes) -> "LayeredScene":
        """The inverse of ``to_bytes``, checked (a saved game may come from anyone): ValueError saying what is
        wrong with a blob that is not a scene this code draws."""
        if len(data) > MAX_LAYERS_BYTES:
            raise ValueError(f"{len(data)} bytes, a scene is at most {MAX_LAYERS_BYTES}")
        try:
            tensors = load_np(data)  # safetensors checks the header and every tensor against the data's length
            header_len = int.from_bytes(data[:8], "little")
            meta = json.loads(data[8:8 + header_len]).get("__metadata__") or {}
            place, time, actors = meta["place"], meta["time"], json.loads(meta["actors"])
            camera = float(meta.get("camera", 0.0))
            if not np.isfinite(camera):
                raise ValueError("its camera is not a number")
            if not isinstance(actors, list) or len(actors) > MAX_ACTORS or set(tensors) != {
                    f"sprite{i}" for i in range(len(actors))}:
                raise ValueError("its sprites and its characters do not match")
            layers = []
            for i, a in enumerate(actors):
                name, x, facing, verb = a["name"], float(a["x"]), a["facing"], a.get("verb")
                lift = float(a.get("lift", 0.0))  # a game saved before scenes kept the lift: on the ground
                if not np.isfinite(lift) or abs(lift) > MAX_LIFT_PX:
                    raise ValueError(f"character {i}'s lift is not a height in the picture")
                sprite = tensors[f"sprite{i}"]
                if not isinstance(name, str) or not 0 < len(name) <= 64 or not np.isfinite(x) or facing not in (1, -1):
                    raise ValueError(f"character {i} is not a name, a column and a facing")
                if verb is not None and not (isinstance(verb, str) and len(verb) <= 64):
                    raise ValueError(f"character {i}'s verb is not a name")
                if sprite.dtype != np.uint8 or sprite.shape != (SPRITE_H, SPRITE_W, 4):
                    raise ValueError(f"character {i}'s sprite is {sprite.dtype} {sprite.shape}, not uint8 "
                                     f"{(SPRITE_H, SPRITE_W, 4)}")
                layers.append(ActorLayer(name, sprite, x, facing, verb, lift))
        except (KeyError, ValueError, TypeError, AttributeError, SafetensorError, RecursionError) as e:
            raise ValueError(f"not a layered scene: {e}") from None
        if not (isinstance(place, str) and isinstance(time, str) and len(place) <= 64 and len(time) <= 64):
            raise ValueError("not a layered scene: its place and time are not names")
        return cls(place, time, layers, camera)


def start_scene(stage: Stage, place: str, time: str, names: list[str], sprites: dict[str, Sprite], *,
                pair: bool, verb: str | None = None) -> LayeredScene:
    """``names`` standing in ``place`` at ``time`` as the stage composes them (the right-hand one of several
    turned towards the others), but two who do a pair action (``pair``: a hug, a talk) as the world stands a
    pair: ``pair_gap_px(verb)`` apart, face to face. Two who each do a verb of one (both dance) stand apart as the
    stage spaces them, so that neither hides the other."""
    h, w = stage.size
    camera = (place_width(stage, place, time) - w) / 2  # the middle view: the stage's one-view picture
    xs = standing_columns(w, len(names), pair, verb)
    actors = []
    for k, (name, x) in enumerate(zip(names, xs)):
        canvas = cutout_canvas(sprites[name], stage.standing * h)
        facing = -1 if len(names) > 1 and k == len(names) - 1 else 1
        actors.append(ActorLayer(name, canvas[:, ::-1].copy() if facing < 0 else canvas, camera + x, facing))
    return LayeredScene(place, time, actors, camera)


def standing_columns(w: int, n: int, pair: bool, verb: str | None) -> list[float]:
    """Where ``start_scene`` stands ``n`` characters' feet in a view ``w`` wide: a pair acting ``pair_gap_px(verb)``
    apart about the middle, others as the stage spaces them."""
    gap = pair_gap_px(verb)
    return [w / 2 - gap / 2, w / 2 + gap / 2] if n == 2 and pair else [x * w for x in positions(n)]


def tracks_as_played(stage: Stage, place: str, time: str, sprites: list[np.ndarray], offsets: list[np.ndarray],
                     verb: str) -> np.ndarray:
    """uint8 (T, H, W, 3): characters' sprite tracks (uint8 (T, SPRITE_H, SPRITE_W, 4), facing as drawn; ``offsets``
    (T, 2) in pixels: their feet's move from where each stands at frame 0, and their lift, +y up) layered on the
    stage as play shows a scene that starts: stood by ``start_scene``, the camera following the first who travels
    (``follow``).
    The world's shot of the same tracks has another camera (it pans over some) and other pixels; the level the
    world's quantiser reads from this one is the level play shows for that motion."""
    h, w = stage.size
    view = stage.places[(place, time)]
    width = place_width(stage, place, time)
    camera = (width - w) / 2
    xs = standing_columns(w, len(sprites), verb in pair_verbs(), verb)
    feet = [np.stack([camera + x + o[:, 0], view.ground * h - o[:, 1]], axis=1) for x, o in zip(xs, offsets)]
    track = follow(feet[0][:, 0], camera, w, width, fresh=True)
    return _shot(view, [s / 255.0 for s in sprites], feet, track)


def place_width(stage: Stage, place: str, time: str) -> int:
    """How wide the picture a scene in ``place`` at ``time`` plays on is: its wide one where the stage has it."""
    return stage.places[(place, time)].width


def _shot(view: PlaceView, sprites: list[np.ndarray], feet: list[np.ndarray], camera: np.ndarray) -> np.ndarray:
    return layered_shot(view, sprites, feet, camera if view.wide_layers else None)


def _blocked(scene: LayeredScene, acting: list[str], verb: str | None) -> LayeredScene:
    """A pair that acts stands as the world stands one at frame 0: the partner ``pair_gap_px(verb)`` in front of its
    subject, facing it."""
    if len(acting) != 2:
        return scene
    by = {a.name: a for a in scene.actors}
    sub, par = by[acting[0]], by[acting[1]]
    facing = -sub.facing
    sprite = par.sprite if par.facing == facing else par.sprite[:, ::-1].copy()
    moved = replace(par, sprite=sprite, x=sub.x + sub.facing * pair_gap_px(verb), facing=facing)
    return LayeredScene(scene.place, scene.time, [moved if a.name == par.name else a for a in scene.actors],
                        scene.camera)


def framed(stage: Stage, scene: LayeredScene, acting: list[str], verb: str | None) -> LayeredScene:
    """The scene as the turn's camera sees it at frame 0: a turn that starts ``verb`` afresh (``afresh``) is a new
    shot, framed as the world's camera frames every shot: who acts (their middle) in the middle of the view, within
    the place's ends; a turn that goes on keeps the camera (frame 0 is the frame shown). Left where the last turn's
    camera was, a character who had run to a side of the view did the next verb there, and the evaluator named it
    far less often (docs/layers.md, "A scene that goes on")."""
    xs = [a.x for a in scene.actors if a.name in acting]
    if not xs or not afresh(scene, acting, verb):
        return scene
    w = stage.size[1]
    width = place_width(stage, scene.place, scene.time)
    return replace(scene, camera=float(np.clip(np.mean(xs) - w / 2, 0.0, max(0.0, width - w))))


def afresh(scene: LayeredScene, acting: list[str], verb: str | None) -> bool:
    """Whether who acts starts ``verb`` afresh: the stage stood them, or any of them did another verb last turn.
    Then each is drawn from its reference cut-out, already in the verb's pose at frame 0, as the world starts every
    shot of a verb; one who goes on with the same verb goes on from the pose it holds. Where the verb is not read
    (``verb`` None: a model whose anchors read no verbs), who has acted goes on from the pose it holds."""
    who = [a for a in scene.actors if a.name in acting]
    return any(a.verb is None for a in who) or (verb is not None and any(a.verb != verb for a in who))


def scene_frame(stage: Stage, scene: LayeredScene) -> np.ndarray:
    """uint8 (H, W, 3): the scene as it stands (the first frame of its next turn)."""
    view = stage.places[(scene.place, scene.time)]
    ground = view.ground * stage.size[0]
    return _shot(view, [a.sprite[None] / 255.0 for a in scene.actors],
                 [np.array([[a.x, ground - a.lift]]) for a in scene.actors], np.array([scene.camera]))[0]


@cache
def pair_verbs() -> frozenset[str]:
    """The verbs two characters do together, as subject and partner (a hug, a talk with)."""
    return frozenset(key for key, motion in load_motions()[0].items() if motion.pair)


def acts_as_pair(acting: list[str], verb: str | None) -> bool:
    """Whether ``acting`` do ``verb`` as a pair (subject and partner): two of them and a verb of two. Two who do
    a verb of one (both dance) each do it. ``verb`` None (not read): two are taken for a pair."""
    return len(acting) == 2 and (verb is None or verb in pair_verbs())


def roles(acting: int, pair: bool) -> list[int]:
    """The animator's role of each acting character: two who do a pair action act as its subject (1) and partner
    (2); otherwise each acts alone (0), as the world draws every verb of one (two who dance each dance)."""
    return [1, 2] if acting == 2 and pair else [0] * acting


def _canonical_facing(role: int) -> int:
    return -1 if role == 2 else 1  # the world draws a pair's partner facing its subject, on the right


def draw_turn(animator: SpriteAnimator, stage: Stage, scene: LayeredScene, acting: list[str], s_a: torch.Tensor,
              level: int, references: dict[str, np.ndarray], first: np.ndarray | None = None, *,
              verb: str | None) -> tuple[np.ndarray, LayeredScene]:
    """uint8 (T, H, W, 3): frame 0 the scene as it stands, frames 1..T-1 with each of ``acting`` drawn by the
    animator from ``s_a`` (N, D) and ``level``, and from its reference cut-out on the canvas, facing right
    (``references``: name -> ``cutout_canvas``); and the scene after the turn. ``first``: ``scene_frame`` of
    the scene, where the caller composed it already. ``verb``: the turn's verb where known (else None): two acting
    a verb of two (a hug, a talk) are blocked and drawn as its subject and partner, otherwise each acts alone
    (``acts_as_pair``); who starts it afresh (``afresh``: the stage stood them, or they did something else) is
    drawn from the reference cut-out and, by an animator trained to draw frame 0 (``first_frame``), already in the
    verb's pose at frame 0, as a world shot starts; who goes on with it goes on from the frame the player saw.
    Where the first of ``acting`` travels, the camera follows it across the place's wide picture, locked on it as
    the world's follow camera keeps a runner (``follow``); otherwise the camera stays."""
    pair = acts_as_pair(acting, verb)
    fresh = afresh(scene, acting, verb)
    view = stage.places[(scene.place, scene.time)]
    h, w = stage.size
    ground = view.ground * h
    t = animator.config.frames
    frame0 = scene_frame(stage, scene) if first is None else first  # what the player saw last, before blocking
    scene = _blocked(scene, acting, verb) if pair else scene
    width = place_width(stage, scene.place, scene.time)
    lo, hi = EDGE * w, width - EDGE * w
    acts = {name: role for name, role in zip(acting, roles(len(acting), pair))}
    start = 0 if fresh and animator.config.first_frame else 1
    n = len(scene.actors)
    sprites, feet, after = [None] * n, [None] * n, list(scene.actors)
    who = [i for i, a in enumerate(scene.actors) if a.name in acts]
    still = [i for i, a in enumerate(scene.actors) if a.name not in acts]
    for k in still:
        sprites[k] = np.repeat(scene.actors[k].sprite[None] / 255.0, t, 0)
        feet[k] = np.tile([scene.actors[k].x, ground - scene.actors[k].lift], (t, 1))
    # several who start a verb of one together go the way the first of them goes, as the world draws a group
    # (``world/shot.render_turn``: one facing, side by side); turned towards one another as the stage stands them,
    # two walkers crossed and one hid the other, two fallers fell head to head, two sleepers lay wider than the view
    # (docs/layers.md, "A group faces one way")
    group = fresh and not pair and len(acts) > 1
    lead_facing = None  # the group's way, once its lead has chosen it
    for k in sorted(who, key=lambda k: scene.actors[k].name != acting[0]):  # the lead first: the others go its way
        actor = scene.actors[k]
        role = acts[actor.name]
        ref = references[actor.name]
        if group and lead_facing is not None:
            actor = replace(actor, facing=lead_facing)
        if fresh:  # from the character's clean picture, the way it faces now
            actor = replace(actor, sprite=ref if actor.facing > 0 else ref[:, ::-1].copy())
        drawn, xs, lift = _animate(animator, actor, role, s_a, level, ref, start)
        if not lo <= xs[-1] <= hi and lead_facing is None:  # it would leave the place: it turns round
            actor = replace(actor, sprite=actor.sprite[:, ::-1].copy(), facing=-actor.facing)
            drawn2, xs2, lift2 = _animate(animator, actor, role, s_a, level, ref, start)
            if abs(np.clip(xs2[-1], lo, hi) - xs2[-1]) < abs(np.clip(xs[-1], lo, hi) - xs[-1]):
                drawn, xs, lift = drawn2, xs2, lift2
            else:
                actor = replace(actor, sprite=actor.sprite[:, ::-1].copy(), facing=-actor.facing)
        if group and lead_facing is None:
            lead_facing = actor.facing
        xs = np.clip(xs, lo, hi)
        sprites[k] = drawn
        feet[k] = np.stack([xs, ground - lift], axis=1)
        after[k] = ActorLayer(actor.name, np.clip((drawn[-1] * 255).round(), 0, 255).astype(np.uint8),
                              float(xs[-1]), actor.facing, "" if verb is None else verb, float(lift[-1]))
    if start == 0 and not pair and len(acts) > 1:  # each drawn afresh, frame 0 too: nothing shown moves
        # their ink stays in the view the turn is shot in (a fresh turn without a traveller keeps its camera), so
        # neither lies half out of the picture
        inks = max(lo, scene.camera + MARGIN_PX), min(hi, scene.camera + w - MARGIN_PX)
        least = GROUP_GAP_PX * h / FRAME_H  # as the world stands a group
        for i, x in zip(who, apart([feet[i][:, 0] for i in who], [sprites[i] for i in who], *inks, least=least)):
            feet[i][:, 0] = x
            after[i] = replace(after[i], x=float(x[-1]))
    if start == 0 and still:  # a new shot (a cut): who holds still stands clear of who acts, not under them
        span = ink_span([feet[i][:, 0] for i in who], [sprites[i] for i in who])
        moved = step_aside(span, [float(feet[i][0, 0]) for i in still],
                           [tuple(frame_reach(sprites[i][:1])[0]) for i in still], lo, hi)  # held: one pose
        for i, x in zip(still, moved):
            feet[i][:, 0] = x
            after[i] = replace(after[i], x=x)
    camera = np.full(t, scene.camera)
    if acting:  # the camera follows the first who acts, a group by its middle (as the world frames one)
        lead = (np.mean([feet[i][:, 0] for i in who], axis=0) if not pair and len(who) > 1
                else feet[[a.name for a in scene.actors].index(acting[0])][:, 0])
        # who acts, at frame 0: only a new shot's camera keeps it in view
        ink = ink_span([feet[i][:1, 0] for i in who], [sprites[i][:1] for i in who]) if start == 0 else None
        camera = follow(lead, scene.camera, w, width, fresh=start == 0, keep=ink)
    # who acts is pasted over who holds still (the one the turn is about is not hidden behind a bystander); the
    # scene keeps that order, so the next turn's first frame is this turn's last
    order = still + who
    frames = _shot(view, [sprites[i] for i in order], [feet[i] for i in order], camera)
    if start:  # frame 0 is what the player saw last; drawn from 0, it is the drawing
        frames[0] = frame0
    return frames, LayeredScene(scene.place, scene.time, [after[i] for i in order], float(camera[-1]))


def apart(xs: list[np.ndarray], sprites: list[np.ndarray], lo: float, hi: float, least: float = 0.0
          ) -> list[np.ndarray]:
    """Feet columns (T,) of characters who each do a verb of one, pushed apart so that no pose of one covers the
    other's pose of the same frame: two who lie down or read side by side, wider than the stage's standing spacing,
    are drawn next to each other, not one over the other (the world draws a verb of one alone, so its films say
    nothing of how far apart two stand). Frame by frame, not the union of a turn's poses: three who jump each lean
    ~20 px over the turn, and spaced by the union of their leans the three were wider than the view and the outer
    ones cut by its edges. Poses only, not the way they travel: two who run together stay abreast as they stood.
    Each keeps its order and its own motion; the group's ink keeps the middle their feet stood about (a lying body
    reaches far to one side of its feet: centred on the feet, two sleepers at the stage's spacing put one head out
    of the view) and stays within [lo, hi] (the view where it fits there, else centred on it). Neighbours' feet
    stand at least ``least`` apart (the world stands a group ``GROUP_GAP_PX`` apart, 53 px: at the stage's 29, two who
    stood turning their heads were drawn half over one another, docs/layers.md "A group faces one way")."""
    if len(xs) < 2:
        return xs
    reach = [frame_reach(drawn) for drawn in sprites]  # (T, 2) each: left and right of the feet, NaN without ink
    order = np.argsort([x[0] for x in xs], kind="stable")
    start = [float(xs[i][0]) for i in order]
    for j in range(1, len(order)):  # right of everyone before it, in every frame
        start[j] = max(start[j], start[j - 1] + least)
        for i in range(j):
            need = reach[order[i]][:, 1] - reach[order[j]][:, 0]
            if np.isfinite(need).any():
                start[j] = max(start[j], start[i] + float(np.nanmax(need)) + MARGIN_PX)
    lows = [s0 + np.nanmin(reach[k][:, 0]) for s0, k in zip(start, order) if np.isfinite(reach[k]).any()]
    highs = [s0 + np.nanmax(reach[k][:, 1]) for s0, k in zip(start, order) if np.isfinite(reach[k]).any()]
    low, high = (min(lows), max(highs)) if lows else (start[0], start[-1])
    middle = float(np.mean([x[0] for x in xs]))
    shift = middle - (low + high) / 2  # the ink's middle where the feet's was
    if high - low > hi - lo:  # wider than the room: centred on it
        shift = (lo + hi) / 2 - (low + high) / 2
    else:
        shift = float(np.clip(shift, lo - low, hi - high))
    out = list(xs)
    for i, s0 in zip(order, start):
        out[i] = xs[i] + (s0 + shift - xs[i][0])
    return out


def frame_reach(sprites: np.ndarray) -> np.ndarray:
    """(T, 2): how far a character's ink reaches left and right of its feet in each of ``sprites`` (T, SPRITE_H,
    SPRITE_W, 4) in [0, 1], in pixels; NaN in a frame without ink. The ink is the body (the largest blot covered
    at least INK) and what is drawn beside it (a verb's marks, within MARK_GAP_PX of its columns): the animator
    leaves faint smudges near the canvas's edges now and then (a sleeper's at 30-39 px from its feet, 11 px clear of
    its body), and counted as ink they spread two sleepers wider than the view (docs/layers.md, "A group faces one
    way")."""
    out = np.full((len(sprites), 2), np.nan)
    for k, frame in enumerate(sprites):
        n, _, stats, _ = cv2.connectedComponentsWithStats((frame[..., 3] > INK).astype(np.uint8), connectivity=8)
        if n < 2:
            continue
        left = stats[1:, cv2.CC_STAT_LEFT]
        right = left + stats[1:, cv2.CC_STAT_WIDTH]
        body = int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
        near = (left <= right[body] + MARK_GAP_PX) & (right >= left[body] - MARK_GAP_PX)
        out[k] = left[near].min() - SPRITE_W / 2, right[near].max() - SPRITE_W / 2
    return out


def ink_span(xs: list[np.ndarray], sprites: list[np.ndarray]) -> tuple[float, float]:
    """The columns characters' ink covers over a turn (feet ``xs`` (T,), ``sprites`` (T, SPRITE_H, SPRITE_W, 4));
    (0, 0) where none has ink."""
    spans = np.concatenate([np.asarray(x, float)[:, None] + frame_reach(drawn) for x, drawn in zip(xs, sprites)])
    if not np.isfinite(spans).any():
        return 0.0, 0.0
    return float(np.nanmin(spans[:, 0])), float(np.nanmax(spans[:, 1]))


def step_aside(span: tuple[float, float], xs: list[float], reaches: list[tuple[float, float]], lo: float,
               hi: float) -> list[float]:
    """Feet columns of characters who hold still while others act over ``span`` (their ink's columns), each whose ink
    (``reaches``: left and right of its feet, NaN without ink) would overlap it or one moved before it, moved
    just clear of it: to the side its middle is on, next to any moved there before; the other side where that
    would take its feet out of [lo, hi] (the place, less its edge); left where it is when neither side has room.
    Who is clear already stays. The world draws a verb of one alone: left where it stood, a bystander after a hug
    stood under the one who acts next, and the shot showed neither clearly."""
    if span[1] <= span[0]:
        return list(xs)
    out = list(xs)
    left_edge, right_edge = span[0] - MARGIN_PX, span[1] + MARGIN_PX  # what is taken so far, margins included
    middle = (span[0] + span[1]) / 2
    for i in sorted(range(len(xs)), key=lambda k: abs(xs[k] + sum(reaches[k]) / 2 - middle)):
        x, (r0, r1) = xs[i], reaches[i]
        if not r1 > r0 or x + r1 <= left_edge or x + r0 >= right_edge:
            continue  # no ink, or clear of everyone who acts and of everyone moved
        to_left, to_right = left_edge - r1, right_edge - r0
        sides = [to_left, to_right] if x + (r0 + r1) / 2 < middle else [to_right, to_left]
        room = [s for s in sides if lo <= s <= hi]
        if not room:
            continue
        out[i] = room[0]
        if room[0] == to_left:
            left_edge = to_left + r0 - MARGIN_PX
        else:
            right_edge = to_right + r1 + MARGIN_PX
    return out


def follow(x: np.ndarray, camera: float, w: int, width: int, fresh: bool = False,
           keep: tuple[float, float] | None = None) -> np.ndarray:
    """The camera's left edge per frame for a character whose feet are at ``x`` (T,) in a place ``width`` wide
    seen ``w`` wide: still unless it travels TRAVELS_PX; then locked on it, as the world's follow camera keeps its
    traveller where it stands on screen (within the place's ends). A new shot (``fresh``: its frame 0 is drawn, not
    the frame the player saw) starts with the traveller FOLLOW behind the view's middle, room ahead, as the world
    starts one; a shot that goes on keeps it where it was. Locked, not eased: a camera that lags behind its
    traveller moves it across a flat sky, and the flow the world's level is measured by read a flight one or two
    levels too fast (docs/layers.md, "The level through the network"). ``keep``: columns of the place (who acts, at
    frame 0) a new shot's start keeps in the view where they fit in it, else centres: room ahead of a group of three
    put the one behind out of the picture."""
    t = len(x)
    travel = float(x[-1] - x[0])
    if abs(travel) < TRAVELS_PX or width <= w:
        return np.full(t, float(camera))
    start = float(x[0] - w * (0.5 - FOLLOW * np.sign(travel))) if fresh else float(camera)
    if fresh and keep is not None and keep[1] > keep[0]:
        start = (float(np.clip(start, keep[1] + MARGIN_PX - w, keep[0] - MARGIN_PX))
                 if keep[1] - keep[0] <= w - 2 * MARGIN_PX else (keep[0] + keep[1] - w) / 2)
    return np.clip(start + (x - x[0]), 0.0, width - w)


@torch.no_grad()
def _animate(animator: SpriteAnimator, actor: ActorLayer, role: int, s_a: torch.Tensor, level: int,
             reference: np.ndarray, start: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """-> the sprites (T, H, W, 4) in [0, 1] as seen (frame 0 the actor's own, or with ``start`` 0 drawn), the
    feet's column (T,) and their lift above the ground line (T,) in pixels (frame 0's the actor's own with ``start``
    1). ``reference``: the character's cut-out on the canvas, facing right."""
    canonical = _canonical_facing(role)
    mirror = actor.facing != canonical
    source = actor.sprite[:, ::-1] if mirror else actor.sprite
    ref = reference[:, ::-1] if canonical < 0 else reference  # facing the way the role's track faces
    first = to_unit(torch.from_numpy(np.ascontiguousarray(source)))[None]
    dev = next(animator.parameters()).device
    frames, offsets = animator.draw(first.to(dev), to_unit(torch.from_numpy(np.ascontiguousarray(ref)))[None].to(dev),
                                    s_a[None].float().to(dev), torch.tensor([level], device=dev),
                                    torch.tensor([role], device=dev), start=start)
    frames = torch.cat([first.to(dev), frames[0]]) if start else frames[0]
    frames = frames.permute(0, 2, 3, 1).cpu().numpy()  # (T, H, W, 4)
    offsets = offsets[0].cpu().numpy()
    # the feet's column moves from frame 0's; their lift is the animator's own, above the ground line (a broom
    # flies ~40 px up from its first frame on)
    offsets = (np.concatenate([np.array([[0.0, actor.lift]], np.float32), offsets]) if start
               else offsets - np.array([offsets[0, 0], 0.0], np.float32))
    # whole pixels from where it stood: the shot is pasted at whole pixels, and the animator's ~0.1 px wobble of
    # a still character's feet, rounded against the place's grid instead, became a one-pixel jump whenever it stood
    # near a half pixel, which the level's flow reads as motion (a sleeper read two levels, docs/layers.md)
    offsets[:, 0] = np.round(offsets[:, 0])
    offsets[:, 1] = actor.lift + np.round(offsets[:, 1] - actor.lift) if start else np.round(offsets[:, 1])
    if mirror:
        frames = frames[:, :, ::-1]
        offsets[:, 0] = -offsets[:, 0]
    return np.ascontiguousarray(frames), actor.x + offsets[:, 0], offsets[:, 1]
