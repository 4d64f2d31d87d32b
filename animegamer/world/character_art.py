"""Chibi cel-shaded characters drawn with OpenCV, in place, on an RGB uint8 canvas.

Every shape is a polygon or ellipse defined once (at import) in one of two frames and
mapped to pixels with a 2x3 affine matrix per frame:
  body frame  units of the character's height, y up, x forward (toward `facing`),
              origin at the hips; rotated by `Pose.lean`, mirrored by `Pose.facing`.
  head frame  units of the head's horizontal radius, centred on the head, rotated by
              `Pose.head_tilt` about the neck.
Proportions: head ~45% of the height, torso 25%, legs 30% (chibi). Style: dark ink
outlines, one flat shadow tone (rear limbs, back hair, the rear side of the torso),
big eyes with a white highlight. Coordinates go to OpenCV in 1/8 pixel fixed point
(shift=3) so slow motion still moves the anti-aliased edges smoothly.
"""
from __future__ import annotations

import math
from functools import lru_cache

import cv2
import numpy as np

from .cast import CharacterSpec, Look, default_look
from .pose import Pose

SHIFT = 3
MUL = float(1 << SHIFT)
AA = cv2.LINE_AA
INK = (44, 30, 46)
WHITE = (252, 252, 250)

# ---- proportions (body frame, character heights) ----------------------------------
THIGH, SHIN = 0.15, 0.15
HIP_X = 0.045
SHOULDER = (0.078, 0.198)
UPPER_ARM, FOREARM = 0.10, 0.095
NECK_Y = 0.235
HEAD_R = 0.215            # horizontal head radius; the head frame's unit
HEAD_RY = 0.93            # vertical radius in head units
HEAD_UP = 0.98            # neck -> head centre distance, head units
ARM_W, LEG_W, HAND_R = 0.052, 0.066, 0.032


def _arc(cx, cy, rx, ry, a0, a1, n):
    a = np.radians(np.linspace(a0, a1, n))
    return np.stack([cx + rx * np.cos(a), cy + ry * np.sin(a)], 1)


def _P(*pts):
    return np.array(pts, dtype=np.float64)


def _cat(*parts):
    return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in parts], 0)


def _mirror_x(p):
    q = p.copy()
    q[:, 0] *= -1
    return q[::-1]


# ---- hair (head frame) -------------------------------------------------------------
def _fringe(tips, valleys_y, tip_y):
    """Zigzag fringe lower edge from left to right."""
    out = []
    for i, x in enumerate(tips):
        out.append((x, tip_y[i]))
        if i < len(tips) - 1:
            out.append(((x + tips[i + 1]) / 2, valleys_y))
    return out


_OUTER = _arc(0, 0.06, 1.12, 1.04, -18, 198, 22)          # right-bottom -> over top -> left-bottom


def _bangs_zigzag(side_len=-0.45, tip_y=0.12, valley=0.42):
    left = [(-0.93, side_len), (-0.78, 0.05)]
    mid = _fringe([-0.6, -0.2, 0.2, 0.6], valley, [tip_y + 0.05, tip_y - 0.02, tip_y, tip_y + 0.06])
    right = [(0.8, 0.05), (0.95, side_len)]
    return _cat(_OUTER, left, mid, right)


def _hair_templates():
    T = {}
    # each style: back (behind everything), mid (after torso, before head), bangs (over face)
    short_back = _cat(_arc(0, 0.05, 1.15, 1.07, 200, -20, 18), [(1.02, -0.55), (0.5, -0.75), (-0.5, -0.75), (-1.02, -0.55)])
    T["bob"] = dict(
        back=[_cat(_arc(0, 0.05, 1.17, 1.08, 195, -15, 18), [(1.2, -0.55), (1.12, -0.86), (0.9, -0.95), (0.2, -0.9),
                                                            (-0.2, -0.9), (-0.9, -0.95), (-1.12, -0.86), (-1.2, -0.55)])],
        mid=[],
        bangs=[_cat(_OUTER, [(-1.14, -0.78), (-0.98, -0.9), (-0.8, -0.72), (-0.78, 0.25), (-0.4, 0.3), (0.0, 0.26),
                             (0.4, 0.3), (0.78, 0.25), (0.8, -0.72), (0.98, -0.9), (1.14, -0.78)])],
    )
    long_back = _cat(_arc(0, 0.05, 1.17, 1.08, 195, -15, 18),
                     [(1.22, -0.6), (1.3, -1.6), (1.38, -2.55), (1.0, -2.4), (0.6, -2.62), (0.2, -2.45), (-0.2, -2.62),
                      (-0.6, -2.45), (-1.0, -2.62), (-1.38, -2.5), (-1.3, -1.6), (-1.22, -0.6)])
    T["long_straight"] = dict(back=[long_back], mid=[], bangs=[_cat(
        _OUTER, [(-1.12, -0.6), (-1.05, -1.5), (-0.88, -1.35), (-0.8, -0.4), (-0.76, 0.08)],
        _fringe([-0.55, -0.15, 0.22, 0.58], 0.42, [0.16, 0.08, 0.1, 0.18]),
        [(0.76, 0.08), (0.8, -0.4), (0.88, -1.35), (1.05, -1.5), (1.12, -0.6)])])
    tail_r = _P((0.85, 0.55), (1.35, 0.62), (1.7, 0.25), (1.75, -0.5), (1.62, -1.3), (1.78, -1.85), (1.42, -2.2),
                (1.48, -1.6), (1.3, -0.9), (1.2, -0.2), (0.95, 0.2))
    T["twin_tails"] = dict(back=[short_back, tail_r, _mirror_x(tail_r)], mid=[], bangs=[_bangs_zigzag(-0.5, 0.1, 0.4)],
                           ties=[(0.98, 0.48), (-0.98, 0.48)])
    pony = _P((-0.55, 0.85), (-1.25, 0.95), (-1.75, 0.55), (-1.95, -0.2), (-1.85, -1.0), (-2.05, -1.55),
              (-1.6, -1.25), (-1.35, -0.55), (-1.15, 0.05), (-0.8, 0.35))
    T["ponytail"] = dict(back=[short_back, pony], mid=[], bangs=[_bangs_zigzag(-0.35, 0.14, 0.42)],
                         ties=[(-1.1, 0.72)])
    spikes = _P((1.0, -0.5), (1.2, 0.1), (1.55, 0.3), (1.12, 0.55), (1.38, 1.02), (0.8, 0.95), (0.78, 1.5),
                (0.35, 1.08), (-0.12, 1.62), (-0.3, 1.08), (-0.98, 1.45), (-0.9, 0.82), (-1.62, 0.78), (-1.15, 0.35),
                (-1.66, -0.08), (-1.1, -0.2), (-1.0, -0.55))
    T["spiky"] = dict(back=[spikes], mid=[], bangs=[_cat(
        _OUTER, [(-0.98, -0.55), (-0.78, 0.0)], [(-0.62, 0.0), (-0.45, 0.45), (-0.3, 0.02), (-0.05, 0.42), (0.15, -0.02),
                                                 (0.35, 0.42), (0.55, 0.0), (0.7, 0.4)], [(0.8, 0.0), (0.98, -0.55)])])
    messy_back = _cat(_arc(0, 0.05, 1.18, 1.1, 200, -20, 16),
                      [(1.12, -0.45), (1.3, -0.6), (1.0, -0.72), (0.3, -0.8), (-0.3, -0.8), (-1.0, -0.72), (-1.32, -0.58), (-1.12, -0.4)])
    ahoge = _P((0.05, 1.05), (0.25, 1.45), (0.55, 1.55), (0.35, 1.4), (0.2, 1.05))
    T["short_messy"] = dict(back=[messy_back, ahoge], mid=[], bangs=[_cat(
        _arc(0, 0.06, 1.14, 1.06, -22, 202, 22), [(-1.08, -0.45), (-0.9, -0.1), (-0.78, 0.15)],
        [(-0.6, 0.05), (-0.42, 0.42), (-0.2, 0.12), (-0.02, 0.45), (0.22, 0.08), (0.4, 0.46), (0.62, 0.1)],
        [(0.78, 0.15), (0.92, -0.1), (1.1, -0.45)])])
    T["bun"] = dict(back=[short_back], mid=[], bangs=[_cat(
        _OUTER, [(-0.95, -0.4), (-0.8, 0.1), (-0.5, 0.3), (-0.2, 0.45), (0.05, 0.5)],
        [(0.25, 0.3), (0.5, 0.2), (0.72, 0.1), (0.85, -0.1), (0.98, -0.45)])],
        buns=[(-0.25, 1.08, 0.44)])
    T["braids"] = dict(back=[short_back], mid=[], bangs=[_cat(
        _OUTER, [(-0.98, -0.55), (-0.8, 0.05)], _fringe([-0.6, -0.2, 0.2, 0.6], 0.4, [0.2, 0.18, 0.18, 0.2]),
        [(0.8, 0.05), (0.98, -0.55)])],
        braids=[1.0, -1.0])
    T["side_swept"] = dict(back=[_cat(_arc(0, 0.05, 1.15, 1.07, 200, -20, 18),
                                      [(1.05, -0.45), (0.7, -0.62), (0.2, -0.55), (-0.3, -0.72), (-0.75, -0.6), (-1.1, -0.5)])],
                           mid=[], bangs=[_cat(
        _arc(0, 0.06, 1.13, 1.06, -18, 198, 22), [(-0.96, -0.35), (-0.85, 0.1), (-0.72, 0.32), (-0.62, 0.02), (-0.45, 0.45),
                                                  (-0.25, 0.15), (-0.05, 0.48), (0.2, 0.18), (0.35, 0.42), (0.65, 0.06),
                                                  (0.76, 0.2), (0.97, -0.35)])])
    return T


