"""Evaluation of the whole game, as a player gets it.

- ``run``: `animegamer eval`: held-out world sessions played through ``GameSession`` by the
  model, its ablations and baselines (each just another model directory), graded per turn.
- ``metrics``: pixel / flow / state metrics (PSNR and SSIM stand in for DreamSim).
- ``evaluator``: the separately trained CLIP-style evaluator and its zero-shot probes.
- ``report``: eval.json, eval.md, the plot and the contact sheet.
- ``bench``: `animegamer bench`: per-stage seconds per turn and peak memory.
"""
