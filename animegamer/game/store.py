"""Saved games: SQLite for sessions and turns, one MP4 per turn beside it.

Layout of a store (``SessionStore(root)``)::

    root/games.sqlite        sessions, turns, meta(schema_version)   (WAL mode)
    root/clips/<session>/    one MP4 per turn: 0003-<random>.mp4
    root/exports/            whole-session MP4s and storyboard PNGs

Crash safety. A turn is saved in two steps: (1) its clip is written atomically (temp file,
fsync, rename: ``video_io.save_mp4``), (2) ONE transaction inserts the turn row (instruction,
predicted values, states, s_a as a safetensors blob, the clip's path) and bumps the session's
``updated_at``. A kill before (2) leaves at most an orphan clip that no row names: it is ignored
by every reader and removed by :meth:`SessionStore.clean_orphans` (run when a store is opened,
for files older than a grace period, so a turn being saved by another process is left alone).
A kill during (2) is SQLite's business: the transaction is either in the database or not.
Clip names carry a random suffix, so retrying a turn never overwrites an orphan of a failed try.

Confinement. Every path the store builds from a name or an id (a game's clip folder, a clip, an
export, a character's pictures) goes through :func:`confined`: it must resolve strictly inside the
store's folder it belongs in, or nothing is written, read or deleted. A game id must match
``GAME_ID`` to be created, so an id from a saved-game file or a URL cannot climb out (``..``) or
name an absolute path. A game whose id does not match (left by an older version's restore) is
still listed and can be deleted: its rows go, no file does; its turns are not read, as a row
naming a clip anywhere but the clips folder is never followed.

Connections are opened per operation (cheap for SQLite), so a store can be used from the web
UI's worker threads and from several processes at once; ``(session_id, idx)`` is the turns'
primary key, so two writers continuing the same game cannot both save turn k.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from PIL import Image, ImageDraw
from platformdirs import user_data_dir
from safetensors.torch import load, save

from animegamer.core.atomic_io import atomic_write
from animegamer.core.errors import UserFacingError
from animegamer.core.video_io import read_video, save_mp4
from animegamer.world.preview import font

SCHEMA_VERSION = 2  # 2: turns.layers (a store of version 1 is upgraded when opened)
DB_NAME = "games.sqlite"
CLIPS_DIR = "clips"
EXPORTS_DIR = "exports"
STORE_ENV = "ANIMEGAMER_SAVES"  # overrides the default store directory
ORPHAN_GRACE_S = 600.0  # orphan clips younger than this may belong to a turn being saved elsewhere
GAME_ID = r"^[A-Za-z0-9_-]{1,64}$"  # a game's id: what a URL, a saved-game file or a folder name may carry
_GAME_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # for fullmatch: "$" would also match before a final newline

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id          TEXT PRIMARY KEY,
    characters  TEXT NOT NULL,           -- JSON list of names
    seed        INTEGER NOT NULL,        -- per-turn seeds derive from it (reproducible replays)
    model       TEXT NOT NULL,           -- JSON: what played it (model path, configs)
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    idx           INTEGER NOT NULL,      -- 0-based turn number
    instruction   TEXT NOT NULL,
    motion_level  INTEGER NOT NULL,      -- the engine's prediction, 1..5
    deltas        TEXT NOT NULL,         -- JSON {stamina, social, entertainment}
    states_before TEXT NOT NULL,         -- JSON absolute states before the turn
    states        TEXT NOT NULL,         -- JSON absolute states after the turn
    s_a           BLOB NOT NULL,         -- safetensors bytes, tensor "s_a" (N, D) float32
    seed          INTEGER NOT NULL,      -- the decoder's noise seed for this turn
    probs         TEXT NOT NULL,         -- JSON per-field probabilities from the engine
    clip          TEXT NOT NULL,         -- clip path relative to the store root
    timings       TEXT NOT NULL,         -- JSON seconds per stage
    created_at    REAL NOT NULL,
    layers        BLOB,                  -- the scene after the turn when drawn in layers (decoder/layered.py);
                                         -- kept for a game's newest turn only
    PRIMARY KEY (session_id, idx)
);
"""


