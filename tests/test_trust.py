"""Hostile saved games, pictures and uploads (issue 45, docs/trust.md): everything an archive or an upload
carries is untrusted. Every archive and picture here is made by the test: a real game's archive, taken
apart and changed, or zips written byte by byte where zipfile would refuse to write the lie.

What is measured: a folder outside the store ("victim") and the store's other game and character
survive every hostile restore byte for byte; a refused archive leaves the store exactly as it was
(files and rows); bombs are refused in under 1 s and under 300 MB above the process's memory before
the call; every malformed member gets a clear 4xx / one-line error; the HTTP routes take only their
content types and, without an API key, only their own pages' Origin."""
from __future__ import annotations

import functools
import hashlib
import io
import json
import random
import re
import sqlite3
import struct
import threading
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
from safetensors.torch import save
from tiny_game import CAST, RUN

from animegamer.cli import main
from animegamer.game.api import ServeConfig, create_app
from animegamer.game.archive import MAX_MEMBERS, ArchiveError, write_archive
from animegamer.game.characters import CharacterError, read_picture
from animegamer.game.session import Game, GameInputError
from animegamer.game.store import (SessionStore, StoreError, UnsafePathError, confined, export_session, is_game_id,
                                   s_a_to_blob)
from animegamer.world.character_gen import random_character, reference_sheet

torch.set_num_threads(1)
NEKO = "a girl with short green hair in a red hoodie, with a scarf"
MIMI = "a boy with spiky blue hair in a yellow hoodie"
ZIP_HEADERS = {"content-type": "application/zip"}
BOMB_SECONDS, BOMB_BYTES = 1.0, 300 * 1024**2


# ----------------------------------------------------------------------------- the world a restore lands in
@pytest.fixture(scope="module")
def base(models, tmp_path_factory) -> bytes:
    """A real saved game's file: two turns, Neko (a custom character) and Qiqi."""
    root = tmp_path_factory.mktemp("origin")
    game = Game.from_models(*models, store=root / "saves", cast=CAST)
    game.add_character("Neko", NEKO)
    s = game.new_session(["Neko", "Qiqi"], seed=3)
    s.step("Neko waves at Qiqi")
    s.step("Qiqi runs in the town")
    return game.archive_session(s.id, root / "game.zip").read_bytes()


def _world(models, tmp: Path) -> tuple[Game, Path, str]:
    """A store at tmp/store with a game and a character of its own, and a victim folder at tmp/victim:
    the folder an id like ``../../victim`` would reach from the clips folder."""
    victim = tmp / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    (victim / "sub" / "0000-aaaa.mp4").write_bytes(b"not yours")
    game = Game.from_models(*models, store=tmp / "store", cast=CAST)
    game.add_character("Mimi", MIMI)
    other = game.new_session(["Qiqi"], seed=1)
    other.step(RUN)
    return game, victim, other.id


def _tree(root: Path, skip: str = "\0") -> dict[str, str]:
    """Every file and folder under ``root`` (but those whose name holds ``skip``): its path -> a hash of
    its bytes (folders: "dir")."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if skip not in p.name}


def _state(game: Game) -> tuple:
    """The store as a player would see it: its files (the database's aside: SQLite's own business) and
    its rows."""
    files = _tree(game.store.root, skip="games.sqlite")
    with sqlite3.connect(game.store.db_path) as db:
        sessions = db.execute("SELECT id, characters, seed, model FROM sessions ORDER BY id").fetchall()
        turns = db.execute("SELECT session_id, idx, instruction, clip FROM turns ORDER BY session_id, idx").fetchall()
    return files, sessions, turns


def _survivors_intact(game: Game, other: str) -> None:
    assert [t.idx for t in game.store.load_turns(other)] == [0]
    assert all(t.clip.is_file() for t in game.store.load_turns(other))
    assert "Mimi" in game.characters.names() and game.characters.reference_path("Mimi").is_file()


# ----------------------------------------------------------------------------- making archives
def _unpack(data: bytes) -> tuple[dict, dict, dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    return json.loads(members.pop("game.json")), json.loads(members.pop("characters.json")), members


def _pack(meta: Any, book: Any, members: dict[str, bytes], raw_json: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("game.json", (raw_json or {}).get("game.json", json.dumps(meta).encode()))
        z.writestr("characters.json", (raw_json or {}).get("characters.json", json.dumps(book).encode()))
        for n, d in members.items():
            z.writestr(n, d)
    return out.getvalue()


def _changed(base: bytes, change: Callable[[dict, dict, dict], Any]) -> bytes:
    meta, book, members = _unpack(base)
    change(meta, book, members)
    return _pack(meta, book, members)


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def _raw_zip(entries: list[dict]) -> bytes:
    """A zip written byte by byte, so that it can lie: each entry is {name, data} or {name, packed} with
    optional method, flags, crc, file_size, compress_size, offset (of its local header)."""
    out, central = io.BytesIO(), []
    for e in entries:
        method = e.get("method", zipfile.ZIP_DEFLATED)
        data = e.get("data", b"")
        packed = e["packed"] if "packed" in e else (_deflate(data) if method == zipfile.ZIP_DEFLATED else data)
        crc, usize = e.get("crc", zlib.crc32(data)), e.get("file_size", len(data))
        csize, flags, name = e.get("compress_size", len(packed)), e.get("flags", 0x800), e["name"].encode()
        offset = out.tell()
        if "offset" not in e:  # entries that point at an earlier entry's bytes write none of their own
            out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, flags, method, 0, 0x21, crc, csize, usize,
                                  len(name), 0) + name + packed)
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, flags, method, 0, 0x21, crc, csize, usize,
                                   len(name), 0, 0, 0, 0, 0, e.get("offset", offset)) + name)
    at, cd = out.tell(), b"".join(central)
    n = min(len(central), 0xFFFF)
    out.write(cd + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(cd), at, 0))
    return out.getvalue()


def _entries(data: bytes) -> list[dict]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [{"name": i.filename, "data": z.read(i), "method": i.compress_type} for i in z.infolist()]


@functools.cache
def _deflated_repeats(byte: bytes, mib: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``mib`` MiB of ``byte``, and their CRC, made in milliseconds: after a full
    flush the compressor's output for the same MiB is the same, so one piece is repeated."""
    piece = byte * 1024**2
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    assert again == c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(piece, crc)
    return first + again * (mib - 2) + c.flush(zlib.Z_FINISH), crc


