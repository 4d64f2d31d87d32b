"""Build what scripts/gpu_train_sprites.sh needs on a bare GPU machine, in ignored folders of the repository:

    .venv/bin/python scripts/gpu_payload.py [--model animegamer/weights/default] [--init RUN]
    .venv/bin/python scripts/gpu_payload.py --join FILES_AT --out RUN   # what came back -> a run's final/

.gpu/decoder/   the model's shot_decoder.json, E_a's weights alone (0.5 MB), autoencoder/ (f_v), and
                s_a_text.safetensors: E_a's text tokens of every motion text of the world, so the GPU machine
                needs no MiniLM
.gpu/init/      the sprite animator to continue (default: the shipped one), fp16
.whl/           the diffusers wheel (the autoencoder is a diffusers class; the GPU image has no diffusers)
All are listed in .git/info/exclude, so only `carry` takes them to the machine. The repository's own weights
(88 MB) are over what a call carries (64 MiB): the script's usage says how to leave them behind.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_file

from animegamer.core.checkpoint import save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import DECODER_CONFIG, DECODER_WEIGHTS, resolve_decoder
from animegamer.decoder.pipeline import SPRITES_DIR
from animegamer.decoder.sprite_animator import SpriteAnimator
from animegamer.training.action_parts import TEXT_TABLE, ActionParts
from animegamer.world.instructions import all_motion_texts

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ["diffusers==0.42.1", "importlib_metadata==10.2.0"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "animegamer" / "weights" / "default"))
    ap.add_argument("--init", default=None, help="a `train sprites` run to continue (default: the model's animator)")
    ap.add_argument("--no-wheels", action="store_true", help="skip the diffusers wheel (a CPU rehearsal)")
    ap.add_argument("--join", default=None, metavar="DIR", help="the shards a GPU call brought back, to join")
    ap.add_argument("--out", default=None, metavar="RUN", help="with --join: the run to write (RUN/final/)")
    args = ap.parse_args()
    if args.join:
        if not args.out:
            ap.error("--join needs --out")
        return join(Path(args.join), Path(args.out))
    src, out = resolve_decoder(args.model), ROOT / ".gpu" / "decoder"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / DECODER_CONFIG, out / DECODER_CONFIG)
    shutil.copytree(src / "autoencoder", out / "autoencoder", dirs_exist_ok=True)
    with safe_open(src / DECODER_WEIGHTS, "pt") as f:
        save_safetensors_atomic({k: f.get_tensor(k) for k in f.keys() if k.startswith("action_encoder.")},
                                out / DECODER_WEIGHTS)
    texts = all_motion_texts()
    table = src / TEXT_TABLE
    if table.is_file():
        shutil.copy(table, out / TEXT_TABLE)
    ActionParts(out, "cpu", out / TEXT_TABLE, save_new=True).text_part(texts)  # the texts the table lacks
    SpriteAnimator.from_pretrained(args.init or src / SPRITES_DIR).save_pretrained(ROOT / ".gpu" / "init")
    if not args.no_wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
                        "-d", str(ROOT / ".whl"), *WHEELS], check=True)
    exclude = ROOT / ".git" / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    exclude.write_text("\n".join(lines + [p for p in ("/.gpu/", "/.whl/") if p not in lines]) + "\n")
    save_json_atomic({"model": str(args.model), "texts": len(texts), "init": args.init}, ROOT / ".gpu" / "payload.json")
    print(f"payload ready: .gpu/ ({len(texts)} motion texts, the animator to continue)" +
          ("" if args.no_wheels else ", .whl/"))
    return 0


def join(shards_dir: Path, run: Path) -> int:
    """The fp16 shards and config.json of scripts/gpu_train_sprites.sh -> RUN/final/ (checked by loading it)."""
    shards = sorted(shards_dir.glob("model-*.safetensors"))
    if not shards or not (shards_dir / "config.json").is_file():
        raise SystemExit(f"{shards_dir}: no model-*.safetensors with config.json (what the GPU call writes)")
    state = {k: v for p in shards for k, v in load_file(p).items()}
    final = run / "final"
    final.mkdir(parents=True, exist_ok=True)
    shutil.copy(shards_dir / "config.json", final / "config.json")
    save_safetensors_atomic(state, final / "model.safetensors")
    for name in ("log.jsonl", "train.txt"):
        if (shards_dir / name).is_file():
            shutil.copy(shards_dir / name, run / name)
    model = SpriteAnimator.from_pretrained(final)
    print(f"joined {len(shards)} shards into {final} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f} M)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
