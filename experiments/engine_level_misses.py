"""Which turns does the engine get the motion level wrong on, beside the lookup table?

    .venv/bin/python experiments/engine_level_misses.py ENGINE_REPORT.json SESSIONS_DIR WORLD_DIR

ENGINE_REPORT.json: an engine report written with ``levels_per_turn`` (``python -m
animegamer.engine.evaluate ENGINE SESSIONS_DIR --out DIR``); SESSIONS_DIR: the engine sessions it
graded (their ids are world session ids); WORLD_DIR: the world dataset. The lookup table is
``world.level_ceiling``'s (fit on the world's train split). Prints engine vs table accuracy per
factor the engine is told: tired stamina, cast size, adverb, verb, instruction template.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from animegamer.world.dataset import WorldDataset
from animegamer.world.level_ceiling import LevelTable


def main(report_path: str, sessions_dir: str, world_dir: str) -> int:
    world = WorldDataset(world_dir)
    lookup = LevelTable(world.split_rows("train"))
    report = json.loads(Path(report_path).read_text())["teacher_forced"]
    if "levels_per_turn" not in report:
        raise SystemExit(f"{report_path}: no levels_per_turn (written by an older engine evaluation); evaluate again")
    ids = [json.loads(line)["id"] for line in open(Path(sessions_dir) / "engine_sessions.jsonl") if line.strip()]
    rows = {(int(r["session"]), int(r["turn"])): r
            for split in ("train", "val", "test") for r in world.split_rows(split)}
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # turns, engine right, table right
    for si, turn, true, pred in report["levels_per_turn"]:
        r = rows[(int(ids[si]), turn)]
        table = lookup.predict(r)
        for g in ("all", f"tired {r['states_before']['stamina'] < 30}", f"cast {len(r['characters'])}",
                  f"adverb {r['adverb'] or '(none)'}", f"verb {r['motion']}", f"template {r['template_id']}"):
            s = groups[g]
            s[0] += 1
            s[1] += pred == true
            s[2] += table == true
    print(f"{'group':32s} {'turns':>5s} {'engine':>7s} {'table':>7s}")
    for g, (n, e, t) in sorted(groups.items()):
        print(f"{g:32s} {n:5d} {e / n:7.3f} {t / n:7.3f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    raise SystemExit(main(*sys.argv[1:]))