@functools.cache
def _picture_bomb() -> bytes:
    """A 13000 x 13000 PNG of 20 KB: 0.7 GB once decoded to RGBA."""
    out = io.BytesIO()
    Image.new("1", (13000, 13000)).save(out, format="PNG")
    return out.getvalue()


def _cost(work: Callable[[], Any]) -> tuple[float, int]:
    """Seconds ``work`` took and its peak resident memory above the process's just before (Linux: the
    kernel's high-water mark, reset first), or -1 where the kernel offers no reset (not Linux): there
    only the time is checked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size
        before = _status_kb("VmRSS")
    except OSError:
        before = None
    t0 = time.perf_counter()
    work()
    seconds = time.perf_counter() - t0
    return seconds, (_status_kb("VmHWM") - before) * 1024 if before is not None else -1


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _refused(work: Callable[[], Any], error: type[Exception], match: str) -> tuple[float, int]:
    def run() -> None:
        with pytest.raises(error, match=match):
            work()
    return _cost(run)


# ----------------------------------------------------------------------------- ids and paths
HOSTILE_IDS = ["..", ".", "../characters", "../..", "../../victim", "/", "/tmp", "a/b", "..\\..\\victim", "ok\n",
               "", " ", "a" * 65, "%2e%2e", "x\x00y", "ｆｕｌｌ", 7, None, ["x"], {"id": "x"}]


def test_a_hostile_id_gets_a_new_one_and_nothing_outside_the_store_is_touched(models, tmp_path, base):
    game, victim, other = _world(models, tmp_path)
    outside = _tree(victim)
    restored = []
    for sid in HOSTILE_IDS + [str(victim), str(victim / "sub"), str(game.store.root / "characters")]:
        gid = game.restore_session(_changed(base, lambda meta, book, m: meta["session"].update(id=sid)))
        assert is_game_id(gid) and gid != sid, sid
        clips = [t.clip.resolve() for t in game.store.load_turns(gid)]
        assert len(clips) == 2 and all(c.is_relative_to((game.store.root / "clips" / gid).resolve()) for c in clips)
        assert _tree(victim) == outside, sid
        restored.append(gid)
    _survivors_intact(game, other)
    for gid in restored:  # and deleting them again touches nothing but their own clips
        game.delete_session(gid)
    assert _tree(victim) == outside and [r.id for r in game.list_sessions()] == [other]
    _survivors_intact(game, other)
    # a valid, free id is kept, as before
    assert game.restore_session(_changed(base, lambda meta, book, m: meta["session"].update(id="my-game_1"))) \
        == "my-game_1"


@pytest.mark.parametrize("sid", ["../../victim", "../characters", "..", "VICTIM"])
def test_a_restore_that_fails_half_way_removes_only_what_it_wrote(models, tmp_path, base, monkeypatch, sid):
    """The write of turn 1 fails after turn 0 was saved: the store is exactly as it was, whatever the id."""
    game, victim, other = _world(models, tmp_path)
    sid = str(victim) if sid == "VICTIM" else sid
    outside, before = _tree(victim), _state(game)
    save_turn = SessionStore.save_turn

    def failing(self, turn):
        if turn.idx == 1:
            raise OSError("disk full")
        return save_turn(self, turn)

    monkeypatch.setattr(SessionStore, "save_turn", failing)
    with pytest.raises(OSError, match="disk full"):
        game.restore_session(_changed(base, lambda meta, book, m: meta["session"].update(id=sid)))
    assert _tree(victim) == outside and _state(game) == before
    _survivors_intact(game, other)


def test_games_left_with_a_hostile_id_are_deleted_without_following_it(models, tmp_path, capsys):
    """An older version's restore could leave such rows: deleting, exporting or archiving them never
    reaches outside, and a link planted in the clips folder is not followed."""
    game, victim, other = _world(models, tmp_path)
    store, outside = game.store, _tree(victim)
    (store.root / "clips" / "linked").symlink_to(victim, target_is_directory=True)
    blob = s_a_to_blob(torch.zeros(2, 2))
    states = json.dumps({"stamina": 50, "social": 50, "entertainment": 50})
    with sqlite3.connect(store.db_path) as db:
        for sid, clip in (("../../victim", "clips/../../victim/precious.txt"), (str(victim), f"clips/{victim}/x"),
                          ("../characters", "characters/x.png"), ("linked", "clips/linked/0000-aaaa.mp4")):
            db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)", (sid, '["Qiqi"]', 1, "{}", 0.0, 0.0))
            db.execute("INSERT INTO turns VALUES (?, 0, 'x', 3, ?, ?, ?, ?, 1, '[]', ?, '{}', 0.0, NULL)",
                       (sid, json.dumps({"stamina": 0, "social": 0, "entertainment": 0}), states, states, blob, clip))
    for sid in ("../../victim", str(victim), "../characters", "linked"):
        with pytest.raises(UnsafePathError):
            store.load_turns(sid)
        with pytest.raises(StoreError):
            export_session(store, sid)
        with pytest.raises(StoreError):
            write_archive(store, game.characters, sid)
        with pytest.raises(UnsafePathError):
            store.new_clip_path(sid, 0)
        assert main(["sessions", "--store", str(store.root), "export", sid]) == 2
        assert main(["sessions", "--store", str(store.root), "delete", sid]) == 0  # its rows only
        assert _tree(victim) == outside
    assert [r.id for r in store.list_sessions()] == [other]
    _survivors_intact(game, other)
    with pytest.raises(StoreError, match="not a game id"):
        store.create_session(["Qiqi"], 1, session_id="../x")
    with pytest.raises(StoreError, match="already saved"):
        store.create_session(["Qiqi"], 1, session_id=other)
    for names in (("..",), ("a/b",), ("",), (".",), (str(victim),), ("linked", "x"), ("x\x00",)):
        with pytest.raises(UnsafePathError):
            confined(store.root / "clips", *names)
    assert confined(store.root / "clips", "abc", "0000.mp4") == store.root / "clips" / "abc" / "0000.mp4"


# ----------------------------------------------------------------------------- bombs
def _bombs(base: bytes) -> dict[str, bytes]:
    spaces, spaces_crc = _deflated_repeats(b" ", 1024)
    zeros, zeros_crc = _deflated_repeats(b"\0", 200)
    rest = [e for e in _entries(base) if e["name"] != "game.json"]
    meta = [e for e in _entries(base) if e["name"] == "game.json"]
    clip = next(e for e in rest if e["name"] == "clips/0000.mp4")
    return {
        # 1 GiB of game.json packed into 1 MB, its size declared honestly
        "game.json of 1 GiB": _raw_zip([{"name": "game.json", "packed": spaces, "crc": spaces_crc,
                                         "file_size": 1024**3}] + rest),
        # the same stream declaring 2 bytes: zipfile stops at 2, and its checksum does not match
        "game.json lying about its size": _raw_zip([{"name": "game.json", "packed": spaces, "crc": zlib.crc32(b"{}"),
                                                     "file_size": 2}] + rest),
        # a clip of 200 MiB of zeros in 0.2 MB: under the clip limit, but packed 1000 times
        "a clip packed 1000 times": _raw_zip(meta + [e for e in rest if e["name"] != "clips/0000.mp4"] + [
            {"name": "clips/0000.mp4", "packed": zeros, "crc": zeros_crc, "file_size": 200 * 1024**2}]),
        # 1000 entries pointing at the same stored MiB: 1 GB unpacked from a file of 1 MB
        "overlapping members": _raw_zip([{"name": "clips/0000.mp4", "data": b"\0" * 1024**2, "method": 0}] + [
            {"name": f"clips/{i:04d}.mp4", "data": b"\0" * 1024**2, "method": 0, "offset": 0} for i in range(1, 1000)]),
        # more members than a game has: refused from the end record, before zipfile builds them all
        "too many members": _raw_zip([{"name": f"clips/{i:05d}.mp4", "method": 0} for i in range(MAX_MEMBERS + 10)]),
        # a member that says it is 2 GB
        "a clip declaring 2 GB": _raw_zip(meta + [e for e in rest if e["name"] != "clips/0000.mp4"] + [
            {**clip, "method": 0, "file_size": 2 * 1024**3, "compress_size": 2 * 1024**3}]),
    }


BOMB_MESSAGES = {"game.json of 1 GiB": "unpacks to 1073741824 bytes", "game.json lying about its size": "damaged",
                 "a clip packed 1000 times": "zip bomb", "overlapping members": "claim more packed bytes",
                 "too many members": f"declares {MAX_MEMBERS + 10} files", "a clip declaring 2 GB": "unpacks to 2147483648 bytes"}


def test_zip_bombs_are_refused_in_under_a_second_and_300_mb(models, tmp_path, base):
    game, victim, other = _world(models, tmp_path)
    outside, before = _tree(victim), _state(game)
    for name, bomb in _bombs(base).items():
        path = tmp_path / "bomb.zip"
        path.write_bytes(bomb)
        seconds, extra = _refused(lambda: game.restore_session(path), ArchiveError, re.escape(BOMB_MESSAGES[name]))
        print(f"{name}: refused in {seconds:.3f} s, {extra / 2**20:.0f} MB above idle")
        assert seconds < BOMB_SECONDS and extra < BOMB_BYTES, (name, seconds, extra)
        assert _state(game) == before and _tree(victim) == outside
    with TestClient(create_app(game, ServeConfig())) as c:  # the same over HTTP: a 4xx, not a 500
        for name, bomb in _bombs(base).items():
            r = c.post("/games/restore", content=bomb, headers=ZIP_HEADERS)
            assert r.status_code == 422 and BOMB_MESSAGES[name] in r.json()["error"], (name, r.text)
    assert _state(game) == before


def test_picture_bombs_are_refused_by_their_header(models, tmp_path, base):
    """A 13000 x 13000 PNG of 20 KB, as an upload, a file and a restored character's pictures."""
    bomb = _picture_bomb()
    assert len(bomb) < 64 * 1024
    seconds, extra = _refused(lambda: read_picture(bomb), CharacterError, "13000 x 13000 pixels")
    assert seconds < BOMB_SECONDS and extra < BOMB_BYTES, (seconds, extra)
    game, victim, other = _world(models, tmp_path)
    before = _state(game)
    (tmp_path / "bomb.png").write_bytes(bomb)
    seconds, extra = _refused(lambda: game.add_character("Bomb", image=tmp_path / "bomb.png"), GameInputError,
                              "13000 x 13000 pixels")
    assert seconds < BOMB_SECONDS and extra < BOMB_BYTES, (seconds, extra)
    for member in ("characters/0.png",):
        data = _changed(base, lambda meta, book, m: m.update({member: bomb}))
        seconds, extra = _refused(lambda: game.restore_session(data), ArchiveError, "13000 x 13000 pixels")
        assert seconds < BOMB_SECONDS and extra < BOMB_BYTES, (seconds, extra)
    with TestClient(create_app(game, ServeConfig())) as c:
        t0 = time.perf_counter()
        r = c.post("/characters/Bomb/picture", content=bomb, headers={"content-type": "image/png"})
        assert r.status_code == 422 and "13000 x 13000 pixels" in r.json()["error"]
        assert time.perf_counter() - t0 < BOMB_SECONDS
    assert _state(game) == before


