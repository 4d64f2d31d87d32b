"""Per-turn comparison of the systems of one `animegamer eval` directory (its systems/*.jsonl).

    .venv/bin/python experiments/game_level_match.py EVAL_DIR [--baseline SYSTEM_FILE_STEM]

For each system: how often the flow on the decoded shot reads the level the ENGINE asked for
("decoded = engine's"; ACC-F pixels compares with the true level instead), the engine-level x
decoded-level counts, and for every column the difference to the baseline system on the same turns
with a paired bootstrap standard error (the systems play the same sessions, so the turns pair up).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

COLUMNS = {"clip_i": "CLIP-I", "clip_t": "CLIP-T", "acc_f_pixels": "ACC-F px", "char_acc": "character",
           "place_acc": "place", "action_acc": "action", "prop_keep": "prop keep", "match": "decoded = engine's",
           "char_id": "character id", "place_id": "place id", "time_id": "time id", "sharp_ratio": "sharpness"}


def load(path: Path) -> dict[tuple[int, int], dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r["match"] = float(r["ml_pixels"] == r["ml_engine"])
        if r.get("sharp") is not None and r.get("sharp_true"):
            r["sharp_ratio"] = r["sharp"] / r["sharp_true"]  # the picture columns, where the evaluator has them
    return {(r["session"], r["turn"]): r for r in rows}


def paired(a: dict, b: dict, key: str, draws: int = 2000, seed: int = 0) -> tuple[float, float, int]:
    """mean(a - b) over the turns where both have the column, and its bootstrap standard error."""
    keys = [k for k in a if k in b and a[k].get(key) is not None and b[k].get(key) is not None]
    d = np.array([a[k][key] - b[k][key] for k in keys], dtype=float)
    if len(d) == 0:
        return float("nan"), float("nan"), 0
    idx = np.random.default_rng(seed).integers(0, len(d), (draws, len(d)))
    return float(d.mean()), float(d[idx].mean(1).std()), len(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", type=Path)
    ap.add_argument("--baseline", default=None, help="systems/<STEM>.jsonl to compare with (default: the first)")
    args = ap.parse_args()
    files = sorted((args.eval_dir / "systems").glob("*.jsonl"))
    if not files:
        raise SystemExit(f"{args.eval_dir}/systems has no graded systems (*.jsonl): run `animegamer eval` first")
    systems = {f.stem: load(f) for f in files}
    base = args.baseline or files[0].stem
    if base not in systems:
        raise SystemExit(f"--baseline {base!r} is not one of {sorted(systems)}")
    for name, rows in systems.items():
        vals = list(rows.values())
        conf = np.zeros((5, 5), int)
        for r in vals:
            conf[r["ml_engine"] - 1, r["ml_pixels"] - 1] += 1
        print(f"\n{name} ({len(vals)} turns)")
        print("  engine level x decoded (rows 1..5): " + " / ".join("·".join(map(str, row)) for row in conf))
        for key, label in COLUMNS.items():
            have = [r[key] for r in vals if r.get(key) is not None]
            line = f"  {label:>20}: {np.mean(have):.3f}" if have else f"  {label:>20}: -"
            if name != base and have:
                d, se, n = paired(rows, systems[base], key)
                line += f"   vs {base}: {d:+.3f} +- {se:.3f} ({n} turns)"
            print(line)


if __name__ == "__main__":
    main()
