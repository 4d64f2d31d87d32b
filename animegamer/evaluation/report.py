"""The evaluation's outputs: OUT/eval.json, OUT/eval.md (one row per system), OUT/eval.png and
OUT/contact_sheet.png (generated turns of every system beside the ground truth).

Every file is written atomically. The markdown states which rows exist and which of the
paper's rows do not (and why), so a table is never read as more than it is.
"""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator
from PIL import Image, ImageDraw

from animegamer.core.atomic_io import atomic_write_path, write_json, write_text
from animegamer.core.video_io import read_video
from animegamer.evaluation.evaluator import Evaluator
from animegamer.evaluation.metrics import align_clips, finite_mean
from animegamer.evaluation.picture import picture_summary
from animegamer.evaluation.systems import SystemResult, jsonable
from animegamer.world.dataset import WorldDataset
from animegamer.world.preview import BG, FG, font, save_png, shot_strip

# (key, header, +1 higher is better / -1 lower is better, format)
MAIN_COLUMNS = (
    ("clip_i", "CLIP-I", +1, "{:.3f}"),
    ("psnr", "PSNR dB*", +1, "{:.2f}"),
    ("ssim", "SSIM*", +1, "{:.3f}"),
    ("ms_ssim", "MS-SSIM*", +1, "{:.3f}"),
    ("clip_t", "CLIP-T", +1, "{:.3f}"),
    ("acc_f_pixels", "ACC-F pixels", +1, "{:.3f}"),
    ("acc_f_engine", "ACC-F engine", +1, "{:.3f}"),
    ("mae_f", "MAE-F", -1, "{:.3f}"),
    ("char_acc", "character", +1, "{:.3f}"),
    ("place_acc", "place", +1, "{:.3f}"),
    ("action_acc", "action", +1, "{:.3f}"),
    ("prop_keep", "prop keep", +1, "{:.3f}"),
    ("char_id", "character id", +1, "{:.3f}"),
    ("place_id", "place id", +1, "{:.3f}"),
    ("time_id", "time id", +1, "{:.3f}"),
    ("sharpness", "sharpness vs truth", +1, "{:.3f}"),
    # what frame 0 moved along optical flow cannot explain (issue 44): a slid picture ~0; compare with the truth's
    ("new_content", "new content", 0, "{:.3f}"),
    ("fd", "FD", -1, "{:.1f}"),
    ("sec", "s/turn", -1, "{:.2f}"),
)
PICTURE_KEYS = ("char_id", "place_id", "time_id", "sharpness", "fd")  # picture_summary's, over all turns
EXTRA_COLUMNS = (
    ("mae_states", "MAE states (points)", -1, "{:.2f}"),
    ("consec_sim", "consecutive-shot sim", 0, "{:.3f}"),
    ("prop_acc", "prop colour vs truth", +1, "{:.3f}"),
    ("n_prop_keep", "prop-keep turns", 0, "{:.0f}"),
    ("engine_s", "engine s", -1, "{:.3f}"),
    ("decoder_s", "decoder s", -1, "{:.3f}"),
    ("clip_s", "clip write s", -1, "{:.3f}"),
    ("save_s", "store s", -1, "{:.3f}"),
)
UNIT_KEYS = ("clip_i", "ssim", "ms_ssim", "clip_t", "acc_f_pixels", "acc_f_engine", "char_acc", "place_acc",
             "action_acc", "prop_keep", "char_id", "place_id", "time_id")

# first frames that are a stored training picture: retrieved from the bank, or a scene that goes on from the
# picture its previous turn started from ("composed" is a place's picture with the characters' cut-outs)
STORED_SOURCES = ("retrieved", "reposed", "continued")