# ----------------------------------------------------------------------------- malformed members
def _s_a(**tensors: torch.Tensor) -> bytes:
    return save({k: v.contiguous() for k, v in tensors.items()})


def _turn(field: str, value: Any, i: int = 1) -> Callable:
    return lambda meta, book, m: meta["turns"][i].update({field: value})


def _neko(field: str, value: Any) -> Callable:
    return lambda meta, book, m: book["characters"]["Neko"].update({field: value})


MALFORMED: list[tuple[str, Callable, str]] = [
    ("s_a garbage", lambda meta, book, m: m.update({"s_a.safetensors": b"\0garbage"}), "not a safetensors file"),
    ("s_a truncated", lambda meta, book, m: m.update({"s_a.safetensors": m["s_a.safetensors"][:-9]}),
     "not a safetensors file"),
    ("s_a of integers", lambda meta, book, m: m.update({"s_a.safetensors": _s_a(
        turn_0000=torch.zeros(8, 16, dtype=torch.int32), turn_0001=torch.zeros(8, 16, dtype=torch.int32))}),
     "float tensor"),
    ("s_a of 3 dims", lambda meta, book, m: m.update({"s_a.safetensors": _s_a(
        turn_0000=torch.zeros(2, 8, 16), turn_0001=torch.zeros(2, 8, 16))}), "N x D"),
    ("s_a with NaN", lambda meta, book, m: m.update({"s_a.safetensors": _s_a(
        turn_0000=torch.zeros(8, 16), turn_0001=torch.full((8, 16), float("nan")))}), "NaN"),
    ("s_a of two shapes", lambda meta, book, m: m.update({"s_a.safetensors": _s_a(
        turn_0000=torch.zeros(8, 16), turn_0001=torch.zeros(4, 16))}), "turn 0's"),
    ("s_a missing a turn", lambda meta, book, m: m.update({"s_a.safetensors": _s_a(turn_0000=torch.zeros(8, 16))}),
     "has no turn_0001"),
    ("clip not an MP4", lambda meta, book, m: m.update({"clips/0001.mp4": b"hello"}), "not an MP4 clip"),
    ("clip an MP4 header on noise", lambda meta, book, m: m.update(
        {"clips/0001.mp4": b"\0\0\0\x18ftypisom" + random.Random(1).randbytes(5000)}), "is not a video"),
    ("game.json nested 100000 deep", lambda meta, book, m: None, "is not JSON"),
    ("game.json a list", lambda meta, book, m: None, "not a saved game of animegamer"),
    ("game.json not UTF-8", lambda meta, book, m: None, "is not JSON"),
    ("a 5000-digit seed", lambda meta, book, m: None, "is not JSON"),
    ("seed as text", lambda meta, book, m: meta["session"].update(seed="7"), "seed"),
    ("seed as a bool", lambda meta, book, m: meta["session"].update(seed=True), "seed"),
    ("characters not a list", lambda meta, book, m: meta["session"].update(characters="Qiqi"), "characters"),
    ("bad start states", lambda meta, book, m: meta["session"]["model"].update(start_states={"stamina": 900}),
     "start states"),
    ("turns not a list", lambda meta, book, m: meta.update(turns={"0": 1}), "turns are not a list"),
    ("a turn missing a field", lambda meta, book, m: meta["turns"][1].pop("probs"), "does not hold"),
    ("idx as a bool", _turn("idx", True), "numbered"),
    ("instruction with a right-to-left override", _turn("instruction", "Qiqi \u202enur"), "U+202E"),
    ("instruction with a control character", _turn("instruction", "Qiqi\x07runs"), "U+0007"),
    ("instruction too long", _turn("instruction", "Qiqi runs " * 60), "1..500"),
    ("motion level 9", _turn("motion_level", 9), "motion level"),
    ("deltas out of range", _turn("deltas", {"stamina": 5, "social": 0, "entertainment": 0}), "deltas"),
    ("states out of range", _turn("states", {"stamina": 500, "social": 0, "entertainment": 0}), "states"),
    ("probs not numbers", _turn("probs", [["x"]]), "probabilities"),
    ("timings not numbers", _turn("timings", {"engine_s": "fast"}), "timings"),
    ("created_at negative", _turn("created_at", -1), "created_at"),
    ("characters.json not JSON", lambda meta, book, m: None, "characters.json is not JSON"),
    ("a character the game does not play", lambda meta, book, m: book["characters"].update(
        Zed=book["characters"]["Neko"]), "whom the game does not play"),
    ("a character entry without created_at", lambda meta, book, m: book["characters"]["Neko"].pop("created_at"),
     "not a character entry"),
    ("a description with an override", _neko("description", "a girl \u202ewith green hair"), "U+202E"),
    ("an entry the world cannot draw", lambda meta, book, m: book["characters"]["Neko"]["entry"].update(
        hair="green"), "not a character the world can draw"),
    ("a picture flag without its cut-out", _neko("picture", True), "has no characters/0_cutout.png"),
    ("a reference that is no picture", lambda meta, book, m: m.update({"characters/0.png": b"not a png"}),
     "reference sheet is not a picture"),
    ("a member named ../evil.txt", lambda meta, book, m: m.update({"../evil.txt": b"x"}), "no part of a saved game"),
    ("a member named /etc/cron.d/x", lambda meta, book, m: m.update({"/etc/cron.d/x": b"x"}),
     "no part of a saved game"),
    ("a clip the game does not have", lambda meta, book, m: m.update({"clips/0002.mp4": m["clips/0001.mp4"]}),
     "does not use"),
    ("a missing clip", lambda meta, book, m: m.pop("clips/0001.mp4"), "has no clips/0001.mp4"),
]
RAW_JSON = {"game.json nested 100000 deep": {"game.json": b"[" * 100000},
            "game.json a list": {"game.json": b"[1, 2]"},
            "game.json not UTF-8": {"game.json": b'{"format": "\xff\xfe"}'},
            "characters.json not JSON": {"characters.json": b"{"}}


