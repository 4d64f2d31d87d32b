"""`animegamer recipe`: a whole model rebuilt from a recipe file; the tiny recipe runs end to end here."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from animegamer import Game
from animegamer.cli import main
from animegamer.recipes.runner import (
    RecipeError, expand, load_recipe, parse_recipe, parse_sets, recipe_names, run_recipe, select_steps,
)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    runs = tmp_path_factory.mktemp("recipe") / "runs"
    assert main(["recipe", "tiny", "--out", str(runs), "--no-progress", "--set", "threads=1"]) == 0
    return runs


def test_tiny_recipe_builds_a_model_that_plays(tiny_runs, tmp_path):
    game = Game.load(tiny_runs / "model", store=tmp_path / "store")
    session = game.new_session(characters=["Qiqi"], seed=0)
    assert game.decoder.draws_layers  # the sprite animator draws every shot, as in the shipped model
    turn = session.step("Character: Qiqi; Motion: quickly run; Background: day town.")
    assert turn.frames.dtype == np.uint8 and turn.frames.ndim == 4 and turn.frames.shape[-1] == 3
    assert turn.anchor == "staged"
    assert 1 <= turn.motion_level <= 5
    assert len(game.open_session(session.id).turns) == 1


def test_tiny_recipe_saves_itself_and_grades_its_model(tiny_runs):
    saved = yaml.safe_load((tiny_runs / "recipe.yaml").read_text())
    assert saved["name"] == "tiny" and saved["vars"]["threads"] == "1"
    assert [s["name"] for s in saved["steps"]] == [s.name for s in load_recipe("tiny").steps]
    assert (tiny_runs / "eval" / "eval.md").is_file()
    report = json.loads((tiny_runs / "eval" / "eval.json").read_text())
    assert report["summary"]["AnimeGamer"]["char_id"] is not None  # the evaluator's frame classifier graded it
    packed = json.loads((tiny_runs / "model" / "model.json").read_text())
    assert packed["sprite_animator"]["from"] == str(tiny_runs / "sprites") and packed["stage"]["places"]
    # a fine-tune (--init) keeps the latent normalisation of the decoder it starts from
    tuned = json.loads((tiny_runs / "drawn_cast" / "joint" / "final" / "shot_decoder" / "shot_decoder.json").read_text())
    start = json.loads((tiny_runs / "adapt" / "final" / "shot_decoder" / "shot_decoder.json").read_text())
    assert [tuned["diffusion"][k] for k in ("latent_scale", "latent_shift")] == \
        [start["diffusion"][k] for k in ("latent_scale", "latent_shift")]
    anchors = json.loads((tiny_runs / "model" / "shot_decoder" / "anchors" / "anchors.json").read_text())
    assert anchors["entries"] and all(e["characters"] for e in anchors["entries"])  # the world's train shots
    acts = collections.Counter((tuple(sorted(e["characters"])), e["place"], e["time"], e["motion"])
                               for e in anchors["entries"])
    assert max(acts.values()) == 1 and anchors["motions"]  # --anchors-per-action 1, the motions kept for by_action
    assert {m["verb"] for m in anchors["motions"]} == {e["motion"] for e in anchors["entries"]}


def test_rerun_skips_finished_steps(tiny_runs):
    report = run_recipe(load_recipe("tiny"), tiny_runs, progress=False)
    assert {r["status"] for r in report} == {"done before"}


def test_shipped_recipes_parse_and_rebuild_from_nothing():
    assert {"default", "tiny"} <= set(recipe_names())
    default = load_recipe("default")
    names = [s.name for s in default.steps]
    # one pass: each phase once, in the paper's order, then the evaluator, pack and grading
    order = ["vae", "representation", "decoder", "engine", "adapt", "drawn-cast", "sprites", "evaluator-pack", "pack",
             "eval", "bench"]
    assert [n for n in names if n in order] == order
    # every run is built by a step of the recipe: no command restores anything from git history, and no training
    # run continues another of the same phase (the chain the shipped model was found by is docs/history.md's)
    assert not any("git" in (s.run or "") for s in default.steps)
    inits = [s.run.split("--init ")[1].split()[0] for s in default.steps if s.run and "--init " in s.run]
    assert inits == ["{runs}/vae", "{runs}/representation", "{runs}/adapt"]  # the sharp decoder, phase a's two, phase c's
    # the tiny recipe is the same pipeline at toy size: the same steps in the same order
    assert [s.name for s in load_recipe("tiny").steps] == names


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, capsys):
    assert main(["recipe", "default", "--out", str(tmp_path / "r"), "--dry-run", "--until", "vae"]) == 0
    out = capsys.readouterr().out
    assert "animegamer train vae --preset default" in out and "train engine" not in out
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("doc, match", [
    ({"steps": []}, "non-empty list of steps"),
    ({"steps": [{"run": "world catalog"}]}, "needs a name"),
    ({"steps": [{"name": "a", "run": "x", "copy": [["a", "b"]]}]}, "exactly one of run"),
    ({"steps": [{"name": "a", "run": "x", "colour": 1}]}, "unknown field"),
    ({"steps": [{"name": "a", "run": "x"}, {"name": "a", "run": "y"}]}, "used twice"),
    ({"steps": [{"name": "a", "copy": ["a"]}]}, "pairs"),
])
def test_bad_recipes_are_refused_with_the_reason(doc, match):
    with pytest.raises(RecipeError, match=match):
        parse_recipe(doc)


def test_bad_overrides_and_steps_are_refused():
    with pytest.raises(RecipeError, match="no var 'nope'"):
        load_recipe("tiny", {"nope": "1"})
    with pytest.raises(RecipeError, match="NAME=VALUE"):
        parse_sets(["threads"])
    with pytest.raises(RecipeError, match="no step 'nope'"):
        select_steps(load_recipe("tiny"), only=["nope"])
    with pytest.raises(RecipeError, match="no recipe named"):
        load_recipe("nope")


def test_expand_fills_fields_and_json_values(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"pack_argument": "0.9,0.5", "a": {"b": 3}}))
    values = {"runs": str(tmp_path)}
    assert expand("--x {json:{runs}/c.json:pack_argument} --y {json:{runs}/c.json:a.b}", values) == "--x 0.9,0.5 --y 3"
    with pytest.raises(RecipeError, match="has not run"):
        expand("{json:{runs}/missing.json:k}", values)
    with pytest.raises(RecipeError, match="unknown field"):
        expand("{nope}", values)


def test_eval_decoder_grades_a_packed_model_on_any_world_with_the_picture_chain(tiny_runs, tmp_path, capsys):
    """No training run beside the decoder: eval-decoder builds the held-out cache with the decoder's own
    encoders and reports the picture at each step (truth, autoencoder round trip, decoded)."""
    argv = ["eval-decoder", "--decoder", str(tiny_runs / "model"), "--data", str(tiny_runs / "data" / "world"),
            "--cache", str(tmp_path / "cache"), "--split", "test", "--n", "2", "--evaluator",
            str(tiny_runs / "evaluator_pack"), "--out", str(tmp_path / "r.json"), "--no-progress"]
    assert main(argv) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["shots"] == 2 and set(report["picture"]) == {"truth", "autoencoder", "decoded"}
    truth = report["picture"]["truth"]
    assert truth["sharpness"] == pytest.approx(1.0) and abs(truth["fd"]) < 1e-3
    assert all(report["picture"][k]["char_id"] is not None for k in ("autoencoder", "decoded"))
    assert main(argv) == 0  # the cache is reused


def test_the_papers_ablations_are_one_recipe_of_config_files(tmp_path, capsys):
    """experiments/recipes/ablations.yaml: each baseline or ablation is a config file of overrides, trained from the
    default recipe's runs; every file it names exists, and its dry run prints each step once."""
    root = Path(__file__).resolve().parents[1]
    recipe = load_recipe(root / "experiments" / "recipes" / "ablations.yaml")
    values = {"runs": "R", "data": "R/data", **recipe.vars, "configs": str(root / "experiments" / "configs")}
    values = {k: expand(str(v), values) for k, v in values.items()}
    named = {c for s in recipe.steps if s.run for c in expand(s.run, values).split() if c.endswith(".yaml")}
    assert {Path(c).name for c in named} == {"tokens_only.yaml", "no_motion_level.yaml", "random_frame.yaml",
                                             "gc_caption.yaml"}
    assert all(Path(c).is_file() for c in named)
    default_runs = {"{runs}/representation", "{runs}/engine", "{runs}/model", "{runs}/model_no_adapt"}
    assert all(any(r in s.run for s in recipe.steps if s.run) for r in default_runs)  # it builds on the default's
    assert main(["recipe", str(root / "experiments" / "recipes" / "ablations.yaml"), "--out", str(tmp_path / "r"),
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert [line.split("]")[0][1:] for line in out.splitlines()] == [s.name for s in recipe.steps]
    assert "--ablation GC=" in out and "without adaptation=" in out