def default_store_dir() -> Path:
    """``$ANIMEGAMER_SAVES`` or the user data dir (e.g. ~/.local/share/animegamer/saves)."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()

    return Path(user_data_dir("animegamer", appauthor=False)) / "saves"


def s_a_to_blob(s_a: torch.Tensor) -> bytes:
    return save({"s_a": s_a.detach().to("cpu", torch.float32).contiguous()})


def blob_to_s_a(blob: bytes) -> torch.Tensor:
    return load(bytes(blob))["s_a"]


@dataclass
class SessionRow:
    id: str
    characters: list[str]
    seed: int
    model: dict[str, Any]
    created_at: float
    updated_at: float
    n_turns: int = 0
    last_instruction: str = ""
    last_states: dict[str, int] | None = None  # the states after the last turn (None: no turn yet)


@dataclass
class TurnRow:
    session_id: str
    idx: int
    instruction: str
    motion_level: int
    deltas: dict[str, int]
    states_before: dict[str, int]
    states: dict[str, int]
    s_a: torch.Tensor
    seed: int
    clip: Path  # absolute
    probs: list[list[float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    created_at: float = 0.0
    layers: bytes | None = None  # the scene after the turn, drawn in layers (LayeredScene.to_bytes), else None


class StoreError(RuntimeError, UserFacingError):
    """The store cannot do what was asked (unknown session, a turn saved elsewhere, newer schema)."""


class UnsafePathError(StoreError):
    """A path built from a name or an id would not stay inside the store's folder it belongs in."""


def is_game_id(value: Any) -> bool:
    """Whether ``value`` may be a game's id (``GAME_ID``): letters, digits, - and _, 1..64 of them."""
    return isinstance(value, str) and _GAME_ID.fullmatch(value) is not None


def confined(folder: str | os.PathLike, *names: str) -> Path:
    """``folder/names[0]/names[1]...``, or UnsafePathError unless each name is one plain path component
    and the whole resolves (symbolic links followed) strictly inside ``folder`` (itself resolved, so a
    store kept behind a link of its owner's still works). The one gate for every path the store and the
    character book build from a name or an id: nothing is written or deleted outside them."""
    folder = Path(folder)
    for name in names:
        if not isinstance(name, str) or name in ("", ".", "..") or "\0" in name or "/" in name or \
                (os.sep in name) or (os.altsep is not None and os.altsep in name):
            raise UnsafePathError(f"{name!r} is not a plain file name: refused as a path inside {folder}")
    path = folder.joinpath(*names)
    base, real = folder.resolve(), path.resolve()
    if real == base or not real.is_relative_to(base):
        raise UnsafePathError(f"{path} leads outside {folder} (to {real}): refused")
    return path


