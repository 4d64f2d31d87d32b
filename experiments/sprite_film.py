"""A film in another style than the world's, with its truth known: Kenney's animated characters (CC0) and
Luis Zuno's pixel-art streets, as shipped inside the PyPI package ``arcade``, cut into shots.

    pip download arcade==3.3.3 --no-deps -d /tmp/arcade && unzip -q /tmp/arcade/arcade-3.3.3-*.whl -d /tmp/arcade
    .venv/bin/python experiments/sprite_film.py film --assets /tmp/arcade/arcade/resources/assets/images \\
        --sessions 40 --seed 0 --out runs/sprite/film
    bin/animegamer ingest runs/sprite/film/film.mp4 --out runs/sprite/ingested
    .venv/bin/python experiments/sprite_film.py grade runs/sprite/film runs/sprite/ingested

The world's own films (``bench-ingest``, ``film_finetune.py``) are drawn by the generator the model was
trained on. A researcher's film is not. This one is: flat vector characters with no outlines, pixel-art and
tile-built places, a 24 fps film animated on twos and threes, hard cuts, sessions of one character.

``film`` writes ``film.mp4``, ``truth.json`` (every shot: its first frame, length, session, characters,
action, place, time of day, camera), ``annotations.csv`` (what a person would write of each shot, by time
range: characters, motion, place, time; state changes left unknown: a film does not show stamina) and
``references/NAME.png`` (each character's standing sprite, the picture a person would give
``annotate --references`` or ``characters add --image``).

``grade`` compares an ingest of the film with its truth: the cuts found (precision, recall by kind of cut),
the clips that start on a shot, the motion level measured per action, and, after ``ingest --annotations``,
the annotated fields; with ``--names FILE`` (``annotate --references``' output) how often a clip's
first name is right.

Nothing of arcade is copied into this repository: the pictures are read from the package's files.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from animegamer.core.atomic_io import write_json, write_text
from animegamer.core.video_io import save_mp4
from animegamer.ingest.annotations import COLUMNS
from animegamer.world.dataset import WorldDataset

W, H, FPS = 288, 192, 24
FEET = {"city": 176, "highway": 150}  # the street's line in the pixel-art places; tile places: GROUND
GROUND = 160
CHARACTERS = {"Ada": "female_adventurer/femaleAdventurer", "Max": "male_adventurer/maleAdventurer",
              "Mia": "female_person/femalePerson", "Leo": "male_person/malePerson", "Robo": "robot/robot",
              "Zed": "zombie/zombie"}
TILE_PLACES = {  # ground tile prefix, far hills' colour, decorations
    "grassland": ("grass", (112, 170, 122), ("bush", "grass_sprout", "mushroomRed", "signRight", "plantPurple")),
    "desert": ("sand", (222, 190, 132), ("cactus", "rock", "signLeft")),
    "snowfield": ("snow", (196, 212, 236), ("snow_pile", "rock", "boxCrate")),
    "castle": ("stone", (118, 116, 138), ("torch1", "boxCrate_double", "lockYellow", "brickGrey")),
}
PLACES = {**{p: ("day", "sunset", "night") for p in TILE_PLACES}, "city": ("night",), "highway": ("sunset",)}
SKY = {"day": ((118, 186, 250), (206, 232, 252)), "sunset": ((120, 80, 150), (250, 170, 110)),
       "night": ((14, 18, 48), (48, 52, 102))}
TINT = {"day": (1.0, 1.0, 1.0), "sunset": (1.05, 0.86, 0.76), "night": (0.48, 0.52, 0.78)}
# action: (world verb or "" where the world has none, what a person writes, weight in the draw)
ACTIONS = {"walk": ("walk", "walk", 3), "run": ("run", "run", 3), "jump": ("jump", "jump", 2),
           "fall": ("fall", "fall", 1), "climb": ("", "climb a ladder", 1), "stand": ("", "stand still", 2)}


@dataclass
class Shot:
    start: int  # first frame in the film
    frames: int
    session: int
    characters: list[str]
    action: str
    place: str
    time: str
    camera: str  # static, pan, follow
    seed: int


class Art:
    """The package's pictures, read once."""

    def __init__(self, root: Path) -> None:
        if not (root / "animated_characters").is_dir():
            raise SystemExit(f"{root} is not arcade's resources/assets/images (no animated_characters/ in it)")
        self.root = root
        self.sprites = {name: self._character(stem) for name, stem in CHARACTERS.items()}
        self.tiles: dict[str, np.ndarray] = {}

    def _rgba(self, rel: str, scale: float = 1.0, nearest: bool = False) -> np.ndarray:
        im = Image.open(self.root / rel).convert("RGBA")
        if scale != 1.0:
            im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))),
                           Image.NEAREST if nearest else Image.LANCZOS)
        return np.asarray(im).astype(np.float32) / 255.0

    def _character(self, stem: str) -> dict[str, np.ndarray]:
        poses = ["idle", "jump", "fall", "climb0", "climb1"] + [f"walk{k}" for k in range(8)]
        return {p: self._rgba(f"animated_characters/{stem}_{p}.png", 0.62) for p in poses}

    def tile(self, name: str, size: int = 40) -> np.ndarray:
        if name not in self.tiles:
            self.tiles[name] = self._rgba(f"tiles/{name}.png", size / 128)
        return self.tiles[name]

    def layer(self, rel: str, scale: float = 1.0) -> np.ndarray:
        key = f"{rel}@{scale}"
        if key not in self.tiles:
            self.tiles[key] = self._rgba(rel, scale, nearest=True)
        return self.tiles[key]


