"""`animegamer play` (web UI, --terminal or --script) and `animegamer serve` (HTTP API)."""
from __future__ import annotations

import argparse
import os

import torch
import uvicorn

from animegamer.core.devices import add_device_arguments
from animegamer.game.api import ServeConfig, check_exposure, create_app
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
    add_device_arguments(play, quantize=True)
    play.add_argument("--window", type=int, default=None, metavar="N",
                      help="history turns the engine sees (default: the model's own; the published release: 1)")
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
    add_device_arguments(serve, quantize=True)
    serve.add_argument("--window", type=int, default=None, metavar="N",
                       help="history turns the engine sees (default: the model's own; the published release: 1)")
    serve.set_defaults(func=_serve)


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
        game = Game.load(args.model, store=args.store, device=args.device, precision=args.precision,
                     quantize=args.quantize, window=args.window)
        try:
            result = play_script(game, args.script, characters=args.characters, out=args.out, seed=args.seed,
                                 stop_on_error=args.stop_on_error)
        except GameInputError as e:
            raise SystemExit(f"play: {e}") from None
        print(f"played {len(result.turns)} of {len(lines)} lines; {len(result.errors)} refused "
              f"(the game is saved: play --terminal --open {result.session.id})")
        return 1 if result.errors else 0
    game = Game.load(args.model, store=args.store, device=args.device, precision=args.precision,
                     quantize=args.quantize, window=args.window)
    if args.terminal:
        return run_terminal(game, open_id=args.open_id, characters=args.characters)

    launch(game, host=args.host, port=args.port)
    return 0


def _serve(args: argparse.Namespace) -> int:
    config = ServeConfig(max_active_games=args.max_active, max_queue=args.max_queue, api_key=args.api_key or None)
    check_exposure(args.host, config)  # before the model loads
    if args.threads:
        torch.set_num_threads(args.threads)
    game = Game.load(args.model, store=args.store, device=args.device, precision=args.precision,
                     quantize=args.quantize, window=args.window)
    print(f"AnimeGamer API on http://{args.host}:{args.port} (docs: /docs; saved games: {game.store.root})")
    uvicorn.run(create_app(game, config), host=args.host, port=args.port, log_level="info")
    return 0
