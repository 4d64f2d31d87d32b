"""`animegamer convert vae|clip CHECKPOINT --out RUN`: the paper's pretrained, frozen parts from local
checkpoints, written as the run directories every phase reads.

The paper does not train its autoencoder (CogVideoX-2B's 3D VAE) or its visual reference encoder
(OpenCLIP ViT-B-16): phase a encodes shots with them as they are. Here, where no such weights exist,
`train vae` and `train clip` train small ones; at paper scale these commands take their place:

    animegamer convert vae /models/CogVideoX-2b --out runs/vae_paper        # its vae/ folder, or the folder itself
    animegamer convert clip /models/clip-vit-b16-hf --out runs/clip_paper    # a transformers CLIP (vision) dir
    animegamer train decoder --preset paper --vae runs/vae_paper --clip runs/clip_paper --transformer ... ...

The architecture comes from the checkpoint's config.json; the weights are copied once into the run
(`final/autoencoder/`, `final/vision_tower/`, fp16 unless --fp32), so the run reopens without the source.
OpenCLIP's own format is converted to a transformers CLIP directory first (docs/SCALING.md).
Nothing downloads; a folder that is not the expected class is a clear error.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from animegamer.core.checkpoint import atomic_dir
from animegamer.models.autoencoder import ShotAutoencoder, autoencoder_config
from animegamer.models.vision_tower import VisionTower, vision_tower_config
from animegamer.training.release_import import register_release

VAE_CLASS = "AutoencoderKLCogVideoX"
CLIP_TYPES = ("clip_vision_model", "clip")


def _config(path: Path, subfolder: str) -> tuple[Path, dict[str, Any]]:
    """(the checkpoint folder, its config.json): ``path`` itself or its ``subfolder`` (a pipeline dir)."""
    path = Path(path).expanduser()
    if (path / subfolder / "config.json").is_file():
        path = path / subfolder
    config = path / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{path}: no config.json (nor {subfolder}/config.json)")
    return path, json.loads(config.read_text())


def convert_vae(source: str | Path, out: str | Path, fp16: bool = True) -> Path:
    """A local diffusers AutoencoderKLCogVideoX (a CogVideoX pipeline dir or its vae/) -> OUT/final/autoencoder."""
    path, c = _config(Path(source), "vae")
    if c.get("_class_name") != VAE_CLASS:
        found = c.get("_class_name") or f"model_type {c.get('model_type')!r}"
        raise ValueError(f"{path}: {found}, not a diffusers {VAE_CLASS} (CogVideoX-2B's vae/ folder)")
    cfg = autoencoder_config("paper", pretrained_path=str(path), block_out_channels=tuple(c["block_out_channels"]),
                             layers_per_block=int(c["layers_per_block"]), latent_channels=int(c["latent_channels"]),
                             norm_num_groups=int(c["norm_num_groups"]),
                             temporal_ratio=int(c.get("temporal_compression_ratio", 4)))
    ae = ShotAutoencoder(cfg).eval()
    with atomic_dir(out) as tmp:
        ae.save_pretrained(tmp / "final" / "autoencoder", dtype=torch.float16 if fp16 else None)
        (tmp / "final" / "source.json").write_text(json.dumps({"converted_from": str(path), "class": VAE_CLASS}))
    return Path(out) / "final" / "autoencoder"


def convert_clip(source: str | Path, out: str | Path, fp16: bool = True) -> Path:
    """A local transformers CLIP (vision) dir -> OUT/final/vision_tower: frames are resized to the checkpoint's
    square input, normalised with CLIP's statistics, and f_v is its penultimate layer's patch tokens."""
    path, c = _config(Path(source), "vision_model")
    if c.get("model_type") not in CLIP_TYPES:
        raise ValueError(f"{path}: model_type {c.get('model_type')!r}, not a transformers CLIP model")
    size = int(c.get("image_size") or c.get("vision_config", {}).get("image_size", 224))
    tower = VisionTower(vision_tower_config("paper", pretrained_path=str(path), input_size=(size, size))).eval()
    with atomic_dir(out) as tmp:
        tower.save_pretrained(tmp / "final" / "vision_tower", dtype=torch.float16 if fp16 else None)
        (tmp / "final" / "source.json").write_text(json.dumps({"converted_from": str(path), "class": "CLIP"}))
    return Path(out) / "final" / "vision_tower"


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    conv = subparsers.add_parser("convert", help="the paper's pretrained parts from local checkpoints -> runs",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = conv.add_subparsers(dest="part", metavar="PART")
    csub.required = True
    for part, doc in (("vae", "CogVideoX's 3D VAE (a diffusers AutoencoderKLCogVideoX dir) -> a `train vae`-like run"),
                      ("clip", "a transformers CLIP vision tower dir -> a `train clip`-like run")):
        p = csub.add_parser(part, help=doc)
        p.add_argument("checkpoint", help="local checkpoint directory (nothing is downloaded)")
        p.add_argument("--out", required=True, help="run directory to write (replaced atomically)")
        p.add_argument("--fp32", action="store_true", help="keep fp32 weights (default: fp16)")
        p.set_defaults(func=_run)
    register_release(csub)  # the published AnimeGamer checkpoints (release_import.py)


def _run(args: argparse.Namespace) -> int:
    convert = convert_vae if args.part == "vae" else convert_clip
    done = convert(args.checkpoint, args.out, fp16=not args.fp32)
    print(f"convert {args.part}: {args.checkpoint} -> {done} (use it as --{args.part} {args.out})")
    return 0
