"""Build what scripts/gpu_train_framenet.sh needs on a bare GPU machine, in ignored folders of the repository:

    .venv/bin/python scripts/gpu_payload.py [--model animegamer/weights/default] [--init RUN]

.gpu/decoder/   the model's shot_decoder.json, E_a's weights alone (0.5 MB), autoencoder/ (f_v), and
                s_a_text.safetensors: E_a's text tokens of every motion text of the world (160), so the GPU
                machine needs no MiniLM
.gpu/init/      with --init: a run's final weights in fp16 (config.json + model.safetensors)
.whl/           the diffusers wheel (the autoencoder is a diffusers class; the GPU image has no diffusers)
Both folders are listed in .git/info/exclude, so only `carry` takes them to the machine.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open

from animegamer.core.checkpoint import save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import DECODER_CONFIG, DECODER_WEIGHTS, resolve_decoder
from animegamer.decoder.frame_diffusion import FrameDenoiser
from animegamer.training.framenet_data import TEXT_TABLE, ActionParts
from animegamer.world.instructions import all_motion_texts

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ["diffusers==0.42.1", "importlib_metadata==10.2.0"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "animegamer" / "weights" / "default"))
    ap.add_argument("--init", default=None, help="a `train framenet` run to continue on the GPU")
    args = ap.parse_args()
    src, out = resolve_decoder(args.model), ROOT / ".gpu" / "decoder"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / DECODER_CONFIG, out / DECODER_CONFIG)
    shutil.copytree(src / "autoencoder", out / "autoencoder", dirs_exist_ok=True)
    with safe_open(src / DECODER_WEIGHTS, "pt") as f:
        save_safetensors_atomic({k: f.get_tensor(k) for k in f.keys() if k.startswith("action_encoder.")},
                                out / DECODER_WEIGHTS)
    texts = all_motion_texts()
    ActionParts(src, "cpu", out / TEXT_TABLE, save_new=True).text_part(texts)  # computes and writes the table
    if args.init:
        init = FrameDenoiser.from_pretrained(args.init)
        init.save_pretrained(ROOT / ".gpu" / "init")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
                    "-d", str(ROOT / ".whl"), *WHEELS], check=True)
    exclude = ROOT / ".git" / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    exclude.write_text("\n".join(lines + [p for p in ("/.gpu/", "/.whl/") if p not in lines]) + "\n")
    save_json_atomic({"model": str(args.model), "texts": len(texts), "init": args.init}, ROOT / ".gpu" / "payload.json")
    print(f"payload ready: .gpu/ ({len(texts)} motion texts), .whl/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
