"""A saved game as one file, with the player's own characters it plays: to keep, move or share.

    animegamer sessions archive ID [--out neko.zip]       # the game, its clips and its custom characters
    animegamer sessions restore neko.zip                   # a saved game here (its id, or a new one if taken)
    game.archive_session(gid, "neko.zip"); game.restore_session("neko.zip")
    GET /games/{id}/archive.zip;  POST /games/restore (the zip as the body)

The file is a zip (format ``animegamer-saved-game``, version 2; version 1, without layers, is read too)::

    game.json              format, version, the session (characters, seed, model) and its turns'
                           fields (instruction, level, states, seeds, probabilities, timings)
    s_a.safetensors        each turn's s_a ("turn_0000", ...): the context the game continues from
    clips/0000.mp4 ...     each turn's shot
    layers/NNNN.safetensors  the scene after the last turn, where it was drawn in layers (decoder/layered.py):
                           what the game goes on from
    characters.json        the book entries of the custom characters the game names
    characters/0.png ...   their reference sheets, and the cut-outs of those made from a picture

A file to restore is untrusted: it may come from anyone (docs/trust.md). Nothing in it is ever used as
a path: members are read by the names above only (a file holding any other member is refused), the
game's id is kept only when it is a ``GAME_ID`` free here (otherwise the game gets a new one), and every
path the restore writes is built by the store and confined to its folders (``store.confined``). The work
is bounded before it is done: the file's size, its number of members (read from the zip's end record,
before zipfile builds an entry for each), every member's declared size against a limit of its kind and
against its compressed size (a zip bomb is refused from its directory, unread), and then its real size
while it is streamed (never read whole first). Every field is checked for its type and range, pictures
by their header's size before they are decoded, clips by their container's header.

Restoring reads and checks the whole file (the clips by streaming them through their checksums) before
it writes anything. A custom character of the archive whose name is already a character here is reused
only when it is the same character; otherwise the restore is refused with what to do. A failure while
writing removes what this restore wrote (its rows, its clips, the characters it added), nothing else, so
the saves are as they were.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import cv2
import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from animegamer.core.atomic_io import atomic_write
from animegamer.core.errors import UserFacingError
from animegamer.decoder.layered import MAX_LAYERS_BYTES, LayeredScene
from animegamer.game.characters import MAX_PICTURE_BYTES, CharacterBook, CharacterError
from animegamer.game.store import SessionStore, StoreError, TurnRow, is_game_id
from animegamer.game.text import MAX_INSTRUCTION_CHARS, describe_characters, unsafe_characters
from animegamer.world.rules import DELTA_VALUES, HIGH, LOW, STATE_NAMES

FORMAT = "animegamer-saved-game"
VERSION = 2  # 2: layers/ (version 1 has none and is read as it is)
READ_VERSIONS = (1, 2)
TURN_FIELDS = ("idx", "instruction", "motion_level", "deltas", "states_before", "states", "seed", "probs",
               "timings", "created_at")
# Limits: far above a real game (the shipped model's turn is ~1.5 KB of game.json, 72 KB of s_a, ~20 KB of
# clip; the paper's s_a is 1.7 MB), far below what would exhaust a machine.
MAX_ARCHIVE_BYTES = 4 * 1024**3  # the file, from this machine (the CLI)
MAX_UPLOAD_BYTES = 512 * 1024**2  # the file, sent to a server (HTTP API, web page): thousands of turns of the
# shipped model, hundreds of the paper's
MAX_UNPACKED_BYTES = 4 * 1024**3  # all members together
MAX_TURNS = 50_000
MAX_CHARACTERS = 64  # a game's characters, and the custom ones of the file
MAX_MEMBERS = 4 + MAX_TURNS + 2 * MAX_CHARACTERS
MAX_GAME_JSON = 32 * 1024**2  # parsed in memory: a JSON of this size takes a few hundred MB as Python objects
MAX_BOOK_JSON = 4 * 1024**2
MAX_CLIP_BYTES = 256 * 1024**2
MAX_S_A_VALUES = 4 * 1024**2  # one turn's s_a: N x D float32 values (the paper's: 226 x 1920)
MAX_CLIP_SIDE, MAX_CLIP_FRAMES = 4096, 10_000  # a clip's frames as its container declares them
MAX_RATIO = 100  # unpacked / packed bytes of one member: JSON packs ~10x, MP4 / PNG / floats ~1x; bombs 1000x
RATIO_FREE_BYTES = 1024**2  # members smaller than this may pack as well as they like: they cannot exhaust anything
CHUNK = 1024**2  # members are streamed in pieces of this size
MAX_SEED = 2**63 - 1
MAX_PROBS, MAX_TIMINGS = 1024, 64  # the engine's probabilities: a few fields of a few values; timings: a few stages
_MEMBER = re.compile(r"game\.json|s_a\.safetensors|characters\.json|clips/[0-9]{4,}\.mp4"
                     r"|layers/[0-9]{4,}\.safetensors"
                     r"|characters/[0-9]+(?:_cutout)?\.png")  # every name a saved game's member may have
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError)


class ArchiveError(ValueError, UserFacingError):
    """A saved-game file cannot be written or restored (the message says why)."""


@dataclass
class SavedGame:
    """An archive read into memory and checked (``clips`` empty when they were only checked: restore
    streams them into the store)."""
    session: dict[str, Any]
    turns: list[dict[str, Any]]
    s_a: dict[int, torch.Tensor]
    clips: dict[int, bytes]
    characters: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> book entry
    layers: dict[int, bytes] = field(default_factory=dict)  # turn -> its scene in layers (checked)
    pictures: dict[str, tuple[bytes, bytes | None]] = field(default_factory=dict)  # name -> (reference, cut-out)


def write_archive(store: SessionStore, book: CharacterBook, session_id: str, out: str | Path | None = None) -> Path:
    """Write saved game ``session_id`` of ``store`` (with its custom characters from ``book``) to
    ``out`` (default: ``<store>/exports/<id>.zip``), atomically. Returns the path."""
    row = store.get_session(session_id)
    turns = store.load_turns(session_id)
    out = Path(out) if out is not None else store.export_path(session_id, ".zip")
    entries = book.entries()
    custom = [n for n in row.characters if n in entries]
    meta = {"format": FORMAT, "version": VERSION,
            "session": {"id": row.id, "characters": row.characters, "seed": row.seed, "model": row.model,
                        "created_at": row.created_at, "updated_at": row.updated_at},
            "turns": [{k: getattr(t, k) for k in TURN_FIELDS} for t in turns]}
    book_json = {"version": 1, "characters": {n: entries[n] for n in custom}}

    def write(fh) -> None:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("game.json", json.dumps(meta, indent=1))
            z.writestr("s_a.safetensors", save({f"turn_{t.idx:04d}": t.s_a.float().contiguous() for t in turns})
                       if turns else b"")
            for t in turns:
                z.write(t.clip, f"clips/{t.idx:04d}.mp4", compress_type=zipfile.ZIP_STORED)  # MP4 is compressed
                if t.layers is not None:
                    z.writestr(f"layers/{t.idx:04d}.safetensors", t.layers)
            z.writestr("characters.json", json.dumps(book_json, indent=1))
            for i, name in enumerate(custom):
                z.write(book.reference_path(name), f"characters/{i}.png")
                if entries[name].get("picture"):
                    z.write(book.sprite_path(name), f"characters/{i}_cutout.png")

    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, write)


# ----------------------------------------------------------------------------- reading, bounded
def _declared_entries(fh: BinaryIO, size: int) -> int | None:
    """How many members the zip's end record declares (None when it has none: zipfile then says why).
    Read before ``zipfile.ZipFile``, which builds an entry object for every member of the central
    directory: a 500 MB file of 46-byte entries would be ten million of them."""
    fh.seek(max(0, size - (22 + 65535)))  # the end record (22 bytes) and at most a 64 KB comment
    tail = fh.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    entries = struct.unpack_from("<H", tail, at + 10)[0]
    if entries == 0xFFFF and at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":  # zip64: the count is elsewhere
        offset = struct.unpack_from("<Q", tail, at - 20 + 8)[0]
        if offset + 56 <= size:
            fh.seek(offset)
            record = fh.read(56)
            if record[:4] == b"PK\x06\x06":
                entries = struct.unpack_from("<Q", record, 32)[0]
    fh.seek(0)
    return entries


def _member_limit(name: str) -> int:
    """The most a member of this name may unpack to."""
    if name == "game.json":
        return MAX_GAME_JSON
    if name == "characters.json":
        return MAX_BOOK_JSON
    if name.startswith("clips/"):
        return MAX_CLIP_BYTES
    if name.startswith("characters/"):
        return MAX_PICTURE_BYTES
    if name.startswith("layers/"):
        return MAX_LAYERS_BYTES
    return MAX_UNPACKED_BYTES  # s_a.safetensors: its limit by the number of turns is checked when it is read


class _Members:
    """A saved-game zip opened for checked reading: its directory checked on opening (names, declared
    sizes, compression), every read streamed with a count of the real bytes."""

    def __init__(self, z: zipfile.ZipFile, where: str, size: int) -> None:
        self.z, self.where = z, where
        infos = z.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ArchiveError(f"{where} holds {len(infos)} files; a saved game holds at most {MAX_MEMBERS}")
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            if not _MEMBER.fullmatch(name):
                raise ArchiveError(f"{where} holds {name[:80]!r}, which is no part of a saved game: not restored")
            if name in self.infos:
                raise ArchiveError(f"{where} holds {name} twice: not a saved game of animegamer")
            if info.flag_bits & 0x1:
                raise ArchiveError(f"{where}: {name} is encrypted; saved games are not")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ArchiveError(f"{where}: {name} is packed with method {info.compress_type}; saved games are "
                                   "stored or deflated")
            limit = _member_limit(name)
            if info.file_size > limit:
                raise ArchiveError(f"{where}: {name} unpacks to {info.file_size} bytes; a saved game's is at most "
                                   f"{limit}")
            if info.file_size > RATIO_FREE_BYTES and info.file_size > MAX_RATIO * info.compress_size:
                raise ArchiveError(f"{where}: {name} unpacks {info.file_size // max(1, info.compress_size)} times "
                                   f"larger than it is packed (a zip bomb): not a saved game")
            self.infos[name] = info
        if sum(i.compress_size for i in infos) > size:
            raise ArchiveError(f"{where}: its files claim more packed bytes than it holds: not a saved game")
        if sum(i.file_size for i in infos) > MAX_UNPACKED_BYTES:
            raise ArchiveError(f"{where} unpacks to more than {MAX_UNPACKED_BYTES // 1024**3} GB: not a saved game")

    @contextlib.contextmanager
    def _damage(self, name: str) -> Iterator[None]:
        """A failure of zipfile or zlib on a member as the ArchiveError that names it."""
        try:
            yield
        except _READ_ERRORS as e:  # a damaged member fails its CRC, its stream or its header here
            if isinstance(e, ArchiveError):
                raise
            raise ArchiveError(f"{self.where}: {name} is damaged ({e})") from None

    def copy(self, name: str, write: Callable[[bytes], Any], limit: int | None = None) -> int:
        """Stream member ``name`` to ``write`` piece by piece, counting its real bytes against what it
        declares and ``limit`` (ArchiveError the moment either is passed). Returns its size."""
        info = self.infos.get(name)
        if info is None:
            raise ArchiveError(f"{self.where} has no {name}: it is not a whole saved game (written by "
                               "`animegamer sessions archive`)")
        limit = min(info.file_size, _member_limit(name) if limit is None else limit)
        if info.file_size > limit:
            raise ArchiveError(f"{self.where}: {name} unpacks to {info.file_size} bytes; at most {limit} here")
        seen = 0
        with self._damage(name):
            member = self.z.open(info)
        with member:
            while True:
                with self._damage(name):
                    piece = member.read(CHUNK)
                if not piece:
                    break
                seen += len(piece)
                if seen > limit:  # zipfile stops at the declared size; this holds whatever reads the stream
                    raise ArchiveError(f"{self.where}: {name} unpacks to more than the {limit} bytes it declares")
                write(piece)  # outside _damage: a full disk is not a damaged file
        if seen != info.file_size:
            raise ArchiveError(f"{self.where}: {name} is damaged (it unpacks to {seen} bytes, not the "
                               f"{info.file_size} it declares)")
        return seen

    def read(self, name: str, limit: int | None = None) -> bytes:
        buf = io.BytesIO()
        self.copy(name, buf.write, limit)
        return buf.getvalue()

    def json(self, name: str, limit: int) -> Any:
        data = self.read(name, limit)
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, a 5000-digit number; nesting
            raise ArchiveError(f"{self.where}: its {name} is not JSON ({str(e)[:200]})") from None

    def check_clip(self, name: str) -> None:
        """Stream a clip through its checksum without keeping it; it must be an MP4 (an ``ftyp`` box first)."""
        head = bytearray()

        def look(piece: bytes) -> None:
            if len(head) < 12:
                head.extend(piece[:12])

        self.copy(name, look)
        if bytes(head[4:8]) != b"ftyp":
            raise ArchiveError(f"{self.where}: {name} is not an MP4 clip")


@contextlib.contextmanager
def _opened(source: str | Path | bytes | BinaryIO) -> Iterator[_Members]:
    """The archive at ``source`` (a path, its bytes, or a binary file object such as the spooled body of
    an upload) opened for checked reading, or ArchiveError."""
    own = None
    if isinstance(source, (bytes, bytearray)):
        where, fh, size = "the uploaded file", io.BytesIO(source), len(source)
    elif isinstance(source, (str, os.PathLike)):
        where, p = str(source), Path(source)
        if not p.exists():
            raise ArchiveError(f"{where}: no such file")
        if not p.is_file():  # a folder, a FIFO or a device is never opened
            raise ArchiveError(f"{where} is not a file")
        size = p.stat().st_size
        try:
            fh = own = p.open("rb")
        except OSError as e:  # not readable by this user
            raise ArchiveError(f"{where} cannot be read ({e.strerror})") from None
    else:
        where, fh = "the uploaded file", source
        size = fh.seek(0, os.SEEK_END)
        fh.seek(0)
    try:
        if size > MAX_ARCHIVE_BYTES:
            raise ArchiveError(f"{where} is {size} bytes; a saved game is at most {MAX_ARCHIVE_BYTES // 1024**3} GB")
        try:
            entries = _declared_entries(fh, size)
            if entries is not None and entries > MAX_MEMBERS:
                raise ArchiveError(f"{where} declares {entries} files; a saved game holds at most {MAX_MEMBERS}")
            z = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error) as e:
            if isinstance(e, ArchiveError):
                raise
            raise ArchiveError(f"{where} is not a saved game of animegamer (not a zip file: {e})") from None
        with z:
            yield _Members(z, where, size)
    finally:
        if own is not None:
            own.close()


# ----------------------------------------------------------------------------- checking the fields
def _shown(v: Any) -> str:
    """A value from the file as an error message shows it: escaped (no control character reaches a
    terminal or a page) and short."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_states(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == set(STATE_NAMES) and all(_is_int(x, LOW, HIGH) for x in v.values())


