"""The in-domain CLIP evaluator: a separately trained vision tower + the frozen MiniLM captions.

The game model carries its own vision tower (its f_v); grading the model with that same tower
would reward whatever that tower happens to see. The evaluator is another `animegamer train
clip` run (other seed, ideally other data) loaded from its run directory:

    ev = Evaluator.load("runs/clip_eval")              # run dir, its final/ or the vision_tower/ dir
    e = ev.embed_frames(frames)                        # uint8 (T, H, W, 3) -> (T, E), unit norm
    ev.caption_embeddings(["Qiqi quickly running, day town, red car"])   # (1, E)

CLIP-I is the cosine between evaluator embeddings of generated and true frames, CLIP-T between
generated frames and the true shot's caption (through MiniLM and the tower's text projection,
the text side the tower was trained against).

Zero-shot probes (character, place, prop colour) score the generated shot against captions that
differ from the TRUE caption in exactly one attribute ("Mika quickly running, day town, red car"
vs "Qiqi ..."), so the probe asks one question at a time in the caption style the tower was
trained on; ``probes`` builds them from a world turn row.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from animegamer.core.checkpoint import file_hash
from animegamer.core.runs import resolve_component
from animegamer.models.action_classifier import ActionClassifier
from animegamer.models.frame_classifier import FrameClassifier
from animegamer.models.text_encoder import TextEncoder, TextEncoderConfig
from animegamer.models.vision_tower import CONFIG_NAME, WEIGHTS_NAME, VisionTower
from animegamer.training.engine_sessions import decoder_run_inputs
from animegamer.world.cast import load_cast
from animegamer.world.place_art import load_places

DEFAULT_EVALUATOR = Path(__file__).resolve().parent.parent / "weights" / "evaluator"


def _text_encoder_path(tower_dir: Path) -> str | None:
    """The text encoder the tower was trained against, as its run recorded it (None = bundled MiniLM)."""
    for d in (tower_dir, tower_dir.parent, tower_dir.parent.parent):
        for name in ("config.json", "run_config.json"):
            f = d / name
            if f.is_file():
                try:
                    te = json.loads(f.read_text()).get("model_config", {}).get("text_encoder") or {}
                except (ValueError, AttributeError):
                    continue
                return te.get("path")
    return None


@dataclass
class Probe:
    """One zero-shot question: which of ``captions`` describes the shot; ``answer`` indexes the truth."""

    attribute: str  # "character" | "place" | "prop:<description>"
    captions: list[str]
    labels: list[str]
    answer: int


class Evaluator:
    """Frozen vision tower + text encoder used only to grade shots (deterministic, no grad)."""

    def __init__(self, tower: Any, text: Any, path: str | None = None, weights_hash: str | None = None,
                 batch: int = 32, actions: Any = None, frames: FrameClassifier | None = None,
                 frames_hash: str | None = None) -> None:
        self.tower = tower.float().eval().requires_grad_(False)
        self.actions = actions  # an ActionClassifier (the "action" column), or None
        self.frames = frames  # a FrameClassifier (the picture columns: who, where, when, FD), or None
        self.frames_hash = frames_hash
        self.text = text
        self.path = path
        self.weights_hash = weights_hash
        self.batch = batch
        self._captions: dict[str, torch.Tensor] = {}

    @classmethod
    def load(cls, path: str | Path, actions: str | Path | None = None) -> "Evaluator":
        """From a `train clip` run dir, its final/, or a vision_tower/ dir. The action classifier
        comes from ``actions`` (a `train action` run or its action_classifier/ dir), else from an
        action_classifier/ beside the tower (as in the shipped weights/evaluator), else none; the
        frame classifier from a frame_classifier/ beside the tower, else none."""

        tower_dir = resolve_component(path, CONFIG_NAME, "vision_tower")
        tower = VisionTower.from_pretrained(tower_dir)
        text = TextEncoder(TextEncoderConfig(path=_text_encoder_path(tower_dir)))
        # beside the tower: in the tower's own dir (the shipped flat layout) or its parent (a run's final/)
        found = (ActionClassifier.find(actions) if actions is not None
                 else ActionClassifier.find(tower_dir) or ActionClassifier.find(tower_dir.parent))
        if actions is not None and found is None:
            raise FileNotFoundError(f"{actions}: no action classifier (config.json + model.safetensors) in it, its "
                                    "action_classifier/ or final/action_classifier/")
        frames = FrameClassifier.find(tower_dir) or FrameClassifier.find(tower_dir.parent)
        return cls(tower, text, str(tower_dir.resolve()), file_hash(tower_dir / WEIGHTS_NAME),
                   actions=ActionClassifier.load(found) if found is not None else None,
                   frames=FrameClassifier.from_pretrained(frames) if frames is not None else None,
                   frames_hash=FrameClassifier.weights_hash(frames) if frames is not None else None)

    @torch.no_grad()
    def embed_frames(self, frames: np.ndarray) -> torch.Tensor:
        """uint8 (T, H, W, 3) -> unit-norm embeddings (T, E)."""
        x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
        return torch.cat([self.tower.embed_images(x[i:i + self.batch]) for i in range(0, len(x), self.batch)])

    @staticmethod
    def shot_embedding(frame_embs: torch.Tensor) -> torch.Tensor:
        """(T, E) -> (E,): the normalised mean over frames, one vector per shot."""
        return F.normalize(frame_embs.mean(0), dim=-1)

    @torch.no_grad()
    def caption_embeddings(self, captions: list[str]) -> torch.Tensor:
        """Captions -> unit-norm joint-space embeddings (K, E), cached per string."""
        new = [c for c in dict.fromkeys(captions) if c not in self._captions]
        if new:
            embs = self.tower.embed_text_features(self.text.embed_sentences(new))
            self._captions.update(zip(new, embs))
        return torch.stack([self._captions[c] for c in captions])

    def answer(self, shot_emb: torch.Tensor, probe: Probe) -> int:
        """Index of the probe caption closest to the shot embedding."""
        return int((self.caption_embeddings(probe.captions) @ shot_emb).argmax())

    def info(self) -> dict[str, Any]:
        return {"path": self.path, "weights_blake2b": self.weights_hash,
                "text_encoder": self.text.cfg.path or "bundled all-MiniLM-L6-v2",
                "action_classifier": ({"path": self.actions.path, "weights_blake2b": self.actions.weights_hash}
                                      if self.actions is not None else None),
                "frame_classifier": ({"weights_blake2b": self.frames_hash, "characters": self.frames.characters}
                                     if self.frames is not None else None)}


# -- zero-shot probes from a world turn row ---------------------------------------------------------
def _place_tables():
    return sorted(load_cast()), load_places()


def probes(row: dict[str, Any]) -> list[Probe]:
    """The character, place and per-prop colour probes of one world turn (see the module doc).
    A probe whose attribute cannot be located in the caption (other caption formats) is left out."""
    cast, places = _place_tables()
    cap, chars = row["caption"], list(row["characters"])
    out: list[Probe] = []
    who = " and ".join(chars)
    if cap.startswith(who + " ") and chars[0] in cast:
        names = [c for c in cast if c not in chars[1:]]
        out.append(Probe("character", [" and ".join([c, *chars[1:]]) + cap[len(who):] for c in names], names,
                         names.index(chars[0])))
    where = f", {row['time']} {row['place']}"
    if where in cap and row["place"] in places:
        keys = sorted(places)
        out.append(Probe("place", [cap.replace(where, f", {row['time']} {p}", 1) for p in keys], keys,
                         keys.index(row["place"])))
    props = list(row.get("props") or [])
    tail = ", " + ", ".join(props)
    place = places.get(row["place"])
    if props and cap.endswith(tail) and place is not None:
        head = cap[: len(cap) - len(tail)]
        for i, desc in enumerate(props):
            for kind, colours in place.props.items():
                kd = place.prop_kinds.get(kind, {})
                display = kd.get("display") or kind.replace("_", " ")
                options = sorted(set(colours))
                if kd.get("colorless") or len(options) < 2 or not desc.endswith(" " + display):
                    continue
                colour = desc[: -len(display) - 1]
                if colour not in options:
                    continue
                caps = [head + ", " + ", ".join([*props[:i], f"{c} {display}", *props[i + 1:]]) for c in options]
                out.append(Probe(f"prop:{display}", caps, options, options.index(colour)))
                break
    return out


def recorded_tower_hashes(model_dir: str | Path | None) -> set[str]:
    """Weight hashes of the vision towers a model directory was trained with, as far as it
    records them: ``clip_hash`` keys in its JSON files, and the tower of the decoder run it came
    from (``model.json`` of `animegamer model pack`, or a shot_decoder/ linked into a run). Used to
    warn when the evaluator is the model's own tower. Best effort: unrecorded means not found."""

    found: set[str] = set()
    if model_dir is None or not Path(model_dir).is_dir():
        return found
    root = Path(model_dir)
    decoder_runs = [root / "shot_decoder"]

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "clip_hash" and isinstance(v, str):
                    found.add(v)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for f in sorted(root.rglob("*.json"))[:200]:
        try:
            doc = json.loads(f.read_text())
        except (ValueError, OSError):
            continue
        walk(doc)
        part = doc.get("shot_decoder") if isinstance(doc, dict) and f.name == "model.json" else None
        src = part.get("from") if isinstance(part, dict) else None
        if isinstance(src, str):
            decoder_runs.append(Path(src))
    for d in decoder_runs:
        clip = decoder_run_inputs(d).get("clip") if d.exists() else None
        try:
            tower = resolve_component(clip, CONFIG_NAME, "vision_tower") if clip else None
        except FileNotFoundError:
            tower = None
        if tower is not None and (tower / WEIGHTS_NAME).is_file():
            found.add(file_hash(tower / WEIGHTS_NAME))
    return found
