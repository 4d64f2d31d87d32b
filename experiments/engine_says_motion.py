"""Which motion the engine means, engine by engine, on held-out world turns (docs/layers.md, "The engine says which
motion it means"):

    .venv/bin/python experiments/engine_says_motion.py --world runs/data/w9100 --engines SHIPPED runs/engine_motion/final
        [--out FILE.json]

For each turn of the world (every split: none of it was trained on), each engine predicts the next state from the
TRUE history (window 3, as play) and the verb it means is read as play reads it: the decoder's anchors' verb of
s_a's text tokens (``VisualAnchors.verb``). An engine with motion texts (EngineConfig.motion_texts) puts its
chosen text's own tokens there; one without regresses them. Reported: the motion text right (an engine without
motion texts: the nearest text), the verb right and the level right, per engine and paired against the first, per
verb.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
from pathlib import Path

import torch

from animegamer.core.runs import resolve_decoder, resolve_engine
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.engine.data import load_sessions, turn_record
from animegamer.engine.model import load_engine
from animegamer.engine.sequence import TurnRecord
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.training.engine_sessions import build_engine_splits, motion_text_table
from animegamer.world.instructions import all_motion_texts, known_adverbs, known_verbs


def mean_se(xs: list[float]) -> dict[str, float]:
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1)
    return {"mean": m, "se": math.sqrt(var / len(xs)), "n": len(xs)}


@torch.no_grad()
def read_turns(engine, sessions, decoder: ShotDecoder, texts: list[str], table: torch.Tensor) -> list[dict]:
    """Per turn: the text and verb the engine means, and the truth."""
    n = table.shape[1]
    verbs, n_adverbs = known_verbs(), len(known_adverbs())
    rows = []
    for s in sessions:
        engine.reset_cache()
        hist: list[TurnRecord] = []
        for d in s:
            true = turn_record(d)
            p = engine.predict(hist, true.instruction, true.states)
            text = p.motion_text or texts[int(torch.cdist(p.s_a[None, :n].flatten(1), table.flatten(1)).argmin())]
            verb = decoder.anchors.verb(p.s_a[:n], decoder.net.action_encoder)
            true_verb = verbs[texts.index(d["motion_text"]) // n_adverbs]
            rows.append({"text_ok": float(text == d["motion_text"]), "verb_ok": float(verb == true_verb),
                         "level_ok": float(p.motion_level == true.motion_level),
                         "verb": true_verb, "read": verb})
            hist.append(true)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", default="runs/data/w9100")
    ap.add_argument("--engines", nargs="+", default=[str(DEFAULT_WEIGHTS)])
    ap.add_argument("--model", default=str(DEFAULT_WEIGHTS), help="whose decoder's E_a and anchors read s_a")
    ap.add_argument("--work", default="runs/engine_says_motion")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dec_dir = resolve_decoder(args.model)
    splits = build_engine_splits(args.world, dec_dir, dec_dir / "autoencoder", Path(args.work) / "sessions",
                                 splits=("train", "val", "test"))
    sessions = [s for p in splits.values() for s in load_sessions(p)[0]]
    build = json.loads((splits["train"] / "engine_meta.json").read_text())["build"]
    texts = all_motion_texts()
    table = motion_text_table(build, texts)
    decoder = ShotDecoder.from_pretrained(dec_dir)
    per_engine = {e: read_turns(load_engine(resolve_engine(e), window=3), sessions, decoder, texts, table)
                  for e in args.engines}
    base = per_engine[args.engines[0]]
    report = {"world": args.world, "turns": len(base), "engines": {}}
    for name, rows in per_engine.items():
        by_verb = collections.defaultdict(list)
        for r in rows:
            by_verb[r["verb"]].append(r["verb_ok"])
        report["engines"][name] = {
            "text": mean_se([r["text_ok"] for r in rows]), "verb": mean_se([r["verb_ok"] for r in rows]),
            "verb_minus_first": mean_se([r["verb_ok"] - b["verb_ok"] for r, b in zip(rows, base)]),
            "level": mean_se([r["level_ok"] for r in rows]),
            "level_minus_first": mean_se([r["level_ok"] - b["level_ok"] for r, b in zip(rows, base)]),
            "per_verb": {v: round(sum(x) / len(x), 3) for v, x in sorted(by_verb.items())},
            "read_as": {v: collections.Counter(r["read"] for r in rows if r["verb"] == v).most_common(3)
                        for v in sorted(by_verb)},
        }
        e = report["engines"][name]
        print(f"{name}: text {e['text']['mean']:.3f}, verb {e['verb']['mean']:.3f} "
              f"(paired {e['verb_minus_first']['mean']:+.3f} +/- {e['verb_minus_first']['se']:.3f}), level "
              f"{e['level']['mean']:.3f} (paired {e['level_minus_first']['mean']:+.3f} +/- {e['level_minus_first']['se']:.3f})")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
