"""Long games (the short version of `animegamer bench-long`): nothing a session holds grows with its
length, the engine's context stays within its window, a long game reopens with its whole context."""
from __future__ import annotations

import pytest
import torch
from tiny_game import tiny_models

from animegamer.engine.model import save_engine
from animegamer.evaluation.bench.game import SCRIPT
from animegamer.evaluation.bench.long_session import bench_long_session, decoded_turns, drift, format_long, summarise
from animegamer.game.session import Game

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    engine, decoder = tiny_models()
    root = tmp_path_factory.mktemp("model")
    engine.cfg.window = 2
    save_engine(engine, root / "engine")
    decoder.save_pretrained(root / "shot_decoder")
    return root


def test_nothing_grows_with_the_game(model_dir, tmp_path):
    game = Game.load(model_dir, store=tmp_path / "saves")
    session = game.new_session(["Qiqi"], seed=5)
    context = []
    for i in range(14):
        turn = session.step(SCRIPT[i % len(SCRIPT)])
        assert decoded_turns(session) == 1  # only the newest shot is held decoded
        assert turn.frames.shape[0] == 5 and session.turns[0].frames.shape == turn.frames.shape  # older: read back
        context.append(game.engine._cache_len)
    # once the window is full the engine's context stops growing (a linear growth would be 5x by turn 14;
    # instructions differ in length, so the bound has slack)
    assert max(context[8:]) <= 1.5 * max(context[2:6])
    reopened = game.open_session(session.id)
    assert len(reopened.turns) == 14 and decoded_turns(reopened) == 0
    assert [t.states for t in reopened.turns] == [t.states for t in session.turns]
    assert reopened.step(SCRIPT[0]).index == 14


def test_bench_long_reports_the_targets(model_dir):
    result = bench_long_session(model_dir, turns=9, edge=4, progress=False)
    s = result["summary"]
    assert len(result["per_turn"]) == 9 and s["max_decoded_turns"] == 1
    assert s["first_median_s"] > 0 and s["last_median_s"] > 0 and s["reopened_turn_index"] == 9
    assert s["time_ratio"] == pytest.approx(s["last_median_s"] / s["first_median_s"])
    assert "reopen" in format_long(result) and result["store_mb"] > 0
    with pytest.raises(ValueError, match="at least 2 x --edge"):
        bench_long_session(model_dir, turns=8, edge=4, progress=False)


def test_summary_flags():
    rows = [{"turn": i, "turn_s": 1.0 if i < 11 else 1.2, "rss_mb": 1000.0 + i, "peak_rss_mb": 1000.0 + 5 * i,
             "decoded_turns": 1} for i in range(31)]
    s = summarise(rows, 10)
    assert s["time_ratio"] == pytest.approx(1.2) and not s["time_flat"]
    assert s["peak_rss_growth_mb"] == pytest.approx(100.0) and not s["memory_flat"]
    rows = [dict(r, turn_s=1.0, peak_rss_mb=1000.0) for r in rows]
    s = summarise(rows, 10)
    assert s["time_flat"] and s["memory_flat"] and s["rss_growth_mb"] == pytest.approx(20.0)


def test_drift_in_one_place(model_dir):
    """--drift: the one-place script, every shot graded; the last turns must keep 0.95 of the first's."""
    result = bench_long_session(model_dir, turns=9, edge=4, progress=False, grade_drift=True)
    rows, d = result["per_turn"], result["summary"]["drift"]
    assert all({"qiqi", "sharpness", "place", "first_frame"} <= set(r) for r in rows)
    assert d["qiqi_first"] == pytest.approx(sum(r["qiqi"] for r in rows[:4]) / 4)
    assert d["sharpness_last"] == pytest.approx(sum(r["sharpness"] for r in rows[-4:]) / 4)
    assert "drift, one place" in format_long(result)
    steady = [{"qiqi": 1.0, "sharpness": 100.0}] * 10 + [{"qiqi": 1.0, "sharpness": 96.0}] * 10
    assert drift(steady, 10)["kept"] and drift(steady, 10)["sharpness_ratio"] == pytest.approx(0.96)
    blurring = steady[:10] + [{"qiqi": 0.9, "sharpness": 60.0}] * 10
    assert not drift(blurring, 10)["kept"]
