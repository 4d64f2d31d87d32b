"""Assemble a playable model directory from training runs (what ``Game.load`` reads).

    animegamer model pack --engine runs/engine --decoder runs/adapt --out animegamer/weights/default \
        --provenance docs/provenance.json

Output: ``OUT/engine/`` (engine.json + engine.safetensors: LoRA, new embeddings, queries,
resamplers; the base LLM comes from its package) and ``OUT/shot_decoder/`` (ShotDecoder:
E_a + transformer + autoencoder), fp16 by default: half the bytes, and the game runs them in
fp32 / bf16 autocast anyway, so fp16 storage costs nothing measurable. ``OUT/model.json`` records
where each part came from (run directories, their metrics, the training commands if given).
The whole directory is written atomically: a failed pack leaves the previous model in place.
"""
from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from animegamer.core.checkpoint import atomic_dir, load_safetensors, save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import ENGINE_WEIGHTS, resolve_decoder, resolve_engine
from animegamer.decoder.anchors import AnchorConfig, VisualAnchors
from animegamer.decoder.pipeline import STAGE_DIR, ShotDecoder
from animegamer.decoder.sprite_animator import SpriteAnimator
from animegamer.decoder.stage import Stage, world_stage
from animegamer.engine.model import load_engine, save_engine
from animegamer.models.autoencoder import ShotAutoencoder
from animegamer.models.text_encoder import TextEncoder, TextEncoderConfig
from animegamer.world.cast import load_cast


def _metrics(run_dir: Path) -> dict[str, Any]:
    for p in (run_dir / "metrics.json", run_dir.parent / "metrics.json"):
        if p.is_file():
            return json.loads(p.read_text())
    return {}


@dataclasses.dataclass(frozen=True)
class AnchorPacking:
    """Visual anchors built at pack time (decoder/anchors.py): ``worlds`` are world datasets whose train shots'
    first frames become the anchors, at most ``limit`` in all, ``per_scene`` of each (characters, place, time)
    and ``per_action`` of each (characters, place, time, verb), their pictures stored at ``frame_quality``
    (None: lossless), with the motions they show encoded by ``text_encoder`` (the decoder's; None: the bundled
    MiniLM) so that the game can choose them for the action (``by_action``, ``repose``: AnchorConfig)."""

    worlds: str | Path | Sequence[str | Path]
    limit: int | None = None
    per_scene: int | None = None
    per_action: int | None = None
    frame_quality: int | None = None
    text_encoder: str | Path | None = None
    by_action: bool = True
    repose: bool = False


def pack_model(engine: str | Path, decoder: str | Path, out: str | Path, fp16: bool = True,
               provenance: dict[str, Any] | None = None, sampler: dict[str, Any] | None = None,
               autoencoder: str | Path | None = None, anchors: AnchorPacking | Literal[False] | None = None,
               sprites: str | Path | None = None) -> Path:
    """Copy the engine and shot decoder of two runs into one model directory (see module doc).

    ``sampler``: SamplerConfig fields that replace the ones stored with the decoder (the game's
    guidance); model.json records them. ``autoencoder``: an autoencoder directory to decode with instead of the
    decoder's own: a decoder-only fine-tune of it (`train vae --init --decoder-only`), whose encoder
    and latent scale must be the decoder's, so the latents mean the same. ``anchors``: the visual anchors to build (``AnchorPacking``); False drops the anchors the decoder has; None
    keeps them. With anchors
    built, the stage (decoder/stage.py: the world's places with no one in them and the cast's cut-outs) is drawn
    too, so the game can compose a first frame no stored shot shows. ``sprites``: a `train sprites` run whose
    animator draws every shot in layers on the stage (decoder/layered.py)."""

    engine_dir, decoder_dir = resolve_engine(engine), resolve_decoder(decoder)
    eng = load_engine(engine_dir)
    dec = ShotDecoder.from_pretrained(decoder_dir)
    if autoencoder is not None:
        dec.autoencoder = same_latent_space(dec.autoencoder, ShotAutoencoder.from_pretrained(autoencoder).float())
    if anchors is False:
        dec.anchors = None
    elif isinstance(anchors, AnchorPacking):
        dec.anchors = VisualAnchors.build(anchors.worlds, dec.latent_reference(), limit=anchors.limit,
                                          per_scene=anchors.per_scene, per_action=anchors.per_action,
                                          config=AnchorConfig(by_action=anchors.by_action, repose=anchors.repose),
                                          motion_features=motion_features(dec, anchors.text_encoder),
                                          frame_quality=anchors.frame_quality)
    built = isinstance(anchors, AnchorPacking)
    if built:
        dec.stage = world_stage(dec.frame_size)
    sampler = dict(sampler or {})
    if sprites is not None:  # the sprite animator draws every shot in layers on the world's stage
        dec.animator = SpriteAnimator.from_pretrained(sprites)
        if dec.animator.config.cond_dim != dec.config.d_cond:
            raise ValueError(f"{sprites} draws from s_a {dec.animator.config.cond_dim} wide, the decoder's is "
                             f"{dec.config.d_cond}")
        dec.stage = world_stage(dec.frame_size)  # with the wide places a camera follows a traveller across
        # play never shows a stored picture: the anchors keep their tokens, which name the scene
        if dec.anchors is not None:
            dec.anchors.frames = None
    if sampler:  # validated like any stored config: a bad value fails here, before anything is written
        dec.sampler = dataclasses.replace(dec.sampler, **sampler)
    n_eng, d_eng, n_dec, d_dec = eng.cfg.rep_tokens, eng.cfg.rep_dim, dec.config.n_tokens, dec.config.d_cond
    if (n_eng, d_eng) != (n_dec, d_dec):
        raise ValueError(f"{engine_dir} predicts s_a of {n_eng} x {d_eng} but {decoder_dir} reads {n_dec} x {d_dec}")
    cast = film_cast(dec.anchors.entries, list(load_cast())) if built else None
    dtype = torch.float16 if fp16 else None
    with atomic_dir(out) as tmp:
        save_engine(eng, tmp / "engine")
        if fp16:  # the rep statistics stay fp32 (tiny, and they scale every prediction)
            sd = load_safetensors(tmp / "engine" / ENGINE_WEIGHTS)
            sd = {k: v.half() if v.is_floating_point() and not k.startswith("rep_") else v for k, v in sd.items()}
            save_safetensors_atomic(sd, tmp / "engine" / ENGINE_WEIGHTS, metadata={"kind": "animegamer-engine"})
        dec.save_pretrained(tmp / "shot_decoder", dtype=dtype)
        save_json_atomic({"engine": {"from": str(engine_dir), "metrics": _metrics(engine_dir)},
                          "shot_decoder": {"from": str(decoder_dir), "metrics": _metrics(decoder_dir.parent)},
                          "dtype": "float16" if fp16 else "float32",
                          **({"anchors": {"from": [str(a) for a in _sources(anchors.worlds)],
                                          "shots": len(dec.anchors),
                                          "per_scene": anchors.per_scene, "per_action": anchors.per_action,
                                          "frame_quality": anchors.frame_quality or "lossless",
                                          "motions": len(dec.anchors.motions or []),
                                          "config": dec.anchors.config.to_dict()}}
                             if built else {}),
                          **({"stage": stage_summary(dec.stage)} if dec.stage is not None else {}),
                          **({"sprite_animator": {"from": str(sprites), "parameters": sum(
                              p.numel() for p in dec.animator.parameters())}} if sprites is not None else {}),
                          **({"cast": cast} if cast else {}),
                          **({"sampler_override": sampler} if sampler else {}), **(provenance or {})},
                         tmp / "model.json")
    return Path(out)


