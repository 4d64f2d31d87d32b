"""`animegamer annotate DATA (--vlm DIR | --references DIR) --out FILE.csv`: annotate an ingested dataset's
clips with a local vision-language model (ingest/vlm.py) and / or name their characters by reference
pictures (evaluation/character_match.py); its own module so that `ingest` does not load transformers."""
from __future__ import annotations

import argparse

from tqdm import tqdm

from animegamer.core.devices import add_device_arguments
from animegamer.evaluation.character_match import ReferenceGallery
from animegamer.evaluation.evaluator import DEFAULT_EVALUATOR
from animegamer.ingest.annotations import write_template
from animegamer.ingest.video import IngestError
from animegamer.ingest.vlm import VlmAnnotator, annotate
from animegamer.models.character_reid import REID_DIR, CharacterReID
from animegamer.world.character_fit import CLOSE_FIT
from animegamer.world.dataset import WorldDataset


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    a = subparsers.add_parser(
        "annotate", help="annotate ingested clips: a local vision-language model, and / or reference pictures of "
                         "the characters",
        description="Ask a local vision-language model (any that transformers loads: AutoModelForImageTextToText "
                    "and its processor) who is on screen, what they do, where and when, about the middle frame of "
                    "each clip of an ingested dataset; and / or name who is on screen by the nearest of your "
                    "reference pictures (--references: one picture per character, named after them). Write the "
                    "answers as an annotation file; what is not known readably stays empty. Review it, then apply "
                    "it: animegamer ingest VIDEO... --out DATA --annotations FILE.")
    a.add_argument("data", help="an ingested dataset (animegamer ingest --out)")
    a.add_argument("--vlm", default=None, metavar="DIR", help="local vision-language model directory (nothing "
                                                               "downloads)")
    a.add_argument("--references", default=None, metavar="DIR",
                   help="one picture per character (Qiqi.png: alone on a plain background, in the world's style); "
                        "each clip's characters are the nearest, overriding the model's")
    a.add_argument("--reid", default=str(DEFAULT_EVALUATOR / REID_DIR), metavar="DIR",
                   help="the character re-identification network (default: the shipped one; `train reid` trains one)")
    a.add_argument("--out", required=True, metavar="FILE.csv", help="the annotation file to write")
    a.add_argument("--characters", default=None, metavar="NAME,NAME",
                   help="the characters that may appear; the model is told them and other names are not taken")
    a.add_argument("--limit", type=int, default=None, help="only the first N clips")
    a.add_argument("--max-new-tokens", type=int, default=64, help="the longest answer (default: %(default)s)")
    a.add_argument("--no-progress", action="store_true")
    add_device_arguments(a)
    a.set_defaults(func=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    if args.vlm is None and args.references is None:
        raise ValueError("give --vlm DIR (a local vision-language model), --references DIR (pictures of the "
                         "characters), or both")
    names = [n.strip() for n in args.characters.split(",") if n.strip()] if args.characters else None
    gallery = None
    if args.references is not None:
        gallery = ReferenceGallery.from_dir(args.references, CharacterReID.from_pretrained(args.reid),
                                            progress=not args.no_progress)
        for name, error in gallery.fit_errors.items():
            if error > CLOSE_FIT:
                print(f"note: {name}'s picture is not much like the world's drawings (fit error {error:.2f}); "
                      "clips named after it are guesses")
    who = (lambda frames: gallery.name(frames)[0]) if gallery is not None else None
    if args.vlm is not None:
        annotator = VlmAnnotator.load(args.vlm, device=args.device)
        annotator.max_new_tokens = args.max_new_tokens
        report = annotate(args.data, annotator, args.out, names=names, limit=args.limit,
                          progress=not args.no_progress, who=who)
        print(f"{report['clips']} clips asked; {report['answered']} answers gave something: characters "
              f"{report['characters']}, motion {report['motion_text']}, place {report['place']}, time {report['time']}")
    else:
        world = WorldDataset(args.data)
        rows = world.rows[: args.limit or None]
        if not rows or "source" not in rows[0]:
            raise IngestError(f"{args.data}: not an ingested dataset (animegamer ingest writes one)")
        done = [{**row, "characters": who(world.frames(row))}
                for row in tqdm(rows, desc="references", unit="clip", disable=args.no_progress, dynamic_ncols=True)]
        write_template(args.out, done)
    if gallery is not None:
        print(f"each clip's characters: the nearest of the {len(gallery.names)} reference pictures in {args.references}")
    print(f"wrote {args.out}: review it, then apply it with animegamer ingest VIDEO... --out {args.data} "
          f"--annotations {args.out}")
    return 0
