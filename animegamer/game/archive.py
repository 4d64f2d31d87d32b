"""A saved game as one file, with the player's own characters it plays: to keep, move or share.

    animegamer sessions archive ID [--out neko.zip]       # the game, its clips and its custom characters
    animegamer sessions restore neko.zip                   # a saved game here (its id, or a new one if taken)
    game.archive_session(gid, "neko.zip"); game.restore_session("neko.zip")
    GET /games/{id}/archive.zip;  POST /games/restore (the zip as the body)

The file is a zip (format ``animegamer-saved-game``, version 1)::

    game.json              format, version, the session (characters, seed, model) and its turns'
                           fields (instruction, level, states, seeds, probabilities, timings)
    s_a.safetensors        each turn's s_a ("turn_0000", ...): the context the game continues from
    clips/0000.mp4 ...     each turn's shot
    characters.json        the book entries of the custom characters the game names
    characters/0.png ...   their reference sheets, and the cut-outs of those made from a picture

Restoring reads and checks the whole file before it writes anything. A custom character of the
archive whose name is already a character here is reused only when it is the same character;
otherwise the restore is refused with what to do. A failure while writing removes what this
restore wrote, so the saves are as they were.
"""
from __future__ import annotations

import contextlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from animegamer.core.atomic_io import atomic_write
from animegamer.core.errors import UserFacingError
from animegamer.game.characters import CharacterBook, CharacterError
from animegamer.game.store import SessionStore, StoreError, TurnRow

FORMAT = "animegamer-saved-game"
VERSION = 1
MAX_UNPACKED_BYTES = 4 * 1024**3  # a saved game of thousands of turns is far smaller; more is not an archive of ours
TURN_FIELDS = ("idx", "instruction", "motion_level", "deltas", "states_before", "states", "seed", "probs",
               "timings", "created_at")


class ArchiveError(ValueError, UserFacingError):
    """A saved-game file cannot be written or restored (the message says why)."""


@dataclass
class SavedGame:
    """An archive read into memory and checked."""
    session: dict[str, Any]
    turns: list[dict[str, Any]]
    s_a: dict[int, torch.Tensor]
    clips: dict[int, bytes]
    characters: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> book entry
    pictures: dict[str, tuple[bytes, bytes | None]] = field(default_factory=dict)  # name -> (reference, cut-out)


def write_archive(store: SessionStore, book: CharacterBook, session_id: str, out: str | Path | None = None) -> Path:
    """Write saved game ``session_id`` of ``store`` (with its custom characters from ``book``) to
    ``out`` (default: ``<store>/exports/<id>.zip``), atomically. Returns the path."""
    row = store.get_session(session_id)
    turns = store.load_turns(session_id)
    out = Path(out) if out is not None else store.export_dir() / f"{session_id}.zip"
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
            z.writestr("characters.json", json.dumps(book_json, indent=1))
            for i, name in enumerate(custom):
                z.write(book.reference_path(name), f"characters/{i}.png")
                if entries[name].get("picture"):
                    z.write(book.sprite_path(name), f"characters/{i}_cutout.png")

    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, write)


