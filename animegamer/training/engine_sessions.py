"""Engine sessions from a rendered world: the s_a of every turn's TRUE shot, computed with phase a.

    build_engine_sessions("/work/data/fit", "runs/decoder", "runs/clip", "runs/engine/sessions/train", "train")

For every session of one split of the world dataset (``animegamer.world.dataset``), each turn's
target representation is what the decoder was trained on and conditions on: the phase-a
``ActionRepresentation`` (vision tower on the shot's FIRST frame + MiniLM motion-text token
states + the decoder's E_a). So an s_a the engine predicts lives in the space the decoder decodes.

Output: the engine sessions format of ``animegamer.engine.data.save_sessions`` (turns carry
instruction, motion_level, deltas, states = absolute states BEFORE the turn, plus session / turn /
template_id / motion_text / shot for analysis), and:
    engine_rep_stats.safetensors   {"mean": (N, D), "std": (N, D)} of the split's s_a
    engine_meta.json               + "build" (what produced it: world, decoder, vision tower and
                                   text encoder, by path and content hash), "rep_stats",
                                   "n_text", "n_visual" (s_a = n_text text tokens then n_visual
                                   visual tokens), "split". "build" is written LAST: a directory
                                   without it is unfinished.
Resumable: each session's s_a is written (atomically) to ``.{name}.partial/`` beside the output
as soon as it is computed; an interrupted build continues from there, and the finished
directory is committed in one step. A finished directory built from the same inputs is reused;
one built from other inputs (say, a retrained decoder) is refused, never silently mixed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import file_hash, load_json, load_safetensors, save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.decoder.pipeline import WEIGHTS_NAME, ShotDecoder, frames_from_uint8
from animegamer.engine.data import save_sessions
from animegamer.models.text_encoder import TextEncoder, TextEncoderConfig
from animegamer.representation.action_encoder import ActionRepresentation
from animegamer.representation.reference_encoder import (
    CONDITION_TEXT,
    load_reference_encoder,
    reference_weights,
    resolve_reference,
)
from animegamer.training.shot_cache import CACHE_FORMAT
from animegamer.world.dataset import FORMAT, WorldDataset

BUILD_FORMAT = "animegamer-engine-world-sessions"
BUILD_VERSION = 1
STATS_FILE = "engine_rep_stats.safetensors"
STD_FLOOR = 0.1  # std of a (token, dim) is floored at STD_FLOOR x the mean std (constant padding tokens)
# extra row fields kept on each turn (the engine ignores them; the evaluation can slice by them)
EXTRA_FIELDS = ("session", "turn", "template_id", "motion_text", "shot")

RepresentationSource = Any  # an ActionRepresentation, or a zero-argument callable returning one


def is_world_dataset(path: str | Path | None) -> bool:
    """True if ``path`` is a finished world dataset (meta.json with format animegamer-world)."""

    if path is None or not (Path(path) / "meta.json").is_file():
        return False
    try:
        return json.loads((Path(path) / "meta.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------- phase-a inputs
def decoder_run_inputs(decoder_dir: Path) -> dict[str, Any]:
    """What the decoder run encoded its shots with (its feature cache meta), if the run dir is
    around: {"clip": path, "text_encoder": path | None, "n_text": int, "random_frame": bool}."""

    for run in list(Path(decoder_dir).resolve().parents)[:4]:  # shot_decoder -> final -> joint -> RUN
        for meta in sorted((run / "cache").glob("*/meta.json")):
            try:
                m = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if m.get("format") == CACHE_FORMAT and m.get("split") == "train":
                return {"clip": m["clip"]["path"], "text_encoder": m.get("text_encoder"), "n_text": m.get("n_text"),
                        "random_frame": m.get("random_frame", False), "reference_patch": m.get("reference_patch"),
                        "condition": m.get("condition", "motion")}
    return {}



def representation_inputs(decoder_dir: str | Path, clip_dir: str | Path | None,
                          text_encoder: str | None = None) -> dict[str, Any]:
    """Resolve (cheaply, nothing loaded) the three parts of phase a's representation.

    ``clip_dir`` None takes the vision tower the decoder run was trained with (its cache meta);
    a given one that differs from it is reported, since s_a from another tower would not decode.
    """

    dec = resolve_decoder(decoder_dir)
    run = decoder_run_inputs(dec)
    if clip_dir is None:
        if "clip" not in run:
            raise ValueError(f"no --clip given and the decoder run of {dec} records no vision tower; pass --clip")
        clip_dir = run["clip"]
    clip = resolve_reference(clip_dir)  # a vision tower, or the autoencoder of a latent reference
    if run.get("clip") and Path(run["clip"]).resolve() != clip.resolve():
        print(f"[world-sessions] warning: the decoder was trained with the visual reference {run['clip']}, "
              f"but s_a will be computed with {clip}")
    text = text_encoder if text_encoder is not None else run.get("text_encoder")
    return {"decoder": str(dec.resolve()), "decoder_hash": file_hash(dec / WEIGHTS_NAME),
            "clip": str(clip.resolve()), "clip_hash": file_hash(reference_weights(clip)),
            "text_encoder": text, "random_frame_decoder": bool(run.get("random_frame", False)),
            "reference_patch": run.get("reference_patch"),
            # "caption": the GC baseline's decoder (caption text, no visual reference); the key is left
            # out for the default so engine sessions built before it keep matching
            **({"condition": run["condition"]} if run.get("condition", "motion") != "motion" else {})}


def load_representation(inputs: dict[str, Any]):
    """The phase-a ActionRepresentation (frozen, eval) from ``representation_inputs``: the
    decoder's E_a, the vision tower and the text encoder with the decoder's n_text."""

    decoder = ShotDecoder.from_pretrained(inputs["decoder"])
    cfg = decoder.config
    tower = load_reference_encoder(inputs["clip"], inputs.get("reference_patch") or 4,
                                   inputs.get("condition", "motion"))
    if hasattr(tower, "n_visual") and (tower.n_visual, tower.d_visual) != (cfg.n_visual, cfg.d_visual_in):
        raise ValueError(f"vision tower {inputs['clip']} gives {tower.n_visual} x {tower.d_visual} tokens, the decoder "
                         f"{inputs['decoder']} expects {cfg.n_visual} x {cfg.d_visual_in}: not the tower it was trained with")
    text = TextEncoder(TextEncoderConfig(path=inputs["text_encoder"], n_text=cfg.n_text))
    ea = decoder.net.action_encoder.float().eval().requires_grad_(False)
    return ActionRepresentation(tower, text, ea).eval()


def motion_text_table(build: dict[str, Any], texts: list[str]) -> torch.Tensor:
    """s_a's text tokens of each motion text (K, n_text, D) with the representation a sessions directory's
    ``build`` records: what its turns' true s_a begin with."""
    return load_representation(build).encode_text(texts).float().cpu()