HAIR = _hair_templates()
SHINE = _arc(0, 0.12, 0.78, 0.62, 125, 55, 9)      # the anime hair highlight, an arc on the bangs

# ---- accessories (head frame unless marked) ------------------------------------------
BOW_L = _P((0, 0), (-0.55, 0.32), (-0.6, -0.22))
STAR = _P(*[(0.22 * (1 if i % 2 == 0 else 0.45) * math.sin(math.radians(36 * i)),
             0.22 * (1 if i % 2 == 0 else 0.45) * math.cos(math.radians(36 * i))) for i in range(10)])
CAT_EAR = _P((-0.3, 0.0), (0.0, 0.62), (0.3, 0.0))
CAT_EAR_IN = _P((-0.16, 0.05), (0.0, 0.42), (0.16, 0.05))
CAP = _cat(_arc(0, 0.2, 1.15, 0.95, 5, 175, 14))
CAP_BRIM = _P((0.35, 0.42), (1.55, 0.38), (1.6, 0.28), (0.3, 0.24))
WITCH_HAT = _P((-0.9, 0.62), (-0.45, 1.3), (-0.2, 1.95), (-0.45, 2.25), (-0.85, 2.2), (-0.3, 2.45), (0.1, 2.05),
               (0.4, 1.3), (0.95, 0.62))
SUNHAT_CROWN = _cat(_arc(0, 0.62, 0.95, 0.62, 0, 180, 12))
HEART = _cat(_P((0, -1.0)), _arc(0.5, 0.3, 0.5, 0.5, -40, 180, 9), _arc(-0.5, 0.3, 0.5, 0.5, 0, 220, 9))
ZED = _P((-0.5, 0.5), (0.5, 0.5), (-0.5, -0.5), (0.5, -0.5))

# ---- outfits (body frame) -----------------------------------------------------------
TORSO = _P((-0.08, 0.215), (-0.03, 0.238), (0.03, 0.238), (0.08, 0.215), (0.093, 0.16), (0.086, 0.07),
           (0.096, -0.02), (-0.096, -0.02), (-0.086, 0.07), (-0.093, 0.16))
SKIRT_DRESS = _P((-0.086, 0.08), (0.086, 0.08), (0.175, -0.12), (0.12, -0.138), (0.06, -0.125), (0.0, -0.14),
                 (-0.06, -0.125), (-0.12, -0.138), (-0.175, -0.12))
SKIRT_ROBE = _P((-0.09, 0.1), (0.09, 0.1), (0.2, -0.2), (0.07, -0.215), (-0.07, -0.215), (-0.2, -0.2))
SKIRT_SAILOR = _P((-0.094, 0.03), (0.094, 0.03), (0.16, -0.1), (-0.16, -0.1))
SKIRT_KIMONO = _P((-0.093, 0.12), (0.093, 0.12), (0.118, -0.19), (-0.118, -0.19))
SKIRT_COAT = _P((-0.093, 0.1), (0.093, 0.1), (0.145, -0.15), (-0.145, -0.15))
SHORTS = _P((-0.098, 0.02), (0.098, 0.02), (0.112, -0.08), (0.015, -0.085), (0.0, -0.045), (-0.015, -0.085),
            (-0.112, -0.08))
BIB = _P((-0.062, 0.15), (0.062, 0.15), (0.068, 0.0), (-0.068, 0.0))
PANTS_TOP = _P((-0.098, 0.035), (0.098, 0.035), (0.104, -0.045), (-0.104, -0.045))
SAILOR_COLLAR = _P((-0.1, 0.22), (-0.03, 0.24), (0.0, 0.15), (0.03, 0.24), (0.1, 0.22), (0.097, 0.17), (0.0, 0.1),
                   (-0.097, 0.17))