def _check_text(v: Any, what: str, longest: int) -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > longest:
        raise ValueError(f"{what} is not a text of 1..{longest} characters")
    bad = unsafe_characters(v)
    if bad:
        raise ValueError(f"{what} holds control or bidirectional characters ({describe_characters(bad)})")
    return v


def _check_session(session: Any) -> dict[str, Any]:
    """The session of game.json, checked (ValueError says what is wrong)."""
    if not isinstance(session, dict) or {"characters", "seed", "model"} - set(session):
        raise ValueError("it holds no session (characters, seed, model)")
    chars = session["characters"]
    if not isinstance(chars, list) or not 1 <= len(chars) <= MAX_CHARACTERS or \
            not all(isinstance(c, str) and 0 < len(c) <= 64 for c in chars) or len(set(chars)) != len(chars):
        raise ValueError(f"the session's characters are not a list of 1..{MAX_CHARACTERS} different names")
    if not _is_int(session["seed"], 0, MAX_SEED):
        raise ValueError(f"the session's seed {_shown(session['seed'])} is not an integer in 0..2^63-1")
    model = session["model"]
    if not isinstance(model, dict):
        raise ValueError("the session's model is not a mapping")
    if "start_states" in model and not _is_states(model["start_states"]):
        raise ValueError(f"the session's start states are not {', '.join(STATE_NAMES)} in {LOW}..{HIGH}")
    return {"id": session.get("id"), "characters": list(chars), "seed": session["seed"], "model": model}


