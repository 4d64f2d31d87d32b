"""`animegamer play` (web UI, --terminal or --script), `animegamer serve` (HTTP API) and `animegamer model pack`."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import uvicorn

from animegamer.core.devices import add_device_arguments
from animegamer.core.runs import resolve_autoencoder
from animegamer.decoder.sampler import add_sampler_arguments, sampler_overrides
from animegamer.game.api import ServeConfig, check_exposure, create_app
from animegamer.game.pack import model_bytes, pack_model
from animegamer.game.script import play_script, read_script
from animegamer.game.session import Game, GameInputError
from animegamer.game.terminal import run_terminal
from animegamer.game.web import launch


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    play = subparsers.add_parser("play", help="play the game: a web page on localhost (or --terminal)",
                                 description="Play AnimeGamer. Every turn is saved; reopen a game to continue it.")
    play.add_argument("--terminal", action="store_true", help="play in this terminal instead of a browser")
    play.add_argument("--model", default=None, metavar="PATH",
                      help="model directory holding engine/ and shot_decoder/ (default: the shipped model)")
    play.add_argument("--store", default=None, metavar="PATH",
                      help="saved-games directory (default: $ANIMEGAMER_SAVES or the user data dir)")
    play.add_argument("--host", default="127.0.0.1", help="web UI address (default: %(default)s, this machine only)")
    play.add_argument("--port", type=int, default=7860, help="web UI port (default: %(default)s)")
    play.add_argument("--open", dest="open_id", default=None, metavar="ID", help="continue this saved game")
    play.add_argument("--characters", default=None,
                      help="terminal or --script: start a game with these (comma separated)")
    play.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    play.add_argument("--script", default=None, metavar="FILE",
                      help="play the instructions of FILE (one a line; free text or the release's game_demo "
                           "form) as one saved game, print the states turn by turn, and exit")
    play.add_argument("--out", default=None, metavar="DIR",
                      help="with --script: write every clip, the session's MP4 and its storyboard here")
    play.add_argument("--seed", type=int, default=None, help="with --script: the game's seed (same seed, same game)")
    play.add_argument("--stop-on-error", action="store_true",
                      help="with --script: stop at the first line the game refuses (default: report it, go on)")
    add_device_arguments(play)
    play.set_defaults(func=_play)

    serve = subparsers.add_parser(
        "serve", help="the game as an HTTP JSON API (docs at /docs)",
        description="Serve the game as an HTTP JSON API: create games, play turns, download clips and exports. "
                    "Same saved games as `animegamer play`. OpenAPI docs at http://HOST:PORT/docs.")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address (default: %(default)s, this machine only; any other needs an API key)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    serve.add_argument("--model", default=None, metavar="PATH",
                       help="model directory holding engine/ and shot_decoder/ (default: the shipped model)")
    serve.add_argument("--store", default=None, metavar="PATH",
                       help="saved-games directory (default: $ANIMEGAMER_SAVES or the user data dir)")
    serve.add_argument("--api-key", default=os.environ.get("ANIMEGAMER_API_KEY"), metavar="KEY",
                       help="require this key on every request but /health (default: $ANIMEGAMER_API_KEY)")
    serve.add_argument("--max-active", type=int, default=ServeConfig.max_active_games,
                       help="games whose turns run at once (default: %(default)s)")
    serve.add_argument("--max-queue", type=int, default=ServeConfig.max_queue,
                       help="turns that may wait beyond those; more get 429 (default: %(default)s)")
    serve.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    add_device_arguments(serve)
    serve.set_defaults(func=_serve)

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
    pk.add_argument("--no-anchors", action="store_true",
                    help="drop the decoder's visual anchors: the game draws the engine's visual tokens (the paper)")
    pk.add_argument("--provenance", default=None, metavar="JSON",
                    help="a JSON file (e.g. the training commands and data seeds) copied into model.json")
    pk.set_defaults(func=_pack)


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
        out = pack_model(args.engine, args.decoder, args.out, fp16=not args.fp32, provenance=prov, sampler=sampler,
                         autoencoder=autoencoder, anchors=False if args.no_anchors else args.anchors,
                         anchor_limit=args.anchor_limit, anchors_per_scene=args.anchors_per_scene)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"model pack: {e}") from None
    print(f"model written to {out} ({model_bytes(out) / 1e6:.1f} MB)")
    return 0


def _play(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)

    if (args.out or args.seed is not None or args.stop_on_error) and not args.script:
        raise SystemExit("play: --out, --seed and --stop-on-error go with --script FILE")
    if args.script:
        try:
            lines = read_script(args.script)  # a bad file fails before the model loads
        except GameInputError as e:
            raise SystemExit(f"play: {e}") from None
        game = Game.load(args.model, store=args.store, device=args.device, precision=args.precision)
        try:
            result = play_script(game, args.script, characters=args.characters, out=args.out, seed=args.seed,
                                 stop_on_error=args.stop_on_error)
        except GameInputError as e:
            raise SystemExit(f"play: {e}") from None
        print(f"played {len(result.turns)} of {len(lines)} lines; {len(result.errors)} refused "
              f"(the game is saved: play --terminal --open {result.session.id})")
        return 1 if result.errors else 0
    game = Game.load(args.model, store=args.store, device=args.device, precision=args.precision)
    if args.terminal:
        return run_terminal(game, open_id=args.open_id, characters=args.characters)

    launch(game, host=args.host, port=args.port)
    return 0


def _serve(args: argparse.Namespace) -> int:
    config = ServeConfig(max_active_games=args.max_active, max_queue=args.max_queue, api_key=args.api_key or None)
    check_exposure(args.host, config)  # before the model loads
    if args.threads:
        torch.set_num_threads(args.threads)
    game = Game.load(args.model, store=args.store, device=args.device, precision=args.precision)
    print(f"AnimeGamer API on http://{args.host}:{args.port} (docs: /docs; saved games: {game.store.root})")
    uvicorn.run(create_app(game, config), host=args.host, port=args.port, log_level="info")
    return 0