KERCHIEF = _P((-0.035, 0.15), (0.035, 0.15), (0.0, 0.075))
V_SHIRT = _P((-0.033, 0.238), (0.033, 0.238), (0.0, 0.12))
TIE = _P((-0.012, 0.232), (0.012, 0.232), (0.02, 0.14), (0.0, 0.115), (-0.02, 0.14))
KIMONO_V = _P((-0.045, 0.238), (0.045, 0.238), (0.0, 0.11))
OBI = _P((-0.1, 0.095), (0.1, 0.095), (0.103, 0.025), (-0.103, 0.025))
OBI_KNOT = _P((-0.095, 0.085), (-0.16, 0.12), (-0.16, 0.0), (-0.095, 0.035))
HOOD = _P((-0.12, 0.2), (-0.17, 0.3), (-0.13, 0.38), (0.0, 0.4), (0.13, 0.38), (0.17, 0.3), (0.12, 0.2))
COLLAR_W = _P((-0.06, 0.238), (0.0, 0.2), (0.06, 0.238), (0.07, 0.205), (0.0, 0.17), (-0.07, 0.205))
LAPEL = _P((-0.05, 0.238), (0.0, 0.09), (0.05, 0.238))
SCARF = _P((-0.085, 0.205), (0.085, 0.205), (0.09, 0.26), (-0.09, 0.26))
SCARF_TAIL = _P((0.02, 0.215), (0.07, 0.215), (0.085, 0.07), (0.04, 0.075))
BACKPACK = _P((-0.17, 0.2), (-0.06, 0.21), (-0.06, 0.0), (-0.17, 0.01))
BROOM_STICK = (_P((-0.52, -0.02)), _P((0.46, 0.03)))
BROOM_BRISTLE = _P((-0.45, -0.015), (-0.7, 0.05), (-0.78, -0.02), (-0.74, -0.1), (-0.45, -0.035))

# per outfit: (layers under the head drawn in order, arm colours, leg colours); colour keys resolve per look
OUTFITS = {
    "dress": dict(layers=[("skirt", SKIRT_DRESS * [1.06, 1.0] + [0, -0.012], "bottom"), ("skirt", SKIRT_DRESS, "top"),
                          ("torso", TORSO, "top"), ("flat", COLLAR_W, "accent")],
                  arms=("top", "skin"), legs=("skin", "skin")),
    "witch_robe": dict(layers=[("skirt", SKIRT_ROBE, "top"), ("torso", TORSO, "top"), ("flat", COLLAR_W, "accent")],
                       arms=("top", "top"), legs=("skin", "skin")),
    "sailor_uniform": dict(layers=[("skirt", SKIRT_SAILOR, "bottom"), ("torso", TORSO, "top"),
                                   ("flat", SAILOR_COLLAR, "bottom"), ("flat", KERCHIEF, "accent")],
                           arms=("top", "skin"), legs=("skin", "white")),
    "blazer_uniform": dict(layers=[("torso", TORSO, "top"), ("flat", V_SHIRT, "white"), ("flat", TIE, "accent")],
                           arms=("top", "top"), legs=("bottom", "bottom")),
    "hoodie": dict(layers=[("back", HOOD, "top_dark"), ("torso", TORSO * [1.06, 1.0], "top"),
                           ("flat", PANTS_TOP * [0.98, 0.25] + [0, 0.0], "top_dark")],
                   arms=("top", "top"), legs=("bottom", "bottom"), strings=True),
    "overalls": dict(layers=[("torso", TORSO, "top"), ("flat", PANTS_TOP, "bottom"), ("flat", BIB, "bottom")],
                     arms=("top", "skin"), legs=("bottom", "bottom"), straps=True),
    "kimono": dict(layers=[("skirt", SKIRT_KIMONO, "top"), ("torso", TORSO, "top"), ("flat", KIMONO_V, "bottom"),
                           ("flat", OBI, "accent"), ("flat", OBI_KNOT, "accent")],
                   arms=("top", "top"), legs=("bottom", "white"), wide_sleeves=True),
    "tshirt_shorts": dict(layers=[("skirt", SHORTS, "bottom"), ("torso", TORSO, "top")],
                          arms=("top", "skin"), legs=("bottom", "skin"), print_=True),
    "coat": dict(layers=[("skirt", SKIRT_COAT, "top"), ("torso", TORSO, "top"), ("flat", LAPEL, "accent")],
                 arms=("top", "top"), legs=("bottom", "bottom"), buttons=True),
}


BERET = _arc(0, 0, 1.12, 0.42, 0, 360, 20) @ np.array([[math.cos(0.2), math.sin(0.2)], [-math.sin(0.2), math.cos(0.2)]]) + [-0.2, 0.9]
SPARK = _P((0, -1), (0.25, -0.25), (1, 0), (0.25, 0.25), (0, 1), (-0.25, 0.25), (-1, 0), (-0.25, -0.25))
DROP = _P((0, -0.09), (0.05, 0.0), (0, 0.04), (-0.05, 0.0)) * 0.6
U_ARC = _arc(0, 0, 1, 1, 200, 340, 7)        # lower half: closed eye (u), flipped: happy eye (^)
MOUTH_SMILE = _arc(0, 0.07, 0.13, 0.09, 210, 330, 5)
MOUTH_GRIN = _cat(_P((-0.16, 0.04), (0.16, 0.04)), _arc(0, 0.04, 0.16, 0.156, 0, -180, 8))
RICEBALL = _P((0, 0.055), (0.05, -0.035), (-0.05, -0.035))
NORI = _P((-0.025, -0.036), (0.025, -0.036), (0.025, -0.01), (-0.025, -0.01))
# the lines are drawn 8-connected: the canvas is supersampled and averaged afterwards,
# and anti-aliased thick polylines cost ~4x more in OpenCV (the fills stay anti-aliased)
FILL_LT = cv2.LINE_AA
INK_LT = cv2.LINE_8


def _dark(c, k=0.78):
    return (int(c[0] * k), int(c[1] * k), int(c[2] * k))


def _mix(a, b, t):
    return (int(a[0] * (1 - t) + b[0] * t), int(a[1] * (1 - t) + b[1] * t), int(a[2] * (1 - t) + b[2] * t))


def _light(c, t=0.45):
    return _mix(c, (255, 255, 255), t)


# ---- compiled shape lists -----------------------------------------------------------
_POLY, _FILL, _LINE, _LOOP, _ELL, _ELLF = range(6)


class _Ops:
    """Static shapes of one frame compiled into one point array: one matrix product per
    frame per draw, then one OpenCV call per fill/line."""

    def __init__(self):
        self.pts, self.ops, self.n = [], [], 0

    def add(self, op, P, color, arg=None):
        P = np.asarray(P, np.float64).reshape(-1, 2)
        self.ops.append((op, self.n, self.n + len(P), tuple(int(v) for v in color), arg))
        self.pts.append(P)
        self.n += len(P)

    def done(self):
        self.arr = np.concatenate(self.pts) if self.pts else np.zeros((0, 2))
        return self