def _check_turn(t: Any, i: int) -> dict[str, Any]:
    """Turn ``i`` of game.json, checked field by field (ValueError says which is wrong)."""
    if not isinstance(t, dict) or set(TURN_FIELDS) - set(t):
        raise ValueError(f"turn {i} does not hold {', '.join(TURN_FIELDS)}")
    if not _is_int(t["idx"], i, i):
        raise ValueError(f"its turns are not numbered 0..n-1 (turn {i} says {_shown(t['idx'])})")
    _check_text(t["instruction"], f"turn {i}'s instruction", MAX_INSTRUCTION_CHARS)
    if not _is_int(t["motion_level"], 1, 5):
        raise ValueError(f"turn {i}'s motion level {_shown(t['motion_level'])} is not 1..5")
    d = t["deltas"]
    if not isinstance(d, dict) or set(d) != set(STATE_NAMES) or \
            not all(_is_int(d[k], -1, 1) and d[k] in DELTA_VALUES[k] for k in STATE_NAMES):
        raise ValueError(f"turn {i}'s deltas are not {', '.join(f'{k} in {v}' for k, v in DELTA_VALUES.items())}")
    for k in ("states_before", "states"):
        if not _is_states(t[k]):
            raise ValueError(f"turn {i}'s {k} are not {', '.join(STATE_NAMES)} in {LOW}..{HIGH}")
    if not _is_int(t["seed"], 0, MAX_SEED):
        raise ValueError(f"turn {i}'s seed is not an integer in 0..2^63-1")
    p = t["probs"]
    if not isinstance(p, list) or len(p) > MAX_PROBS or \
            not all(isinstance(x, list) and len(x) <= MAX_PROBS and all(_is_number(v) for v in x) for x in p):
        raise ValueError(f"turn {i}'s probabilities are not lists of numbers")
    tm = t["timings"]
    if not isinstance(tm, dict) or len(tm) > MAX_TIMINGS or \
            not all(len(k) <= 64 and _is_number(v) for k, v in tm.items()):
        raise ValueError(f"turn {i}'s timings are not a few named numbers")
    if not _is_number(t["created_at"]) or t["created_at"] < 0:
        raise ValueError(f"turn {i}'s created_at is not a time")
    return {k: t[k] for k in TURN_FIELDS}


