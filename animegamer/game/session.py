"""The game as an environment: ``Game`` holds the models and the saved games, ``GameSession.step``
plays one turn. Every front end (web, terminal, evaluation) drives this interface only.

    game = Game.load()                               # animegamer/weights/default/{engine,shot_decoder}
    session = game.new_session(characters=["Qiqi"])
    turn = session.step("Character: Qiqi; Motion: quickly run; Background: day town.")
    turn.frames, turn.motion_level, turn.deltas, turn.states, turn.video_path
    game.open_session(session.id).step("Qiqi sits down under a tree")  # continue a saved game

One turn: the engine reads the session's history (its sliding window of past turns, each with
the s_a the engine predicted for it) plus the instruction and the absolute states, and predicts
s_a, the motion level and the state deltas; the decoder draws the shot from s_a and the motion
level (NOT the social delta, a release bug); the session adds 5 x delta to its states (rules.py);
the clip is written, then the turn is committed to the store in one transaction. Only then does
the session's in-memory history change, so a failure anywhere leaves the game as it was.

Reproducible: greedy engine decoding, and the decoder's noise is seeded per turn from the
session's seed and the turn number, so replaying a game's instructions gives the same game.

Input rules (``check_instruction``): after trimming, 1..500 characters of readable text (valid
Unicode, no control characters nor bidirectional overrides: game/text.py, at least one letter).
Characters: in the release's structured
form the ``Character:`` field must name characters of this game (case-insensitive); in free text
any cast member's name written with its capital (``Ren``) must belong to this game. Other words
are free: the game has no fixed command set.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from animegamer.core.devices import check_precision, cpu_kind, default_precision, resolve_device
from animegamer.core.video_io import save_mp4
from animegamer.decoder.anchors import Anchor, Shown, named_characters
from animegamer.decoder.layered import (
    LayeredScene,
    acts_as_pair,
    draw_turn,
    framed,
    scene_frame,
    start_scene,
)
from animegamer.decoder.layers import cutout_canvas
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.decoder.stage import Sprite
from animegamer.engine.model import load_engine
from animegamer.engine.release_engine import is_release_engine, load_release_engine
from animegamer.engine.sequence import TurnRecord
from animegamer.game.archive import restore_archive, write_archive
from animegamer.game.characters import CharacterBook, CharacterError, CustomCharacter
from animegamer.game.store import SessionStore, StoreError, TurnRow, export_session, frames_of
from animegamer.game.text import MAX_INSTRUCTION_CHARS, describe_characters, unsafe_characters
from animegamer.training.release_import import check_release_memory
from animegamer.world.cast import load_cast
from animegamer.world.instructions import known_places, pair_verb_said, place_said, time_said
from animegamer.world.rules import HIGH, LOW, STATE_NAMES, apply_deltas, initial_states

FPS = 8  # the paper's shots play at 8 fps
DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "default"
ENGINE_FILES = ("engine/engine.json", "engine/engine.safetensors")
DECODER_FILES = ("shot_decoder/shot_decoder.json", "shot_decoder/shot_decoder.safetensors", "shot_decoder/autoencoder")
EXAMPLE = "Character: Qiqi; Motion: quickly run; Background: day town."

Progress = Callable[[str, float], None]  # (stage, fraction done 0..1)


class GameInputError(ValueError):
    """The player's input cannot be played (the message says why and what to type instead)."""