def _run(img, M, unit, ops, ot):
    if not ops.ops:
        return
    q = (ops.arr @ (M[:, :2].T * MUL) + (M[:, 2] * MUL + 0.5)).astype(np.int32)
    ang = None
    for op, s, e, col, arg in ops.ops:
        if op == _POLY:
            pts = [q[s:e]]
            cv2.fillPoly(img, pts, col, FILL_LT, SHIFT)
            cv2.polylines(img, pts, True, INK, ot, INK_LT, SHIFT)
        elif op == _FILL:
            cv2.fillPoly(img, [q[s:e]], col, FILL_LT, SHIFT)
        elif op == _LINE or op == _LOOP:
            cv2.polylines(img, [q[s:e]], op == _LOOP, col, max(1, int(arg * unit + 0.5)) if arg else ot, INK_LT, SHIFT)
        else:
            if ang is None:
                ang = math.degrees(math.atan2(M[1, 0], M[0, 0]))
            c = (int(q[s, 0]), int(q[s, 1]))
            ax, ay = int(arg[0] * unit * MUL) + 1, int(arg[1] * unit * MUL) + 1
            if op == _ELL:
                cv2.ellipse(img, c, (ax + ot * 8, ay + ot * 8), ang, 0, 360, INK, -1, FILL_LT, SHIFT)
            cv2.ellipse(img, c, (ax, ay), ang, 0, 360, col, -1, FILL_LT, SHIFT)


@lru_cache(maxsize=256)
def _palette(spec: CharacterSpec, look: Look) -> dict:
    p = dict(skin=spec.skin, hair=spec.hair_color, eyes=spec.eyes, top=look.top, bottom=look.bottom,
             accent=look.accent, shoes=look.shoes, white=(246, 246, 250))
    for k in list(p):
        p[k + "_dark"] = _dark(p[k])
    p["hair_shine"] = _light(spec.hair_color, 0.5)
    p["hair_back"] = _mix(_dark(spec.hair_color, 0.8), (70, 60, 110), 0.12)
    p["blush"] = _mix(spec.skin, (255, 110, 130), 0.35)
    p["acc"] = {a.type: a.color for a in look.accessories}
    return p


@lru_cache(maxsize=512)
def _compile(spec: CharacterSpec, look: Look, sit: bool):
    pal = _palette(spec, look)
    acc = pal["acc"]
    outfit = OUTFITS[spec.outfit_type]
    hair = HAIR[spec.hair_style]
    # behind the body: head frame then body frame
    hb, bb = _Ops(), _Ops()
    for poly in hair["back"]:
        hb.add(_POLY, poly, pal["hair_back"])
    for (bx, by, br) in hair.get("buns", ()):
        hb.add(_ELL, (bx, by), pal["hair"], (br, br * 0.92))
        hb.add(_LINE, _arc(bx, by, br * 0.6, br * 0.55, 140, 60, 5), pal["hair_shine"], 0.07)
    for (tx, ty) in hair.get("ties", ()):
        hb.add(_ELL, (tx, ty), pal["accent"], (0.16, 0.12))
    for kind, P, col in outfit["layers"]:
        if kind == "back":
            bb.add(_POLY, P, pal[col])
    if "bag" in acc:
        bb.add(_POLY, BACKPACK, acc["bag"])
        bb.add(_LINE, BACKPACK[[0, 1]] * [1, 1] + [0, -0.05], _dark(acc["bag"]), 0.012)
    # the outfit (body frame), drawn after the legs
    bo = _Ops()
    for kind, P, col in outfit["layers"]:
        if kind == "back":
            continue
        if kind == "skirt" and sit:
            P = _sit_skirt(P)
        if kind in ("torso", "skirt"):
            sh = P.copy()
            sh[:, 0] = np.minimum(sh[:, 0], -0.035 if kind == "torso" else -0.06)
            bo.add(_FILL, P, pal[col])
            bo.add(_FILL, sh, _dark(pal[col]))
            bo.add(_LOOP, P, INK)
        else:
            bo.add(_POLY if col != "white" else _FILL, P, pal[col])
    if outfit.get("straps"):
        for sx in (-0.05, 0.05):
            bo.add(_LINE, _P((sx, 0.14), (sx * 1.3, 0.225)), pal["bottom"], 0.024)
            bo.add(_ELLF, (sx, 0.13), pal["accent"], (0.012, 0.012))
    if outfit.get("strings"):
        for sx in (-0.025, 0.025):
            bo.add(_LINE, _P((sx, 0.225), (sx * 1.2, 0.15)), pal["accent"], 0.012)
        bo.add(_LINE, _P((-0.05, 0.02), (-0.045, 0.09), (0.045, 0.09), (0.05, 0.02)), pal["top_dark"], None)
    if outfit.get("buttons"):
        for by in (0.07, 0.0, -0.07):
            bo.add(_ELLF, (0.035, by), pal["accent_dark"], (0.011, 0.011))
    if outfit.get("print_"):
        bo.add(_FILL, STAR * 0.22 + [0.01, 0.12], pal["accent"])
    if spec.outfit_type in ("sailor_uniform",):
        bo.add(_LINE, _P((-0.085, 0.2), (0.0, 0.125), (0.085, 0.2)), (250, 250, 250), 0.008)
    if "bag" in acc:
        bo.add(_LINE, _P((0.06, 0.22), (0.065, 0.08)), _dark(acc["bag"]), 0.02)
    if "scarf" in acc:
        bo.add(_POLY, SCARF, acc["scarf"])
        bo.add(_POLY, SCARF_TAIL, acc["scarf"])
        bo.add(_LINE, _P((0.03, 0.09), (0.08, 0.09)), _dark(acc["scarf"], 0.6), None)
    # in front of the face (head frame)
    hf = _Ops()
    if "cat_ears" in acc:
        for ex, a in ((0.58, -28), (-0.58, 28)):
            c_, s_ = math.cos(math.radians(a)), math.sin(math.radians(a))
            R = np.array([[c_, s_], [-s_, c_]])
            hf.add(_POLY, CAT_EAR @ R.T + (ex, 0.72), acc["cat_ears"])
            hf.add(_FILL, CAT_EAR_IN @ R.T + (ex, 0.72), (255, 170, 190))
    for poly in hair["bangs"]:
        hf.add(_POLY, poly, pal["hair"])
    hf.add(_LINE, SHINE, pal["hair_shine"], 0.07)
    for side in hair.get("braids", ()):
        for i in range(5):
            hf.add(_ELL, (side * (0.95 + 0.04 * i), -0.35 - 0.42 * i), pal["hair"] if i % 2 == 0 else pal["hair_back"],
                   (0.26, 0.24))
        hf.add(_POLY, _P((side * 1.05, -2.4), (side * 1.3, -2.4), (side * 1.25, -2.75), (side * 1.1, -2.7)), pal["hair"])
        hf.add(_ELL, (side * 1.15, -2.35), pal["accent"], (0.14, 0.1))
    if "headphones" in acc:
        c = acc["headphones"]
        band = _arc(0, 0.05, 1.22, 1.12, 5, 175, 12)
        hf.add(_LINE, band, INK, 0.28)
        hf.add(_LINE, band, c, 0.19)
        for side in (1, -1):
            hf.add(_ELL, (side * 1.08, -0.05), c, (0.24, 0.36))
            hf.add(_ELLF, (side * 1.12, -0.05), (90, 220, 210), (0.1, 0.2))
    if "ribbon" in acc:
        c, base = acc["ribbon"], (-0.35, 1.0)
        for side in (1, -1):
            hf.add(_POLY, BOW_L * [side * 1.05, 1.05] + base, c)
        hf.add(_ELL, base, _dark(c), (0.13, 0.13))
    if "star_clip" in acc:
        hf.add(_POLY, STAR * 1.2 + [0.6, 0.62], acc["star_clip"])
    if "flower" in acc:
        c, fc = acc["flower"], (-0.62, 0.7)
        for k in range(5):
            a = math.radians(90 + 72 * k)
            hf.add(_ELL, (fc[0] + 0.17 * math.cos(a), fc[1] + 0.17 * math.sin(a)), c, (0.13, 0.13))
        hf.add(_ELLF, fc, (255, 200, 60), (0.09, 0.09))
    if "cap" in acc:
        c = acc["cap"]
        hf.add(_POLY, CAP_BRIM, _dark(c, 0.8))
        hf.add(_POLY, _cat(CAP, [(-1.12, 0.32), (1.12, 0.32)]), c)
        hf.add(_ELLF, (0, 1.15), _dark(c), (0.1, 0.07))
    if "beret" in acc:
        hf.add(_POLY, BERET, acc["beret"])
        hf.add(_LINE, _P((-0.2, 1.3), (-0.15, 1.45)), INK, 0.08)
    if "sunhat" in acc:
        c = acc["sunhat"]
        hf.add(_ELL, (0, 0.58), c, (1.75, 0.36))
        hf.add(_POLY, SUNHAT_CROWN, c)
        band = pal["accent"] if pal["accent"] != (255, 255, 255) else (230, 80, 80)
        hf.add(_POLY, _P((-0.93, 0.62), (0.93, 0.62), (0.9, 0.8), (-0.9, 0.8)), band)
    if "witch_hat" in acc:
        c = acc["witch_hat"]
        hf.add(_ELL, (0, 0.6), c, (1.55, 0.32))
        hf.add(_POLY, WITCH_HAT, c)
        hf.add(_POLY, _P((-0.82, 0.62), (0.86, 0.62), (0.74, 0.85), (-0.7, 0.85)), pal["accent"])
    arms = (pal[outfit["arms"][0]], pal[outfit["arms"][1]])
    legs = (pal[outfit["legs"][0]], pal[outfit["legs"][1]])
    return pal, hb.done(), bb.done(), bo.done(), hf.done(), arms, legs, 1.5 if outfit.get("wide_sleeves") else 1.0


