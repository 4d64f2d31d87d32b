"""Atomic checkpoint I/O used by every phase.

Rules: tensors go to safetensors, everything else to JSON; every file is
written to a temporary name in the same directory, fsynced, then renamed, so a crash leaves
either the old file or the new one, never a torn one. A checkpoint *directory* is committed
the same way: filled under a hidden temp name, then renamed in one step (`atomic_dir`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import load_file, save_file
from torch.distributed.tensor import DTensor

from animegamer.core.atomic_io import _UMASK, TMP_PREFIX, atomic_write_path, fsync_dir

FORMAT_VERSION = 1


def save_safetensors_atomic(tensors: dict[str, torch.Tensor], path: str | Path,
                            metadata: dict[str, str] | None = None) -> Path:
    """Write `tensors` to `path` as safetensors atomically.

    Tensors are made contiguous and moved to CPU; tensors sharing storage (tied weights) are
    cloned, since safetensors refuses shared memory. Sharded tensors (FSDP's DTensors) are gathered
    whole first, which is collective: under FSDP every rank must make the same call.
    """
    seen: set[int] = set()
    flat: dict[str, torch.Tensor] = {}
    for key, value in gathered(tensors).items():
        t = value.detach().to("cpu")
        ptr = t.untyped_storage().data_ptr() if t.numel() else -1
        if ptr in seen or not t.is_contiguous():
            t = t.clone().contiguous()
        if t.numel():
            seen.add(t.untyped_storage().data_ptr())
        flat[key] = t
    meta = {"format_version": str(FORMAT_VERSION), **(metadata or {})}
    return atomic_write_path(Path(path), lambda tmp: save_file(flat, tmp, metadata=meta))


def gathered(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same tensors with every sharded one (a DTensor, as FSDP 2 holds parameters) gathered whole.
    Collective when any is sharded: every rank of the group must call it with the same keys."""
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v) for k, v in tensors.items()}


def file_hash(path: str | Path) -> str:
    """The blake2b (16 bytes, hex) of a file's bytes, read in 4 MB chunks: which weights a result came from."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def load_safetensors(path: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    return load_file(str(path), device=str(device))


def save_json_atomic(obj: Any, path: str | Path) -> Path:
    """Write `obj` as JSON (indent 2, sorted keys) atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return atomic_write_path(Path(path), write)


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (tuple, set)):
        return list(o)
    if isinstance(o, torch.Tensor) and o.numel() == 1:
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def save_model_dir(directory: str | Path, state_dict: dict[str, torch.Tensor], meta: dict[str, Any],
                   dtype: torch.dtype | None, weights: str = "model.safetensors", config: str = "config.json") -> Path:
    """A model's folder written atomically: its weights (cast to ``dtype``; None keeps them) and its config json."""
    with atomic_dir(directory) as tmp:
        save_safetensors_atomic(state_dict_to_dtype(state_dict, dtype), tmp / weights)
        save_json_atomic(meta, tmp / config)
    return Path(directory)


def run_dir(path: str | Path, what: str, config: str = "config.json") -> Path:
    """The folder that holds a model's ``config``: ``path`` itself (an export, a packed part) or a training run's
    final/; a clear error naming ``what`` otherwise."""
    d = Path(path)
    for candidate in (d, d / "final"):
        if (candidate / config).is_file():
            return candidate
    raise FileNotFoundError(f"no {what} in {path}: expected {config} there or in final/")


def load_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def commit_dir(tmp_dir: str | Path, final_dir: str | Path) -> Path:
    """Rename a fully written `tmp_dir` to `final_dir` (replacing an existing one).

    The new directory appears under its final name in one rename. If `final_dir` existed it is
    first moved to a hidden `.tmp-*.old` name (so a reader sees either the old or the new
    version, or -- for an instant, only when replacing -- none) and deleted afterwards.
    Checkpoints use a fresh name per step, so they never hit the replace case.
    """
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    fsync_dir(tmp_dir)
    old = None
    if final_dir.exists():
        old = final_dir.with_name(TMP_PREFIX + final_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final_dir, old)
    os.replace(tmp_dir, final_dir)
    fsync_dir(final_dir.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final_dir


@contextlib.contextmanager
def atomic_dir(final_dir: str | Path) -> Iterator[Path]:
    """Build a directory under a hidden temp name, then `commit_dir` it to `final_dir`.

    On an exception inside the block the temp dir is deleted and `final_dir` is untouched.
    """
    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + final_dir.name + ".", dir=str(final_dir.parent)))
    os.chmod(tmp, 0o777 & ~_UMASK)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    commit_dir(tmp, final_dir)


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Delete leftovers of interrupted atomic writes (`.tmp-*`) in `directory`."""
    removed = []
    directory = Path(directory)
    if not directory.is_dir():
        return removed
    for p in directory.iterdir():
        if p.name.startswith(TMP_PREFIX):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            removed.append(p)
    return removed


def state_dict_to_dtype(sd: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """Cast floating tensors to `dtype` (e.g. fp16 for shipped weights); others unchanged."""
    if dtype is None:
        return dict(sd)
    return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in sd.items()}
