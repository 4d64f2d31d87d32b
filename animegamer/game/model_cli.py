"""`animegamer model pack`: training runs -> a model directory the game plays. Apart from `play`, so
that packing (a recipe step, often on a training machine) does not import the web server's stack."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from animegamer.core.runs import resolve_autoencoder
from animegamer.decoder.sampler import add_sampler_arguments, sampler_overrides
from animegamer.game.pack import AnchorPacking, add_stage, model_bytes, pack_model


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    model = subparsers.add_parser("model", help="model directories: pack training runs into a playable model")
    msub = model.add_subparsers(dest="action", metavar="ACTION")
    msub.required = True
    pk = msub.add_parser("pack", help="engine run + decoder (or adapt) run -> a model directory Game.load reads")
    pk.add_argument("--engine", required=True, help="`train engine` run dir (or its final/)")
    pk.add_argument("--decoder", required=True, help="`train adapt` or `train decoder` run dir (or shot_decoder/)")
    pk.add_argument("--out", required=True, help="model directory to write (replaced atomically)")
    pk.add_argument("--fp32", action="store_true", help="keep fp32 weights (default: fp16, half the size)")
    add_sampler_arguments(pk, default="the decoder run's")
    pk.add_argument("--autoencoder", default=None, metavar="AE",
                    help="decode with this autoencoder instead of the decoder's own: a decoder-only fine-tune of it "
                         "(`train vae --init ... --decoder-only`; a run dir, its final/ or the autoencoder/ dir)")
    pk.add_argument("--anchors", default=None, nargs="+", metavar="DATA",
                    help="build the visual anchors the game draws from (decoder/anchors.py) from the first frames of "
                         "these world datasets' train shots (the model's own training worlds)")
    pk.add_argument("--anchor-limit", type=int, default=None, metavar="N", help="at most N anchor shots (default: all)")
    pk.add_argument("--anchors-per-scene", type=int, default=None, metavar="N",
                    help="at most N anchor shots of each (characters, place, time) (default: all)")
    pk.add_argument("--anchors-per-action", type=int, default=None, metavar="N",
                    help="at most N anchor shots of each (characters, place, time, verb) (default: all)")
    pk.add_argument("--anchors-frame-quality", type=int, default=None, metavar="Q",
                    help="store the anchors' pictures as WebP of quality Q (1-100; default lossless)")
    pk.add_argument("--anchors-by-action", choices=("on", "off"), default="on",
                    help="choose the anchor for the action too: a shot of the verb the engine's motion names, where "
                         "the bank has one (decoder/anchors.py; default on)")
    pk.add_argument("--anchors-repose", choices=("on", "off"), default="off",
                    help="with --anchors-by-action: draw a persisting scene again from a shot of the turn's verb (on), "
                         "or continue it from its anchor, keeping its props and layout (off, the default)")
    pk.add_argument("--text-encoder", default=None, metavar="DIR",
                    help="the decoder's text encoder, which encodes the anchors' motions (default: the bundled MiniLM)")
    pk.add_argument("--sprites", default=None, metavar="RUN",
                    help="a `train sprites` run: every shot is drawn in layers on the stage, each character who acts "
                         "drawn by its sprite animator (decoder/layered.py)")
    pk.add_argument("--no-anchors", action="store_true",
                    help="drop the decoder's visual anchors: the game draws the engine's visual tokens (the paper)")
    pk.add_argument("--provenance", default=None, metavar="JSON",
                    help="a JSON file (e.g. the training commands and data seeds) copied into model.json")
    pk.set_defaults(func=_pack)
    st = msub.add_parser("stage", help="draw the world's stage (places with no one in them, the cast's cut-outs: "
                                       "decoder/stage.py) into a model packed without one")
    st.add_argument("model", help="a model directory (model pack's --out)")
    st.set_defaults(func=_stage)


def _stage(args: argparse.Namespace) -> int:
    try:
        where = add_stage(args.model)
    except (ValueError, FileNotFoundError, KeyError) as e:
        raise SystemExit(f"model stage: {e}") from None
    print(f"stage written to {where}")
    return 0


def _pack(args: argparse.Namespace) -> int:
    try:
        sampler = sampler_overrides(args)
    except ValueError as e:
        raise SystemExit(f"model pack: {e}") from None
    prov = json.loads(Path(args.provenance).read_text()) if args.provenance else None
    autoencoder = resolve_autoencoder(args.autoencoder) if args.autoencoder else None
    if args.anchors and args.no_anchors:
        raise SystemExit("model pack: --anchors and --no-anchors exclude each other")
    try:
        anchors = False if args.no_anchors else AnchorPacking(
            args.anchors, args.anchor_limit, args.anchors_per_scene, args.anchors_per_action,
            args.anchors_frame_quality, args.text_encoder, args.anchors_by_action == "on",
            args.anchors_repose == "on") if args.anchors else None
        out = pack_model(args.engine, args.decoder, args.out, fp16=not args.fp32, provenance=prov, sampler=sampler,
                         autoencoder=autoencoder, anchors=anchors, sprites=args.sprites)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"model pack: {e}") from None
    print(f"model written to {out} ({model_bytes(out) / 1e6:.1f} MB)")
    return 0