# ---- skeleton -----------------------------------------------------------------------
def _rot(deg):
    r = math.radians(deg)
    return math.cos(r), math.sin(r)


def _dir(deg):
    """Limb direction in the body frame for an angle (0 = down, +90 = forward)."""
    r = math.radians(deg)
    return math.sin(r), -math.cos(r)


def _limb_points(root, a1, a2, l1, l2):
    d1 = _dir(a1)
    j = (root[0] + d1[0] * l1, root[1] + d1[1] * l1)
    d2 = _dir(a2)
    return j, (j[0] + d2[0] * l2, j[1] + d2[1] * l2)


_JOINTS = ("ls", "le", "lh", "rs", "re", "rh", "lhip", "lk", "lf", "rhip", "rk", "rf", "hc", "n0", "n1")


def _skeleton(pose: Pose):
    """Joint positions in the body frame (before lean), in the order of _JOINTS."""
    ls = (SHOULDER[0], SHOULDER[1])
    rs = (-SHOULDER[0], SHOULDER[1])
    le, lh = _limb_points(ls, pose.lead_shoulder, pose.lead_shoulder + pose.lead_elbow, UPPER_ARM, FOREARM)
    re, rh = _limb_points(rs, pose.rear_shoulder, pose.rear_shoulder + pose.rear_elbow, UPPER_ARM, FOREARM)
    lk, lf = _limb_points((HIP_X, 0.0), pose.lead_hip, pose.lead_hip - pose.lead_knee, THIGH, SHIN)
    rk, rf = _limb_points((-HIP_X, 0.0), pose.rear_hip, pose.rear_hip - pose.rear_knee, THIGH, SHIN)
    ct, st = _rot(pose.head_tilt)
    hc = (st * HEAD_UP * HEAD_R, NECK_Y + ct * HEAD_UP * HEAD_R)
    return [ls, le, lh, rs, re, rh, (HIP_X, 0.0), lk, lf, (-HIP_X, 0.0), rk, rf, hc, (0.0, 0.2), (0.0, NECK_Y + 0.02)]


def _lowest(sk, pose: Pose) -> float:
    """How far the lowest body point is below the hips after lean (body units): the
    hips are lifted by this much so the character rests on the ground."""
    c, s = _rot(pose.lean)
    q = pose.squash
    lk, lf, rk, rf, hc = sk[7], sk[8], sk[10], sk[11], sk[12]
    pts = [(lf[0], lf[1] - 0.028), (rf[0], rf[1] - 0.028), (lk[0], lk[1] - 0.03), (rk[0], rk[1] - 0.03),
           (0.0, -0.05), (0.09, 0.0), (-0.09, 0.0), (0.09, 0.22), (-0.09, 0.22), (hc[0], hc[1] - 0.5 * HEAD_R)]
    if abs(pose.lean) > 45:
        pts += [(hc[0] + 0.5 * HEAD_R, hc[1]), (hc[0] - 0.5 * HEAD_R, hc[1])]
    return -min(-x * s + y * c * q for x, y in pts)


def _sit_skirt(P):
    Q = P.copy()
    low = Q[:, 1] < 0.02
    Q[low, 0] = Q[low, 0] + 0.5 * (0.02 - Q[low, 1])
    Q[low, 1] = 0.02 + (Q[low, 1] - 0.02) * 0.35
    return Q


def _i(p):
    return (int(p[0] * MUL + 0.5), int(p[1] * MUL + 0.5))


def _disc(img, c, r, col, ot, ry=None, ang=0.0):
    """Outlined filled ellipse: an ink ellipse, then the colour ellipse inside it."""
    cc = _i(c)
    ax, ay = int(r * MUL) + 1, int((r if ry is None else ry) * MUL) + 1
    cv2.ellipse(img, cc, (ax + ot * 8, ay + ot * 8), ang, 0, 360, INK, -1, FILL_LT, SHIFT)
    cv2.ellipse(img, cc, (ax, ay), ang, 0, 360, col, -1, FILL_LT, SHIFT)


