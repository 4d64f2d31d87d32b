"""Where the action a player asked for is lost in play: for every turn of an `animegamer eval` directory,
whether the engine's motion tokens read as the true verb (the verb the anchors' bank reads them as), whether
the anchor the shot was drawn from shows the true verb (its bank entry's shot), and whether the evaluator's
action classifier names the true verb in the decoded shot, split by calm (levels 1-3) and fast turns.

    .venv/bin/python experiments/action_chain.py EVAL_DIR --model MODEL_WITH_MOTIONS [--systems a b] [--out F.json]

MODEL_WITH_MOTIONS: a model whose anchors keep the motions they show (`model pack`, by_action): its bank
reads the verbs and names the entries. The systems' saved turns (their drawn s_a) are read from EVAL_DIR's
stores; a turn whose anchor is not an entry of that bank (a continued custom picture) counts as "anchor
verb unknown".
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import torch

from animegamer.core.atomic_io import write_json
from animegamer.decoder.pipeline import ShotDecoder
from animegamer.game.store import SessionStore
from animegamer.world.dataset import WorldDataset


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_dir", type=Path)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--systems", nargs="+", default=None, help="systems/*.jsonl stems (default: all)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dec = ShotDecoder.from_pretrained(args.model / "shot_decoder")
    bank, enc, n_text = dec.anchors, dec.net.action_encoder, dec.config.n_text
    if bank is None or not bank.motions:
        raise SystemExit(f"{args.model}: its anchors keep no motions (rebuild them with model pack --anchors)")
    truth = {(r["session"], r["turn"]): r for r in WorldDataset(args.eval_dir / "world").rows}
    systems = args.systems or sorted(p.stem for p in (args.eval_dir / "systems").glob("*.jsonl"))
    report = {}
    for system in systems:
        rows = [json.loads(x) for x in (args.eval_dir / "systems" / f"{system}.jsonl").read_text().splitlines() if x]
        store = SessionStore(args.eval_dir / "games" / system, clean=False)
        cells: dict[str, list[float]] = collections.defaultdict(list)
        for r in rows:
            turn = store.load_turns(r["game_session"], only=r["turn"])[0]
            verb = truth[(r["session"], r["turn"])]["motion"]
            entry = bank.entry_of(turn.s_a[n_text:], enc)
            shown = "unknown" if entry is None else str(bank.entries[entry].get("motion") == verb).lower()
            key = (f"engine verb right {str(bank.verb(turn.s_a[:n_text], enc) == verb).lower()}, anchor verb right "
                   f"{shown}, {'calm' if r['ml_engine'] <= 3 else 'fast'}")
            cells[key].append(float(r["action_acc"]))
        report[system] = {k: {"turns": len(v), "action": sum(v) / len(v)} for k, v in sorted(cells.items())}
        print(system)
        for k, v in report[system].items():
            print(f"  {k:<62} {v['turns']:>3} turns, action named {v['action']:.2f}")
    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
