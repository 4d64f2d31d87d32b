"""The animation library: one procedural animation per verb of `data/motions.yaml`.

`animate(verb, n_frames, fps, speed, amplitude, phase)` returns one `ActorFrame` per
frame: the body `Pose` plus the displacement from where the shot started, in
character heights (dx: + = the way the character faces when `facing=+1`, i.e. to the
right; dy: height above the ground, + = up). `speed` multiplies the tempo of every
cycle and the travel (`travel` of the yaml, heights per second); `amplitude`
multiplies the size of the gestures (swing angles, bobs, jump height). Everything is
a pure function of the arguments: `phase` (radians) is the only source of variation,
so callers pass e.g. `rng.uniform(0, 2 * pi)` to decorrelate actors.

Frequencies are kept below the Nyquist limit of the frame rate (a gait faster than
fps/2 would alias into a slower-looking one and break "faster = more motion").
Animations are generated facing right; `mirror()` turns a track around.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

import yaml

from .pose import Pose

TAU = 2.0 * math.pi


@dataclass(frozen=True)
class ActorFrame:
    pose: Pose
    dx: float = 0.0   # character heights from the start position, + = right (when facing=+1)
    dy: float = 0.0   # character heights above the ground, + = up


@lru_cache(maxsize=1)
def motion_table() -> dict:
    text = resources.files("animegamer.world").joinpath("data/motions.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["motions"]


def verbs(pair: bool | None = None) -> list[str]:
    return [v for v, m in motion_table().items() if pair is None or bool(m["pair"]) == pair]


def _travel(verb: str) -> float:
    return float(motion_table()[verb]["travel"])


def mirror(frames: list[ActorFrame]) -> list[ActorFrame]:
    """The same track facing and moving the other way."""
    return [ActorFrame(replace(f.pose, facing=-f.pose.facing), -f.dx, f.dy) for f in frames]


class _Clock:
    """Per-frame time, cycle phase and travel for one actor."""

    def __init__(self, fps: float, speed: float, phase: float):
        self.fps, self.speed, self.phase = float(fps), float(speed), float(phase)

    def t(self, i: int) -> float:
        return i / self.fps

    def ph(self, i: int, hz: float) -> float:
        f = min(hz * self.speed, 0.45 * self.fps)
        return TAU * f * self.t(i) + self.phase


def _s(x: float) -> float:
    return math.sin(x)


def _smooth(u: float) -> float:
    u = max(0.0, min(1.0, u))
    return u * u * (3 - 2 * u)


# ---- single actions -------------------------------------------------------------------
def _walk(i, c, a, run=False):
    p = c.ph(i, 1.3 if run else 1.0)
    sw = math.sin(p)
    if run:
        hip, arm = 46 * a, 55 * a
        lead_hip, rear_hip = hip * sw + 10, -hip * sw + 10
        kl = 25 + 55 * max(0.0, -math.sin(p + 0.6)) * a
        kr = 25 + 55 * max(0.0, math.sin(p + 0.6)) * a
        pose = Pose(lean=12 + 4 * a, bob=0.045 * a * abs(math.cos(p)), lead_hip=lead_hip, rear_hip=rear_hip,
                    lead_knee=kl, rear_knee=kr, lead_shoulder=-arm * sw + 10, rear_shoulder=arm * sw + 10,
                    lead_elbow=80, rear_elbow=80, mouth="open", eyes="open", head_tilt=-4,
                    effect="dust", effect_phase=(c.t(i) * 2.0 * c.speed) % 1.0)
    else:
        hip, arm = 26 * a, 32 * a
        kl = 28 * max(0.0, -math.sin(p + 0.5)) * a
        kr = 28 * max(0.0, math.sin(p + 0.5)) * a
        pose = Pose(lean=3, bob=0.018 * a * abs(math.cos(p)), lead_hip=hip * sw, rear_hip=-hip * sw,
                    lead_knee=kl, rear_knee=kr, lead_shoulder=-arm * sw, rear_shoulder=arm * sw,
                    lead_elbow=12, rear_elbow=12, mouth="smile", head_tilt=3 * math.sin(2 * p) * a)
    return ActorFrame(pose, _travel("run" if run else "walk") * c.speed * c.t(i), 0.0)


def _fly(i, c, a):
    p = c.ph(i, 0.7)
    pose = Pose(on_broom=True, lean=8 + 5 * a * _s(p + 1.0), lead_hip=70 + 8 * a * _s(p), rear_hip=60 - 8 * a * _s(p),
                lead_knee=75, rear_knee=70, lead_shoulder=62, lead_elbow=8, rear_shoulder=50, rear_elbow=12,
                head_turn=0.3 + 0.3 * _s(p * 0.5), mouth="smile" if _s(p * 0.5) < 0.4 else "open",
                eyes="happy" if _s(p * 0.5) > 0.7 else "open", effect="sparkle", effect_phase=(c.t(i) * c.speed) % 1.0)
    dy = 0.9 + 0.12 * a * _s(p)
    return ActorFrame(pose, _travel("fly_broom") * c.speed * c.t(i), dy)


def _jump(i, c, a):
    period = 0.95 / c.speed
    u = ((c.t(i) + c.phase / TAU * period) / period) % 1.0
    crouch, air = 0.28, 0.72            # fraction of the cycle on the ground / in the air
    if u < crouch:                      # anticipation: squash down, arms back
        k = math.sin(math.pi * u / crouch)
        pose = Pose(squash=1 - 0.16 * a * k, lead_hip=25 * k, rear_hip=20 * k, lead_knee=50 * k, rear_knee=45 * k,
                    lean=10 * k, lead_shoulder=-40 * k * a, rear_shoulder=-45 * k * a, mouth="smile")
        dy = 0.0
    else:
        v = (u - crouch) / air
        h = 4 * v * (1 - v)
        pose = Pose(squash=1 + 0.08 * a * (1 - h), lead_hip=30 * h, rear_hip=-15 * h, lead_knee=60 * h, rear_knee=40 * h,
                    lead_shoulder=150 * min(1.0, a) * (0.4 + 0.6 * h), rear_shoulder=140 * min(1.0, a) * (0.4 + 0.6 * h),
                    lead_elbow=10, rear_elbow=10, eyes="happy", mouth="grin")
        dy = 0.42 * a * h
    return ActorFrame(pose, 0.0, dy)


def _sit(i, c, a):
    p = c.ph(i, 0.9)
    pose = Pose(sit=True, lead_hip=80 + 10 * a * _s(p), rear_hip=84 - 10 * a * _s(p), lead_knee=15 + 30 * a * max(0, _s(p)),
                rear_knee=15 + 30 * a * max(0, -_s(p)), lead_shoulder=25, lead_elbow=35, rear_shoulder=-30, rear_elbow=0,
                lean=-4 + 3 * a * _s(p + 1), head_tilt=8 * a * _s(p * 0.5), head_turn=0.2 + 0.4 * a * _s(p * 0.5),
                mouth="smile")
    return ActorFrame(pose, 0.0, 0.0)


def _lie(i, c, a, sleep=False):
    p = c.ph(i, 0.35 if sleep else 0.6)
    if sleep:
        pose = Pose(lean=-88, lead_hip=6, rear_hip=-2, lead_knee=10, lead_shoulder=35, lead_elbow=60, rear_shoulder=20,
                    rear_elbow=40, squash=1 + 0.03 * a * _s(p), eyes="closed", mouth="open" if _s(p) > 0 else "closed",
                    head_tilt=-10 + 4 * a * _s(p), effect="zzz", effect_phase=(c.t(i) * 0.6 * c.speed + c.phase / TAU) % 1.0)
    else:
        pose = Pose(lean=-86, lead_hip=12 + 14 * a * _s(p), rear_hip=0, lead_knee=30 + 25 * a * max(0, _s(p)),
                    lead_shoulder=165, lead_elbow=40, rear_shoulder=160, rear_elbow=45, squash=1 + 0.02 * _s(2 * p),
                    head_turn=0.3 + 0.5 * a * _s(p * 0.5), eyes="happy" if _s(p * 0.5) > 0.6 else "open", mouth="smile")
    return ActorFrame(pose, 0.0, 0.0)


def _turn_head(i, c, a):
    p = c.ph(i, 0.45)
    turn = max(-1.0, min(1.0, 1.1 * a * math.sin(p)))
    pose = Pose(head_turn=turn, head_tilt=-5 * abs(turn), lean=-4 * turn, lead_shoulder=8 + 6 * turn, rear_shoulder=-8 + 6 * turn,
                eyes="wide" if abs(turn) > 0.9 else "open", mouth="open" if abs(turn) > 0.8 else "closed")
    return ActorFrame(pose, 0.0, 0.0)


def _wave(i, c, a):
    p = c.ph(i, 1.5)
    # the raised forearm swings about the elbow, out beside the (big) head
    pose = Pose(lead_shoulder=108 + 6 * a * _s(p), lead_elbow=38 + 32 * a * _s(p), rear_shoulder=-10, rear_elbow=15,
                bob=0.012 * a * abs(_s(p)), lean=-3 + 3 * a * _s(p), head_tilt=6 * a * _s(p), mouth="open",
                eyes="happy" if _s(p * 0.5 + c.phase) > 0.3 else "open", head_turn=0.3)
    return ActorFrame(pose, 0.0, 0.0)


def _talk(i, c, a, listen=False):
    p = c.ph(i, 1.8)
    g = c.ph(i, 0.7)
    mouth = ("talk" if (math.sin(p) > -0.2) else "closed") if not listen else "smile"
    pose = Pose(mouth=mouth, head_tilt=7 * a * _s(p), bob=0.008 * a * abs(_s(p)),
                lead_shoulder=45 + 28 * a * _s(g), lead_elbow=50 + 30 * a * _s(g + 1.0),
                rear_shoulder=-10 + 10 * a * _s(g + 2), rear_elbow=20, head_turn=0.5,
                eyes="happy" if _s(g * 0.7) > 0.85 else "open")
    if listen:
        pose = replace(pose, lead_shoulder=10, lead_elbow=15, head_tilt=5 * a * _s(g), bob=0.0)
    return ActorFrame(pose, 0.0, 0.0)


def _laugh(i, c, a):
    p = c.ph(i, 2.4)
    pose = Pose(eyes="happy", mouth="grin" if _s(p) > -0.3 else "open", lean=-8 * a + 7 * a * _s(p), bob=0.02 * a * abs(_s(p)),
                head_tilt=-10 * a + 8 * a * _s(p), lead_shoulder=25, lead_elbow=95, rear_shoulder=20, rear_elbow=95,
                blush=True, effect="sparkle", effect_phase=(c.t(i) * c.speed) % 1.0)
    return ActorFrame(pose, 0.0, 0.0)


def _eat(i, c, a):
    p = c.ph(i, 0.8)
    k = _smooth(0.5 + 0.6 * math.sin(p))            # 0 = food at the chest, 1 = food at the mouth
    k *= min(1.0, 0.6 + 0.4 * a)
    pose = Pose(item="food", lead_shoulder=35 + 85 * k, lead_elbow=70 + 50 * k, rear_shoulder=-8, rear_elbow=15,
                mouth="open" if k > 0.75 else ("smile" if k < 0.3 else "closed"), eyes="happy" if k > 0.85 else "open",
                head_tilt=6 * a * k, bob=0.01 * a * abs(_s(2 * p)), blush=k > 0.85)
    return ActorFrame(pose, 0.0, 0.0)


def _dance(i, c, a):
    p = c.ph(i, 1.0)
    beat = c.ph(i, 2.0)
    half = int(math.floor(p / math.pi)) % 2
    pose = Pose(lean=14 * a * _s(p), bob=0.03 * a * abs(_s(beat)), lead_shoulder=90 + 70 * a * _s(p),
                rear_shoulder=90 - 70 * a * _s(p), lead_elbow=20 + 20 * _s(beat), rear_elbow=20 - 20 * _s(beat),
                lead_hip=18 * a * max(0, _s(p)), rear_hip=-18 * a * max(0, -_s(p)), lead_knee=30 * a * max(0, _s(p)),
                rear_knee=30 * a * max(0, -_s(p)), head_tilt=10 * a * _s(p), eyes="happy", mouth="grin" if half else "open",
                facing=1 if half == 0 else -1, effect="notes", effect_phase=(c.t(i) * 0.8 * c.speed) % 1.0)
    return ActorFrame(pose, 0.08 * a * _s(p), 0.0)


def _read(i, c, a):
    p = c.ph(i, 0.5)
    pose = Pose(sit=True, item="book", lead_hip=82, rear_hip=86, lead_knee=8, rear_knee=5, lead_shoulder=45,
                lead_elbow=75, rear_shoulder=70, rear_elbow=60, head_tilt=12 + 5 * a * _s(2 * p), mouth="closed",
                head_turn=0.25 + 0.25 * a * _s(p), lean=2 + 3 * a * _s(p),
                effect_phase=(c.t(i) * 0.55 * c.speed * max(0.5, a) + c.phase / TAU) % 1.0)
    return ActorFrame(pose, 0.0, 0.0)


def _swim(i, c, a):
    p = c.ph(i, 0.9)
    pose = Pose(lean=72, submerge=0.5, lead_shoulder=(math.degrees(p) * 1.0) % 360, lead_elbow=15,
                rear_shoulder=(math.degrees(p) + 180) % 360, rear_elbow=15, lead_hip=-10 + 20 * a * _s(3 * p),
                rear_hip=-10 - 20 * a * _s(3 * p), head_tilt=-55 + 8 * a * _s(p), head_turn=0.4, mouth="open",
                bob=0.02 * a * _s(2 * p), eyes="happy" if _s(p) > 0.5 else "open")
    return ActorFrame(pose, _travel("swim") * c.speed * c.t(i), 0.0)


def _fall(i, c, a, n, fps):
    dur = min(1.3 / c.speed, 0.8 * max(n - 1, 1) / fps)
    u = c.t(i) / dur
    travel = _travel("fall") * c.speed * min(c.t(i), dur)
    if u < 0.3:                                     # stumble: a step that catches on something
        k = u / 0.3
        pose = Pose(lean=10 + 15 * k, lead_hip=25 - 40 * k, rear_hip=-20 + 30 * k, rear_knee=30 * k,
                    lead_shoulder=30 * k * a, rear_shoulder=-20, eyes="wide", mouth="open", effect="sweat")
    elif u < 0.7:                                   # pitching forward, arms flung out
        k = _smooth((u - 0.3) / 0.4)
        pose = Pose(lean=25 + 65 * k, lead_hip=-15 - 20 * k, rear_hip=10 - 30 * k, lead_knee=20, rear_knee=30 * (1 - k),
                    lead_shoulder=(30 + 120 * k) * min(1.3, a), rear_shoulder=(20 + 110 * k) * min(1.3, a),
                    lead_elbow=10, rear_elbow=10, eyes="wide", mouth="open", effect="sweat", effect_phase=k)
    else:                                           # flat on the ground, a little bounce, then still
        k = min(1.0, (u - 0.7) / 0.3)
        bounce = 0.04 * a * max(0.0, math.sin(math.pi * min(1.0, k * 1.5))) if u < 1.0 else 0.0
        kick = 25 * a * math.sin(c.ph(i, 1.2)) if u >= 1.0 else 0.0
        pose = Pose(lean=90, bob=bounce, lead_hip=-30 + kick, rear_hip=-15, lead_knee=40 + max(0.0, kick), rear_knee=20,
                    lead_shoulder=160, rear_shoulder=150, lead_elbow=15, rear_elbow=15, eyes="closed", mouth="open",
                    head_tilt=-20, effect="dust" if u < 1.0 else "sweat", effect_phase=k)
    return ActorFrame(pose, travel, 0.0)


_SINGLE = {
    "walk": lambda i, c, a, n, fps: _walk(i, c, a),
    "run": lambda i, c, a, n, fps: _walk(i, c, a, run=True),
    "fly_broom": lambda i, c, a, n, fps: _fly(i, c, a),
    "jump": lambda i, c, a, n, fps: _jump(i, c, a),
    "sit": lambda i, c, a, n, fps: _sit(i, c, a),
    "lie_down": lambda i, c, a, n, fps: _lie(i, c, a),
    "sleep": lambda i, c, a, n, fps: _lie(i, c, a, sleep=True),
    "turn_head": lambda i, c, a, n, fps: _turn_head(i, c, a),
    "wave": lambda i, c, a, n, fps: _wave(i, c, a),
    "talk": lambda i, c, a, n, fps: _talk(i, c, a),
    "laugh": lambda i, c, a, n, fps: _laugh(i, c, a),
    "eat": lambda i, c, a, n, fps: _eat(i, c, a),
    "dance": lambda i, c, a, n, fps: _dance(i, c, a),
    "read": lambda i, c, a, n, fps: _read(i, c, a),
    "swim": lambda i, c, a, n, fps: _swim(i, c, a),
    "fall": _fall,
}


def _check(verb, n_frames, fps, speed, amplitude, pair):
    table = motion_table()
    if verb not in table:
        raise ValueError(f"unknown verb {verb!r}; known: {', '.join(table)}")
    if bool(table[verb]["pair"]) != pair:
        raise ValueError(f"verb {verb!r} is a {'pair' if table[verb]['pair'] else 'single'} action: use "
                         f"{'animate_pair' if table[verb]['pair'] else 'animate'}()")
    if n_frames < 1 or fps <= 0 or speed <= 0 or amplitude < 0:
        raise ValueError(f"animate({verb!r}): need n_frames >= 1, fps > 0, speed > 0, amplitude >= 0; got "
                         f"{n_frames}, {fps}, {speed}, {amplitude}")


def animate(verb: str, n_frames: int, fps: float, speed: float = 1.0, amplitude: float = 1.0,
            phase: float = 0.0) -> list[ActorFrame]:
    """One actor doing a single (non-pair) verb; facing right, starting at dx = dy = 0."""
    _check(verb, n_frames, fps, speed, amplitude, pair=False)
    c = _Clock(fps, speed, phase)
    fn = _SINGLE[verb]
    return [fn(i, c, amplitude, n_frames, fps) for i in range(n_frames)]


PAIR_GAP = {"talk_with": 0.62, "hug": 0.52, "chase": 1.15, "play_with": 0.8}


def animate_pair(verb: str, n_frames: int, fps: float, speed: float = 1.0, amplitude: float = 1.0,
                 phase: float = 0.0) -> tuple[list[ActorFrame], list[ActorFrame]]:
    """A pair action: (subject, partner). Both tracks are relative to the subject's start
    position; the partner stands PAIR_GAP[verb] heights to the subject's right (facing
    it, except in a chase where it runs ahead)."""
    _check(verb, n_frames, fps, speed, amplitude, pair=True)
    c = _Clock(fps, speed, phase)
    gap = PAIR_GAP[verb]
    A, B = [], []
    if verb == "talk_with":
        # they take turns: the subject speaks first, the partner answers
        turn = max(2, int(round(fps * 1.1 / speed)))
        for i in range(n_frames):
            a_speaks = (i // turn) % 2 == 0
            fa = _talk(i, c, amplitude, listen=not a_speaks)
            fb = _talk(i, _Clock(fps, speed, phase + 1.7), amplitude, listen=a_speaks)
            A.append(fa)
            B.append(ActorFrame(replace(fb.pose, facing=-1), gap, 0.0))
    elif verb == "hug":
        dur = min(0.9 / speed, 0.5 * n_frames / fps)
        for i in range(n_frames):
            k = _smooth(c.t(i) / dur)
            sway = 6 * amplitude * math.sin(c.ph(i, 0.8)) * k
            step = 0.1 * k
            common = dict(lead_shoulder=40 + 60 * k, lead_elbow=20 + 50 * k, rear_shoulder=20 + 60 * k, rear_elbow=30 + 40 * k,
                          eyes="happy" if k > 0.5 else "open", mouth="smile" if k > 0.5 else "open", blush=k > 0.5,
                          head_tilt=8 * k, effect="hearts" if k > 0.6 else "none", effect_phase=(c.t(i) * 0.7) % 1.0,
                          bob=0.015 * amplitude * abs(math.sin(c.ph(i, 0.8))) * k)
            A.append(ActorFrame(Pose(lean=6 * k + sway, **common), step, 0.0))
            B.append(ActorFrame(Pose(lean=6 * k - sway, facing=-1, **common), gap - step, 0.0))
    elif verb == "chase":
        tr = _travel("chase") * speed
        for i in range(n_frames):
            fa = _walk(i, c, amplitude, run=True)
            fb = _walk(i, _Clock(fps, speed, phase + 2.2), amplitude, run=True)
            A.append(ActorFrame(replace(fa.pose, mouth="open", eyes="open", head_tilt=-6), tr * c.t(i), 0.0))
            B.append(ActorFrame(replace(fb.pose, head_turn=-0.9, eyes="happy", mouth="grin", effect="sweat",
                                        effect_phase=(c.t(i) * 2) % 1.0),
                                gap + tr * c.t(i) * 0.97, 0.0))
    elif verb == "play_with":
        for i in range(n_frames):
            fa = _jump(i, c, amplitude)
            fb = _jump(i, _Clock(fps, speed, phase + math.pi), amplitude)
            p = c.ph(i, 0.5)
            shift = 0.12 * amplitude * math.sin(p)
            A.append(ActorFrame(replace(fa.pose, mouth="grin", eyes="happy"), shift, fa.dy))
            B.append(ActorFrame(replace(fb.pose, facing=-1, mouth="grin", eyes="happy",
                                        effect="notes", effect_phase=(c.t(i) * 0.8) % 1.0), gap + shift, fb.dy))
    return A, B
