"""Refit the manner head of an animator trained with ``manners`` on clean targets (docs/layers.md, "Manner codes"):
per track of N train shots and their manner twins, the code whose whole shot (17 frames from the standing
cut-out, graded against the shot drawn from phase 0, moving pixels weighted as in training) costs least; the head
fitted alone on (s_a, level, role), 80/20 split, kept at its best held-out epoch. Prints the held-out accuracy
against the most frequent code and writes the animator with the refitted head. With ``--labels`` (an animator
trained with ``manner_labels``) the targets are the adverbs that played the tracks, nothing is drawn.

    .venv/bin/python experiments/fit_manner_head.py --sprites RUN_OR_CHECKPOINT --world runs/data/e6000 --n 300 --out DIR [--labels]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from animegamer.decoder.pipeline import STAGE_DIR
from animegamer.decoder.sprite_animator import SpriteAnimator, to_unit
from animegamer.decoder.stage import Stage
from animegamer.evaluation.drawn_shots import load_animator
from animegamer.training.action_parts import SHIPPED, TEXT_TABLE, ActionParts
from animegamer.training.phase_sprites import SpriteTensors, join_tracks, manner_twins, played_levels, sprite_tensors
from animegamer.world.dataset import WorldDataset
from animegamer.world.motion_catalog import load_motions


def track_costs(model: SpriteAnimator, tracks: SpriteTensors, s_a: torch.Tensor, level: torch.Tensor,
                batch: int = 8) -> torch.Tensor:
    """(M, manners): each track's whole shot drawn from its standing cut-out in every code, its moving-weighted L1."""
    costs = torch.zeros(len(level), model.config.manners)
    with torch.no_grad():
        for i in range(0, len(level), batch):
            j = slice(i, i + batch)
            source, target = to_unit(tracks.standing[j]), to_unit(tracks.canonical["rgba"][j])
            weight = 1 + model.config.moving_weight * ((target - source[:, None]).abs().amax(2, keepdim=True) > 0.05)
            for code in range(model.config.manners):
                drawn, _ = model.draw(source, source, s_a[j], level[j], tracks.role[j], start=0, chunk=68,
                                      manner=torch.full((source.shape[0],), code))
                costs[j, code] = ((drawn - target).abs() * weight).mean(dim=(1, 2, 3, 4))
    return costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sprites", required=True)
    ap.add_argument("--world", required=True, help="a world dataset whose train shots the animator trained on")
    ap.add_argument("--n", type=int, default=300, help="the last N train shots")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--labels", action="store_true", help="targets: the adverb that played each track")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_animator(args.sprites)
    world = WorldDataset(args.world)
    rows = world.split_rows("train")[-args.n:]
    decoder = SHIPPED / "shot_decoder"
    first = torch.from_numpy(np.stack([world.frames(r)[0] for r in rows]))
    s_a = ActionParts(decoder, "cpu", decoder / TEXT_TABLE).encode(first.permute(0, 3, 1, 2).float() / 127.5 - 1,
                                                                    [r["motion_text"] for r in rows])
    stage = Stage.from_pretrained(decoder / STAGE_DIR)
    own = sprite_tensors(rows, 17, workers=args.threads, progress=False, canonical=True)
    levels = played_levels(rows, own, stage, progress=False, workers=args.threads)
    sources, twins, twin_levels, twin_manners = manner_twins(rows, levels, stage, 17, args.threads, False,
                                                             canonical=True)
    tracks = join_tracks(own, twins, len(rows))
    s_a_t, level_t = torch.cat([s_a, s_a[sources]])[tracks.shot], torch.cat([levels, twin_levels])[tracks.shot]
    t0 = time.time()
    if args.labels:
        adverbs = sorted(load_motions()[1])
        best = torch.tensor([adverbs.index(r["adverb"]) for r in rows] + [adverbs.index(m) for m in twin_manners])
        best = best[tracks.shot]
    else:
        best = track_costs(model, tracks, s_a_t, level_t).argmin(1)
    print(f"{len(best)} tracks ({len(twins.role)} twins), targets in {time.time() - t0:.0f} s; codes "
          f"{np.round(np.bincount(best.numpy(), minlength=model.config.manners) / len(best), 3)}")
    perm = torch.randperm(len(best), generator=torch.Generator().manual_seed(0))
    train, held = perm[:int(0.8 * len(best))], perm[int(0.8 * len(best)):]
    head = model.net.manner_head
    model.requires_grad_(False)
    head.requires_grad_(True)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=1e-2)
    logits = lambda rows: model.net.manner_logits(s_a_t[rows], level_t[rows], tracks.role[rows])  # noqa: E731
    kept, kept_acc = None, -1.0
    for epoch in range(400):
        loss = F.cross_entropy(logits(train), best[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            acc = float((logits(held).argmax(1) == best[held]).float().mean())
        if acc > kept_acc:
            kept, kept_acc = {k: v.clone() for k, v in head.state_dict().items()}, acc
        if epoch % 50 == 0:
            print(f"epoch {epoch}: train loss {float(loss):.3f}, held-out accuracy {acc:.3f}")
    head.load_state_dict(kept)
    common = int(np.bincount(best[train].numpy()).argmax())
    common_acc = float((best[held] == common).float().mean())
    print(f"held-out accuracy {kept_acc:.3f}; the most frequent code's {common_acc:.3f}")
    model.save_pretrained(args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