def _read_s_a(m: _Members, n_turns: int) -> dict[int, torch.Tensor]:
    """Each turn's s_a: 2-D, floating, finite, one shape for all turns."""
    if n_turns == 0:
        return {}
    data = m.read("s_a.safetensors", min(MAX_UNPACKED_BYTES, CHUNK + n_turns * (MAX_S_A_VALUES * 4 + 64)))
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, TypeError, RuntimeError) as e:
        raise ArchiveError(f"{m.where}: s_a.safetensors is not a safetensors file ({e})") from None
    del data
    s_a, shape = {}, None
    for i in range(n_turns):
        key = f"turn_{i:04d}"
        x = tensors.get(key)
        if x is None:
            raise ArchiveError(f"{m.where}: s_a.safetensors has no {key}")
        if x.ndim != 2 or not x.is_floating_point() or not 0 < x.numel() <= MAX_S_A_VALUES:
            raise ArchiveError(f"{m.where}: s_a.safetensors' {key} is not an N x D float tensor of at most "
                               f"{MAX_S_A_VALUES} values (it is {x.dtype} {tuple(x.shape)})")
        if shape is not None and x.shape != shape:
            raise ArchiveError(f"{m.where}: s_a.safetensors' {key} is {tuple(x.shape)}, turn 0's {tuple(shape)}")
        shape = x.shape
        x = x.float().contiguous()
        if not torch.isfinite(x).all():
            raise ArchiveError(f"{m.where}: s_a.safetensors' {key} holds NaN or infinite values")
        s_a[i] = x
    return s_a