def _limb(img, a, b, c, col_up, col_lo, w, ot):
    """Two-segment limb with an ink outline and round joints."""
    w_ = max(1, int(w + 0.5))
    pa, pb, pc = _i(a), _i(b), _i(c)
    cv2.polylines(img, [np.array([pa, pb, pc], np.int32)], False, INK, w_ + 2 * ot, INK_LT, SHIFT)
    if col_up == col_lo:
        cv2.polylines(img, [np.array([pa, pb, pc], np.int32)], False, col_up, w_, INK_LT, SHIFT)
    else:
        cv2.line(img, pb, pc, col_lo, max(1, int(w * 0.9 + 0.5)), INK_LT, SHIFT)
        cv2.line(img, pa, pb, col_up, w_, INK_LT, SHIFT)


# ---- the character ------------------------------------------------------------------
def body_matrix(spec: CharacterSpec, pose: Pose, x: float, ground_y: float, scale: float) -> np.ndarray:
    """(2, 3) float64: where ``draw_character`` puts the body frame (origin at the hips, y up, body units) on the
    canvas: canvas point = M[:, :2] @ body point + M[:, 2]. The pose's lean, squash, bob and the lift that keeps
    the lowest point on the ground are in it; the limbs and the head are drawn in this frame (the sprite animator
    learns to move a whole body along it: ``world/sprite_tracks.py``)."""
    H = float(scale) * spec.height
    return _body_matrix(_skeleton(pose), pose, x, ground_y, H, max(1, int(H * 0.017 + 0.5)))


def _body_matrix(sk, pose: Pose, x: float, ground_y: float, H: float, ot: int) -> np.ndarray:
    """``body_matrix`` from the pose's skeleton, the character's pixel height and its outline width."""
    Y = ground_y - H * (_lowest(sk, pose) + pose.bob) - ot     # the ink line rests on the ground too
    c, s = _rot(pose.lean)
    f, q = float(pose.facing), pose.squash
    return np.array([[f * H * c, f * H * s * q, x], [H * s, -H * c * q, Y]])


def draw_character(canvas: np.ndarray, spec: CharacterSpec, look: Look | None, pose: Pose, x: float,
                   ground_y: float, scale: float, water_y: float | None = None) -> None:
    """Draw one character in place on an HxWx3 uint8 RGB canvas.

    x: horizontal centre (pixels); ground_y: where the feet stand (pixels);
    scale: pixel height of a height-1.0 character (the spec's height multiplies it).
    The lowest body point rests on ground_y (pose.bob lifts it). water_y: if given and
    pose.submerge > 0, the character is moved vertically so that `submerge` of its
    height is below this line, and its underwater part is faded into what the canvas
    showed there (swimming). Without water_y a submerged pose draws its own ripple.
    """
    if look is None:
        look = default_look(spec)
    pal, hb, bb, bo, hf, arms, legs, sleeve = _compile(spec, look, bool(pose.sit))
    H = float(scale) * spec.height
    ot = max(1, int(H * 0.017 + 0.5))
    img = canvas
    sk = _skeleton(pose)
    M = _body_matrix(sk, pose, x, ground_y, H, ot)
    q = pose.squash
    hs = HEAD_R
    ct, st = _rot(pose.head_tilt)
    hcb = sk[12]
    Mh = M @ np.array([[hs * ct, hs * st, hcb[0]], [-hs * st, hs * ct, hcb[1]], [0, 0, 1.0]])
    head_px = H * HEAD_R
    head_ang = math.degrees(math.atan2(Mh[1, 0], Mh[0, 0]))

    saved = None
    if pose.submerge > 0:
        hcy = Mh[1, 2]
        top = hcy - head_px * 1.2
        bottom = max(ground_y, hcy + 0.2 * H)
        wl = top + (1.0 - pose.submerge) * (bottom - top)
        if water_y is not None:
            M[1, 2] += water_y - wl
            Mh[1, 2] += water_y - wl
            wl = water_y
        x0, x1 = int(max(0, x - 0.9 * H)), int(min(canvas.shape[1], x + 0.9 * H))
        y0 = int(max(0, math.ceil(wl)))
        if x1 > x0 and y0 < canvas.shape[0]:
            saved = (y0, x0, x1, canvas[y0:, x0:x1].copy(), wl)

    J = np.asarray(sk) @ M[:, :2].T + M[:, 2]
    ls, le, lh, rs, re, rh, lhip, lk, lf, rhip, rk, rf, hc, n0, n1 = J
    fwd = M[:, 0] / H                       # unit vector of the body's forward axis on screen
    up = -M[:, 1] / (H * q)

    # 1. behind the body
    _run(img, Mh, head_px, hb, ot)
    _run(img, M, H, bb, ot)
    aw = ARM_W * sleeve * H
    dk = _dark
    _limb(img, rs, re, rh, dk(arms[0]), dk(arms[1]), aw, ot)
    _disc(img, rh, HAND_R * H, dk(pal["skin"]), ot)
    _leg(img, rhip, rk, rf, dk(legs[0]), dk(legs[1]), dk(pal["shoes"]), H, ot, fwd)
    if pose.on_broom or pose.item == "broom":
        _broom(img, M, lh, pose, H, ot, fwd, up)
    _leg(img, lhip, lk, lf, legs[0], legs[1], pal["shoes"], H, ot, fwd)

    # 2. the outfit
    cv2.line(img, _i(n0), _i(n1), pal["skin_dark"], max(1, int(0.06 * H)), INK_LT, SHIFT)
    _run(img, M, H, bo, ot)

    # 3. the head: skin, face, bangs and hats
    cc = _i(hc)
    ax, ay = int(head_px * MUL), int(head_px * HEAD_RY * MUL)
    cv2.ellipse(img, cc, (ax + ot * 8, ay + ot * 8), head_ang, 0, 360, INK, -1, FILL_LT, SHIFT)
    cv2.ellipse(img, cc, (ax, ay), head_ang, 0, 360, pal["skin"], -1, FILL_LT, SHIFT)
    _face(img, Mh, pose, pal, head_px, head_ang, ot)
    _run(img, Mh, head_px, hf, ot)

    # 4. in front: held items and the lead arm
    if pose.item == "food":
        fc = lh + up * 0.035 * H
        tri = RICEBALL * [H, -H] + fc
        pts = [(tri * MUL + 0.5).astype(np.int32)]
        cv2.fillPoly(img, pts, WHITE, FILL_LT, SHIFT)
        cv2.polylines(img, pts, True, INK, ot, INK_LT, SHIFT)
        cv2.fillPoly(img, [((NORI * [H, -H] + fc) * MUL + 0.5).astype(np.int32)], (30, 45, 40), FILL_LT, SHIFT)
    _limb(img, ls, le, lh, arms[0], arms[1], aw, ot)
    _disc(img, lh, HAND_R * H, pal["skin"], ot)
    if pose.item == "book":
        _book(img, lh, rh, pose, H, ot)

    if pose.effect != "none":
        _effect(img, pose, hc, head_px, H, lf, rf, ot)

    if saved is not None:
        y0, x0, x1, under, wl = saved
        reg = canvas[y0:, x0:x1]
        cv2.addWeighted(under, 0.62, reg, 0.38, 0, dst=reg)
        cv2.ellipse(img, _i((x, wl)), (int(0.42 * H * MUL), int(0.05 * H * MUL)), 0, 0, 360, (235, 245, 255),
                    max(1, ot), INK_LT, SHIFT)


