"""Atomic file writes: everything the project writes to disk goes through these.

A write goes to a temporary file in the same directory and is renamed over the target, so a
crash leaves either the old file or the new one, never half of one.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

TMP_PREFIX = ".tmp-"
_UMASK = os.umask(0)
os.umask(_UMASK)


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename in `path` durable (best effort: not every platform supports it)."""
    with contextlib.suppress(OSError):
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_path(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call write(tmp_path) for a temp file beside `path` (same suffix, so tools that pick a
    format from the name still work), fsync, then rename it onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{path.stem}.", suffix=path.suffix, dir=str(path.parent))
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; our files are read like any other
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "wb") -> Path:
    """Call write(fileobj) on a temp file beside `path`, then rename it onto `path`."""
    def write_file(tmp: str) -> None:
        with open(tmp, mode) as f:
            write(f)
    return atomic_write_path(path, write_file)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write(path, lambda f: json.dump(obj, f, indent=2, sort_keys=False), mode="w")


def write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text), mode="w")


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> Path:
    return atomic_write(path, lambda f: f.writelines(json.dumps(r) + "\n" for r in rows), mode="w")


def write_npz(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    return atomic_write(path, lambda f: np.savez_compressed(f, **arrays))
