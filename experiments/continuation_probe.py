"""Would the decoder draw the next shot from the last frame the player saw? A probe on held-out play.

    .venv/bin/python experiments/continuation_probe.py EVAL_DIR --evaluator EVALUATOR --out OUT.json

Plays the held-out sessions of an `animegamer eval` directory (its world/) with the shipped model and
draws every turn after the first three ways, from the same engine prediction and seed:
  engine       the engine's predicted s_a (what the game does)
  continue     the visual tokens of s_a replaced by E_a's visual stream of the previous shot's decoded
               LAST frame (re-encoded by the autoencoder), text tokens kept
  oracle       `continue` only where the world kept the place and the time of day, else `engine`
The history fed back to the engine is the engine's own (as in the game). Per turn it records the
frame classifier's reading of each, the truth flags, and candidate gate distances between the
engine's predicted visual tokens and the continuation tokens.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from animegamer.decoder.pipeline import frames_from_uint8
from animegamer.evaluation.evaluator import Evaluator
from animegamer.evaluation.picture import read_picture
from animegamer.evaluation.run import session_characters
from animegamer.game.session import Game, turn_seed
from animegamer.representation.reference_encoder import LatentReference
from animegamer.world.dataset import WorldDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("eval_dir", type=Path)
    ap.add_argument("--evaluator", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sessions", type=int, default=24)
    args = ap.parse_args()
    torch.set_num_threads(2)
    world = WorldDataset(args.eval_dir / "world")
    held = world.sessions("test")[: args.sessions]
    seed0 = int(world.meta["seed"])
    ev = Evaluator.load(args.evaluator)
    game = Game.load(store=args.out.parent / "probe_games")
    dec = game.decoder
    ref = LatentReference(dec.autoencoder, patch=4)
    n_text = dec.config.n_text
    rows_out = []
    bar = tqdm(total=sum(len(s) for s in held))
    for rows in held:
        game.engine.reset_cache()
        session = game.new_session(session_characters(rows), seed=turn_seed(seed0, rows[0]["session"]),
                                   states=dict(rows[0]["states_before"]))
        prev_last = None
        for row in rows:
            turn = session.step(row["instruction"])
            true = world.frames(row)
            rec = {"session": row["session"], "turn": row["turn"], "place_changed": bool(row.get("place_changed")),
                   "time_changed": bool(row.get("time_changed")), "ml": int(turn.motion_level)}
            r = read_picture(ev.frames, turn.frames, true, row)
            rec["engine"] = {k: r[k] for k in ("char_id", "place_id", "time_id", "sharp", "sharp_true")}
            if prev_last is not None:
                with torch.no_grad():
                    f_v = ref.patch_tokens(frames_from_uint8(prev_last)[None])  # (1, 54, 64)
                    cont = dec.net.action_encoder.visual(f_v)[0]  # (54, D)
                pred = turn.s_a[n_text:].float()
                rec["dist_tok"] = float(((pred - cont) ** 2).mean() / (pred ** 2).mean())
                rec["dist_mean"] = float(((pred.mean(0) - cont.mean(0)) ** 2).mean() / (pred.mean(0) ** 2).mean())
                pg = pred.reshape(6, 9, -1).permute(2, 0, 1)[None]
                cg = cont.reshape(6, 9, -1).permute(2, 0, 1)[None]
                pp = torch.nn.functional.adaptive_avg_pool2d(pg, (2, 3))
                cp = torch.nn.functional.adaptive_avg_pool2d(cg, (2, 3))
                rec["dist_pool"] = float(((pp - cp) ** 2).mean() / (pp ** 2).mean())
                s_a = turn.s_a.clone().float()
                s_a[n_text:] = cont
                frames = dec(s_a, motion_level=turn.motion_level, generator=torch.Generator().manual_seed(turn.seed))
                r = read_picture(ev.frames, frames, true, row)
                rec["continue"] = {k: r[k] for k in ("char_id", "place_id", "time_id", "sharp", "sharp_true")}
            prev_last = turn.frames[-1]
            rows_out.append(rec)
            bar.update(1)
    bar.close()
    args.out.write_text(json.dumps(rows_out, indent=1))
    later = [r for r in rows_out if "continue" in r]
    keep = [r for r in later if not r["place_changed"] and not r["time_changed"]]
    for name, sel in (("all later turns", later), ("place+time kept", keep)):
        for sys in ("engine", "continue"):
            c = np.mean([r[sys]["char_id"] for r in sel])
            p = np.mean([r[sys]["place_id"] for r in sel])
            t = np.mean([r[sys]["time_id"] for r in sel])
            s = np.mean([r[sys]["sharp"] for r in sel]) / np.mean([r[sys]["sharp_true"] for r in sel])
            print(f"{name:18s} {sys:9s} n={len(sel)} char {c:.3f} place {p:.3f} time {t:.3f} sharp {s:.3f}")
    y = np.array([not r["place_changed"] and not r["time_changed"] for r in later])
    for k in ("dist_tok", "dist_mean", "dist_pool"):
        d = np.array([r[k] for r in later])
        auc = float((d[y][:, None] < d[~y][None, :]).mean())  # P(a kept turn is closer than a changed one)
        print(f"{k}: AUC {auc:.3f}; kept median {np.median(d[y]):.3f}, changed median {np.median(d[~y]):.3f}")


if __name__ == "__main__":
    main()