def _leg(img, hip, k, f, c_up, c_lo, shoe, H, ot, fwd):
    _limb(img, hip, k, f, c_up, c_lo, LEG_W * H, ot)
    toe = f + fwd * 0.022 * H
    _disc(img, toe, 0.046 * H, shoe, ot, 0.028 * H, math.degrees(math.atan2(fwd[1], fwd[0])))


def _broom(img, M, lh, pose, H, ot, fwd, up):
    if pose.on_broom:
        a, b = BROOM_STICK[0][0] @ M[:, :2].T + M[:, 2], BROOM_STICK[1][0] @ M[:, :2].T + M[:, 2]
        br = BROOM_BRISTLE @ M[:, :2].T + M[:, 2]
    else:
        a, b = lh - up * 0.42 * H, lh + up * 0.36 * H
        br = np.array([a, a - up * 0.03 * H + fwd * 0.05 * H, a - up * 0.22 * H + fwd * 0.08 * H,
                       a - up * 0.24 * H, a - up * 0.22 * H - fwd * 0.08 * H, a - up * 0.03 * H - fwd * 0.05 * H])
    w = max(1, int(0.028 * H + 0.5))
    cv2.line(img, _i(a), _i(b), INK, w + 2 * ot, INK_LT, SHIFT)
    cv2.line(img, _i(a), _i(b), (150, 96, 52), w, INK_LT, SHIFT)
    pts = [(br * MUL + 0.5).astype(np.int32)]
    cv2.fillPoly(img, pts, (226, 184, 92), FILL_LT, SHIFT)
    cv2.polylines(img, pts, True, INK, ot, INK_LT, SHIFT)
    cv2.line(img, _i(br[0] * 0.7 + br.mean(0) * 0.3), _i(br[-1] * 0.7 + br.mean(0) * 0.3), (190, 60, 50),
             max(1, int(0.025 * H)), INK_LT, SHIFT)


def _book(img, lh, rh, pose, H, ot):
    c = (lh + rh) / 2 if pose.lead_shoulder > 40 and pose.rear_shoulder > 40 else lh
    c = c + [0, -0.02 * H]
    w, h = 0.12 * H, 0.085 * H
    f = pose.facing
    cover = _P((-w * 1.04, -h), (w * 1.04, -h), (w * 1.04, h * 1.15), (-w * 1.04, h * 1.15)) + c
    pts = [(cover * MUL + 0.5).astype(np.int32)]
    cv2.fillPoly(img, pts, (170, 60, 60), FILL_LT, SHIFT)
    cv2.polylines(img, pts, True, INK, ot, INK_LT, SHIFT)
    for side in (-1, 1):
        page = _P((0, -h * 0.85), (side * w * 0.96, -h * 0.95), (side * w * 0.96, h * 0.95), (0, h * 1.05)) + c
        cv2.fillPoly(img, [(page * MUL + 0.5).astype(np.int32)], WHITE, FILL_LT, SHIFT)
        for ly in (-0.45, -0.1, 0.25, 0.6):
            cv2.line(img, _i(c + (side * w * 0.2, ly * h)), _i(c + (side * w * 0.8, ly * h)), (160, 160, 178), 1, INK_LT, SHIFT)
    # a page turning across the book: the visible motion of reading
    px = -f * w * 0.92 * math.cos(math.pi * (pose.effect_phase % 1.0))
    pg = _P((0, -h * 0.85), (px, -h * 0.95), (px, h * 0.95), (0, h * 1.05)) + c
    pts = [(pg * MUL + 0.5).astype(np.int32)]
    cv2.fillPoly(img, pts, (236, 236, 244), FILL_LT, SHIFT)
    cv2.polylines(img, pts, True, (120, 120, 140), 1, INK_LT, SHIFT)


