"""Atomic file writes: everything the project writes to disk goes through these.

A write goes to a temporary file in the same directory and is renamed over the target, so a
crash leaves either the old file or the new one, never half of one.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "wb") -> Path:
    """Call write(fileobj) on a temp file beside `path`, fsync, then rename onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write(path, lambda f: json.dump(obj, f, indent=2, sort_keys=False), mode="w")


def write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text), mode="w")


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> Path:
    return atomic_write(path, lambda f: f.writelines(json.dumps(r) + "\n" for r in rows), mode="w")


def write_npz(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    return atomic_write(path, lambda f: np.savez_compressed(f, **arrays))