def read_archive(source: str | Path | bytes) -> SavedGame:
    """A saved-game file (a path or its bytes) read and checked, or ArchiveError saying what is wrong."""
    where = "the uploaded file" if isinstance(source, bytes) else str(source)
    try:
        z = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source)
    except FileNotFoundError:
        raise ArchiveError(f"{where}: no such file") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise ArchiveError(f"{where} is not a saved game of animegamer (not a zip file: {e})") from None
    with z:
        if sum(i.file_size for i in z.infolist()) > MAX_UNPACKED_BYTES:
            raise ArchiveError(f"{where} unpacks to more than {MAX_UNPACKED_BYTES // 1024**3} GB: not a saved game")
        names = set(z.namelist())

        def member(name: str) -> bytes:
            if name not in names:
                raise ArchiveError(f"{where} has no {name}: it is not a whole saved game (written by "
                                   "`animegamer sessions archive`)")
            try:
                return z.read(name)
            except (zipfile.BadZipFile, OSError, RuntimeError) as e:  # a damaged member fails its CRC here
                raise ArchiveError(f"{where}: {name} is damaged ({e})") from None

        try:
            meta = json.loads(member("game.json"))
            book = json.loads(member("characters.json"))
        except json.JSONDecodeError as e:
            raise ArchiveError(f"{where}: its game.json or characters.json is not JSON ({e})") from None
        if meta.get("format") != FORMAT:
            raise ArchiveError(f"{where} is not a saved game of animegamer (format {meta.get('format')!r})")
        if meta.get("version") != VERSION:
            raise ArchiveError(f"{where} is a saved game of version {meta.get('version')}; this animegamer reads "
                               f"version {VERSION}: update animegamer to restore it")
        session, turns = meta.get("session"), meta.get("turns")
        if not isinstance(session, dict) or not isinstance(turns, list) or \
                not all(isinstance(t, dict) and set(TURN_FIELDS) <= set(t) for t in turns) or \
                {"characters", "seed", "model"} - set(session):
            raise ArchiveError(f"{where}: game.json does not hold a session and its turns")
        if [t["idx"] for t in turns] != list(range(len(turns))):
            raise ArchiveError(f"{where}: its turns are not numbered 0..{len(turns) - 1}")
        tensors = load(member("s_a.safetensors")) if turns else {}
        s_a = {}
        for t in turns:
            key = f"turn_{t['idx']:04d}"
            if key not in tensors:
                raise ArchiveError(f"{where}: s_a.safetensors has no {key}")
            s_a[t["idx"]] = tensors[key]
        clips = {t["idx"]: member(f"clips/{t['idx']:04d}.mp4") for t in turns}
        characters = book.get("characters") if isinstance(book, dict) else None
        if not isinstance(characters, dict):
            raise ArchiveError(f"{where}: characters.json does not hold characters")
        pictures = {}
        for i, (name, entry) in enumerate(characters.items()):
            cutout = member(f"characters/{i}_cutout.png") if entry.get("picture") else None
            pictures[name] = (member(f"characters/{i}.png"), cutout)
        return SavedGame(session, turns, s_a, clips, characters, pictures)


def restore_archive(store: SessionStore, book: CharacterBook, source: str | Path | bytes,
                    cast: list[str]) -> str:
    """Restore a saved-game file into ``store`` and its custom characters into ``book``; ``cast``: the
    names the model plays (a custom character may not take one). Returns the restored game's id: the
    archived one, or a new one where that id is taken here."""
    game = read_archive(source)
    mine = book.entries()
    fixed = {c.lower(): c for c in cast if c not in mine}
    adopt = []
    for name, entry in game.characters.items():
        try:
            book.check_entry(name, entry, *game.pictures[name])
        except (CharacterError, ValueError) as e:
            raise ArchiveError(f"the saved game's character {name!r} cannot be restored: {e}") from None
        if name.lower() in fixed:
            raise ArchiveError(f"the saved game's own character {name!r} has the name of a character of this "
                               f"model ({fixed[name.lower()]}): it cannot be restored here")
        if name in mine:
            if not book.same(name, entry, game.pictures[name][1]):
                raise ArchiveError(f"a character named {name!r} is already yours here and looks different from the "
                                   f"saved game's: remove yours (animegamer characters remove {name!r}) or restore "
                                   "into another saves directory (--store)")
        else:
            adopt.append(name)
    unknown = [c for c in game.session["characters"] if c not in game.characters and c.lower() not in fixed]
    if unknown:
        raise ArchiveError(f"the saved game plays {', '.join(unknown)}, who {'is' if len(unknown) == 1 else 'are'} "
                           f"neither in this model's cast nor in the file")
    taken = {r.id for r in store.list_sessions()}
    sid = game.session.get("id")
    row = store.create_session(game.session["characters"], int(game.session["seed"]), game.session["model"],
                               session_id=sid if isinstance(sid, str) and sid not in taken else None)
    added: list[str] = []
    try:
        for name in adopt:
            reference, cutout = game.pictures[name]
            book.adopt(name, game.characters[name], reference, cutout)
            added.append(name)
        for t in game.turns:
            clip = store.new_clip_path(row.id, t["idx"])
            clip.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(clip, lambda fh, data=game.clips[t["idx"]]: fh.write(data))
            store.save_turn(TurnRow(row.id, t["idx"], t["instruction"], t["motion_level"], t["deltas"],
                                    t["states_before"], t["states"], game.s_a[t["idx"]], t["seed"], clip,
                                    t["probs"], t["timings"], t["created_at"]))
    except BaseException:
        with contextlib.suppress(StoreError):
            store.delete_session(row.id)
        for name in added:
            with contextlib.suppress(CharacterError):
                book.remove(name)
        raise
    return row.id