# --------------------------------------------------------------------- statistics
def rep_stats(sessions: list[list[dict[str, Any]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-(token, dim) mean and std (N, D) of the s_a of all turns. The std is floored at
    STD_FLOOR x its mean so constant entries (E_a of padding text tokens) standardise to 0
    instead of blowing up."""
    s = torch.stack([t["s_a"].double() for sess in sessions for t in sess])  # (turns, N, D)
    mean, std = s.mean(0), s.std(0, unbiased=False)
    std = std.clamp_min(max(STD_FLOOR * float(std.mean()), 1e-6))
    return mean.float(), std.float()


def load_rep_stats(data_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The stats stored by ``build_engine_sessions`` (None for a sessions dir without them)."""

    path = Path(data_dir) / STATS_FILE
    if not path.is_file():
        return None
    t = load_safetensors(path)
    return t["mean"].float(), t["std"].float()


# --------------------------------------------------------------------- the build
def _first_frames(world, rows: list[dict[str, Any]]) -> torch.Tensor:
    """(B, 3, H, W) in [-1, 1]: frame 0 of each row's shot (as collate_shots scales frames)."""

    return frames_from_uint8(np.stack([world.frames(r)[0] for r in rows]))  # uint8 (B, H, W, 3) -> (B, 3, H, W)


def engine_turn(row: dict[str, Any]) -> dict[str, Any]:
    """A world row -> an engine sessions turn (without s_a). An ingested clip whose state changes were not
    annotated has no deltas and no states: None, which the engine's loss skips."""
    deltas, states = row.get("deltas"), row.get("states_before")
    return {"instruction": row["instruction"], "motion_level": int(row["motion_level"]),
            "deltas": None if deltas is None else {k: int(v) for k, v in deltas.items()},
            "states": None if states is None else dict(states),
            **{k: row[k] for k in EXTRA_FIELDS if k in row}}


def build_engine_sessions(world_dir: str | Path, decoder_dir: str | Path, clip_dir: str | Path | None,
                          out_dir: str | Path, split: str = "train", batch_size: int = 16, progress: bool = True,
                          *, text_encoder: str | None = None, representation: RepresentationSource | None = None,
                          limit: int | None = None) -> Path:
    """Compute the s_a of every turn of ``split`` and write engine sessions to ``out_dir``.

    ``representation``: an ActionRepresentation to use (or a callable returning one, called only
    if something must be computed, so several splits share one load); default: loaded from
    ``decoder_dir`` / ``clip_dir`` / ``text_encoder``. ``limit``: the first N sessions only.
    Returns ``out_dir``; a finished directory of the same inputs is returned as it is.
    """

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out_dir = Path(out_dir)
    world = WorldDataset(world_dir)
    inputs = representation_inputs(decoder_dir, clip_dir, text_encoder)
    build = {"format": BUILD_FORMAT, "version": BUILD_VERSION, "split": split, "limit": limit,
             "world": str(world.root.resolve()), "world_seed": world.meta.get("seed"),
             "world_turns": world.meta.get("turns_total"), **inputs}
    meta_path = out_dir / "engine_meta.json"
    if meta_path.is_file():
        old = load_json(meta_path).get("build")
        if old == build:
            return out_dir
        if old is not None:
            raise ValueError(f"{out_dir} holds engine sessions built from other inputs:\n  {old}\nnow:\n  {build}\n"
                             f"delete it (or choose another output) to rebuild")
    sessions = world.sessions(split)[:limit]
    if not sessions:
        raise ValueError(f"{world_dir}: no sessions in split {split!r}")
    ids = [f"{rows[0]['session']:06d}" for rows in sessions]

    partial = out_dir.parent / f".{out_dir.name}.partial"
    if (partial / "build.json").is_file() and load_json(partial / "build.json") != build:
        shutil.rmtree(partial)  # s_a of other inputs: useless
    save_json_atomic(build, partial / "build.json")
    rep_path = {sid: partial / "reps" / f"{sid}.safetensors" for sid in ids}
    todo = [(sid, rows) for sid, rows in zip(ids, sessions) if not rep_path[sid].is_file()]
    total = sum(len(rows) for rows in sessions)
    bar = tqdm(total=total, initial=total - sum(len(rows) for _, rows in todo), unit="turn",
               desc=f"s_a {split}", disable=not progress, dynamic_ncols=True)
    text_key = CONDITION_TEXT[inputs.get("condition", "motion")]  # GC: the caption
    rep = None
    i = 0
    while i < len(todo):
        chunk = [todo[i]]  # whole sessions, about batch_size turns per encoder call
        while i + len(chunk) < len(todo) and sum(len(r) for _, r in chunk) + len(todo[i + len(chunk)][1]) <= batch_size:
            chunk.append(todo[i + len(chunk)])
        i += len(chunk)
        if rep is None:
            rep = representation() if callable(representation) and not isinstance(representation, torch.nn.Module) \
                else representation if representation is not None else load_representation(inputs)
        rows = [r for _, rs in chunk for r in rs]
        with torch.no_grad():
            s_a = rep.encode(_first_frames(world, rows), [r[text_key] for r in rows]).float()  # (B, N, D)
        k = 0
        for sid, rs in chunk:
            save_safetensors_atomic({"s_a": s_a[k:k + len(rs)].contiguous()}, rep_path[sid])  # (T, N, D)
            k += len(rs)
        bar.update(len(rows))
    bar.close()

    out: list[list[dict[str, Any]]] = []
    for sid, rows in zip(ids, sessions):
        reps = load_safetensors(rep_path[sid])["s_a"]  # (T, N, D)
        out.append([{**engine_turn(r), "s_a": reps[t]} for t, r in enumerate(rows)])
    N, D = out[0][0]["s_a"].shape
    mean, std = rep_stats(out)
    all_s = torch.stack([t["s_a"] for s in out for t in s])  # (turns, N, D)
    dec_cfg = json.loads((Path(inputs["decoder"]) / "shot_decoder.json").read_text())["decoder"]
    n_text = int(dec_cfg["n_text"])
    save_sessions(out, out_dir, ids)
    save_safetensors_atomic({"mean": mean, "std": std}, out_dir / STATS_FILE)
    meta = load_json(meta_path)
    meta.update(split=split, n_text=n_text, n_visual=int(N) - n_text, turns=sum(len(s) for s in out),
                rep_stats={"file": STATS_FILE, "over": split, "kind": "per (token, dim)", "std_floor": STD_FLOOR,
                           "global_mean": float(all_s.mean()), "global_std": float(all_s.std())},
                build=build)
    save_json_atomic(meta, meta_path)  # "build" written last: marks the directory finished
    shutil.rmtree(partial, ignore_errors=True)
    return out_dir


def build_engine_splits(world_dir: str | Path, decoder_dir: str | Path, clip_dir: str | Path | None,
                        out_root: str | Path, splits: tuple[str, ...] = ("train", "val", "test"),
                        batch_size: int = 16, progress: bool = True, text_encoder: str | None = None,
                        limit: int | None = None) -> dict[str, Path]:
    """``build_engine_sessions`` for several splits into ``out_root/<split>``, loading the
    representation at most once (and not at all when every split is already built)."""
    loaded: list[Any] = []

    def get() -> Any:
        if not loaded:
            loaded.append(load_representation(representation_inputs(decoder_dir, clip_dir, text_encoder)))
        return loaded[0]

    return {s: build_engine_sessions(world_dir, decoder_dir, clip_dir, Path(out_root) / s, s, batch_size, progress,
                                     text_encoder=text_encoder, representation=get,
                                     limit=limit if s == "train" else None)
            for s in splits}