def paste(canvas: np.ndarray, sprite: np.ndarray, x: float, y: float, tint: tuple[float, ...] = (1, 1, 1)) -> None:
    """Alpha-composite ``sprite`` (RGBA float) with its top-left at (x, y), clipped to the canvas."""
    x, y = int(round(x)), int(round(y))
    h, w = sprite.shape[:2]
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, canvas.shape[1]), min(y + h, canvas.shape[0])
    if x0 >= x1 or y0 >= y1:
        return
    s = sprite[y0 - y:y1 - y, x0 - x:x1 - x]
    a = s[..., 3:4]
    canvas[y0:y1, x0:x1] = canvas[y0:y1, x0:x1] * (1 - a) + s[..., :3] * np.asarray(tint, np.float32) * a


def tiled(canvas: np.ndarray, layer: np.ndarray, offset: float, y: int = 0) -> None:
    """``layer`` repeated along x, shifted left by ``offset`` pixels (parallax)."""
    w = layer.shape[1]
    x = -(offset % w)
    while x < canvas.shape[1]:
        paste(canvas, layer, x, y)
        x += w


def background(art: Art, place: str, time: str, cam: float) -> np.ndarray:
    canvas = np.zeros((H, W, 3), np.float32)
    if place == "city":
        for rel, par in (("far-buildings", 0.15), ("back-buildings", 0.4), ("foreground", 1.0)):
            tiled(canvas, art.layer(f"cybercity_background/{rel}.png"), cam * par)
        return canvas
    if place == "highway":
        for rel, par in (("back", 0.0), ("sun", 0.05), ("buildings", 0.3), ("palms", 0.6), ("highway", 1.0)):
            tiled(canvas, art.layer(f"miami_synth_parallax/layers/{rel}.png", 0.8), cam * par)
        return canvas
    top, bottom = (np.asarray(c, np.float32) / 255 for c in SKY[time])
    canvas[:] = (top + (bottom - top) * np.linspace(0, 1, H)[:, None, None])
    if time == "night":  # the same stars every night
        rng = np.random.default_rng(7)
        for sx, sy in zip(rng.integers(0, 4 * W, 60), rng.integers(0, GROUND - 60, 60)):
            px = int((sx - cam * 0.05) % (4 * W))
            if px < W:
                canvas[sy, px] = 0.95
    prefix, hills, decor = TILE_PLACES[place]
    tint = TINT[time]
    xs = np.arange(W) + cam * 0.3  # far hills: a fixed silhouette of the place
    rng = np.random.default_rng(sum(map(ord, place)))  # the same place every time it is shown
    phase = rng.uniform(0, 6.28, 3)
    ridge = GROUND - 34 - 16 * np.sin(xs / 53 + phase[0]) - 9 * np.sin(xs / 21 + phase[1]) - 5 * np.sin(xs / 9 + phase[2])
    colour = np.asarray(hills, np.float32) / 255 * np.asarray(tint, np.float32)
    below = (np.arange(H)[:, None] >= ridge[None, :]) & (np.arange(H)[:, None] < GROUND)
    canvas[below] = colour
    # decorations: one fixed layout per place, every 70-140 px of the place's x
    layout = np.cumsum(rng.integers(70, 140, 80)) - 2000
    kinds = rng.integers(0, len(decor), 80)
    for px, k in zip(layout, kinds):
        sprite = art.tile(decor[k], 44)
        paste(canvas, sprite, px - cam, GROUND - sprite.shape[0] + 4, tint)
    top_tile, centre = art.tile(f"{prefix}Mid"), art.tile(f"{prefix}Center")
    for x in range(-int(cam) % 40 - 40, W, 40):
        paste(canvas, top_tile, x, GROUND - 4, tint)
        paste(canvas, centre, x, GROUND + 36, tint)
    return canvas


