"""What play gives the decoder, turn by turn, against the truth (docs/layers.md, "What play gives the animator"):

    .venv/bin/python experiments/play_inputs.py --world runs/eval_base/world [--sessions 24] [--out FILE.json]
        [--true-text] [--true-level] [--snap]

Plays the held-out sessions `animegamer eval` plays (the world's test split, through GameSession, the shipped
model) and records, per turn, what the layered decoder is handed: the verb the engine's motion tokens are read as
(the anchors' reading, ``Anchor.verb``), the characters named, the place and time the scene is drawn in, the
level; each against the world's turn; and the level the world's quantiser reads from the drawn frames
(``pixel_level``, ``flow``), against the level the animator was handed (``pixels_ok``). Where eval-drawn (true
motion text, true level, true place) names the action or draws the level far more often than play does, this says
which of play's inputs differs.
"""
from __future__ import annotations

import argparse
import collections
import tempfile
from pathlib import Path

import numpy as np
import torch

from animegamer.core.checkpoint import save_json_atomic
from animegamer.core.runs import resolve_decoder
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR, Evaluator
from animegamer.evaluation.metrics import motion_level_from_pixels
from animegamer.evaluation.run import session_characters
from animegamer.game.session import DEFAULT_WEIGHTS, Game, turn_seed
from animegamer.game.store import SessionStore
from animegamer.world.instructions import all_motion_texts, pair_verb_said
from animegamer.training.action_parts import ActionParts
from animegamer.world.dataset import WorldDataset
from animegamer.world.flow import MotionQuantizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", default="runs/eval_base/world")
    ap.add_argument("--model", default=None)
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--out", default=None)
    ap.add_argument("--true-text", action="store_true", help="hand the animator s_a of the TRUE motion text")
    ap.add_argument("--true-level", action="store_true", help="hand the animator the TRUE level")
    ap.add_argument("--snap", action="store_true", help="hand the animator s_a whose text part is E_a's tokens of the "
                                                        "world's motion text nearest the engine's (no training)")
    args = ap.parse_args()
    evaluator = Evaluator.load(DEFAULT_EVALUATOR)
    quantizer = MotionQuantizer.load()
    world = WorldDataset(args.world)
    by_session: dict[int, list[dict]] = collections.defaultdict(list)
    for r in world.rows:
        if r["split"] == "test":
            by_session[r["session"]].append(r)
    sessions = [sorted(v, key=lambda r: r["turn"]) for _, v in sorted(by_session.items())][:args.sessions]
    seen: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        game = Game.load(args.model, store=SessionStore(Path(tmp)))
        real = game.layered_shot
        parts = ActionParts(resolve_decoder(args.model or DEFAULT_WEIGHTS))
        current: dict = {}
        table = parts.text_part(all_motion_texts()).float()  # (K, n_text, D): E_a's tokens of each motion text

        def record(previous, s_a, named, anchor, level, verb=None, said=(None, None)):
            row = current["row"]
            if args.true_text:  # the text part of the true turn's s_a (the visual part is the frame's, as in play)
                s_a = parts.encode(torch.zeros(1, 3, 96, 144), [row["motion_text"]])[0].to(s_a.dtype)
                verb = pair_verb_said(row["instruction"]) or row["motion"]
            if args.snap:  # the engine's text tokens read as the nearest motion text, drawn from its exact tokens
                n = table.shape[1]
                near = int(((table - s_a[:n].float()[None]) ** 2).sum(dim=(1, 2)).argmin())
                s_a = torch.cat([table[near].to(s_a.dtype), s_a[n:]])
            if args.true_level:
                level = int(row["motion_level"])
            out = real(previous, s_a, named, anchor, level, verb, said)
            scene = out[1]
            seen.append({"verb": verb, "anchor_verb": getattr(anchor, "verb", None), "named": list(named),
                         "place": scene.place, "time": scene.time, "level": int(level), "staged": bool(out[3])})
            return out

        game.layered_shot = record
        rows = []
        for turns in sessions:
            session = game.new_session(session_characters(turns), seed=turn_seed(int(world.meta["seed"]),
                                                                                    turns[0]["session"]),
                                       states=dict(turns[0]["states_before"]))
            for row in turns:
                current["row"] = row
                turn = session.step(row["instruction"])
                rec = seen[-1]
                pixel_level, flow = motion_level_from_pixels(turn.frames, quantizer)
                rows.append({**rec, "session": row["session"], "turn": row["turn"],
                             "action": float(evaluator.actions.predict(turn.frames) == row["motion"]),
                             "true_verb": row["motion"], "true_characters": row["characters"],
                             "true_place": row["place"], "true_time": row["time"],
                             "true_level": int(row["motion_level"]), "pixel_level": int(pixel_level),
                             "flow": float(flow)})
    def share(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))
    for r in rows:
        r["verb_ok"] = r["anchor_verb"] == r["true_verb"]
        r["names_ok"] = r["named"] == list(r["true_characters"])
        r["place_ok"] = (r["place"], r["time"]) == (r["true_place"], r["true_time"])
        r["level_ok"] = r["level"] == r["true_level"]
        r["pixels_ok"] = r["pixel_level"] == r["level"]  # the drawing reads the level it was handed
    summary = {k: share(k) for k in ("action", "verb_ok", "names_ok", "place_ok", "level_ok", "pixels_ok", "staged")}
    wrong = collections.Counter((r["true_verb"], r["anchor_verb"]) for r in rows if not r["verb_ok"])
    print(f"{len(rows)} turns:", " ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    print("verb read wrong (true, read):", wrong.most_common(15))
    if args.out:
        save_json_atomic({"turns": len(rows), **summary, "wrong_verbs": [list(k) + [n] for k, n in wrong.items()],
                          "rows": rows}, args.out)


if __name__ == "__main__":
    main()