def _malformed(base: bytes) -> list[tuple[str, bytes, str]]:
    out = []
    for name, change, match in MALFORMED:
        meta, book, members = _unpack(base)
        change(meta, book, members)
        raw = dict(RAW_JSON.get(name, {}))
        if name == "a 5000-digit seed":
            raw["game.json"] = json.dumps(meta).replace('"seed": 3', '"seed": ' + "9" * 5000, 1).encode()
        out.append((name, _pack(meta, book, members, raw), match))
    entries = _entries(base)

    def lie(member: str, **fields: Any) -> bytes:
        return _raw_zip([{**e, **fields} if e["name"] == member else e for e in entries])

    out += [("a duplicate member", _raw_zip(entries + [entries[-1]]), "twice"),
            ("an encrypted member", lie("game.json", flags=0x801), "encrypted"),
            ("a member packed with bzip2", lie("game.json", method=zipfile.ZIP_BZIP2, packed=b"BZh9"), "method 12"),
            ("a clip failing its checksum", lie("clips/0001.mp4", crc=1), "damaged"),
            ("a clip shorter than it declares", lie("clips/0001.mp4", method=0, file_size=10**6), "damaged"),
            ("not a zip", b"PK\x03\x04 hello", "not a zip file")]
    return out


def test_every_malformed_member_gets_a_clear_error_and_changes_nothing(models, tmp_path, base):
    game, victim, other = _world(models, tmp_path)
    outside, before = _tree(victim), _state(game)
    cases = _malformed(base)
    assert len(cases) >= 40
    for name, data, match in cases:
        with pytest.raises(ArchiveError, match=re.escape(match)):
            game.restore_session(data)
        assert _state(game) == before and _tree(victim) == outside, name
    with TestClient(create_app(game, ServeConfig()), raise_server_exceptions=False) as c:
        for name, data, match in cases:
            r = c.post("/games/restore", content=data, headers=ZIP_HEADERS)
            assert r.status_code == 422 and match in r.json()["error"], (name, r.status_code, r.text)
            assert "Traceback" not in r.text
        r = c.post("/games/restore", content=b"", headers=ZIP_HEADERS)
        assert r.status_code == 422 and "empty" in r.json()["error"]
    assert _state(game) == before