def _read_checked(m: _Members, keep_clips: bool) -> SavedGame:
    """Everything of the archive read and checked; the clips streamed through their checksums (and kept
    only with ``keep_clips``). ArchiveError on the first thing wrong."""
    where = m.where
    meta = m.json("game.json", MAX_GAME_JSON)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        raise ArchiveError(f"{where} is not a saved game of animegamer (format {_shown(fmt)})")
    if meta.get("version") not in READ_VERSIONS:
        raise ArchiveError(f"{where} is a saved game of version {_shown(meta.get('version'))}; this animegamer "
                           f"reads version {VERSION}: update animegamer to restore it")
    raw_turns = meta.get("turns")
    try:
        session = _check_session(meta.get("session"))
        if not isinstance(raw_turns, list) or len(raw_turns) > MAX_TURNS:
            raise ValueError(f"its turns are not a list of at most {MAX_TURNS}")
        turns = [_check_turn(t, i) for i, t in enumerate(raw_turns)]
    except ValueError as e:
        raise ArchiveError(f"{where}: game.json does not hold a session and its turns: {e}") from None
    s_a = _read_s_a(m, len(turns))
    book = m.json("characters.json", MAX_BOOK_JSON)
    characters = book.get("characters") if isinstance(book, dict) else None
    if not isinstance(characters, dict) or len(characters) > MAX_CHARACTERS:
        raise ArchiveError(f"{where}: characters.json does not hold characters")
    strays = [n for n in characters if n not in session["characters"]]
    if strays:
        raise ArchiveError(f"{where}: characters.json holds {', '.join(map(repr, strays[:3]))}, whom the game does "
                           "not play")
    pictures, wanted = {}, {"game.json", "s_a.safetensors", "characters.json"}
    for i, (name, entry) in enumerate(characters.items()):
        cutout = None
        if isinstance(entry, dict) and entry.get("picture") is True:
            cutout = m.read(f"characters/{i}_cutout.png")
            wanted.add(f"characters/{i}_cutout.png")
        pictures[name] = (m.read(f"characters/{i}.png"), cutout)
        wanted.add(f"characters/{i}.png")
    clip_names = {t["idx"]: f"clips/{t['idx']:04d}.mp4" for t in turns}
    layers = {}
    for t in turns[-1:]:  # only the last turn's scene is kept: the game goes on from it
        name = f"layers/{t['idx']:04d}.safetensors"
        if name in m.infos:
            data = m.read(name)
            try:
                LayeredScene.from_bytes(data)
            except ValueError as e:
                raise ArchiveError(f"{where}: {name} is not a scene in layers ({str(e)[:200]})") from None
            layers[t["idx"]] = data
            wanted.add(name)
    stray = sorted(set(m.infos) - wanted - set(clip_names.values()))
    if stray:
        raise ArchiveError(f"{where} holds {stray[0]}, which this saved game does not use: not restored")
    clips = {}
    for idx, name in clip_names.items():
        m.check_clip(name)
        if keep_clips:
            clips[idx] = m.read(name)
    return SavedGame(session, turns, s_a, clips, characters, pictures=pictures, layers=layers)