def character_frame(art: Art, name: str, action: str, t: int, rate: int) -> tuple[np.ndarray, float]:
    """The sprite at frame ``t`` and its height above the ground."""
    pose = art.sprites[name]
    if action in ("walk", "run"):
        return pose[f"walk{(t // rate) % 8}"], 0.0
    if action == "jump":  # crouch 6 frames, then 18 in the air
        k = t % 24
        if k < 6:
            return pose["idle"], 0.0
        u = (k - 6) / 18
        return pose["jump" if u < 0.5 else "fall"], 150 * u * (1 - u)
    if action == "fall":  # from above the frame onto the ground, then standing
        k = t % 60
        drop = max(0.0, 1 - (k / 22) ** 2) * 170
        return pose["fall" if drop > 0 else "idle"], drop
    if action == "climb":
        return pose[f"climb{(t // 6) % 2}"], 0.0
    return pose["idle"], float(t // 12 % 2)  # stand: breathing


def render_shot(art: Art, shot: Shot) -> np.ndarray:
    rng = np.random.default_rng(shot.seed)
    direction = 1 if rng.random() < 0.5 else -1
    speed = {"walk": 1.6, "run": 4.2, "climb": 0.0}.get(shot.action, 0.0) * direction
    rate = 2 if shot.action == "run" else 3
    x0 = float(rng.uniform(-40, 40))
    pan = float(rng.choice([-1.8, -1.2, 1.2, 1.8]))
    feet = FEET.get(shot.place, GROUND)
    tint = TINT[shot.time] if shot.place in TILE_PLACES else (0.85, 0.8, 0.95)
    frames = np.zeros((shot.frames, H, W, 3), np.uint8)
    for t in range(shot.frames):
        lead_x = x0 + speed * t
        cam = {"static": -W / 2, "pan": -W / 2 + pan * t, "follow": lead_x - W / 2}[shot.camera]
        canvas = background(art, shot.place, shot.time, cam)
        if shot.action == "climb":
            ladder = art.tile("ladderMid", 40)
            for k in range(4):
                paste(canvas, ladder, x0 - 20 - cam, feet - 40 * (k + 1), tint)
        for i, name in enumerate(shot.characters):  # a chase: the second runs after the first
            sprite, up = character_frame(art, name, shot.action, t + 5 * i, rate)
            if direction < 0:
                sprite = sprite[:, ::-1]
            x = lead_x - i * 70 * direction
            climb = 0.8 * t if shot.action == "climb" else 0.0
            paste(canvas, sprite, x - sprite.shape[1] / 2 - cam, feet - sprite.shape[0] - up - climb, tint)
        frames[t] = np.clip(canvas * 255 + 0.5, 0, 255).astype(np.uint8)
    return frames


def draw_shots(sessions: int, turns: int, seed: int) -> list[Shot]:
    rng = np.random.default_rng(seed)
    names, places = list(CHARACTERS), list(PLACES)
    actions, weights = list(ACTIONS), np.asarray([a[2] for a in ACTIONS.values()], float)
    shots, start = [], 0
    for s in range(sessions):
        who = [str(rng.choice(names))]
        if rng.random() < 0.15:
            who.append(str(rng.choice([n for n in names if n != who[0]])))
        place = str(rng.choice(places))
        time = str(rng.choice(PLACES[place]))
        for k in range(turns):
            if k and rng.random() < 0.25:
                place = str(rng.choice([p for p in places if p != place]))
                time = str(rng.choice(PLACES[place]))
            elif k and place in TILE_PLACES and rng.random() < 0.15:
                time = str(rng.choice([t for t in PLACES[place] if t != time]))
            action = "run" if len(who) == 2 else str(rng.choice(actions, p=weights / weights.sum()))
            moving = action in ("walk", "run")
            camera = str(rng.choice(["static", "pan", "follow"] if moving else ["static", "pan"],
                                    p=[0.3, 0.3, 0.4] if moving else [0.6, 0.4]))
            n = int(rng.integers(54, 110))
            shots.append(Shot(start, n, s, who, action, place, time, camera, int(rng.integers(2**31))))
            start += n
    return shots


def annotation_csv(shots: list[Shot], film: str) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for sh in shots:
        verb, text, _ = ACTIONS[sh.action]
        if len(sh.characters) == 2:
            verb, text = "chase", f"{sh.characters[1]} chases {sh.characters[0]}"
        w.writerow({"source": film, "start_s": f"{sh.start / FPS:.4f}", "end_s": f"{(sh.start + sh.frames) / FPS:.4f}",
                    "characters": ";".join(sh.characters), "motion_text": text, "motion": verb, "place": sh.place,
                    "time": sh.time})
    return buf.getvalue()


def make_film(assets: Path, sessions: int, turns: int, seed: int, out: Path) -> None:
    art = Art(assets)
    shots = draw_shots(sessions, turns, seed)
    out.mkdir(parents=True, exist_ok=True)
    frames = np.concatenate([render_shot(art, sh) for sh in tqdm(shots, desc="shots")])
    save_mp4(frames, out / "film.mp4", fps=FPS)
    write_json(out / "truth.json", {"fps": FPS, "size": [W, H], "seed": seed, "shots": [asdict(s) for s in shots]})
    write_text(out / "annotations.csv", annotation_csv(shots, "film.mp4"))
    (out / "references").mkdir(exist_ok=True)
    for name in CHARACTERS:  # the standing sprite on white, as a person would crop it from a frame
        idle = art.sprites[name]["idle"]
        rgb = idle[..., :3] * idle[..., 3:] + (1 - idle[..., 3:])
        Image.fromarray(np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8)).save(out / "references" / f"{name}.png")
    sheet = np.concatenate([np.concatenate([frames[sh.start + sh.frames // 2] for sh in shots[r:r + 6]], 1)
                            for r in range(0, max(6, min(len(shots), 24) // 6 * 6), 6)], 0)
    Image.fromarray(sheet).save(out / "sheet.jpg", quality=85)
    print(f"{len(shots)} shots, {len(frames) / FPS:.0f} s -> {out}/film.mp4")


def model_frame(film_frame: int, film_fps: float, model_fps: float) -> int:
    """The model frame that shows a film frame: ffmpeg's fps filter takes the nearest in time (measured)."""
    return int(round(film_frame * model_fps / film_fps))


def shot_of_clip(row: dict, shots: list[Shot], film_fps: float, model_fps: float) -> Shot | None:
    """The shot an ingested clip starts in (None past the film's end)."""
    k = round(row["source"]["start_s"] * model_fps)
    return next((s for s in shots if model_frame(s.start, film_fps, model_fps) <= k
                 < model_frame(s.start + s.frames, film_fps, model_fps)), None)


def cut_kind(shot: Shot, prev: Shot) -> str:
    if shot.session != prev.session:
        return "new session"
    if shot.place != prev.place:
        return "new place"
    if shot.time != prev.time:
        return "new time of day"
    return "same scene"


def grade(film_dir: Path, data_dir: Path, names: Path | None) -> dict:
    truth = json.loads((film_dir / "truth.json").read_text())
    shots = [Shot(**s) for s in truth["shots"]]
    data = WorldDataset(data_dir)
    source = json.loads(next((data.root / "sources").glob("*.json")).read_text())
    found = set(source["cuts"])  # in model frames: the first one of each shot
    fps, model_fps = truth["fps"], data.meta["fps"]
    true_cuts = {model_frame(sh.start, fps, model_fps): cut_kind(sh, shots[k - 1]) for k, sh in enumerate(shots) if k}
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for at, kind in true_cuts.items():
        kinds[kind][0] += at in found
        kinds[kind][1] += 1
    starts = {model_frame(sh.start, fps, model_fps) for sh in shots}
    by_action: dict[str, Counter] = defaultdict(Counter)
    on_shot, fields = 0, Counter()
    rows = data.rows
    for r in rows:
        on_shot += round(r["source"]["start_s"] * model_fps) in starts
        sh = shot_of_clip(r, shots, fps, model_fps)
        if sh is None:
            continue
        by_action["chase" if len(sh.characters) == 2 else sh.action][r["motion_level"]] += 1
        if r.get("annotated"):
            fields["annotated"] += 1
            fields["characters"] += list(r.get("characters") or []) == sh.characters
            fields["place"] += r.get("place") == sh.place
            fields["time"] += r.get("time") == sh.time
    result = {
        "film": {"shots": len(shots), "seconds": sum(s.frames for s in shots) / truth["fps"]},
        "cuts": {"true": len(true_cuts), "found": len(found),
                 "precision": len(found & set(true_cuts)) / max(len(found), 1),
                 "recall": len(found & set(true_cuts)) / max(len(true_cuts), 1),
                 "recall_by_kind": {k: {"found": a, "of": b, "recall": a / b} for k, (a, b) in sorted(kinds.items())}},
        "clips": {"clips": len(rows), "start_on_a_shot": on_shot},
        "motion_level_by_action": {a: dict(sorted(c.items())) for a, c in sorted(by_action.items())},
        "annotated_fields": ({k: v / fields["annotated"] for k, v in fields.items() if k != "annotated"}
                             | {"clips": fields["annotated"]}) if fields["annotated"] else None,
    }
    if names is not None:
        result["reference_names"] = grade_names(names, rows, shots, fps, model_fps)
    near = {at + d for at in found for d in (-1, 0, 1)}
    result["cuts"]["recall_within_one_frame"] = len(near & set(true_cuts)) / max(len(true_cuts), 1)
    return result


def grade_names(names: Path, rows: list[dict], shots: list[Shot], fps: float, model_fps: float) -> dict:
    """``annotate --references``' characters column against the truth, first name and exact set."""
    by_clip = {Path(r["shot"]).stem: r for r in rows}
    first, exact, n = [], 0, 0
    for line in csv.DictReader(names.open()):
        r = by_clip.get(line.get("clip", ""))
        if r is None:
            continue
        sh = shot_of_clip(r, shots, fps, model_fps)
        said = [c for c in (line.get("characters") or "").split(";") if c]
        if sh is None:
            continue
        n += 1
        first.append(bool(said) and said[0] in sh.characters)
        exact += sorted(said) == sorted(sh.characters)
    f = np.asarray(first, float)
    return {"clips": n, "first_name_right": float(f.mean()), "se": float(f.std(ddof=1) / np.sqrt(len(f))),
            "exact_set": exact / max(n, 1), "chance": 1 / len(CHARACTERS)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("film")
    f.add_argument("--assets", type=Path, required=True, help="arcade's resources/assets/images")
    f.add_argument("--sessions", type=int, default=40)
    f.add_argument("--turns", type=int, default=5)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("grade")
    g.add_argument("film", type=Path)
    g.add_argument("data", type=Path, help="the ingested film")
    g.add_argument("--names", type=Path, help="annotate --references' CSV of the ingested film")
    g.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "film":
        make_film(a.assets, a.sessions, a.turns, a.seed, a.out)
        return 0
    result = grade(a.film, a.data, a.names)
    print(json.dumps(result, indent=1))
    if a.out:
        write_json(a.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
