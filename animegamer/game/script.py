"""Scripted play: a file of instructions, one a line, played as one saved game.

    animegamer play --script story.txt [--characters Qiqi,Mika] [--out DIR] [--seed N] [--stop-on-error]

A line is free text or the public release's structured form (its ``game_demo/*.txt`` files:
``Character: Qiqi; Motion: quickly run; Background: day town.``). Blank lines and lines starting with
``#`` are skipped. Without ``--characters`` the game's characters are the cast names the file
mentions, in order of first mention. Every turn is saved as in the game; ``--out`` receives each
turn's clip (``turn_NN.mp4``), the whole session as one MP4 with the states drawn on it, and its
storyboard PNG. A line the game refuses is reported with its line number; the rest are played unless
``--stop-on-error``.
"""
from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from animegamer.core.atomic_io import atomic_write_path
from animegamer.game.session import Game, GameInputError, GameSession, Turn

MAX_SCRIPT_BYTES = 1_000_000


@dataclass
class ScriptResult:
    session: GameSession
    turns: list[tuple[int, Turn]] = field(default_factory=list)  # (line number, turn)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, what was wrong)
    video: Path | None = None
    storyboard: Path | None = None


def read_script(path: str | Path) -> list[tuple[int, str]]:
    """(line number, instruction) for every line to play; a clear error for an unreadable file."""
    p = Path(path)
    if not p.is_file():
        raise GameInputError(f"script {p}: no such file")
    if p.stat().st_size > MAX_SCRIPT_BYTES:
        raise GameInputError(f"script {p} is {p.stat().st_size} bytes; keep it under {MAX_SCRIPT_BYTES}")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise GameInputError(f"script {p} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)]
    lines = [(n, line) for n, line in lines if line and not line.startswith("#")]
    if not lines:
        raise GameInputError(f"script {p} has no instructions (one a line; # starts a comment)")
    return lines


def mentioned_characters(lines: list[tuple[int, str]], cast: list[str]) -> list[str]:
    """Cast names the instructions mention, in order of first mention."""
    found: list[tuple[int, int, str]] = []
    for order, (_, line) in enumerate(lines):
        for name in cast:
            m = re.search(rf"\b{re.escape(name)}\b", line, flags=re.IGNORECASE)
            if m:
                found.append((order, m.start(), name))
    return list(dict.fromkeys(name for _, _, name in sorted(found)))


def play_script(game: Game, path: str | Path, characters: list[str] | str | None = None,
                out: str | Path | None = None, seed: int | None = None, stop_on_error: bool = False,
                report: Callable[[str], None] = print) -> ScriptResult:
    """Play every line of ``path`` in one new game (module doc); ``report`` gets a line per turn."""
    lines = read_script(path)
    names = characters if characters else mentioned_characters(lines, game.cast)
    if not names:
        raise GameInputError(f"script {path} names no character of the cast ({', '.join(game.cast)}); "
                             "pass --characters")
    session = game.new_session(names, seed=seed)
    result = ScriptResult(session)
    report(f"game {session.id}: {', '.join(session.characters)}, {len(lines)} lines")
    for n, line in lines:
        try:
            turn = session.step(line)
        except GameInputError as e:
            result.errors.append((n, str(e)))
            report(f"line {n}: not played: {e}")
            if stop_on_error:
                break
            continue
        result.turns.append((n, turn))
        d, s = turn.deltas, turn.states
        report(f"line {n}: turn {turn.index + 1}, motion level {turn.motion_level}, "
               + ", ".join(f"{k} {s[k]} ({d[k]:+d})" for k in ("stamina", "social", "entertainment")))
    if out is not None and result.turns:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for _, turn in result.turns:
            atomic_write_path(out / f"turn_{turn.index + 1:02d}.mp4",
                              lambda tmp, src=turn.video_path: shutil.copyfile(src, tmp))
        result.video, result.storyboard = game.export_session(session.id, out / "session")
        report(f"wrote {len(result.turns)} clips, {result.video.name} and {result.storyboard.name} to {out}")
    return result
