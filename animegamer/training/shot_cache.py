"""Phase a's feature cache: the frozen encoders run ONCE per shot, and training reads the cache.

Each cached shot holds the autoencoder latents of its 17 frames, the visual reference f_v of its
first frame (``representation.reference_encoder``) and the MiniLM token states f_md of its motion
text. Parts of ``PART_SIZE`` shots are written as fp16 safetensors, so an interrupted build resumes
where it stopped; ``meta.json`` records what the cache was built from, and a cache built from other
inputs is refused instead of mixed.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from animegamer.core.checkpoint import load_json, load_safetensors, save_json_atomic, save_safetensors_atomic
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.models.text_encoder import TextEncoder, TextEncoderConfig
from animegamer.representation.action_encoder import pick_reference_frames
from animegamer.representation.reference_encoder import CONDITION_TEXT, LatentReference, load_reference_encoder
from animegamer.world.dataset import ShotDataset, collate_shots

CACHE_FORMAT = "animegamer-decoder-cache"
CACHE_VERSION = 1
PART_SIZE = 256
WAIT_SECONDS = 2.0  # how often a process that does not build a cache looks whether it is finished

@dataclass(frozen=True)
class CacheInputs:
    """What a cache's text and reference features are made of, beside the data and the encoders' folders."""

    text_encoder: str | None  # a local transformers text encoder dir; None = the bundled MiniLM
    n_text: int
    random_frame: bool  # f_v from a random frame (the paper's ablation) instead of the first
    reference_patch: int | None  # latent reference: latent patch side per f_v token; None for a vision tower
    condition: str = "motion"  # "caption": f_md is the whole caption (the GC baseline)


def cache_meta(data: str | Path, split: str, limit: int | None, clip_dir: Path, vae_dir: Path,
               inputs: CacheInputs) -> dict:
    data_meta = json.loads((Path(data) / "meta.json").read_text())

    def stamp(d: Path) -> dict:
        return {"path": str(d.resolve()), "mtime_ns": max(f.stat().st_mtime_ns for f in d.iterdir())}

    return {
        "format": CACHE_FORMAT, "version": CACHE_VERSION, "split": split, "limit": limit,
        "data": str(Path(data).resolve()), "data_seed": data_meta.get("seed"),
        "data_counts": data_meta.get("counts"), "clip": stamp(clip_dir), "vae": stamp(vae_dir),
        "text_encoder": inputs.text_encoder, "n_text": inputs.n_text, "random_frame": inputs.random_frame,
        "reference_patch": inputs.reference_patch,
        # only when not the default, so caches built before this option keep matching
        **({"condition": inputs.condition} if inputs.condition != "motion" else {}),
    }


def cache_encoders(meta: dict, ae) -> dict:
    """The frozen encoders a cache with this ``meta`` is built with (``build_cache``'s get_encoders):
    the reference encoder, the motion-text encoder and the given autoencoder ``ae``."""

    return {"tower": load_reference_encoder(Path(meta["clip"]["path"]), meta["reference_patch"] or 4,
                                            meta.get("condition", "motion")),
            "text": TextEncoder(TextEncoderConfig(path=meta["text_encoder"], n_text=meta["n_text"])), "ae": ae}


def _finished(meta_path: Path, meta: dict) -> bool:
    """A finished cache of exactly these inputs is at ``meta_path``'s folder."""
    if not meta_path.is_file():
        return False
    old = load_json(meta_path)
    return "parts" in old and {k: v for k, v in old.items() if k != "parts"} == meta and all(
        (meta_path.parent / f"part_{p:05d}.safetensors").is_file() for p in range(old["parts"]))


def build_cache(shots, get_encoders, cache_dir: Path, meta: dict, seed: int = 0, batch: int = 8,
                progress: bool = True) -> Path:
    """Encode every shot once into ``cache_dir/part_*.safetensors``; resumes a partial build.

    shots: a ShotDataset; get_encoders() -> {"tower", "text", "ae"} (frozen, eval), called only
    if some part is missing (loading MiniLM costs seconds).
    """

    cache_dir.mkdir(parents=True, exist_ok=True)
    meta_path = cache_dir / "meta.json"
    if _finished(meta_path, meta):  # rewriting its meta would unfinish it under a process reading it
        return cache_dir
    if os.environ.get("LOCAL_RANK", "0") != "0":
        # a distributed launch (torchrun, accelerate launch): this machine's first process builds the cache,
        # the others wait for it rather than build it beside it
        while not _finished(meta_path, meta):
            time.sleep(WAIT_SECONDS)
        return cache_dir
    if meta_path.is_file():
        old = load_json(meta_path)
        if {k: v for k, v in old.items() if k != "parts"} != meta:
            raise ValueError(f"{cache_dir} holds a cache of other inputs ({old}); delete it or pass --cache DIR")
    save_json_atomic(meta, meta_path)
    n = len(shots)
    parts = (n + PART_SIZE - 1) // PART_SIZE
    tower = text = ae = None
    bar = tqdm(total=n, desc=f"cache {meta['split']}", disable=not progress, dynamic_ncols=True)
    for p in range(parts):
        path = cache_dir / f"part_{p:05d}.safetensors"
        lo, hi = p * PART_SIZE, min(n, (p + 1) * PART_SIZE)
        if path.is_file():
            bar.update(hi - lo)
            continue
        if tower is None:
            enc = get_encoders()
            tower, text, ae = enc["tower"], enc["text"], enc["ae"]
        out: dict[str, list] = {"latents": [], "f_v": [], "f_md": [], "motion_level": [], "index": []}
        for s in range(lo, hi, batch):
            idx = list(range(s, min(hi, s + batch)))
            b = collate_shots([shots[i] for i in idx])
            # per-shot generator: the random-frame choice is a function of (seed, shot index)
            g = torch.Generator().manual_seed(seed * 1_000_003 + s)
            with torch.no_grad():
                ref = pick_reference_frames(b.frames, meta["random_frame"], g)  # (B, 3, H, W)
                f_v = tower.patch_tokens(ref).float()  # (B, n_visual, d_v)
                texts = getattr(b, CONDITION_TEXT[meta.get("condition", "motion")])
                f_md, _ = text.token_states(texts, meta["n_text"])  # (B, n_text, d_t), padding = 0
                lat = ae.encode(b.frames).float()  # (B, F, C', h, w), scaled
            out["latents"].append(lat.half())
            out["f_v"].append(f_v.half())
            out["f_md"].append(f_md.float().half())
            out["motion_level"].append(b.motion_level.long())
            out["index"].append(torch.tensor(idx, dtype=torch.long))
            bar.update(len(idx))
        save_safetensors_atomic({k: torch.cat(v) for k, v in out.items()}, path)
    bar.close()
    save_json_atomic({**meta, "parts": parts}, meta_path)
    return cache_dir


def decoder_cache(decoder: ShotDecoder, data: str | Path, split: str, limit: int | None, out: Path,
                  targets=None, targets_name: str = "the decoder's own autoencoder",
                  progress: bool = True) -> "CachedShots":
    """A feature cache of the first ``limit`` shots of ``split`` in ``data``, encoded with the decoder's own
    parts: f_v is the latent of its autoencoder (the latent reference), f_md the bundled text encoder, and
    the shots' targets its autoencoder's latents, or what ``targets`` (an object with the autoencoder's
    ``encode``; ``targets_name`` says what in the cache's meta) makes of the frames. For a decoder with no
    training run beside it (a packed model)."""
    ae = decoder.autoencoder
    channels, d_v = ae.cfg.latent_channels, decoder.config.d_visual_in
    patch = round(math.sqrt(d_v / channels))
    if patch * patch * channels != d_v:
        raise ValueError(f"this decoder's visual reference ({d_v} per token) is not its autoencoder's latent in "
                         "patches; pass --cache of its training run")
    world = json.loads((Path(data) / "meta.json").read_text())
    meta = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "split": split, "limit": limit,
            "data": str(Path(data).resolve()), "data_seed": world.get("seed"), "data_counts": world.get("counts"),
            "clip": {"path": "the decoder's own autoencoder"}, "vae": {"path": targets_name},
            "text_encoder": None, "n_text": decoder.config.n_text, "random_frame": False, "reference_patch": patch}

    def encoders() -> dict:
        return {"tower": LatentReference(ae, patch), "text": TextEncoder(TextEncoderConfig(n_text=meta["n_text"])),
                "ae": ae if targets is None else targets}

    build_cache(ShotDataset(str(data), split, limit=limit), encoders, out, meta, progress=progress)
    return CachedShots(out)


class CachedShots:
    """torch Dataset over a finished cache: item i -> {latents, f_md, f_v, motion_level} (fp32)."""

    def __init__(self, cache_dir: str | Path) -> None:
        cache_dir = Path(cache_dir)
        self.meta = load_json(cache_dir / "meta.json")
        if "parts" not in self.meta:
            raise ValueError(f"{cache_dir}: cache build did not finish; rerun the same command to resume it")
        parts = [load_safetensors(cache_dir / f"part_{p:05d}.safetensors") for p in range(self.meta["parts"])]
        self.tensors = {k: torch.cat([pt[k] for pt in parts]) for k in parts[0]}

    def __len__(self) -> int:
        return len(self.tensors["index"])

    def __getitem__(self, i: int) -> dict:
        t = self.tensors
        return {"latents": t["latents"][i].float(), "f_md": t["f_md"][i].float(), "f_v": t["f_v"][i].float(),
                "motion_level": t["motion_level"][i]}

    def latent_stats(self) -> tuple[float, float]:
        z = self.tensors["latents"].double()
        return z.mean().item(), z.std().item()


# -- the trainable module ------------------------------------------------------------------------
