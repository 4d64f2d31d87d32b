"""`animegamer ingest VIDEO... --out DIR` (your own animation into a training set, see build.py) and
`animegamer mix DIR[:W]... --out DIR` (several datasets as one weighted set, see mix.py)."""
from __future__ import annotations

import argparse

from animegamer.ingest import bench
from animegamer.ingest.build import TEMPLATE_NAME, IngestConfig, ingest
from animegamer.ingest.mix import mix_datasets, parse_part
from animegamer.ingest.shots import CutConfig


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser(
        "ingest", help="your own animation files -> a training set (shot cuts, clips, motion levels, annotations)",
        description="Cut video files into shots (PySceneDetect), take clips of the model's frame count and size, "
                    "measure each clip's motion level with the world's optical-flow code, and write the world's "
                    "dataset format, which every training phase reads. Rerun to continue an interrupted ingest, or "
                    f"with --annotations to apply a completed {TEMPLATE_NAME}.")
    p.add_argument("videos", nargs="+", metavar="VIDEO", help="video files (anything ffmpeg reads), one film each")
    p.add_argument("--out", required=True, help="dataset directory (created; an earlier ingest there is continued)")
    p.add_argument("--annotations", default=None, metavar="FILE",
                   help=f"a CSV or JSON of what each clip shows ({TEMPLATE_NAME} in --out, completed)")
    p.add_argument("--refit-levels", action="store_true",
                   help="fit the motion-level thresholds to these clips (default: the world's, what the model knows)")
    p.add_argument("--height", type=int, default=96)
    p.add_argument("--width", type=int, default=144)
    p.add_argument("--frames", type=int, default=17, help="frames per clip, 4k+1 (default: %(default)s)")
    p.add_argument("--fps", type=int, default=8, help="the model's frame rate (default: %(default)s)")
    p.add_argument("--stride", type=int, default=None,
                   help="model frames between the clips of a long shot (default: the clip length: no overlap)")
    p.add_argument("--session-turns", type=int, default=5, help="consecutive clips per session (default: %(default)s)")
    p.add_argument("--val-fraction", type=float, default=0.05)
    p.add_argument("--test-fraction", type=float, default=0.05)
    p.add_argument("--cut-threshold", type=float, default=CutConfig.adaptive_threshold,
                   help="PySceneDetect AdaptiveDetector's adaptive threshold (default: %(default)s; higher: fewer cuts)")
    p.add_argument("--min-cut-change", type=float, default=CutConfig.min_content_val,
                   help="the least content change of a cut (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_ingest)

    m = subparsers.add_parser(
        "mix", help="several datasets as one weighted training set (e.g. your films and the world)",
        description="Write a dataset that lists the sessions of several datasets (ingested films, rendered "
                    "worlds), each repeated by its weight (DIR:WEIGHT; 2 = twice, 0.5 = half its sessions, "
                    "drawn), pointing at their clips without copying them. Train any phase on it with --data.")
    m.add_argument("parts", nargs="+", metavar="DIR[:WEIGHT]", help="datasets and their weights (default 1)")
    m.add_argument("--out", required=True, help="the mixture's directory")
    m.add_argument("--seed", type=int, default=0, help="draws the fractional part of a weight (default: %(default)s)")
    m.set_defaults(func=_mix)

    b = subparsers.add_parser("bench-ingest", help="ingest graded on a world film whose truth is known, and timed",
                              description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(b)
    b.set_defaults(func=bench.run)


def _ingest(args: argparse.Namespace) -> int:
    config = IngestConfig(height=args.height, width=args.width, frames=args.frames, fps=args.fps, stride=args.stride,
                          session_turns=args.session_turns, val_fraction=args.val_fraction,
                          test_fraction=args.test_fraction, refit_levels=args.refit_levels,
                          cuts=CutConfig(adaptive_threshold=args.cut_threshold, min_content_val=args.min_cut_change))
    meta = ingest(args.videos, args.out, config, annotations=args.annotations, progress=not args.no_progress)
    info = meta["ingest"]
    for s in info["sources"]:
        print(f"{s['file']}: {s['duration_s']:.1f} s, {s['shots']} shots, {s['clips']} clips")
    print(f"{meta['turns_total']} clips in {meta['sessions']} sessions; motion levels {meta['level_counts']}; "
          f"{info['clips_annotated']} clips annotated")
    unused = info.get("annotation_rows_without_clip") or []
    if unused:
        print(f"{len(unused)} annotation rows cover no clip (shots too short for one), e.g. {unused[0]}")
    if info["seconds_this_run"]:
        print(f"{info['video_seconds']:.1f} s of video; this run took {info['seconds_this_run']:.1f} s "
              f"({info['videos_skipped_as_done']} videos already done)")
    print(f"wrote {args.out}/turns.jsonl, meta.json and {TEMPLATE_NAME} (complete it, then rerun with --annotations)")
    return 0


def _mix(args: argparse.Namespace) -> int:
    meta = mix_datasets([parse_part(p) for p in args.parts], args.out, seed=args.seed)
    for part in meta["mix"]:
        print(f"{part['data']}: weight {part['weight']:g}, {part['sessions_listed']} of {part['sessions']} sessions "
              "listed")
    print(f"wrote {args.out}: {meta['sessions']} sessions, {meta['turns_total']} turns")
    return 0
