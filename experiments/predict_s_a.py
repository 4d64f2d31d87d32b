"""The shipped engine's predicted s_a of a world's train turns, played closed loop as in a game, and how far each
lies from the true shot's s_a (E_a of the shot), by turn of the session (docs/layers.md, "The animator asked
with the engine's s_a").

    .venv/bin/python experiments/predict_s_a.py --data runs/data/e6000 --sessions 400 --out runs/predicted_e6000
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch

from animegamer.core.checkpoint import save_json_atomic
from animegamer.engine.data import load_sessions
from animegamer.engine.model import load_engine
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.training.engine_sessions import build_engine_sessions
from animegamer.training.phase_c import predict_sessions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="a world dataset (its train split)")
    ap.add_argument("--sessions", type=int, default=400, help="its first N train sessions")
    ap.add_argument("--model", default=str(DEFAULT_WEIGHTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, out = Path(args.model), Path(args.out)
    sessions_dir = build_engine_sessions(args.data, model / "shot_decoder", model / "shot_decoder" / "autoencoder",
                                         out / "sessions", "train", limit=args.sessions)
    engine = load_engine(model / "engine")
    engine.merge_lora(True)
    sessions, _ = load_sessions(sessions_dir)
    predicted = predict_sessions(engine, sessions, out / "predicted_closed", closed_loop=True, desc="engine predicts")
    true = {d["shot"]: (k, d["s_a"].float()) for s in sessions for k, d in enumerate(s)}
    by_turn: dict[int, list[tuple[float, float]]] = {}
    for name, p in zip(predicted["shot"], predicted["s_a"].float()):
        k, t = true[name]
        cos = float(torch.nn.functional.cosine_similarity(p.flatten(), t.flatten(), 0))
        by_turn.setdefault(k, []).append((cos, float((p - t).norm() / t.norm())))
    report = {k: {"turns": len(v), "cosine": float(np.mean([c for c, _ in v])),
                  "relative_error": float(np.mean([e for _, e in v]))} for k, v in sorted(by_turn.items())}
    print(json.dumps(report, indent=1))
    save_json_atomic(report, out / "s_a_error_by_turn.json")


if __name__ == "__main__":
    main()