@dataclass
class Turn:
    """One played turn. ``states`` are the absolute states AFTER it, ``states_before`` before."""

    index: int
    instruction: str
    motion_level: int
    deltas: dict[str, int]
    states: dict[str, int]
    states_before: dict[str, int]
    s_a: torch.Tensor  # (N, D) float32: the engine's prediction, or with anchors what the shot was drawn from
    # (AnchorConfig.history); the history carries exactly this
    seed: int
    video_path: Path
    probs: list[list[float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    created_at: float = 0.0
    _frames: np.ndarray | None = field(default=None, repr=False)
    anchor: str | None = None  # where the drawn visual tokens came from (decoder/anchors.py); not saved
    anchor_distance: float | None = None  # the anchors' gate distance (None on a first turn or without anchors)

    @property
    def frames(self) -> np.ndarray:
        """uint8 (T, H, W, 3): the decoded shot while this is the session's newest turn, else read back
        from the saved clip (not kept: a long game must not hold every shot in memory)."""
        return self._frames if self._frames is not None else frames_of(self.video_path)

    def record(self) -> TurnRecord:
        """This turn as the engine's history sees it."""
        return TurnRecord(self.instruction, s_a=self.s_a, motion_level=self.motion_level,
                          deltas=dict(self.deltas), states=dict(self.states_before))

    @classmethod
    def from_row(cls, row: TurnRow) -> Turn:
        return cls(row.idx, row.instruction, row.motion_level, row.deltas, row.states, row.states_before,
                   row.s_a, row.seed, row.clip, row.probs, row.timings, row.created_at)


def turn_seed(session_seed: int, index: int) -> int:
    h = hashlib.blake2b(f"{int(session_seed)}:{int(index)}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & (2**63 - 1)


def _split_names(field_text: str) -> list[str]:
    return [n.strip().strip(".").strip() for n in re.split(r",|\band\b|&", field_text, flags=re.IGNORECASE) if n.strip(" .")]


def check_instruction(text: Any, characters: list[str], cast: list[str]) -> str:
    """The instruction to play (trimmed, whitespace collapsed) or GameInputError. See the module doc."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GameInputError(f"the instruction is not valid UTF-8 text ({e.reason} at byte {e.start})") from None
    if not isinstance(text, str):
        raise GameInputError(f"the instruction must be text, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise GameInputError("the instruction contains broken characters (unpaired surrogates); retype it") from None
    text = unicodedata.normalize("NFC", text).strip()
    if not text:
        raise GameInputError(f"the instruction is empty: say what happens next, e.g. {EXAMPLE!r}")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise GameInputError(f"the instruction is {len(text)} characters long; keep it to {MAX_INSTRUCTION_CHARS}")
    bad = unsafe_characters(text)
    if bad:
        raise GameInputError(f"the instruction contains unreadable or control characters ({describe_characters(bad)}); "
                             "retype it as plain text")
    if not any(c.isalpha() for c in text):
        raise GameInputError(f"the instruction has no words; say what happens next, e.g. {EXAMPLE!r}")
    text = " ".join(text.split())
    in_game = {c.lower(): c for c in characters}
    known = {c.lower(): c for c in cast}
    m = re.search(r"\bcharacters?\s*:\s*([^;]*)", text, flags=re.IGNORECASE)
    if m:
        names = _split_names(m.group(1))
        if not names:
            raise GameInputError(f"the Character field is empty; name one of this game's characters: {', '.join(characters)}")
        for n in names:
            if n.lower() not in known:
                raise GameInputError(f"unknown character {n!r}; this game's characters: {', '.join(characters)}")
            if n.lower() not in in_game:
                raise GameInputError(f"{known[n.lower()]} is not in this game (its characters: {', '.join(characters)}); "
                                     f"start a new game with {known[n.lower()]} to play them")
    else:
        for name in cast:
            if name.lower() not in in_game and re.search(rf"\b{re.escape(name)}\b", text):
                raise GameInputError(f"{name} is not in this game (its characters: {', '.join(characters)}); "
                                     f"start a new game with {name} to play them")
    return text


def check_states(states: dict[str, Any]) -> dict[str, int]:
    """Absolute start states: exactly stamina / social / entertainment, integers in 0..100."""
    if set(states) != set(STATE_NAMES):
        raise GameInputError(f"start states need exactly {', '.join(STATE_NAMES)}, got {sorted(states)}")
    out = {}
    for k in STATE_NAMES:
        v = states[k]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not LOW <= int(v) <= HIGH:
            raise GameInputError(f"start state {k} must be an integer in {LOW}..{HIGH}, got {v!r}")
        out[k] = int(v)
    return out


def kept_scene(read: tuple[str, str] | None, shown: tuple[str, str] | None,
               said: tuple[str | None, str | None]) -> tuple[str, str] | None:
    """The (place, time) a turn is drawn in. What the instruction names in the world's words is drawn (``said``:
    ``world.instructions.place_said`` / ``time_said``, which read every wording the world's instructions use); the
    world's rule, which its instructions keep, for the rest: a turn that names no place stays where the last shot
    was, one that names no time keeps its time. ``read`` (the anchors' reading of the engine's prediction) fills
    what a game's first turn does not name (nothing ``shown``). The engine's reading used to decide what was named
    too, and after a broom flight it kept the sky for a turn that named the beach (7 of the 34 turns of held-out
    world 9300 that named a new place went on in the old one; docs/layers.md, "The place the player names")."""
    base = shown or read
    if base is None:
        return (said[0], said[1]) if said[0] and said[1] else None
    return (said[0] or base[0], said[1] or base[1])


class GameSession:
    """One game: its characters, its turns (saved), its absolute states."""

    def __init__(self, game: Game, session_id: str, characters: list[str], seed: int,
                 turns: list[Turn] | None = None, start_states: dict[str, int] | None = None,
                 layers: bytes | None = None) -> None:
        self.game = game
        self.id = session_id
        self.characters = list(characters)
        self.seed = int(seed)
        self.turns: list[Turn] = list(turns or [])
        self.start_states = dict(start_states) if start_states else initial_states()
        self.layers = layers  # the scene after the last turn, when it was drawn in layers (decoder/layered.py)

    def __repr__(self) -> str:
        return f"GameSession(id={self.id!r}, characters={self.characters}, turns={len(self.turns)}, states={self.states})"

    @property
    def states(self) -> dict[str, int]:
        """Absolute states now (before the next turn)."""
        return dict(self.turns[-1].states) if self.turns else dict(self.start_states)

    def history(self) -> list[TurnRecord]:
        """Every past turn as the engine sees it (the engine picks its window from these)."""
        return [t.record() for t in self.turns]

    def check(self, instruction: Any) -> str:
        return check_instruction(instruction, self.characters, self.game.cast)

    def step(self, instruction: Any, progress: Progress | None = None) -> Turn:
        """Play one turn. Raises GameInputError (nothing changes) for unplayable input."""
        text = self.check(instruction)
        progress = progress or (lambda stage, frac: None)
        index = len(self.turns)
        seed = turn_seed(self.seed, index)
        before = self.states
        game = self.game
        with game.lock:  # the engine's KV cache and the CPU are shared by every session
            t0 = time.perf_counter()
            progress("thinking", 0.05)
            pred = game.engine.predict(self.history(), text, states=before, temperature=game.temperature,
                                       generator=torch.Generator().manual_seed(seed))
            t1 = time.perf_counter()
            progress("drawing", 0.35)
            anchors = game.decoder.anchors
            last = self.turns[-1] if self.turns else None
            # the last frame as the player saw it, read back from its clip, so a reopened game continues alike
            frame = (frames_of(last.video_path)[-1] if last and anchors and anchors.config.continue_from == "frame"
                     else None)
            named = named_characters(text, self.characters)
            shown = Shown(frame, last.s_a, named_characters(last.instruction, self.characters)) if last else None
            drawn, anchor = game.decoder.anchor(pred.s_a, named, shown, torch.Generator().manual_seed(seed))
            if not game.decoder.draws_layers and (anchors is not None or any(c in game.custom for c in named)):
                composed = game.composed_anchor(pred.s_a, named, anchor)  # no stored shot shows them there
                drawn, anchor = composed or (drawn, anchor)
            own = anchor is not None and anchor.source == "composed"
            remembered = drawn if own or (anchors and anchors.config.history == "drawn") else pred.s_a
            level = pred.motion_level if pred.decoder_level is None else pred.decoder_level
            layers = None
            if game.decoder.draws_layers:  # every pixel of a character after frame 0 is the sprite animator's
                # the verb that makes two named a pair: one of two the instruction says, else the anchors' reading
                verb = pair_verb_said(text) or (anchor.verb if anchor is not None else None)
                frames, scene, drawn, staged = game.layered_shot(self.layers, pred.s_a, named or self.characters[:1],
                                                                 anchor, int(level), verb,
                                                                 said=(place_said(text), time_said(text)))
                layers = scene.to_bytes()
                remembered = drawn  # the shot's s_a: its visual part that of the frame it starts from
            else:
                frames = game.decoder(drawn, motion_level=level, generator=torch.Generator().manual_seed(seed))
            t2 = time.perf_counter()
        progress("saving", 0.9)

        store = game.store
        clip = save_mp4(frames, store.new_clip_path(self.id, index), fps=game.fps)
        after = apply_deltas(before, pred.deltas)
        t3 = time.perf_counter()
        timings = {"engine_s": t1 - t0, "decoder_s": t2 - t1, "clip_s": t3 - t2}
        row = TurnRow(self.id, index, text, pred.motion_level, dict(pred.deltas), before, after, remembered, seed,
                      clip, pred.probs, timings, time.time(), layers)
        try:
            store.save_turn(row)
        except BaseException:
            clip.unlink(missing_ok=True)  # best effort; an orphan left by a kill is cleaned on the next open
            raise
        timings["save_s"] = time.perf_counter() - t3
        turn = Turn.from_row(row)
        turn._frames = frames
        turn.anchor = anchor.source if anchor else "engine"
        if layers is not None:  # where the first frame came from: the stage (a scene starts) or the last shot shown
            turn.anchor = "staged" if staged else "went on"
        turn.anchor_distance = anchor.distance if anchor else None
        if self.turns:
            self.turns[-1]._frames = None  # only the newest shot stays decoded (Turn.frames reads the rest back)
        self.turns.append(turn)
        self.layers = layers
        progress("done", 1.0)
        return turn

    def export(self, out: str | Path | None = None) -> tuple[Path, Path]:
        return self.game.export_session(self.id, out)


class Game:
    """The models + the saved games. Sessions share the models (one turn at a time: ``lock``)."""

    def __init__(self, engine, decoder, store: SessionStore | str | Path | None = None,
                 cast: list[str] | None = None, model_info: dict[str, Any] | None = None,
                 temperature: float = 0.0, fps: int = FPS) -> None:
        if cast is None:
            cast = list(load_cast())
        self.engine = engine.eval()
        self.decoder = decoder.eval()
        self.store = store if isinstance(store, SessionStore) else SessionStore(store)
        self.characters = CharacterBook(self.store.root)  # the player's own, beside the saves
        self.custom: dict[str, CustomCharacter] = self.characters.characters()
        self._sprites: dict[str, Sprite] = {}  # the player's characters' cut-outs, made on first use
        self.cast = list(cast) + [n for n in self.custom if n not in cast]
        self.model_info = dict(model_info or {})
        self.temperature = float(temperature)
        self.fps = int(fps)
        self.lock = threading.RLock()
        n_eng, d_eng = engine.cfg.rep_tokens, engine.cfg.rep_dim
        n_dec, d_dec = decoder.config.n_tokens, decoder.config.d_cond
        if (n_eng, d_eng) != (n_dec, d_dec):
            raise ValueError(f"the engine predicts s_a of {n_eng} x {d_eng} but the decoder reads {n_dec} x {d_dec}: "
                             "these models were not trained together")

    @classmethod
    def from_models(cls, engine, decoder, store: SessionStore | str | Path | None = None, **kw: Any) -> Game:
        return cls(engine, decoder, store, **kw)

    @classmethod
    def load(cls, path: str | Path | None = None, store: SessionStore | str | Path | None = None,
             merge_lora: bool = True, device: str | torch.device = "cpu", precision: str | None = None,
             quantize: str | None = None, window: int | None = None, **kw: Any) -> Game:
        """Models from ``path`` (default: the shipped ``animegamer/weights/default``) holding
        ``engine/`` (save_engine) and ``shot_decoder/`` (ShotDecoder.save_pretrained), on ``device``
        ("cpu", "cuda", "cuda:N", "auto") at ``precision`` ("fp32", "bf16" autocast, None: as saved, but fp32
        on a CPU without native bf16: ``core.devices.default_precision``).
        ``quantize`` ("8bit", "4bit"; None: as trained) loads a local (paper) engine backbone quantized.
        ``window`` (None: the model's own) is how many past turns the engine sees."""
        dev, precision = resolve_device(device), check_precision(precision)
        root = Path(path).expanduser() if path is not None else DEFAULT_WEIGHTS
        missing = [f for f in ENGINE_FILES + DECODER_FILES if not (root / f).exists()]
        if missing:
            raise FileNotFoundError(
                f"no playable model in {root}: missing {', '.join(missing)}. A model directory holds engine/ "
                "(written by `animegamer train engine`, its final/ directory) and shot_decoder/ (from "
                "`animegamer train decoder` or `animegamer train adapt`, its final/ directory); copy or link "
                "both there, or pass another directory with --model PATH")

        release = is_release_engine(root / "engine")  # `convert release`: a 7B engine and a 2B decoder
        if release:
            check_release_memory(root, dev, quantize)
        load = load_release_engine if release else load_engine
        overrides = {**({"backbone_quantize": quantize} if quantize else {}),
                     **({"window": window} if window is not None else {})}
        engine = load(root / "engine", **overrides)
        # play only: fold the adapters in (faster per turn). Not into quantized weights: that would
        # dequantize and requantize them, a rounding the adapters were not trained with.
        if merge_lora and not engine.cfg.backbone_quantize:
            engine.merge_lora(True)
        engine = engine.to(dev)
        decoder = ShotDecoder.from_pretrained(root / "shot_decoder", device=dev)
        asked, precision = precision, default_precision(dev, precision)
        if precision is not None:
            engine.cfg.autocast_bf16 = precision == "bf16"
            decoder.sampler = dataclasses.replace(decoder.sampler, autocast=precision == "bf16")
        info = json.loads((root / "model.json").read_text()) if (root / "model.json").is_file() else {}
        if info.get("cast") and "cast" not in kw:  # a model fine-tuned on films plays their characters
            kw["cast"] = list(info["cast"])
        return cls(engine, decoder, store, model_info={"path": str(root), "device": str(dev),
                                                       "precision": (precision or "as saved") + (
                                                           "" if asked or not precision else
                                                           f" (this CPU, {cpu_kind()}, has no native bf16)"),
                                                       **({"quantize": q} if (q := engine.cfg.backbone_quantize)
                                                          else {})}, **kw)

    @property
    def places(self) -> list[str]:
        """The places this model has pictures of: its anchor bank's (a model fine-tuned on a film: the film's
        own), else the world's. The structured helper offers them; any other place can still be typed."""
        bank = self.decoder.anchors
        found = sorted({e["place"] for e in bank.entries if e.get("place")}) if bank is not None else []
        return found or known_places()

    # ------------------------------------------------------------------------- the player's characters
    def add_character(self, name: str, description: str | None = None,
                      image: str | Path | bytes | None = None) -> CustomCharacter:
        """A character of the player's own from a description, a picture or both (game/characters.py);
        kept with the saves."""
        try:
            made = self.characters.add(name, description, taken=self.cast, image=image)
        except CharacterError as e:
            raise GameInputError(str(e)) from None
        self.custom[made.name] = made
        self._sprites.pop(made.name, None)
        self.cast.append(made.name)
        return made

    def remove_character(self, name: str) -> None:
        """Forget a custom character (saved games that played it keep their shots)."""
        try:
            self.characters.remove(name)
        except CharacterError as e:
            raise GameInputError(str(e)) from None
        left = self.characters.characters()
        self.cast = [c for c in self.cast if c not in self.custom or c in left]
        self.custom = left
        self._sprites = {n: v for n, v in self._sprites.items() if n in left}

    def composed_anchor(self, s_a: torch.Tensor, named: list[str],
                        chosen: Anchor | None) -> tuple[torch.Tensor, Anchor] | None:
        """Where no stored shot shows the turn's characters together in the place the engine's prediction
        names (two never filmed there together, three, a player's own character), the first frame composed
        from the stage (decoder/stage.py): that place's picture with each named character's cut-out standing
        in it, left to right as named; and ``s_a`` drawn from it. None where the chosen anchor already shows
        them there, or the stage cannot (no picture of the place, a character without a cut-out): the turn is
        drawn from ``chosen``. GameInputError for a player's own character that cannot be stood anywhere."""
        stage, bank = self.decoder.stage, self.decoder.anchors
        custom = [c for c in named if c in self.custom]
        if not named or (chosen is not None and chosen.source == "continued"):
            return None
        entry = bank.entries[chosen.entry] if bank is not None and chosen and chosen.entry is not None else {}
        shown_scene = (entry.get("place"), entry.get("time"))
        scene = chosen.scene if chosen is not None and chosen.scene else shown_scene
        if not custom and entry and sorted(entry["characters"]) == sorted(named) and shown_scene == scene:
            return None  # a stored shot shows them, there
        if stage is not None and not stage.has(*scene):
            if scene != (None, None) and not custom:
                return None  # a place the stage has no picture of (a film's): the stored shot stands
            # no place named (a model without anchors), or none the stage has, for a player's own character
            scene = ("meadow", "day") if stage.has("meadow", "day") else next(iter(stage.places))
        missing = [c for c in named if c not in self.custom and c not in (stage.sprites if stage else {})]
        if stage is None or missing:
            if custom:
                raise GameInputError(f"this model has no stage to stand {', '.join(custom)} in"
                                     + (f" beside {', '.join(missing)}" if missing and stage else "")
                                     + ": run `animegamer model stage MODEL` once (or play with the shipped model)")
            return None
        frame = stage.compose(*scene, [self._sprite(c) for c in named])
        h, w = self.decoder.frame_size
        if frame.shape[:2] != (h, w):
            frame = cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
        drawn = self.decoder.draw_from_frame(s_a, frame)
        return drawn, Anchor(drawn[self.decoder.config.n_text:], "composed", chosen.distance if chosen else None,
                             None, frame, chosen.verb if chosen else None, scene)

    def layered_shot(self, previous: bytes | None, s_a: torch.Tensor, named: list[str], anchor: Anchor | None,
                     level: int, verb: str | None = None, said: tuple[str | None, str | None] = (None, None),
                     ) -> tuple[np.ndarray, LayeredScene, torch.Tensor, bool]:
        """A turn drawn in layers (decoder/layered.py): the named characters act (at least one), drawn by the sprite
        animator.
        The scene goes on from ``previous`` (the last turn's, as saved) while its place and time stay (``kept_scene``:
        what the instruction names, ``said``, is drawn, what it does not name stays) and everyone named is in it;
        otherwise it starts again from the stage: that place's picture with the named characters' cut-outs.
        ``verb``: the turn's verb where known; two named do a verb of two (a hug) as its subject and partner, any
        other each alone (``layered.acts_as_pair``); who did another verb last turn starts this one afresh from their
        cut-out in a new shot, framed as the world frames one (``layered.afresh``, ``layered.framed``); who goes on
        with the same verb goes on from the frame shown. Returns the frames, the scene after the turn, the s_a it was
        drawn from (the engine's, its visual part the first frame's, as a true shot's s_a is made) and whether the
        scene started from the stage."""
        stage = self.decoder.stage
        scene = None
        if previous is not None:
            try:
                scene = LayeredScene.from_bytes(previous)
            except ValueError:  # a scene this model cannot draw (another version's): the stage starts one
                scene = None
        where = kept_scene(self._scene_named(anchor), (scene.place, scene.time) if scene is not None else None, said)
        if where is None or not stage.has(*where):
            where = ("meadow", "day") if stage.has("meadow", "day") else next(iter(stage.places))
        staged = (scene is None or (scene.place, scene.time) != where or not set(named) <= set(scene.names())
                  or not stage.has(scene.place, scene.time))
        if staged:
            scene = start_scene(stage, *where, named, {c: self._sprite(c) for c in named},
                                pair=acts_as_pair(named, verb), verb=verb)
        scene = framed(stage, scene, named, verb)  # a new verb: a new shot; one that goes on keeps its camera
        h, w = self.decoder.frame_size
        first = scene_frame(stage, scene)
        seen = first if first.shape[:2] == (h, w) else cv2.resize(first, (w, h), interpolation=cv2.INTER_AREA)
        drawn = self.decoder.draw_from_frame(s_a, seen)  # s_a's visual part: the frame it starts from, as in training
        references = {c: cutout_canvas(self._sprite(c), stage.standing * stage.size[0]) for c in named}
        frames, after = draw_turn(self.decoder.animator, stage, scene, named, drawn, level, references, first,
                                  verb=verb)
        if frames.shape[1:3] != (h, w):
            frames = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in frames])
        return frames, after, drawn, staged

    def _scene_named(self, anchor: Anchor | None) -> tuple[str, str] | None:
        """The (place, time) the anchors chose for the turn, if any."""
        if anchor is None:
            return None
        if anchor.scene:
            return tuple(anchor.scene)
        bank = self.decoder.anchors
        entry = bank.entries[anchor.entry] if bank is not None and anchor.entry is not None else {}
        return (entry["place"], entry["time"]) if entry.get("place") and entry.get("time") else None

    def _sprite(self, name: str) -> Sprite:
        """A character's cut-out for the stage: the model's for its cast, the book's for the player's own
        (cut out of its reference sheet once per game)."""
        if name not in self.custom:
            return self.decoder.stage.sprites[name]
        if name not in self._sprites:
            self._sprites[name] = Sprite(*self.characters.cutout(name))
        return self._sprites[name]

    # ------------------------------------------------------------------------- sessions
    def canonical_characters(self, characters: list[str] | str) -> list[str]:
        if isinstance(characters, str):
            characters = _split_names(characters)
        known = {c.lower(): c for c in self.cast}
        out: list[str] = []
        for c in characters:
            name = known.get(str(c).strip().lower())
            if name is None:
                raise GameInputError(f"unknown character {c!r}; the cast: {', '.join(self.cast)}")
            if name not in out:
                out.append(name)
        if not out:
            raise GameInputError(f"choose at least one character: {', '.join(self.cast)}")
        return out

    def new_session(self, characters: list[str] | str, seed: int | None = None,
                    states: dict[str, int] | None = None) -> GameSession:
        """``states``: start "mid-life" from these absolute states (default: all 50), e.g. to replay a
        recorded session whose first turn did not start fresh (evaluation)."""
        chars = self.canonical_characters(characters)
        seed = secrets.randbits(63) if seed is None else int(seed)
        info = {**self.model_info, "rep_shape": [self.engine.cfg.rep_tokens, self.engine.cfg.rep_dim]}
        if states is not None:
            states = check_states(states)
            info["start_states"] = states
        row = self.store.create_session(chars, seed, info)
        return GameSession(self, row.id, chars, seed, start_states=states)

    def open_session(self, session_id: str) -> GameSession:
        """A saved game, with exactly the context it was saved with (history incl. s_a, states)."""
        row = self.store.get_session(session_id)
        rows = self.store.load_turns(session_id)
        turns = [Turn.from_row(r) for r in rows]
        want = (self.engine.cfg.rep_tokens, self.engine.cfg.rep_dim)
        if turns and tuple(turns[0].s_a.shape) != want:
            raise StoreError(f"game {session_id} was played with a model whose s_a is {tuple(turns[0].s_a.shape)}; "
                             f"this model's is {want} (model path then: {row.model.get('path', '?')})")
        return GameSession(self, row.id, row.characters, row.seed, turns, start_states=row.model.get("start_states"),
                           layers=rows[-1].layers if rows else None)

    def list_sessions(self):
        return self.store.list_sessions()

    def delete_session(self, session_id: str) -> None:
        self.store.delete_session(session_id)

    def export_session(self, session_id: str, out: str | Path | None = None) -> tuple[Path, Path]:
        """The whole game as one MP4 with the states drawn on it + a storyboard PNG."""

        return export_session(self.store, session_id, out, fps=self.fps)

    def archive_session(self, session_id: str, out: str | Path | None = None) -> Path:
        """The saved game as one file, with the custom characters it plays (game/archive.py): to keep,
        move to another machine or share; ``restore_session`` opens it there."""
        return write_archive(self.store, self.characters, session_id, out)

    def restore_session(self, source: str | Path | bytes) -> str:
        """A saved-game file (a path or its bytes) restored into this game's saves, its custom characters
        into the player's: returns the game's id here (``open_session`` continues it)."""
        with self.lock:
            sid = restore_archive(self.store, self.characters, source, self.cast)
            self.custom = self.characters.characters()
            self._sprites = {}
            self.cast = self.cast + [n for n in self.custom if n not in self.cast]
        return sid