NOT_RUN = {
    "GC (text-only context)": "a text-only engine (it predicts the caption's text features) and a caption-conditioned "
                              "decoder with no visual reference: `experiments/recipes/ablations.yaml` trains one "
                              "(and plays it in its table); pass its model dir as `--ablation GC=DIR`.",
    "GSC / GFC (StoryDiffusion / frame-conditioned)": "other generators, not implemented here.",
    "decoder ablations (w/o motion level, w/o adaptation, random frame, w/o warm-up)":
        "each is a separately trained decoder (`experiments/recipes/ablations.yaml`, graded on TRUE s_a by "
        "`animegamer eval-decoder`); to play one here it needs an engine trained on its own E_a; pass that model "
        "dir (engine/ + shot_decoder/) as `--ablation NAME=DIR`.",
}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over turns of every column (turns where a column does not apply are skipped), with
    the number of turns each mean covers."""
    keys = [k for k, *_ in MAIN_COLUMNS + EXTRA_COLUMNS if not k.startswith("n_") and k not in PICTURE_KEYS]
    out: dict[str, Any] = {"turns": len(rows), "sessions": len({r["session"] for r in rows})}
    for k in keys:
        vals = [r.get(k) for r in rows]
        out[k] = finite_mean(vals)
        out[f"n_{k}"] = sum(v is not None for v in vals)
    out.update(picture_summary(rows))
    out["n_picture"] = sum(r.get("char_id") is not None for r in rows)
    per_turn: dict[str, dict[str, Any]] = {}
    for t in sorted({r["turn"] for r in rows}):
        rs = [r for r in rows if r["turn"] == t]
        per_turn[str(t)] = {k: finite_mean([r.get(k) for r in rs]) for k in ("clip_i", "ssim", "clip_t", "psnr")}
    out["per_turn"] = per_turn
    sources = [r["anchor"] for r in rows if r.get("anchor")]
    if sources:  # where each shot's first frame came from (decoder/anchors.py, decoder/stage.py)
        out["first_frame"] = {s: sources.count(s) / len(sources) for s in sorted(set(sources))}
        out["first_frame_stored"] = sum(sources.count(s) for s in STORED_SOURCES) / len(sources)
    return out


def _cell(v: Any, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)


def _table(systems: dict[str, dict[str, Any]], columns: tuple) -> str:
    head = "| system | " + " | ".join(h + (" ↑" if s > 0 else " ↓" if s < 0 else "") for _, h, s, _ in columns) + " |"
    lines = [head, "|---|" + "---|" * len(columns)]
    for name, summ in systems.items():
        lines.append(f"| {name} | " + " | ".join(_cell(summ.get(k), f) for k, _, _, f in columns) + " |")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    """eval.md: the table, what each row and column is, what is missing."""
    w, ev = report["world"], report.get("evaluator")
    lines = [
        "# AnimeGamer evaluation",
        "",
        f"{w['sessions']} held-out sessions, {w['turns']} turns, of the world `{w['root']}` (seed {w['seed']}, "
        f"{w['height']}x{w['width']}, {w['frames']} frames; split `test`: the 15 paraphrase templates held out of "
        "training), each played through `GameSession.step` exactly as a player would (closed loop: the "
        "history is the game's own turns).",
        "",
    ]
    if report.get("command"):
        lines += [f"Command: `{report['command']}`", ""]
    lines += [_table(report["summary"], MAIN_COLUMNS), "",
              "\\* PSNR / SSIM / MS-SSIM are a **stand-in for DreamSim** (a learned perceptual similarity we cannot "
              "ship offline): pixel and structure agreement with the true shot after resizing to the true frame "
              "size. MS-SSIM uses 4 scales and a 5-px window (the world's 96-px frames are too small for the "
              "standard 5 scales). *action*: the verb named by a small video action classifier trained on true "
              "shots of the evaluator's data (`animegamer train action`); its accuracy on true shots is the "
              "ground-truth row.",
              "", "## Rows", ""]
    for s in report["systems"]:
        lines.append(f"- **{s['name']}**: {s['note']}" + (" (rows reused from an earlier run)" if s.get("reused") else ""))
    lines.append(f"- **{report['references'][0]}**: the true shots graded as if generated: the evaluator's ceiling "
                 "for CLIP-T, ACC-F pixels and the zero-shot columns (CLIP-I, PSNR, SSIM, MS-SSIM are trivially perfect, left out).")
    if len(report["references"]) > 1:
        lines.append(f"- **{report['references'][1]}**: each turn shown the true shot of another held-out session: "
                     "the floor of the image columns (any in-domain shot scores this much).")
    lines += ["", "Paper rows this run was not given a model for:", ""]
    names = [s["name"] for s in report["systems"]]
    has_gc = any(n.split(" ")[0].upper() == "GC" for n in names)
    has_other = any(s["kind"] == "ablation" and s["name"].split(" ")[0].upper() != "GC" for s in report["systems"])
    for name, why in NOT_RUN.items():
        if not ((name.startswith("GC") and has_gc) or (name.startswith("decoder") and has_other)):
            lines.append(f"- {name}: {why}")
    lines += [
        "", "## Columns", "",
        "- CLIP-I: cosine of evaluator embeddings of generated vs true frames (frame by frame). CLIP-T: cosine of "
        "generated frames vs the true shot's caption (MiniLM through the evaluator's text projection).",
        "- ACC-F pixels: the motion level measured from the generated pixels (DIS flow relative to the background, "
        "the world's fitted thresholds: the code that labels the data) equals the true level. ACC-F engine: the "
        "engine's predicted level equals it.",
        "- MAE-F: mean absolute error of the predicted state deltas (stamina, social, entertainment; paper's scale). "
        "MAE states: mean absolute error of the absolute states (0..100) the game reaches, vs the true ones.",
        "- character / place: zero-shot probes: the evaluator picks, among captions that differ from the true caption "
        "only in the protagonist (or the place), the one closest to the generated shot.",
        "- prop keep: on turns that stay in the same place, the zero-shot colour of each coloured prop (captions "
        "differing only in that prop's colour) in the generated shot equals the colour read from the previous "
        "generated turn: does the car stay the colour it was. Props appear in no instruction, so only the visual "
        "history can keep them. A model drawing the same picture every turn also scores 1: read it with "
        "CLIP-I / CLIP-T; the ground-truth row shows how well the evaluator reads props at all.",
        "- consecutive-shot sim: evaluator cosine of consecutive shots in the same place and time of day (the truth's "
        "value is the reference). prop colour vs truth: the zero-shot prop colour equals the true one (expected near "
        "chance in closed loop: a new place's props are invisible to the model).",
        "- character id / place id / time id: the evaluator's frame classifier (a small ResNet trained on true "
        "frames of the evaluator's world, `animegamer train frames`) reads the generated shot's characters (the k "
        "most likely, k = the turn's number of characters), place and time of day; each is right or wrong. The "
        "ground-truth row is its ceiling. sharpness vs truth: mean Laplacian variance of the generated frames over "
        "that of the true frames of the same turns (1 = as sharp). FD: Frechet distance between the frame "
        "classifier's features of generated and true frames (lower is closer; 0 for the truth itself).",
        "- s/turn: wall seconds of `GameSession.step` (engine, sampling + decode, clip write, store), "
        f"torch threads {report['machine']['threads']}.",
        "",
    ]
    if ev:
        lines.append(f"Evaluator: `{ev['path']}` (weights blake2b {ev['weights_blake2b']}), text: {ev['text_encoder']}. "
                     "It must be a `train clip` run other than the model's own tower.")
    for warn in report.get("warnings", []):
        lines.append(f"\n**Warning:** {warn}")
    lines += ["", "## More columns", "", _table(report["summary"], EXTRA_COLUMNS), ""]
    froms = {n: summ for n, summ in report["summary"].items() if summ.get("first_frame")}
    if froms:
        lines += ["## Where each shot's first frame came from", "",
                  "retrieved / continued: a stored training picture (the bank's, or the one the scene started "
                  "from); composed: a stored picture of the place with the characters' cut-outs (decoder/stage.py); "
                  "staged: the same, drawn in layers (decoder/layered.py); went on: the last frame shown, in layers "
                  "(drawn by the sprite animator); engine: none (the engine's visual tokens).", ""]
        lines += [f"- **{n}**: stored training picture {summ['first_frame_stored']:.2f} ("
                  + ", ".join(f"{k} {v:.2f}" for k, v in summ["first_frame"].items()) + ")" for n, summ in froms.items()]
        lines.append("")
    lines += [f"Plots: `{report['files']['plot']}`; generated turns beside the ground truth: "
              f"`{report['files']['contact_sheet']}`.", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Left: the 0..1 columns per system; right: CLIP-I (SSIM without an evaluator) per turn index."""

    matplotlib.use("Agg")

    summ = report["summary"]
    names = list(summ)
    keys = [k for k in UNIT_KEYS if any(summ[n].get(k) is not None for n in names)]
    heads = {k: h for k, h, *_ in MAIN_COLUMNS}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2.2, 1]})
    ax = axes[0]
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(keys))
    colour = {n: f"C{i % 10}" for i, n in enumerate(names)}  # one colour per system in both panels
    for i, n in enumerate(names):
        vals = [summ[n].get(k) if summ[n].get(k) is not None else np.nan for k in keys]
        ax.bar(x + i * width - 0.4 + width / 2, vals, width, label=n, color=colour[n])
    ax.set_xticks(x, [heads[k] for k in keys], rotation=20, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("higher is better")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    metric = "clip_i" if any(v["clip_i"] is not None for s in summ.values() for v in s["per_turn"].values()) else "ssim"
    ax = axes[1]
    for n in names:
        pt = summ[n]["per_turn"]
        ts = [t for t in sorted(pt, key=int) if pt[t][metric] is not None]
        if ts:
            ax.plot([int(t) for t in ts], [pt[t][metric] for t in ts], marker="o", label=n, color=colour[n])
    ax.set_xlabel("turn index")
    ax.set_ylabel(heads[metric] + " (per turn)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"{report['world']['sessions']} held-out sessions ({report['world']['turns']} turns)")
    fig.tight_layout()
    atomic_write_path(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return path


def contact_sheet(results: list["SystemResult"], world: "WorldDataset", sessions: list[list[dict[str, Any]]], path: Path,
                  n_turns: int = 8) -> Path | None:
    """Rows of turns (the first sessions' turns in order): first / middle / last frames of every
    system's generated shot, then the true shot with its annotations."""

    picked = [row for rows in sessions for row in rows][:max(n_turns, 0)]
    if not picked or not results:
        return None
    by_sys = [{(r["session"], r["turn"]): r for r in res.rows} for res in results]
    strips: list[np.ndarray] = []
    for row in picked:
        true = world.frames(row)
        cells = []
        for rows in by_sys:
            r = rows.get((row["session"], row["turn"]))
            if r is not None and Path(r["video"]).is_file():
                gen, _ = align_clips(read_video(r["video"]), true)
                cells.append(shot_strip(gen))
            else:
                cells.append(np.full_like(shot_strip(true), BG))
        cells.append(shot_strip(true, row))
        strips.append(cells)
    widths = [max(s[i].shape[1] for s in strips) for i in range(len(strips[0]))]
    h = strips[0][0].shape[0]
    pad, head = 8, 22
    total_w = sum(widths) + pad * (len(widths) + 1)
    sheet = np.full((head + len(strips) * (h + pad) + pad, total_w, 3), BG, np.uint8)
    xs = np.cumsum([pad] + [w + pad for w in widths[:-1]])
    for r, cells in enumerate(strips):
        y = head + pad + r * (h + pad)
        for c, cell in enumerate(cells):
            sheet[y:y + cell.shape[0], xs[c]:xs[c] + cell.shape[1]] = cell
    img = Image.fromarray(sheet)
    draw = ImageDraw.Draw(img)
    for c, name in enumerate([res.spec.name for res in results] + ["ground truth"]):
        draw.text((int(xs[c]), 4), name, fill=FG, font=font(14))
    return save_png(img, path)


def write_outputs(out: Path, results: list["SystemResult"], refs: dict[str, list[dict[str, Any]]], world: "WorldDataset",
                  sessions: list[list[dict[str, Any]]], evaluator: "Evaluator | None", warnings: list[str],
                  contact_turns: int = 8, command: str | None = None, seconds: float | None = None) -> dict[str, Any]:
    """Summaries + every output file; returns the report (what eval.json holds)."""

    out = Path(out)
    files = {"json": "eval.json", "markdown": "eval.md", "plot": "eval.png", "contact_sheet": "contact_sheet.png",
             "rows": "systems/"}
    m = world.meta
    report: dict[str, Any] = {
        "command": command,
        "world": {"root": str(world.root), "seed": m.get("seed"), "height": m.get("height"), "width": m.get("width"),
                  "frames": m.get("frames"), "sessions": len(sessions), "turns": sum(len(s) for s in sessions),
                  "session_ids": [s[0]["session"] for s in sessions], "split": "test"},
        "evaluator": evaluator.info() if evaluator else None,
        "systems": [{"name": r.spec.name, "model": r.spec.model, "window": r.spec.window, "kind": r.spec.kind,
                     "note": r.spec.note, "reused": r.reused} for r in results],
        "references": list(refs),
        "summary": {**{r.spec.name: summarize(r.rows) for r in results},
                    **{name: summarize(rows) for name, rows in refs.items()}},
        "warnings": list(warnings),
        "machine": {"threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
                    "platform": platform.platform()},
        "seconds": seconds,
        "files": files,
        "dreamsim": "not available offline; PSNR, SSIM and MS-SSIM are reported as a stand-in",
    }
    plot(report, out / files["plot"])
    if contact_sheet(results, world, sessions, out / files["contact_sheet"], contact_turns) is None:
        files["contact_sheet"] = None
    report = jsonable(report)
    write_text(out / files["markdown"], markdown(report))
    write_json(out / files["json"], report)
    return report


def format_summary(report: dict[str, Any]) -> str:
    """The main table for the terminal."""
    return _table(report["summary"], MAIN_COLUMNS)
