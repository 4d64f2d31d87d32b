"""Does the shot a visual anchor comes from set how fast the decoder moves it?

    .venv/bin/python experiments/anchor_source_level.py --data runs/data/big runs/data/engine_extra [--n 30]

Takes bank entries of the shipped model whose source shot was calm (level 1) and fast (level 5), draws
each with the same text tokens (the engine's prediction for one instruction) at two asked levels, and
reads the decoded level from the pixels (the world's flow code). If fast sources decoded faster, a
retrieval that prefers anchors from shots of the engine's level would help the decoded level match the
engine's (docs/results/picture.md section 5). ``--data``: the worlds the bank was built from (its
entries name their shots, not their levels).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from animegamer.decoder.pipeline import frames_to_uint8
from animegamer.evaluation.level_calibration import motion_level_from_pixels
from animegamer.game.session import Game
from animegamer.world.flow import MotionQuantizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", required=True, help="the worlds the shipped bank was built from")
    ap.add_argument("--n", type=int, default=30, help="entries per source level")
    ap.add_argument("--instruction", default="Qiqi walks in the town")
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = ap.parse_args()
    torch.set_num_threads(2)
    game = Game.load(store=Path("/tmp") / "anchor_source_level_games")
    bank = game.decoder.anchors
    levels = {}
    for d in args.data:
        for line in open(Path(d) / "turns.jsonl"):
            r = json.loads(line)
            levels[(Path(d).name, r["shot"])] = r["motion_level"]
    source = [levels[(e.get("data", Path(args.data[0]).name), e["shot"])] for e in bank.entries]
    tokens = bank.tokens(list(range(len(bank))), game.decoder.net.action_encoder.visual)
    pred = game.engine.predict([], args.instruction, states=game.new_session(["Qiqi"], seed=1).states)
    quant, rng, n_text = MotionQuantizer.load(), np.random.default_rng(0), game.decoder.config.n_text
    report = {}
    for src in (1, 5):
        picks = rng.choice([i for i, lv in enumerate(source) if lv == src], args.n, replace=False)
        for asked in (2, 4):
            read = []
            for n, i in enumerate(picks):
                s_a = pred.s_a.clone().float()
                s_a[n_text:] = tokens[int(i)]
                with torch.no_grad():
                    lat = game.decoder.sample_latents(s_a[None], asked, torch.Generator().manual_seed(n))
                read.append(motion_level_from_pixels(frames_to_uint8(game.decoder.decode_latents(lat))[0], quant))
            levels_read = np.array([m for m, _ in read])
            report[f"source {src}, asked {asked}"] = {
                "decoded_mean_level": float(levels_read.mean()), "decoded_equals_asked": float((levels_read == asked).mean()),
                "mean_flow": float(np.mean([f for _, f in read]))}
            print(f"source level {src}, asked {asked}: {report[f'source {src}, asked {asked}']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