def _face(img, Mh, pose, pal, head_px, ang, ot):
    fs = 0.16 + 0.42 * max(-1.0, min(1.0, pose.head_turn))
    ey = -0.2
    exs = (fs + 0.4, fs - 0.4)
    fores = [math.sqrt(max(0.08, 1 - min(0.96, abs(e)) ** 2)) for e in exs]
    mx, my = fs * 1.05, -0.6
    # every face anchor in one product: eye, iris, highlight, blush (x2), lash, mouth
    P = np.array([(exs[0], ey), (exs[0], ey - 0.05), (exs[0] + 0.06, ey + 0.1), (exs[0] + 0.05, -0.5),
                  (exs[1], ey), (exs[1], ey - 0.05), (exs[1] + 0.06, ey + 0.1), (exs[1] - 0.05, -0.5),
                  (exs[0], ey + 0.06), (exs[1], ey + 0.06), (mx, my)])
    A = P @ Mh[:, :2].T + Mh[:, 2]
    hp8 = head_px * MUL
    e_state = pose.eyes
    for k in (0, 1):
        fore = fores[k]
        o = 4 * k
        ew, eh = 0.2 * fore * hp8, 0.27 * hp8
        if e_state == "open" or e_state == "wide":
            big = 1.12 if e_state == "wide" else 1.0
            cv2.ellipse(img, _i(A[8 + k]), (int(ew * big * 1.08) + ot * 4, int(eh * big) + ot * 4), ang, 0, 360, INK, -1, FILL_LT, SHIFT)
            if e_state == "wide":
                cv2.ellipse(img, _i(A[o]), (int(ew * 0.95), int(eh)), ang, 0, 360, WHITE, -1, FILL_LT, SHIFT)
                cv2.ellipse(img, _i(A[o]), (int(ew * 0.5), int(eh * 0.55)), ang, 0, 360, pal["eyes"], -1, FILL_LT, SHIFT)
            else:
                cv2.ellipse(img, _i(A[o + 1]), (int(ew * 0.8), int(eh * 0.76)), ang, 0, 360, pal["eyes"], -1, FILL_LT, SHIFT)
                cv2.ellipse(img, _i(A[o + 1]), (int(ew * 0.42), int(eh * 0.42)), ang, 0, 360, pal["eyes_dark"], -1, FILL_LT, SHIFT)
            cv2.ellipse(img, _i(A[o + 2]), (int(ew * 0.4) + 1, int(eh * 0.3) + 1), ang, 0, 360, WHITE, -1, FILL_LT, SHIFT)
        else:
            sgn = 1.0 if e_state == "closed" else -1.0
            arc = U_ARC * [0.18 * fore, 0.12 * sgn] + [exs[k], ey + (0.04 if sgn > 0 else -0.06)]
            cv2.polylines(img, [((arc @ Mh[:, :2].T + Mh[:, 2]) * MUL + 0.5).astype(np.int32)], False, INK, ot + 1,
                          INK_LT, SHIFT)
        bw = 0.15 * fore * hp8 * (1.3 if pose.blush else 1.0)
        cv2.ellipse(img, _i(A[o + 3]), (int(bw) + 1, int(0.07 * hp8) + 1), ang, 0, 360, pal["blush"], -1, FILL_LT, SHIFT)
    if "glasses" in pal["acc"]:
        gc = pal["acc"]["glasses"]
        for k in (0, 1):
            cv2.ellipse(img, _i(A[4 * k]), (int(0.28 * fores[k] * hp8), int(0.28 * hp8)), ang, 0, 360, gc, max(1, ot),
                        INK_LT, SHIFT)
        br = (_P((fs - 0.12, ey + 0.05), (fs + 0.12, ey + 0.05)) @ Mh[:, :2].T + Mh[:, 2])
        cv2.line(img, _i(br[0]), _i(br[1]), gc, ot, INK_LT, SHIFT)
    m = pose.mouth
    mc = A[10]
    if m == "closed":
        seg = _P((mx - 0.08, my), (mx + 0.08, my)) @ Mh[:, :2].T + Mh[:, 2]
        cv2.line(img, _i(seg[0]), _i(seg[1]), INK, ot, INK_LT, SHIFT)
    elif m == "smile":
        arc = (MOUTH_SMILE + (mx, my)) @ Mh[:, :2].T + Mh[:, 2]
        cv2.polylines(img, [(arc * MUL + 0.5).astype(np.int32)], False, INK, ot, INK_LT, SHIFT)
    elif m == "grin":
        poly = (MOUTH_GRIN + (mx, my)) @ Mh[:, :2].T + Mh[:, 2]
        pts = [(poly * MUL + 0.5).astype(np.int32)]
        cv2.fillPoly(img, pts, (150, 40, 50), FILL_LT, SHIFT)
        cv2.polylines(img, pts, True, INK, ot, INK_LT, SHIFT)
    else:
        sx, sy = {"open": (0.09, 0.08), "talk": (0.12, 0.14)}[m]
        cv2.ellipse(img, _i(mc), (int(sx * hp8) + ot * 8, int(sy * hp8) + ot * 8), ang, 0, 360, INK, -1, FILL_LT, SHIFT)
        cv2.ellipse(img, _i(mc), (int(sx * hp8), int(sy * hp8)), ang, 0, 360, (150, 40, 50), -1, FILL_LT, SHIFT)


def _effect(img, pose, hc, head_px, H, lf, rf, ot):
    t = pose.effect_phase % 1.0
    f = pose.facing
    e = pose.effect

    def poly(P, col, outline=True):
        pts = [(P * MUL + 0.5).astype(np.int32)]
        cv2.fillPoly(img, pts, col, FILL_LT, SHIFT)
        if outline:
            cv2.polylines(img, pts, True, INK, ot, INK_LT, SHIFT)

    if e == "zzz":
        for k in range(3):
            u = (t + k / 3.0) % 1.0
            sz = (0.08 + 0.08 * u) * H
            c = hc + [f * (0.9 + 1.0 * u) * head_px, -(0.9 + 1.5 * u) * head_px]
            cv2.polylines(img, [((ZED * sz + c) * MUL + 0.5).astype(np.int32)], False, (60, 70, 150), ot + 1, INK_LT, SHIFT)
    elif e == "notes":
        for k in range(2):
            u = (t + k / 2.0) % 1.0
            c = hc + [(1.3 - 2.6 * k) * head_px + 0.25 * head_px * math.sin(6.28 * u), -(0.8 + 1.4 * u) * head_px]
            cv2.ellipse(img, _i(c), (int(0.035 * H * MUL), int(0.026 * H * MUL)), -20, 0, 360, (70, 50, 120), -1, FILL_LT, SHIFT)
            stem = _P((0.03 * H, 0), (0.03 * H, -0.13 * H), (0.07 * H, -0.1 * H)) + c
            cv2.polylines(img, [(stem * MUL + 0.5).astype(np.int32)], False, (70, 50, 120), ot, INK_LT, SHIFT)
    elif e == "hearts":
        for k in range(2):
            u = (t + k / 2.0) % 1.0
            c = hc + [(0.6 - 1.2 * k) * head_px * 1.6, -(1.1 + 1.3 * u) * head_px]
            sz = 0.05 * H * (0.7 + 0.5 * u)
            poly(HEART * [sz, -sz] + c, (245, 80, 110))
    elif e == "sweat":
        c = hc + [-f * 1.05 * head_px, -(0.5 - 0.4 * t) * head_px]
        poly(DROP * H + c, (150, 210, 255))
    elif e == "sparkle":
        for k in range(3):
            u = (t + k / 3.0) % 1.0
            a = 2 * math.pi * (k / 3.0 + 0.3 * t)
            c = hc + [math.cos(a) * 1.6 * head_px, math.sin(a) * 1.3 * head_px]
            poly(SPARK * (0.06 * H * (0.5 + abs(math.sin(math.pi * u)))) + c, (255, 236, 120), False)
    elif e == "dust":
        foot = (lf + rf) / 2
        for k in range(3):
            u = (t + k / 3.0) % 1.0
            c = foot + [-f * (0.1 + 0.25 * u) * H, -0.04 * H * u]
            r = 0.05 * H * (0.4 + u)
            cv2.ellipse(img, _i(c), (int(r * MUL), int(r * 0.75 * MUL)), 0, 0, 360, (236, 230, 214), -1, FILL_LT, SHIFT)


PORTRAIT_SCALE = 0.78 / 1.15  # a height-1.0 character's scale in a portrait, as a fraction of its side


def character_portrait(spec: CharacterSpec, look: Look | None = None, size: int = 128,
                       background: tuple[int, int, int] = (214, 234, 248), pose: Pose | None = None) -> np.ndarray:
    """A square RGB portrait of a standing character (for cast sheets and references)."""
    ss = 2
    W = size * ss
    img = np.empty((W, W, 3), np.uint8)
    img[:] = background
    img[int(W * 0.9):] = _mix(background, (120, 170, 90), 0.7)
    scale = W * PORTRAIT_SCALE
    draw_character(img, spec, look, pose or Pose(head_turn=-0.15), W / 2, W * 0.93, scale)
    return cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
