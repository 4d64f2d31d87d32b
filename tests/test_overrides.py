"""Named overrides of a typed config (core/overrides.py) and phase a's config, whose defaults ship."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from animegamer.core.errors import UserFacingError
from animegamer.core.overrides import apply_overrides, load_override_file, parse_set
from animegamer.training.phase_a import PRESETS, DecoderPreset, add_arguments, preset_from_args

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"


def args_of(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--data", "D", "--vae", "V", "--out", "O", *argv])


def test_the_default_preset_is_the_configs_defaults():
    assert PRESETS["default"] == DecoderPreset()
    assert preset_from_args(args_of()) == DecoderPreset()


def test_set_pairs_are_typed_by_the_field_and_nested_configs_take_dotted_keys():
    preset = preset_from_args(args_of("--set", "shared_noise_by_level=[0.9, 0.9, 0.9, 0.5, 0.1]", "--set",
                                      "train.lr=1e-4", "--set", "shared_noise=0", "--set", "random_frame=true"))
    assert preset.shared_noise_by_level == (0.9, 0.9, 0.9, 0.5, 0.1)  # a YAML list becomes the field's tuple
    assert preset.train.lr == 1e-4 and preset.train.steps == DecoderPreset().train.steps  # YAML reads 1e-4 as text
    assert preset.shared_noise == 0.0 and isinstance(preset.shared_noise, float) and preset.random_frame is True
    assert preset_from_args(args_of("--set", "shared_noise_by_level=null")).shared_noise_by_level is None


@pytest.mark.parametrize("pair, says", [
    ("reference_chanels=0", "no field 'reference_chanels'"),  # a typo fails instead of training the default
    ("n_text=many", "'many' is not int"),
    ("random_frame=1", "1 is not bool"),
    ("train.nope=1", "no field 'nope' in TrainConfig"),
    ("condition=poem", "condition must be one of"),  # the config's own checks, as one line
    ("shared_noise_by_level=[1, 2]", "shared_noise_by_level"),
    ("n_text", "expected KEY=VALUE"),
])
def test_a_wrong_override_says_what_was_wrong(pair, says):
    with pytest.raises(UserFacingError, match=says):
        preset_from_args(args_of("--set", pair))


def test_combinations_that_cannot_train_are_refused_with_what_to_set():
    with pytest.raises(UserFacingError, match="motion_level false"):  # the level prior needs the level
        apply_overrides(DecoderPreset(), {"motion_level": False})
    with pytest.raises(UserFacingError, match="reference_channels 0"):  # a caption decoder has no reference
        apply_overrides(DecoderPreset(), {"condition": "caption"})


def test_every_ablation_file_applies_to_the_shipped_preset_and_changes_only_what_it_names():
    files = sorted(CONFIGS.glob("*.yaml"))
    assert {f.stem for f in files} >= {"gc_caption", "no_motion_level", "random_frame", "tokens_only"}
    for f in files:
        fields = load_override_file(f)
        preset = preset_from_args(args_of("--config", str(CONFIGS / "tokens_only.yaml"), "--config", str(f)))
        assert all(getattr(preset, k) == (tuple(v) if isinstance(v, list) else v) for k, v in fields.items())
    gc = preset_from_args(args_of("--config", str(CONFIGS / "gc_caption.yaml")))
    assert (gc.condition, gc.n_text, gc.reference_kind) == ("caption", 69, "none")
    later = preset_from_args(args_of("--config", str(CONFIGS / "gc_caption.yaml"), "--set", "n_text=12"))
    assert later.n_text == 12  # --set applies after the files


def test_an_override_file_that_is_not_a_small_mapping_is_refused(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    (tmp_path / "big.yaml").write_text("# x\n" * 20000)
    for name, says in (("list", "a mapping"), ("bad", "not YAML"), ("big", "bytes"), ("missing", "no such file")):
        with pytest.raises(UserFacingError, match=says):
            load_override_file(tmp_path / f"{name}.yaml")
    assert parse_set(["a.b=1", "a.c=x"]) == {"a": {"b": 1, "c": "x"}}
