"""Choose the visual anchors' settings on a world the evaluation never plays (decoder/anchors.py).

    .venv/bin/python experiments/anchor_calibration.py --model MODEL --data WORLD --split train --sessions 24 \
        --out OUT.json

Plays sessions closed loop with a model that has visual anchors (its own settings) and records, at
every turn: the gate distance and whether the world kept the place and the time of day; which bank
entry each retrieval distance would pick, and whether it shows the true place and time; whether the
scene the bank's scene means name is the true one, and whether the bank holds the turn's characters
there at all. Then it reports the gate's separation and each retrieval distance's hit rate. (It also swept the
sampler's per-level motion scale once; that setting went with the slid stack, docs/history.md.)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from animegamer.decoder.anchors import named_characters, relative_distance
from animegamer.evaluation.run import session_characters
from animegamer.game.session import Game, turn_seed
from animegamer.world.dataset import WorldDataset

POOLS = {"mean": (1, 1), "pool 2x3": (2, 3), "pool 3x3": (3, 3), "tokens": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    world = WorldDataset(args.data)
    held = world.sessions(args.split)[: args.sessions]
    game = Game.load(args.model, store=args.out.parent / "anchor_calibration_games")
    dec, anchors = game.decoder, game.decoder.anchors
    if anchors is None:
        raise SystemExit(f"{args.model} has no visual anchors (model pack --anchors DATA)")
    n_text = dec.config.n_text
    bank = anchors.tokens(list(range(len(anchors))), dec.net.action_encoder.visual)
    pool0 = anchors.config.pool
    anchors.config.pool = (3, 3)
    pooled33 = anchors._pool(bank)
    anchors.config.pool = pool0
    seed0 = int(world.meta["seed"])
    turns = []
    for s in tqdm(held, desc="sessions"):
        game.engine.reset_cache()
        session = game.new_session(session_characters(s), seed=turn_seed(seed0, s[0]["session"]),
                                   states=dict(s[0]["states_before"]))
        for row in s:
            pred = game.engine.predict(session.history(), row["instruction"], states=session.states)
            tokens = pred.s_a[n_text:].float()
            idx = torch.tensor(anchors.candidates(named_characters(row["instruction"], session.characters)))
            rec = {"kept": not row.get("place_changed") and not row.get("time_changed"), "first": row["turn"] == 0}
            for name, pool in POOLS.items():
                if pool is None:
                    d = relative_distance(tokens[None].expand(len(idx), -1, -1), bank[idx])
                else:
                    anchors.config.pool = pool
                    d = relative_distance(anchors._pool(tokens[None]).expand(len(idx), -1), anchors._pool(bank[idx]))
                e = anchors.entries[int(idx[int(torch.argmin(d))])]
                rec[name] = {"place": e["place"] == row["place"], "time": e["time"] == row["time"]}
            anchors.config.pool = (3, 3)
            q = anchors._pool(tokens[None])
            d_all = relative_distance(q.expand(len(bank), -1), pooled33)
            for vote in (5, 15):  # the place and time most of the nearest entries of the whole bank show
                near = [anchors.entries[int(i)] for i in torch.argsort(d_all)[:vote]]
                place = max({e["place"] for e in near}, key=[e["place"] for e in near].count)
                time_ = max({e["time"] for e in near}, key=[e["time"] for e in near].count)
                pick = [int(i) for i in idx if anchors.entries[int(i)]["place"] == place
                        and anchors.entries[int(i)]["time"] == time_] or [int(i) for i in idx]
                pi = torch.tensor(pick)
                d = d_all[pi]
                e = anchors.entries[int(pi[int(torch.argmin(d))])]
                rec[f"vote {vote}"] = {"place": e["place"] == row["place"], "time": e["time"] == row["time"]}
            anchors.config.pool = pool0
            named = named_characters(row["instruction"], session.characters)
            rec["scene named"] = anchors.scene(tokens, dec.net.action_encoder.visual) == (row["place"], row["time"])
            rec["bank has it"] = any(anchors.entries[i]["place"] == row["place"] and anchors.entries[i]["time"] == row["time"]
                                     for i in anchors.candidates(named) if sorted(anchors.entries[i]["characters"]) == sorted(named))
            rec["characters"] = len(named)
            turn = session.step(row["instruction"])
            rec.update(source=turn.anchor, distance=turn.anchor_distance, level=turn.motion_level)
            turns.append(rec)
    report: dict = {"model": args.model, "data": args.data, "split": args.split, "turns": len(turns)}
    later = [t for t in turns if t["distance"] is not None]
    d = np.array([t["distance"] for t in later])
    kept = np.array([t["kept"] for t in later])
    report["gate"] = {"auc": float((d[kept][:, None] < d[~kept][None, :]).mean()),
                      "kept_median": float(np.median(d[kept])), "changed_median": float(np.median(d[~kept])),
                      "accuracy_by_gate": {f"{g:g}": float(((d < g) == kept).mean())
                                           for g in (0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5)}}
    retrieval_turns = [t for t in turns if t["first"] or not t["kept"]]
    report["retrieval"] = {name: {k: float(np.mean([t[name][k] for t in retrieval_turns])) for k in ("place", "time")}
                           for name in [*POOLS, "vote 5", "vote 15"]}
    report["retrieval"]["turns"] = len(retrieval_turns)
    # the scene (place, time) named by the nearest scene mean of the bank (scene_classes), and how often the
    # bank holds the turn's exact characters in the true scene at all (what retrieval can reach), by cast size
    report["retrieval"]["scene named"] = float(np.mean([t["scene named"] for t in retrieval_turns]))
    report["retrieval"]["bank has it"] = {str(n): float(np.mean([t["bank has it"] for t in retrieval_turns
                                                                 if t["characters"] == n]))
                                          for n in sorted({t["characters"] for t in retrieval_turns})}
    report["rows"] = turns
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
