"""The asked verb named in play, verb by verb, for systems of one `animegamer eval` directory.

    .venv/bin/python experiments/action_by_verb.py EVAL_DIR --systems norepose flow-r64 [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from animegamer.world.dataset import WorldDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("eval_dir", type=Path)
    p.add_argument("--systems", nargs="+", required=True, help="systems/*.jsonl stems")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    truth = {(r["session"], r["turn"]): r["motion"] for r in WorldDataset(args.eval_dir / "world").rows}
    table: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for system in args.systems:
        for line in (args.eval_dir / "systems" / f"{system}.jsonl").read_text().splitlines():
            r = json.loads(line)
            table[truth[(r["session"], r["turn"])]][system].append(float(r["action_acc"]))
    report = {verb: {s: {"turns": len(v), "named": sum(v) / len(v)} for s, v in by.items()}
              for verb, by in sorted(table.items())}
    print(f"{'verb':12s} " + " ".join(f"{s:>14s}" for s in args.systems))
    for verb, by in report.items():
        print(f"{verb:12s} " + " ".join(f"{by[s]['named']:6.2f} of {by[s]['turns']:3d}" for s in args.systems))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