class SessionStore:
    def __init__(self, root: str | os.PathLike | None = None, clean: bool = True) -> None:
        self.root = Path(root).expanduser() if root is not None else default_store_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        self.db_path = self.root / DB_NAME
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) == 1:  # version 1 had no layers: every turn of it was drawn whole
                db.execute("BEGIN IMMEDIATE")
                if "layers" not in {c[1] for c in db.execute("PRAGMA table_info(turns)")}:
                    db.execute("ALTER TABLE turns ADD COLUMN layers BLOB")
                db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                db.execute("COMMIT")
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError(f"{self.db_path}: schema version {row[0]}, this code reads {SCHEMA_VERSION}")
        if clean:
            self.clean_orphans()

    def __repr__(self) -> str:
        return f"SessionStore({str(self.root)!r})"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.db_path, timeout=30.0, isolation_level=None)  # autocommit; BEGIN explicitly
        try:
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=FULL")  # a committed turn survives a power cut, not only a kill
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # ------------------------------------------------------------------------- sessions
    def schema_version(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])

    def create_session(self, characters: list[str], seed: int, model: dict[str, Any] | None = None,
                       session_id: str | None = None) -> SessionRow:
        """A new game, with a fresh random id or ``session_id`` (which must match ``GAME_ID`` and be free)."""
        now = time.time()
        if session_id is not None and not is_game_id(session_id):
            raise StoreError(f"{session_id!r} is not a game id (1..64 letters, digits, - and _)")
        sid = session_id or secrets.token_hex(6)
        try:
            with self._transaction() as db:
                db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)",
                           (sid, json.dumps(list(characters)), int(seed), json.dumps(model or {}), now, now))
        except sqlite3.IntegrityError:
            raise StoreError(f"a game {sid!r} is already saved in {self.root}") from None
        return SessionRow(sid, list(characters), int(seed), model or {}, now, now)

    def get_session(self, session_id: str) -> SessionRow:
        rows = self._sessions("WHERE s.id = ?", (session_id,))
        if not rows:
            raise StoreError(f"no saved game {session_id!r} in {self.root} (animegamer sessions list)")
        return rows[0]

    def list_sessions(self) -> list[SessionRow]:
        """Newest first."""
        return self._sessions("", ())

    def _sessions(self, where: str, params: tuple) -> list[SessionRow]:
        q = f"""SELECT s.id, s.characters, s.seed, s.model, s.created_at, s.updated_at,
                       (SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id),
                       (SELECT instruction FROM turns t WHERE t.session_id = s.id ORDER BY idx DESC LIMIT 1),
                       (SELECT states FROM turns t WHERE t.session_id = s.id ORDER BY idx DESC LIMIT 1)
                FROM sessions s {where} ORDER BY s.updated_at DESC, s.id"""
        with self._connect() as db:
            return [SessionRow(r[0], json.loads(r[1]), r[2], json.loads(r[3]), r[4], r[5], r[6], r[7] or "",
                               json.loads(r[8]) if r[8] else None)
                    for r in db.execute(q, params)]

    def delete_session(self, session_id: str, only: list[Path] | None = None) -> None:
        """Rows first (one transaction), then the clips: a crash in between leaves only orphans. The files
        removed are those of the game's own clip folder, only when that folder is confined (a ``GAME_ID``,
        not a link out): a game whose id is not one (left by an older version) loses its rows only.
        ``only``: just these files of the folder (a failed restore removes what it wrote, nothing else)."""
        self.get_session(session_id)
        with self._transaction() as db:
            db.execute("DELETE FROM turns WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        try:
            folder = self.clip_dir(session_id)
        except UnsafePathError:
            return
        if only is not None:
            doomed = [confined(folder, p.name) for p in only if p.parent == folder]
        else:
            doomed = [p for p in folder.iterdir() if p.is_file() or p.is_symlink()] if folder.is_dir() else []
        for p in doomed:
            p.unlink(missing_ok=True)  # a link: the link itself, never what it points to
        with contextlib.suppress(OSError):  # not empty (a file this call was not to touch) or gone
            folder.rmdir()

    # ------------------------------------------------------------------------- turns
    def clip_dir(self, session_id: str) -> Path:
        """The folder of a game's clips (UnsafePathError for an id that is not a ``GAME_ID``)."""
        if not is_game_id(session_id):
            raise UnsafePathError(f"{session_id!r} is not a game id: no clip folder is made of it")
        return confined(self.root / CLIPS_DIR, session_id)

    def new_clip_path(self, session_id: str, idx: int) -> Path:
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise StoreError(f"turn {idx!r} is not a turn number")
        return confined(self.clip_dir(session_id), f"{idx:04d}-{secrets.token_hex(4)}.mp4")

    def _clip_file(self, rel: str) -> Path | None:
        """The clip a turn row names (``clips/<game>/<file>``), or None where the name would lead anywhere
        but a file inside the clips folder."""
        parts = rel.split("/") if isinstance(rel, str) else []
        if len(parts) < 2 or parts[0] != CLIPS_DIR:
            return None
        try:
            return confined(self.root / CLIPS_DIR, *parts[1:])
        except UnsafePathError:
            return None

    def save_turn(self, turn: TurnRow) -> None:
        """Commit one turn whose clip is ALREADY on disk (in the game's clip folder), in one transaction."""
        clip = Path(turn.clip)
        if clip.resolve() != confined(self.clip_dir(turn.session_id), clip.name).resolve():
            raise UnsafePathError(f"turn {turn.idx}: clip {clip} is not in game {turn.session_id}'s clip folder")
        if not clip.is_file():
            raise StoreError(f"turn {turn.idx}: clip {turn.clip} is not on disk; write it before saving the turn")
        clip_rel = f"{CLIPS_DIR}/{turn.session_id}/{clip.name}"
        try:
            with self._transaction() as db:
                n = db.execute("SELECT COUNT(*) FROM turns WHERE session_id = ?", (turn.session_id,)).fetchone()[0]
                if n != turn.idx:
                    raise StoreError(f"game {turn.session_id} has {n} saved turns, so turn {turn.idx} cannot be "
                                     "saved: it was continued elsewhere (another tab or process); open it again")
                db.execute("INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (
                    turn.session_id, turn.idx, turn.instruction, int(turn.motion_level), json.dumps(turn.deltas),
                    json.dumps(turn.states_before), json.dumps(turn.states), s_a_to_blob(turn.s_a), int(turn.seed),
                    json.dumps(turn.probs), clip_rel, json.dumps(turn.timings), turn.created_at or time.time(),
                    turn.layers))
                if turn.layers is not None:  # the game goes on from its newest scene only: the older ones go
                    db.execute("UPDATE turns SET layers = NULL WHERE session_id = ? AND idx < ?",
                               (turn.session_id, turn.idx))
                db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (time.time(), turn.session_id))
        except sqlite3.IntegrityError as e:
            raise StoreError(f"game {turn.session_id}: turn {turn.idx} cannot be saved ({e})") from e

    def load_turns(self, session_id: str, only: int | None = None) -> list[TurnRow]:
        """Every turn of a game in order (``only``: just turn ``only``, or nothing if it has none)."""
        where, params = ("AND idx = ?", (session_id, int(only))) if only is not None else ("", (session_id,))
        with self._connect() as db:
            rows = db.execute(f"""SELECT idx, instruction, motion_level, deltas, states_before, states, s_a, seed,
                                         clip, probs, timings, created_at, layers
                                  FROM turns WHERE session_id = ? {where} ORDER BY idx""", params).fetchall()
        out = []
        for r in rows:
            clip = self._clip_file(r[8])
            if clip is None:  # not written by this code's save_turn: never followed
                raise UnsafePathError(f"game {session_id}: turn {r[0]} names the clip {r[8]!r}, not a file of the "
                                      f"store's clips folder; delete the game (animegamer sessions delete)")
            out.append(TurnRow(session_id, r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), json.loads(r[5]),
                               blob_to_s_a(r[6]), r[7], clip, json.loads(r[9]), json.loads(r[10]), r[11],
                               bytes(r[12]) if r[12] is not None else None))
        return out

    # ------------------------------------------------------------------------- housekeeping
    def clean_orphans(self, grace_s: float = ORPHAN_GRACE_S) -> list[Path]:
        """Remove clips (and temp files of interrupted writes) that no turn row names and that are
        older than ``grace_s`` seconds. Returns what was removed."""
        clips = self.root / CLIPS_DIR
        if not clips.is_dir():
            return []
        with self._connect() as db:
            known = {r[0] for r in db.execute("SELECT clip FROM turns")}
        now, removed = time.time(), []
        for p in clips.rglob("*"):
            if not p.is_file():
                continue
            rel = p.relative_to(self.root).as_posix()
            with contextlib.suppress(FileNotFoundError):
                if rel not in known and now - p.stat().st_mtime >= grace_s:
                    p.unlink()
                    removed.append(p)
        with self._connect() as db:
            sessions = {r[0] for r in db.execute("SELECT id FROM sessions")}
        for d in clips.iterdir():  # empty dirs of deleted sessions (a live session may be writing into its own)
            if d.is_dir() and d.name not in sessions:
                with contextlib.suppress(OSError):
                    d.rmdir()
        return removed

    def export_dir(self) -> Path:
        return self.root / EXPORTS_DIR

    def export_path(self, session_id: str, suffix: str) -> Path:
        """Where a game's export of this kind (".mp4", ".png", ".zip") is written by default, confined."""
        if not is_game_id(session_id):
            raise UnsafePathError(f"{session_id!r} is not a game id: no export is named after it")
        return confined(self.export_dir(), session_id + suffix)