def stage_summary(stage: Stage) -> dict[str, Any]:
    return {"places": len(stage.places), "cut_outs": sorted(stage.sprites), "size": list(stage.size)}


def add_stage(model: str | Path) -> Path:
    """Draw the world's stage into a model directory packed without one (its ``shot_decoder/stage/``, written
    atomically; model.json notes it)."""
    model = Path(model)
    decoder_dir = resolve_decoder(model)
    stage = world_stage(ShotDecoder.from_pretrained(decoder_dir).frame_size)
    stage.save_pretrained(decoder_dir / STAGE_DIR)
    info = model / "model.json"
    if info.is_file():
        save_json_atomic({**json.loads(info.read_text()), "stage": stage_summary(stage)}, info)
    return decoder_dir / STAGE_DIR


def motion_features(decoder: ShotDecoder,
                    text_encoder: str | Path | None = None) -> Callable[[list[str]], torch.Tensor]:
    """texts -> f_md (K, n_text, d_text) by the decoder's text encoder (``text_encoder``, None: the bundled
    MiniLM), loaded on first use; a ValueError when its width is not the one the decoder reads."""
    c = decoder.config

    def features(texts: list[str]) -> torch.Tensor:
        text = TextEncoder(TextEncoderConfig(path=None if text_encoder is None else str(text_encoder), n_text=c.n_text))
        if text.dim != c.d_text_in:
            raise ValueError(f"the text encoder {text_encoder or '(bundled MiniLM)'} gives {text.dim}-wide tokens; "
                             f"this decoder reads {c.d_text_in}: pass its own text encoder (--text-encoder)")
        return text.token_states(texts, c.n_text)[0]
    return features


def _sources(anchors: str | Path | Sequence[str | Path]) -> list[str | Path]:
    return [anchors] if isinstance(anchors, (str, Path)) else list(anchors)


def film_cast(entries: list[dict[str, Any]], world_cast: list[str]) -> list[str] | None:
    """The characters a model's anchors can draw, when some are not the world's (a model fine-tuned on
    films names its own characters): the world's first, in its order, then the others, most frequent
    first. None when every name is the world's (the game keeps the world's cast)."""
    counts = collections.Counter(c for e in entries for c in e["characters"])
    if set(counts) <= set(world_cast):
        return None
    return [c for c in world_cast if c in counts] + sorted((c for c in counts if c not in world_cast),
                                                          key=lambda c: (-counts[c], c))


def same_latent_space(old: ShotAutoencoder, new: ShotAutoencoder) -> ShotAutoencoder:
    """``new`` if it encodes exactly as ``old`` (same config, encoder weights and latent scale), else a
    ValueError saying what differs."""
    if old.cfg != new.cfg:
        raise ValueError(f"the autoencoder's config differs from the decoder's ({new.cfg} vs {old.cfg})")
    a, b = old.state_dict(), new.state_dict()
    keys = [k for k in a if k.startswith(("vae.encoder.", "vae.quant_conv.")) or k in ("latent_scale", "latent_shift")]
    differ = [k for k in keys if not torch.equal(a[k].float(), b[k].float())]
    if differ:
        raise ValueError(f"the autoencoder encodes differently from the decoder's ({len(differ)} tensors differ, e.g. "
                         f"{differ[0]}): only a decoder-only fine-tune (train vae --init --decoder-only) fits")
    return new


def model_bytes(path: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
