"""How far FlowPaint's drawn flow is from the true one, against drawing no motion, by camera (docs/framenet.md).

    .venv/bin/python experiments/flowpaint_flow_error.py --run RUN --data runs/data/w9100 [--n 24] [--out FILE.json]

For each of the shots eval-drawn grades: the true chained DIS flow of every frame back to frame 0 split as the
model splits it (the camera's move = the frame's median; each 4 x 4 cell's own flow after it), and the mean
end-point error in pixels of the camera and of the cells whose pixels change, for the model with its motion
latent read from the true flows (posterior mean: what it can draw) and set to the prior's mean (zero), against
drawing no motion at all.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from animegamer.core.runs import resolve_decoder
from animegamer.decoder.flow_motion import flows_to_first
from animegamer.decoder.flow_paint import FlowPaint
from animegamer.decoder.pipeline import frames_from_uint8
from animegamer.evaluation.drawn_shots import graded_rows, mean_se
from animegamer.training.framenet_data import ActionParts
from animegamer.training.phase_framenet import SHIPPED
from animegamer.world.dataset import WorldDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--n", type=int, default=24)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    model = FlowPaint.from_pretrained(args.run)
    cfg = model.config
    world = WorldDataset(args.data)
    parts = ActionParts(resolve_decoder(str(SHIPPED)))
    per: dict[str, dict[str, list[float]]] = {}
    for row in tqdm(graded_rows(world, args.n), desc="shots"):
        frames = world.frames(row)
        flows = torch.from_numpy(flows_to_first(frames)[1:])  # (T', H, W, 2)
        true = flows.permute(0, 3, 1, 2)
        first = frames_from_uint8(frames[0])[None]
        s_a = parts.encode(first, [row["motion_text"]])
        camera_true = true.flatten(2).median(dim=2).values  # (T', 2)
        local_true = F.avg_pool2d(true - camera_true[:, :, None, None], cfg.stem)
        later = frames_from_uint8(frames[1:])
        moving = F.max_pool2d(((later - first).abs().amax(1, keepdim=True) > 0.1).float(), cfg.stem)[:, 0] > 0
        t = len(true)
        with torch.no_grad():
            z_post = model.motion_encoder(flows[None])[0]
            rows = per.setdefault(row["camera"], {})
            for name, z in (("posterior", z_post), ("prior_mean", torch.zeros_like(z_post))):
                cam, loc, _ = model.net(first.expand(t, -1, -1, -1), s_a.expand(t, -1, -1),
                                        torch.full((t,), int(row["motion_level"])), torch.arange(1, t + 1),
                                        torch.zeros(t), z.expand(t, -1))
                loc_err = (loc * cfg.flow_scale - local_true).norm(dim=1)
                rows.setdefault(f"cells_{name}", []).append(float(loc_err[moving].mean()) if moving.any() else 0.0)
                rows.setdefault(f"camera_{name}", []).append(float((cam * cfg.flow_scale - camera_true).norm(dim=1).mean()))
            rows.setdefault("cells_still", []).append(float(local_true.norm(dim=1)[moving].mean()) if moving.any() else 0.0)
            rows.setdefault("camera_still", []).append(float(camera_true.norm(dim=1).mean()))
    out = {cam: {"shots": len(v["cells_still"]), **{k: mean_se(x) for k, x in v.items()}} for cam, v in per.items()}
    for cam, cols in out.items():
        print(f"{cam:7s} ({cols['shots']} shots) " + "  ".join(f"{k} {v['mean']:.3f}" for k, v in cols.items() if k != "shots"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