def frames_of(clip: Path) -> np.ndarray:
    """A saved clip back as uint8 (T, H, W, 3)."""

    return read_video(clip)


# ----------------------------------------------------------------------------- export
STATE_COLORS = {"stamina": (92, 200, 120), "social": (90, 160, 240), "entertainment": (245, 170, 70)}
_BG, _FG, _DIM, _TRACK = (24, 26, 34), (235, 235, 240), (150, 155, 170), (55, 58, 70)
EXPORT_MIN_HEIGHT = 256
EXPORT_MIN_WIDTH = 384


def _wrap(draw, text: str, font, width: int, max_lines: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = (line + " " + word).strip()
        if draw.textlength(trial, font=font) <= width or not line:
            line = trial
        else:
            lines.append(line)
            line = word
    lines.append(line)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1].rstrip(".") + "..."
    return lines


def draw_state_bars(draw, x: int, y: int, width: int, states: dict[str, int], deltas: dict[str, int] | None,
                    font, row_h: int = 18) -> int:
    """Three labelled bars (0..100) starting at (x, y); returns the y below them."""
    label_w = 104
    for i, name in enumerate(("stamina", "social", "entertainment")):
        yy = y + i * row_h
        v = int(states[name])
        d = f" ({deltas[name]:+d})" if deltas and deltas.get(name) else ""
        draw.text((x, yy), name, fill=_DIM, font=font)
        bx0, bx1 = x + label_w, x + width - 64
        draw.rectangle([bx0, yy + 3, bx1, yy + row_h - 5], fill=_TRACK)
        draw.rectangle([bx0, yy + 3, bx0 + round((bx1 - bx0) * v / 100), yy + row_h - 5], fill=STATE_COLORS[name])
        draw.text((bx1 + 6, yy), f"{v}{d}", fill=_FG, font=font)
    return y + 3 * row_h