def read_archive(source: str | Path | bytes | BinaryIO) -> SavedGame:
    """A saved-game file (a path, its bytes or a binary file object) read and checked, or ArchiveError
    saying what is wrong. Its clips are read into memory: ``restore_archive`` streams them instead."""
    with _opened(source) as m:
        return _read_checked(m, keep_clips=True)


def _check_clip_file(path: Path, what: str) -> None:
    """ArchiveError unless the written clip opens as a video whose frames, as its header declares them,
    are ones the game can decode (a clip of 16k x 16k frames would take gigabytes when played)."""
    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise ArchiveError(f"{what} is not a video")
        w, h = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    finally:
        cap.release()
    if not (0 < w <= MAX_CLIP_SIDE and 0 < h <= MAX_CLIP_SIDE and 0 <= n <= MAX_CLIP_FRAMES):
        raise ArchiveError(f"{what} is a video of {w} x {h} pixels and {n} frames; a shot is at most "
                           f"{MAX_CLIP_SIDE} pixels a side and {MAX_CLIP_FRAMES} frames")


# ----------------------------------------------------------------------------- restoring
def restore_archive(store: SessionStore, book: CharacterBook, source: str | Path | bytes | BinaryIO,
                    cast: list[str]) -> str:
    """Restore a saved-game file into ``store`` and its custom characters into ``book``; ``cast``: the
    names the model plays (a custom character may not take one). Returns the restored game's id: the
    archived one where it is a ``GAME_ID`` free here, else a new one. ArchiveError (nothing changed)
    for a file that is not a saved game this store can take."""
    with _opened(source) as m:
        game = _read_checked(m, keep_clips=False)
        mine = book.entries()
        mine_folded = {n.lower(): n for n in mine}
        fixed = {c.lower(): c for c in cast if c not in mine}
        adopt = []
        for name, entry in game.characters.items():
            try:
                book.check_entry(name, entry, *game.pictures[name])
            except (CharacterError, ValueError) as e:
                raise ArchiveError(f"the saved game's character {_shown(name)} cannot be restored: {e}") from None
            if name.lower() in fixed:
                raise ArchiveError(f"the saved game's own character {_shown(name)} has the name of a character of this "
                                   f"model ({fixed[name.lower()]}): it cannot be restored here")
            if name.lower() in mine_folded:
                here = mine_folded[name.lower()]
                if here != name or not book.same(name, entry, game.pictures[name][1]):
                    raise ArchiveError(f"a character named {here!r} is already yours here and looks different from "
                                       f"the saved game's {name!r}: remove yours (animegamer characters remove "
                                       f"{here!r}) or restore into another saves directory (--store)")
            else:
                adopt.append(name)
        unknown = [c for c in game.session["characters"] if c not in game.characters and c.lower() not in fixed]
        if unknown:
            shown = ", ".join(repr(c[:40]) for c in unknown[:5])
            raise ArchiveError(f"the saved game plays {shown}, who {'is' if len(unknown) == 1 else 'are'} "
                               f"neither in this model's cast nor in the file")
        sid = game.session["id"]
        keep = is_game_id(sid) and sid not in {r.id for r in store.list_sessions()}
        args = (game.session["characters"], game.session["seed"], game.session["model"])
        try:
            row = store.create_session(*args, session_id=sid if keep else None)
        except StoreError:  # the id was taken meanwhile (another restore)
            row = store.create_session(*args)
        written: list[Path] = []
        added: list[str] = []
        try:
            for name in adopt:
                reference, cutout = game.pictures[name]
                book.adopt(name, game.characters[name], reference, cutout)
                added.append(name)
            for t in game.turns:
                clip = store.new_clip_path(row.id, t["idx"])
                written.append(clip)  # before it exists: a write that fails half way is removed too
                member = f"clips/{t['idx']:04d}.mp4"
                atomic_write(clip, lambda fh, name=member: m.copy(name, fh.write))
                _check_clip_file(clip, f"{m.where}: {member}")
                store.save_turn(TurnRow(row.id, t["idx"], t["instruction"], t["motion_level"], t["deltas"],
                                        t["states_before"], t["states"], game.s_a[t["idx"]], t["seed"], clip,
                                        t["probs"], t["timings"], t["created_at"], game.layers.get(t["idx"])))
        except BaseException:
            with contextlib.suppress(StoreError):
                store.delete_session(row.id, only=written)
            for name in added:
                with contextlib.suppress(CharacterError):
                    book.remove(name)
            raise
    return row.id