def test_the_command_line_refuses_a_malformed_file_in_one_line(models, tmp_path, base, capsys):
    game, victim, other = _world(models, tmp_path)
    before, cases = _state(game), _malformed(base)
    for name, data, match in cases[:3] + cases[-6:]:
        path = tmp_path / "bad.zip"
        path.write_bytes(data)
        assert main(["sessions", "--store", str(game.store.root), "restore", str(path)]) == 2, name
        err = capsys.readouterr().err
        assert match in err and "Traceback" not in err and err.count("\n") == 1, (name, err)
    assert main(["sessions", "--store", str(game.store.root), "restore", str(tmp_path)]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert _state(game) == before


# ----------------------------------------------------------------------------- fuzzing
VALUES = [None, True, False, 0, -1, 1, 3, 5, 6, 2**63, 2**64, 1.5, float("inf"), float("nan"), "", "x", "\u202e",
          "a\x00b", "a" * 600, "../..", "/etc/passwd", [], [1], [[0.5]], {}, {"a": 1},
          {"stamina": 50, "social": 50, "entertainment": 50}, {"stamina": 0, "social": 1, "entertainment": 0},
          functools.reduce(lambda x, _: [x], range(60), [])]
NAMES = ["../x", "/tmp/x", "clips/../../x", "clips/0000.mp4/", "characters/0.png/..", "game.json\x00.txt",
         "clips/00.mp4", "clips/0000.MP4", "characters/9.png", "s_a.safetensors ", "C:\\x", "clips/0005.mp4",
         "clips/", "x" * 300]
SIZES = [0, 1, 2, 10**6, 2**31, 2**32 - 1]


def _mutate(rng: random.Random, base: bytes) -> bytes:
    """``base`` with 1..3 random changes: ids, turn fields, session and character fields, member names,
    declared sizes and compression, types of whole documents, bytes."""
    meta, book, members = _unpack(base)
    raw: dict[str, bytes] = {}
    lies: list[tuple[str, dict]] = []

    def change(kind: int) -> None:
        if kind == 0:
            meta["session"]["id"] = rng.choice(HOSTILE_IDS + VALUES + ["".join(rng.choice("a./\\_-\n~é")
                                                                              for _ in range(rng.randint(0, 9)))])
        elif kind == 1:
            turn = rng.choice(meta["turns"])
            field = rng.choice(list(turn) + ["extra"])
            if rng.random() < 0.15:
                turn.pop(field, None)
            else:
                turn[field] = rng.choice(VALUES)
        elif kind == 2:
            meta["session"][rng.choice(["characters", "seed", "model", "id", "created_at"])] = rng.choice(VALUES)
        elif kind == 3:
            entry = book["characters"]["Neko"]
            entry[rng.choice(list(entry) + ["extra"])] = rng.choice(VALUES)
        elif kind == 4:
            if members and rng.random() < 0.5:
                members[rng.choice(NAMES)] = members.pop(rng.choice(sorted(members)))
            else:
                members[rng.choice(NAMES)] = rng.randbytes(rng.randint(0, 64))
        elif kind == 5:
            lies.append((rng.choice(["game.json", "characters.json"] + sorted(members)),
                         {rng.choice(["file_size", "compress_size", "crc"]): rng.choice(SIZES)}))
        elif kind == 6:
            raw[rng.choice(["game.json", "characters.json"])] = json.dumps(rng.choice(VALUES)).encode()
        elif kind == 7:
            target = rng.choice(sorted(members))
            data = bytearray(members[target])
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            members[target] = bytes(data)
        else:
            meta[rng.choice(["format", "version", "turns", "session"])] = rng.choice(VALUES)

    for _ in range(rng.randint(1, 3)):
        try:
            change(rng.randrange(9))
        except (TypeError, KeyError, IndexError, AttributeError):
            pass  # an earlier change replaced what this one edits (the turns by a number): nothing to edit
    try:
        packed = _pack(meta, book, members, raw)
    except ValueError:  # json.dumps of a value nested past its recursion check: a case of its own
        packed = _pack(meta, book, members, {"game.json": b"[" * 5000})
    if lies:
        entries = _entries(packed)
        for name, fields in lies:
            entries = [{**e, **fields} if e["name"] == name else e for e in entries]
        packed = _raw_zip(entries)
    return packed


def test_fuzzing_the_archive_fields_finds_nothing(models, tmp_path, base):
    """A seeded random search over archive fields, for at most 40 s: each file is either restored (into
    a game whose id and files are the store's own) or refused with ArchiveError and nothing changed;
    never another exception, never a file outside, never a loss in the store."""
    game, victim, other = _world(models, tmp_path)
    outside, rng = _tree(victim), random.Random(45)
    t0, tried, restored = time.perf_counter(), 0, 0
    while time.perf_counter() - t0 < 40 and tried < 400:
        data = _mutate(rng, base)
        before = _state(game)
        try:
            gid = game.restore_session(data)
        except ArchiveError:
            assert _state(game) == before, tried
        else:
            restored += 1
            assert is_game_id(gid)
            assert all(t.clip.resolve().is_relative_to((game.store.root / "clips" / gid).resolve())
                       for t in game.store.load_turns(gid))
            game.delete_session(gid)
            for name in set(game.characters.names()) - {"Mimi"}:
                game.remove_character(name)
            assert _state(game) == before, tried
        assert _tree(victim) == outside, tried
        tried += 1
    assert tried >= 100 and 0 < restored < tried, (tried, restored)
    _survivors_intact(game, other)


# ----------------------------------------------------------------------------- the HTTP routes
def test_restore_and_upload_take_only_their_content_types_and_own_origin(models, tmp_path, base):
    game, victim, other = _world(models, tmp_path)
    before = _state(game)
    sheet = io.BytesIO()
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(sheet, format="PNG")
    png = {"content": sheet.getvalue(), "headers": {"content-type": "image/png"}}
    with TestClient(create_app(game, ServeConfig()), base_url="http://127.0.0.1:8000") as c:
        for kind in ("text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded", ""):
            r = c.post("/games/restore", content=base, headers={"content-type": kind})
            assert r.status_code == 415 and "application/zip" in r.json()["error"], kind
        for kind in ("text/plain", "image/svg+xml", "application/octet-stream"):
            r = c.post("/characters/Momo/picture", content=png["content"], headers={"content-type": kind})
            assert r.status_code == 415, kind
        for origin, host in (("http://evil.example", None), ("null", None), ("http://127.0.0.1:9999", None),
                             ("https://127.0.0.1:8000", None), ("http://evil.example:8000", "evil.example:8000")):
            extra = {"origin": origin, **({"host": host} if host else {})}
            assert c.post("/games/restore", content=base, headers={**ZIP_HEADERS, **extra}).status_code == 403
            r = c.post("/characters/Momo/picture", content=png["content"], headers={**png["headers"], **extra})
            assert r.status_code == 403 and "may not change" in r.json()["error"]
            assert c.delete(f"/games/{other}", headers=extra).status_code == 403
            assert c.get("/games", headers=extra).status_code == 200  # reading is not changing
        assert _state(game) == before
        same = c.post("/games/restore", content=base, headers={**ZIP_HEADERS, "origin": "http://127.0.0.1:8000"})
        assert same.status_code == 201, same.text
        assert c.post("/games/restore", content=base, headers=ZIP_HEADERS).status_code == 201  # a program: no Origin
        r = c.post("/characters/Momo/picture", **png)
        assert r.status_code == 201, r.text
    with TestClient(create_app(game, ServeConfig(api_key="s3cret-key"))) as c:  # a key holder is trusted
        r = c.post("/games/restore", content=base, headers={**ZIP_HEADERS, "origin": "http://elsewhere.example",
                                                            "x-api-key": "s3cret-key"})
        assert r.status_code == 201, r.text


def test_oversized_chunked_bodies_get_413(models, tmp_path, base):
    game, victim, other = _world(models, tmp_path)
    before = _state(game)
    with TestClient(create_app(game, ServeConfig(max_body_bytes=4096, max_restore_bytes=64 * 1024))) as c:
        chunks = lambda size: iter([b"x" * 1024] * (size // 1024))  # no Content-Length: the body is streamed
        r = c.post("/games", content=chunks(20 * 1024), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "larger than 4096 bytes" in r.json()["error"]
        r = c.post("/games/restore", content=chunks(200 * 1024), headers=ZIP_HEADERS)
        assert r.status_code == 413 and "larger than 65536 bytes" in r.json()["error"]
        r = c.post("/games/restore", content=b"x" * (65 * 1024), headers=ZIP_HEADERS)
        assert r.status_code == 413
        r = c.post("/games/restore", content=iter([base]), headers=ZIP_HEADERS)  # a real game fits
        assert r.status_code == 201, r.text
    assert ServeConfig().max_restore_bytes >= 256 * 1024**2  # a long game of the paper's size
    assert len([r for r in game.list_sessions()]) == len(before[1]) + 1


def test_restores_and_uploads_wait_in_the_turns_queue(game, base, monkeypatch):
    """One slot, no queue: while a turn runs, a restore and a picture upload are refused with 429, and
    pass once it is done."""
    release, started = threading.Event(), threading.Event()
    forward = type(game.decoder).forward

    def slow(self, *a, **k):
        started.set()
        assert release.wait(30)
        return forward(self, *a, **k)

    monkeypatch.setattr(type(game.decoder), "forward", slow)
    sheet = io.BytesIO()
    Image.fromarray(reference_sheet(random_character(1_000_005, "Momo"), 256)).save(sheet, format="PNG")
    with TestClient(create_app(game, ServeConfig(max_active_games=1, max_queue=0))) as c:
        gid = c.post("/games", json={"characters": ["Qiqi"]}).json()["id"]
        out: dict = {}
        th = threading.Thread(target=lambda: out.update(r=c.post(f"/games/{gid}/turns", json={"instruction": RUN})))
        th.start()
        assert started.wait(30)
        assert c.post("/games/restore", content=base, headers=ZIP_HEADERS).status_code == 429
        r = c.post("/characters/Momo/picture", content=sheet.getvalue(), headers={"content-type": "image/png"})
        assert r.status_code == 429 and "busy" in r.json()["error"]
        release.set()
        th.join(30)
        assert out["r"].status_code == 201
        assert c.post("/games/restore", content=base, headers=ZIP_HEADERS).status_code == 201
        assert c.post("/characters/Momo/picture", content=sheet.getvalue(),
                      headers={"content-type": "image/png"}).status_code == 201


# ----------------------------------------------------------------------------- words
@pytest.mark.parametrize("text", ["Qiqi runs \u202enwot eht ni", "Qiqi runs\u2066 home", "Qiqi\x1b[31m runs",
                                  "Qiqi runs \u200f", "Qiqi \x00runs"])
def test_overrides_and_control_characters_are_refused_in_words(game, text):
    session = game.new_session(["Qiqi"], seed=1)
    with pytest.raises(GameInputError, match="control characters"):
        session.step(text)
    with pytest.raises(GameInputError, match="control characters"):
        game.add_character("Neko", text.replace("Qiqi runs", "a girl with green hair"))
    assert session.turns == [] and "Neko" not in game.cast
    with TestClient(create_app(game, ServeConfig())) as c:
        r = c.post(f"/games/{session.id}/turns", json={"instruction": text})
        assert r.status_code == 422 and "U+" in r.json()["error"]
        r = c.post("/characters", json={"name": "Neko", "description": text.replace("Qiqi runs", "a girl, green hair")})
        assert r.status_code == 422 and "U+" in r.json()["error"]