def _zoom_to(frames: np.ndarray, min_h: int) -> np.ndarray:
    zoom = max(1, -(-min_h // frames.shape[-3]))
    if zoom == 1:
        return frames
    interp = cv2.INTER_NEAREST if frames.shape[-3] < 64 else cv2.INTER_LINEAR
    return np.stack([cv2.resize(f, None, fx=zoom, fy=zoom, interpolation=interp) for f in frames])


def annotated_frames(frames: np.ndarray, turn: TurnRow) -> np.ndarray:
    """One turn's frames, zoomed, above a panel: turn number, instruction, motion level, state bars."""

    big = _zoom_to(frames, EXPORT_MIN_HEIGHT)
    h, w = big.shape[1:3]
    width = max(w, EXPORT_MIN_WIDTH)
    panel = Image.new("RGB", (width, 112), _BG)
    draw = ImageDraw.Draw(panel)
    face, small = font(14), font(12)
    draw.text((8, 4), f"Turn {turn.idx + 1}   motion level {turn.motion_level}", fill=_FG, font=face)
    for i, line in enumerate(_wrap(draw, turn.instruction, small, width - 16, 2)):
        draw.text((8, 22 + i * 15), line, fill=_DIM, font=small)
    draw_state_bars(draw, 8, 56, width - 16, turn.states, turn.deltas, small)
    panel_np = np.asarray(panel)
    out = np.empty((len(big), h + panel_np.shape[0], width, 3), np.uint8)
    out[:] = _BG
    x0 = (width - w) // 2
    out[:, :h, x0:x0 + w] = big
    out[:, h:] = panel_np
    return out


def storyboard(turns: list[TurnRow], frames: list[np.ndarray], columns: int = 4) -> np.ndarray:
    """One tile per turn (the shot's middle frame + its instruction, motion level, states)."""
    tiles = []
    for turn, f in zip(turns, frames):
        tile = annotated_frames(f[len(f) // 2: len(f) // 2 + 1], turn)[0]
        tiles.append(tile)
    th = max(t.shape[0] for t in tiles)
    tw = max(t.shape[1] for t in tiles)
    cols = min(columns, len(tiles))
    rows = -(-len(tiles) // cols)
    pad = 8
    sheet = np.full((rows * (th + pad) + pad, cols * (tw + pad) + pad, 3), _BG, np.uint8)
    for k, t in enumerate(tiles):
        r, c = divmod(k, cols)
        sheet[pad + r * (th + pad): pad + r * (th + pad) + t.shape[0], pad + c * (tw + pad): pad + c * (tw + pad) + t.shape[1]] = t
    return sheet


def export_session(store: SessionStore, session_id: str, out: str | os.PathLike | None = None,
                   fps: int = 8) -> tuple[Path, Path]:
    """``out`` (a path stem; default ``<store>/exports/<id>``) + .mp4 (every turn's shot with the
    states drawn under it) and .png (the storyboard). Both written atomically."""

    store.get_session(session_id)
    turns = store.load_turns(session_id)
    if not turns:
        raise StoreError(f"game {session_id} has no turns yet: nothing to export")
    frames = [frames_of(t.clip) for t in turns]
    # ``out`` is the caller's own choice (the CLI's --out); the default is built from the id, so confined
    stem = Path(out) if out is not None else store.export_path(session_id, ".mp4").with_suffix("")
    if stem.suffix.lower() in (".mp4", ".png"):
        stem = stem.with_suffix("")
    video = np.concatenate([annotated_frames(f, t) for f, t in zip(frames, turns)])
    mp4 = save_mp4(video, stem.with_name(stem.name + ".mp4"), fps=fps)
    board = Image.fromarray(storyboard(turns, frames))
    png = atomic_write(stem.with_name(stem.name + ".png"), lambda fh: board.save(fh, format="PNG"))
    return mp4, png
