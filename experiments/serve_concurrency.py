"""Two games played at the same moment through `animegamer serve` with the shipped model: does each
come out whole and in order, and what does sharing the machine cost a turn?

    .venv/bin/python experiments/serve_concurrency.py --turns 6 --out runs/serve_concurrency.json

Starts the API (uvicorn, loopback, a free port) on a temporary store, then plays: (1) one game of
``--turns`` turns alone, (2) two games of ``--turns`` turns each from two clients at once, (3) two turns
of one game sent at the same moment. Checks every game holds exactly its own instructions in order,
with each turn's states_before equal to the previous turn's states, and reports seconds per turn as
the client sees it (HTTP included). Page: docs/results.md#long-games-and-games-over-http.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from animegamer.core.atomic_io import write_json
from animegamer.evaluation.bench.game import SCRIPT
from animegamer.game.api import ServeConfig, create_app
from animegamer.game.session import Game


def _player(base: str, name: str, texts: list[str], out: dict) -> None:
    with httpx.Client(base_url=base, timeout=300) as h:
        gid = h.post("/games", json={"characters": [name], "seed": 11}).json()["id"]
        took = []
        for t in texts:
            t0 = time.perf_counter()
            r = h.post(f"/games/{gid}/turns", json={"instruction": t})
            took.append(time.perf_counter() - t0)
            assert r.status_code == 201, r.text
        out[name] = {"id": gid, "seconds": took}


def _played(game: Game, gid: str) -> tuple[list[str], bool]:
    """The game's instructions in order, and whether each turn starts from the states the last one left."""
    s = game.open_session(gid)
    return [t.instruction for t in s.turns], all(b.states_before == a.states for a, b in zip(s.turns, s.turns[1:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: the shipped model)")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--out", default=None, metavar="FILE.json")
    a = ap.parse_args()
    qiqi = list(SCRIPT[: a.turns])
    mika = [s.replace("Qiqi", "Mika") for s in qiqi]
    with tempfile.TemporaryDirectory(prefix="animegamer-serve-") as tmp:
        game = Game.load(a.model, store=Path(tmp) / "store")
        server = uvicorn.Server(uvicorn.Config(create_app(game, ServeConfig(max_active_games=2)), host="127.0.0.1",
                                               port=0, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        try:
            alone: dict = {}
            t0 = time.perf_counter()
            _player(base, "Qiqi", qiqi, alone)
            alone_wall = time.perf_counter() - t0
            both: dict = {}
            players = [threading.Thread(target=_player, args=(base, n, texts, both))
                       for n, texts in (("Qiqi", qiqi), ("Mika", mika))]
            t0 = time.perf_counter()
            for p in players:
                p.start()
            for p in players:
                p.join()
            both_wall = time.perf_counter() - t0
            gid = both["Qiqi"]["id"]
            same = []
            racers = [threading.Thread(target=lambda t=t: same.append(httpx.post(
                f"{base}/games/{gid}/turns", json={"instruction": t}, timeout=300).status_code))
                for t in ("Qiqi jumps", "Qiqi sleeps")]  # sorted, as compared below
            for p in racers:
                p.start()
            for p in racers:
                p.join()
            racing = ["Qiqi jumps", "Qiqi sleeps"]
            texts, chained = _played(game, gid)
            whole = {"alone": _played(game, alone["Qiqi"]["id"]) == (qiqi, True),
                     "Mika": _played(game, both["Mika"]["id"]) == (mika, True),
                     "Qiqi + the two racing turns": (sorted(same) == [201, 201] and chained and texts[:a.turns] == qiqi
                                                     and sorted(texts[a.turns:]) == racing)}
        finally:
            server.should_exit = True
            thread.join(30)

    def med(xs: list[float]) -> float:
        return statistics.median(xs[1:])  # turn 0 pays first-call costs

    result = {"turns": a.turns, "whole_and_in_order": whole,
              "alone": {"wall_s": alone_wall, "median_turn_s": med(alone["Qiqi"]["seconds"])},
              "two_at_once": {"wall_s": both_wall, "median_turn_s": {n: med(v["seconds"]) for n, v in both.items()}},
              "note": "seconds per turn as the client sees them (HTTP included), medians over turns 1.."}
    print(json.dumps(result, indent=1))
    if a.out:
        write_json(a.out, result)
    return 0 if all(whole.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
