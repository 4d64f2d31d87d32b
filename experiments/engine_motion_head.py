"""Can the engine SAY which motion it means? A head over the world's motion texts on the shipped engine's frozen
hidden states (docs/layers.md, "What play gives the animator"):

    .venv/bin/python experiments/engine_motion_head.py --world runs/data/fit --out runs/motion_head

The engine regresses E_a's text tokens of the next shot's motion (MSE); read back as the nearest motion text they
name the right verb in 0.75 of play's turns, and handed the TRUE motion text's tokens the animator names the action
in 0.82 of play's turns against 0.57. This fits a linear head, with cross-entropy, from the engine's hidden states at
its s_a query slots (mean over the slots; the LLM and LoRA frozen, as shipped) to the motion text whose E_a tokens
the turn's true s_a holds, on the world's train split, and reports on its val split: the head's accuracy (motion
text, verb) against reading the engine's regressed tokens as the nearest motion text. Writes OUT/head.safetensors
(weight, bias, the motion texts' E_a tokens) for ``experiments/play_inputs.py --head``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from animegamer.core.checkpoint import save_json_atomic, save_safetensors_atomic
from animegamer.core.runs import resolve_decoder, resolve_engine
from animegamer.engine.data import EngineCollate, EngineDataset, load_sessions
from animegamer.engine.model import load_engine
from animegamer.game.session import DEFAULT_WEIGHTS
from animegamer.training.action_parts import ActionParts
from animegamer.training.engine_sessions import build_engine_splits
from animegamer.world.instructions import all_motion_texts, known_adverbs


@torch.no_grad()
def features(engine, sessions, table: torch.Tensor, batch: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> pooled hidden states at the query slots (M, H), the motion text each turn's true s_a holds (M,), and the
    motion text the engine's regressed text tokens are nearest (M,), for each turn with up to 1 turn of history."""
    data = EngineDataset(sessions, engine.builder, max_turns=2, lengths="max")
    collate = EngineCollate(engine.vocab["<PAD>"], engine.cfg.rep_tokens)
    n = table.shape[1]
    feats, labels, nearest = [], [], []
    for i in tqdm(range(0, len(data), batch), desc="engine"):
        b = collate([data[j] for j in range(i, min(i + batch, len(data)))])
        _, hq, _ = engine._hidden(b)
        pred = engine.denormalize_rep(engine.out_resampler(hq).float())
        feats.append(hq.float().mean(dim=1))
        labels.append(torch.cdist(b.target_rep[:, :n].flatten(1), table.flatten(1)).argmin(dim=1))
        nearest.append(torch.cdist(pred[:, :n].flatten(1), table.flatten(1)).argmin(dim=1))
    return torch.cat(feats), torch.cat(labels), torch.cat(nearest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", default="runs/data/fit")
    ap.add_argument("--model", default=str(DEFAULT_WEIGHTS))
    ap.add_argument("--out", default="runs/motion_head")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--train-sessions", type=int, default=120, help="the first N train sessions (CPU time)")
    args = ap.parse_args()
    out = Path(args.out)
    decoder = resolve_decoder(args.model)
    # the shipped decoder's visual reference is its autoencoder (a latent reference, as play reads frames)
    splits = build_engine_splits(args.world, decoder, decoder / "autoencoder", out / "sessions", splits=("train", "val"))
    engine = load_engine(resolve_engine(args.model)).eval()
    texts = all_motion_texts()
    table = ActionParts(decoder).text_part(texts).float()  # (K, n_text, D): E_a's tokens of each motion text
    n_adverbs = len(known_adverbs())  # all_motion_texts goes verb by verb, each with every adverb
    data = {s: features(engine, load_sessions(p, limit=args.train_sessions if s == "train" else None)[0], table)
            for s, p in splits.items()}
    x, y, _ = data["train"]
    mean, std = x.mean(0), x.std(0) + 1e-6
    head = torch.nn.Linear(x.shape[1], len(texts))
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2, weight_decay=1e-3)
    for _ in range(args.steps):
        loss = F.cross_entropy(head((x - mean) / std), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    report = {}
    for split, (xs, ys, near) in data.items():
        with torch.no_grad():
            pick = head((xs - mean) / std).argmax(dim=1)
        same_verb = lambda a, b: float((a // n_adverbs == b // n_adverbs).float().mean())  # noqa: E731
        report[split] = {"turns": len(ys), "head_text": float((pick == ys).float().mean()),
                         "head_verb": same_verb(pick, ys), "nearest_text": float((near == ys).float().mean()),
                         "nearest_verb": same_verb(near, ys)}
        print(split, report[split])
    with torch.no_grad():
        w = head.weight / std[None]
        b = head.bias - (head.weight * (mean / std)[None]).sum(dim=1)
    save_safetensors_atomic({"weight": w.contiguous(), "bias": b.contiguous(), "table": table.contiguous()},
                            out / "head.safetensors")
    save_json_atomic({"texts": texts, "report": report, "world": args.world, "steps": args.steps}, out / "head.json")


if __name__ == "__main__":
    main()
