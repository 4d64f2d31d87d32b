"""Run a recipe: the whole pipeline that builds a model, from world data to a packed, graded model.

A recipe is a YAML file (``animegamer/recipes/<name>.yaml``, or any path) holding ``vars`` and a list
of ``steps``. Each step is one `animegamer` command line (``run``), or a ``copy`` of files, with:

- ``done``: a path that exists once the step has finished; the step is skipped when it does, so a
  recipe that was stopped resumes where it stopped when it is run again;
- ``resume``: a training run directory; when it holds checkpoints, ``--resume`` is added;
- ``link``: ``[target, link]`` pairs made before the step (runs that share one feature cache);
- ``launch``: what the Python interpreter runs the command under, before ``-m animegamer`` (e.g.
  ``-m accelerate.commands.launch --config_file configs/accelerate/multi_gpu.yaml`` for several
  GPUs); empty: one process.

Strings may use ``{runs}`` (the output directory), ``{data}`` (``{runs}/data``), ``{shipped}`` (the
shipped model's directory, where a fine-tuning starts), any var, and
``{json:PATH:KEY}``, which reads KEY from a JSON file an earlier step wrote (a calibration handed to
the pack step). ``--set NAME=VALUE`` overrides a var. The resolved recipe is saved as
``{runs}/recipe.yaml`` beside the runs it builds, and every step's output goes to
``{runs}/logs/<step>.log``.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm.auto import tqdm

from animegamer.core.atomic_io import write_text
from animegamer.core.errors import UserFacingError
from animegamer.game.session import DEFAULT_WEIGHTS

RECIPE_DIR = Path(__file__).resolve().parent
_FIELD = re.compile(r"\{([A-Za-z_][\w]*)\}")
_JSON = re.compile(r"\{json:([^:}]+):([\w.]+)\}")


class RecipeError(UserFacingError):
    """The recipe file is malformed, or a step failed; the message says which and why."""


@dataclass
class Step:
    name: str
    run: str | None = None
    copy: list[tuple[str, str]] = field(default_factory=list)
    done: str | None = None
    resume: str | None = None
    link: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""
    launch: str = ""


@dataclass
class Recipe:
    name: str
    description: str
    vars: dict[str, Any]
    steps: list[Step]


def recipe_names() -> list[str]:
    """The recipes that ship with the package."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | Path) -> Path:
    """A shipped recipe by name (``default``, ``tiny``) or a YAML file by path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise FileNotFoundError(f"recipe file {p} does not exist")
        return p
    if (RECIPE_DIR / f"{name_or_path}.yaml").is_file():
        return RECIPE_DIR / f"{name_or_path}.yaml"
    raise RecipeError(f"no recipe named {name_or_path!r}; shipped: {', '.join(recipe_names())} (or give a .yaml path)")


def _pairs(value: Any, where: str) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 2 for v in value):
        raise RecipeError(f"{where}: expected a list of [from, to] pairs, got {value!r}")
    return [(str(a), str(b)) for a, b in value]


def parse_recipe(doc: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe document; the error names the step and field that are wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list) or not doc["steps"]:
        raise RecipeError(f"{source}: a recipe needs a non-empty list of steps")
    steps, seen = [], set()
    for i, s in enumerate(doc["steps"]):
        where = f"{source}: step {i + 1}"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise RecipeError(f"{where}: each step needs a name")
        where = f"{source}: step {s['name']!r}"
        unknown = set(s) - {f for f in Step.__dataclass_fields__}
        if unknown:
            raise RecipeError(f"{where}: unknown field(s) {sorted(unknown)}")
        if s["name"] in seen:
            raise RecipeError(f"{where}: the name is used twice")
        seen.add(s["name"])
        if bool(s.get("run")) == bool(s.get("copy")):
            raise RecipeError(f"{where}: give exactly one of run (a command line) or copy (file pairs)")
        steps.append(Step(name=s["name"], run=s.get("run"), copy=_pairs(s.get("copy"), where), done=s.get("done"),
                          resume=s.get("resume"), link=_pairs(s.get("link"), where), note=s.get("note", ""),
                          launch=str(s.get("launch") or "")))
    return Recipe(str(doc.get("name", source)), str(doc.get("description", "")), dict(doc.get("vars") or {}), steps)


def load_recipe(name_or_path: str | Path, overrides: dict[str, str] | None = None) -> Recipe:
    """Read a recipe and apply ``--set`` overrides (only vars the recipe declares)."""
    path = recipe_path(name_or_path)
    recipe = parse_recipe(yaml.safe_load(path.read_text()), str(path))
    for key, value in (overrides or {}).items():
        if key not in recipe.vars:
            raise RecipeError(f"--set {key}: the recipe has no var {key!r} (it has: {', '.join(recipe.vars)})")
        recipe.vars[key] = value
    return recipe


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RecipeError(f"--set takes NAME=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def expand(text: str, values: dict[str, Any]) -> str:
    """Fill ``{name}`` fields from ``values`` and ``{json:PATH:KEY}`` from JSON files on disk."""
    def field_value(m: re.Match) -> str:
        if m.group(1) not in values:
            raise RecipeError(f"unknown field {{{m.group(1)}}} in {text!r}")
        return str(values[m.group(1)])

    text = _FIELD.sub(field_value, text)

    def json_value(m: re.Match) -> str:
        path = Path(m.group(1))
        if not path.is_file():
            raise RecipeError(f"{path} is missing: the step that writes it has not run")
        value: Any = json.loads(path.read_text())
        for k in m.group(2).split("."):
            value = value[k]
        return str(value)

    return _JSON.sub(json_value, text)


def _values(recipe: Recipe, runs: Path) -> dict[str, Any]:
    values = {"runs": str(runs), "data": str(runs / "data"), "shipped": str(DEFAULT_WEIGHTS)}
    for k, v in recipe.vars.items():
        values[k] = expand(str(v), values)
    return values


def step_command(step: Step, values: dict[str, Any], resolve_json: bool = True) -> list[str]:
    """The `animegamer` arguments of a run step (``--resume`` added for an interrupted run)."""
    text = expand(step.run, values) if resolve_json else _FIELD.sub(lambda m: str(values[m.group(1)]), step.run)
    argv = shlex.split(text)
    if step.resume and (Path(expand(step.resume, values)) / "checkpoints").is_dir():
        argv.append("--resume")
    return argv


def _is_done(step: Step, values: dict[str, Any]) -> bool:
    return bool(step.done) and Path(expand(step.done, values)).exists()


def _copy(step: Step, values: dict[str, Any]) -> None:
    for src, dst in step.copy:
        s, d = Path(expand(src, values)), Path(expand(dst, values))
        if not s.exists():
            raise RecipeError(f"step {step.name!r}: {s} is missing")
        target = d / s.name if dst.endswith("/") else d  # "dir/": into it, under the source's name
        if s.is_dir():
            shutil.copytree(s, target, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, target)


def _link(step: Step, values: dict[str, Any]) -> None:
    for target, link in step.link:
        t, ln = Path(expand(target, values)).resolve(), Path(expand(link, values))
        ln.parent.mkdir(parents=True, exist_ok=True)
        if ln.is_symlink() or ln.exists():
            if ln.resolve() == t:
                continue
            raise RecipeError(f"step {step.name!r}: {ln} exists and is not a link to {t}")
        ln.symlink_to(t, target_is_directory=True)


def launcher(step: Step, values: dict[str, Any]) -> list[str]:
    """The interpreter and what it runs the command under, up to ``-m animegamer``."""
    return [sys.executable, *shlex.split(expand(step.launch, values)), "-m", "animegamer"]


def _run_command(step: Step, argv: list[str], log: Path, values: dict[str, Any]) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    command = launcher(step, values) + argv
    with open(log, "ab") as fh:
        fh.write(f"\n$ {shlex.join(command)}\n".encode())
        fh.flush()
        code = subprocess.call(command, stdout=fh, stderr=subprocess.STDOUT)
    if code != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RecipeError(f"step {step.name!r} failed (exit {code}); the end of {log}:\n" + "\n".join(tail))


def select_steps(recipe: Recipe, only: list[str] | None = None, start: str | None = None,
                 until: str | None = None) -> list[Step]:
    names = [s.name for s in recipe.steps]
    for n in (only or []) + [x for x in (start, until) if x]:
        if n not in names:
            raise RecipeError(f"no step {n!r} in recipe {recipe.name!r}; its steps: {', '.join(names)}")
    steps = recipe.steps
    if start:
        steps = steps[names.index(start):]
    if until:
        steps = steps[:[s.name for s in steps].index(until) + 1]
    if only:
        steps = [s for s in steps if s.name in only]
    return steps


def run_recipe(recipe: Recipe, runs: str | Path, steps: list[Step] | None = None, dry_run: bool = False,
               progress: bool = True) -> list[dict[str, Any]]:
    """Run the steps in order, skipping finished ones; returns what was done per step."""
    runs = Path(runs).resolve()
    values = _values(recipe, runs)
    steps = recipe.steps if steps is None else steps
    report = []
    if not dry_run:
        runs.mkdir(parents=True, exist_ok=True)
        write_text(runs / "recipe.yaml", yaml.safe_dump(
            {"name": recipe.name, "description": recipe.description, "vars": recipe.vars,
             "steps": [{k: v for k, v in vars(s).items() if v} for s in recipe.steps]}, sort_keys=False))
    bar = tqdm(steps, desc=f"recipe {recipe.name}", unit="step", disable=not progress or dry_run)
    for step in bar:
        bar.set_postfix_str(step.name)
        if _is_done(step, values):
            report.append({"step": step.name, "status": "done before"})
            continue
        if dry_run:
            how = f"python {expand(step.launch, values)} -m animegamer " if step.launch else "animegamer "
            what = (how + shlex.join(step_command(step, values, resolve_json=False)) if step.run
                    else "copy " + ", ".join(f"{a} -> {b}" for a, b in step.copy))
            print(f"[{step.name}] {expand(what, values) if '{json:' not in what else what}")
            report.append({"step": step.name, "status": "would run"})
            continue
        t0 = time.perf_counter()
        _link(step, values)
        if step.run:
            _run_command(step, step_command(step, values), runs / "logs" / f"{step.name}.log", values)
        else:
            _copy(step, values)
        report.append({"step": step.name, "status": "ran", "seconds": round(time.perf_counter() - t0, 1)})
        tqdm.write(f"[recipe] {step.name}: {report[-1]['seconds']} s")
    return report
