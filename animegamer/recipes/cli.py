"""`animegamer recipe NAME --out RUNS`: rebuild a model (and its evaluator) from a recipe file."""
from __future__ import annotations

import argparse

from animegamer.recipes.runner import load_recipe, parse_sets, recipe_names, run_recipe, select_steps


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser(
        "recipe", help="rebuild a whole model (data, every phase, pack, evaluation) from a recipe",
        description="Run a recipe: world data, phase a (autoencoder, decoder), phase b (engine), phase c (adapt), "
                    "the evaluator, the sampler's calibration, the pack and the evaluation. Finished steps are "
                    "skipped, so rerunning a stopped recipe resumes it. Shipped recipes: "
                    + ", ".join(recipe_names()) + " ('default' is the shipped model; 'tiny' runs in minutes).")
    p.add_argument("recipe", help="a shipped recipe name or a recipe .yaml file")
    p.add_argument("--out", required=True, metavar="RUNS", help="where the runs, data, logs and model/ go")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a var of the recipe")
    p.add_argument("--only", default=None, metavar="STEP,...", help="run only these steps")
    p.add_argument("--from", dest="start", default=None, metavar="STEP", help="start at this step")
    p.add_argument("--until", default=None, metavar="STEP", help="stop after this step")
    p.add_argument("--dry-run", action="store_true", help="print the commands that would run, run nothing")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_recipe)


def _recipe(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, parse_sets(args.set))
    steps = select_steps(recipe, args.only.split(",") if args.only else None, args.start, args.until)
    report = run_recipe(recipe, args.out, steps, dry_run=args.dry_run, progress=not args.no_progress)
    if not args.dry_run:
        ran = sum(r["status"] == "ran" for r in report)
        print(f"recipe {recipe.name}: {ran} step(s) ran, {len(report) - ran} were done before; "
              f"the model is in {args.out}/model")
    return 0
