"""`animegamer annotate DATA --vlm DIR --out FILE.csv`: a local vision-language model annotates an ingested
dataset's clips (ingest/vlm.py); its own module so that `ingest` does not load transformers."""
from __future__ import annotations

import argparse

from animegamer.core.devices import add_device_arguments
from animegamer.ingest.vlm import VlmAnnotator, annotate


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    a = subparsers.add_parser(
        "annotate", help="a local vision-language model annotates ingested clips (who, what, where, when)",
        description="Ask a local vision-language model (any that transformers loads: AutoModelForImageTextToText "
                    "and its processor) who is on screen, what they do, where and when, about the middle frame of "
                    "each clip of an ingested dataset, and write the answers as an annotation file. What an answer "
                    "does not say readably stays empty. Review it, then apply it: animegamer ingest VIDEO... "
                    "--out DATA --annotations FILE.")
    a.add_argument("data", help="an ingested dataset (animegamer ingest --out)")
    a.add_argument("--vlm", required=True, metavar="DIR", help="local vision-language model directory (nothing downloads)")
    a.add_argument("--out", required=True, metavar="FILE.csv", help="the annotation file to write")
    a.add_argument("--characters", default=None, metavar="NAME,NAME",
                   help="the characters that may appear; the model is told them and other names are not taken")
    a.add_argument("--limit", type=int, default=None, help="only the first N clips")
    a.add_argument("--max-new-tokens", type=int, default=64, help="the longest answer (default: %(default)s)")
    a.add_argument("--no-progress", action="store_true")
    add_device_arguments(a)
    a.set_defaults(func=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.characters.split(",") if n.strip()] if args.characters else None
    annotator = VlmAnnotator.load(args.vlm, device=args.device)
    annotator.max_new_tokens = args.max_new_tokens
    report = annotate(args.data, annotator, args.out, names=names, limit=args.limit, progress=not args.no_progress)
    print(f"{report['clips']} clips asked; {report['answered']} answers gave something: characters "
          f"{report['characters']}, motion {report['motion_text']}, place {report['place']}, time {report['time']}")
    print(f"wrote {args.out}: review it, then apply it with animegamer ingest VIDEO... --out {args.data} "
          f"--annotations {args.out}")
    return 0
