"""Motion measured from pixels follows the action's intensity (adverbs, stamina)."""
import numpy as np

from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.shot import render_action

CAST = ("Qiqi", "Ren", "Hana", "Kaito")


def _mean_flow(verb: str, adverb: str, stamina: int = 50, place: str = "meadow") -> float:
    return float(np.mean([flow_magnitude(render_action((c,), verb, adverb, place, "day", seed=i, stamina=stamina))
                          for i, c in enumerate(CAST)]))


def test_motion_grows_with_adverb_intensity():
    for verb in ("run", "dance", "wave"):
        slow, plain, fast = (_mean_flow(verb, a) for a in ("slowly", "", "wildly"))
        assert slow < plain < fast, (verb, slow, plain, fast)


def test_motion_levels_order_on_a_batch():
    q = MotionQuantizer.load()
    slow = [q.level(flow_magnitude(render_action((c,), "run", "slowly", "town", "day", seed=i))) for i, c in enumerate(CAST)]
    fast = [q.level(flow_magnitude(render_action((c,), "run", "quickly", "town", "day", seed=i))) for i, c in enumerate(CAST)]
    assert np.mean(fast) > np.mean(slow)


def test_low_stamina_is_visibly_sluggish():
    assert _mean_flow("run", "", stamina=5) < 0.85 * _mean_flow("run", "", stamina=60)


def test_restful_actions_move_less_than_energetic_ones():
    assert _mean_flow("sleep", "") < _mean_flow("dance", "")


def test_level_ceiling_lookup_table():
    import pytest

    from animegamer.world.level_ceiling import level_ceiling

    def row(verb, adverb, stamina, level, chars=1):
        return {"motion": verb, "adverb": adverb, "states_before": {"stamina": stamina},
                "characters": ["A", "B"][:chars], "motion_level": level}

    train = [row("run", "quickly", 50, 5), row("run", "quickly", 80, 5), row("run", "quickly", 10, 3),
             row("sit", "calmly", 50, 1), row("sit", "calmly", 50, 1), row("sit", "calmly", 70, 1),
             row("sit", "calmly", 50, 2)]
    # stamina >= 30 is one key, tired stamina has its own; an unseen key falls back to verb + adverb
    held = [row("run", "quickly", 40, 5), row("run", "quickly", 12, 3), row("sit", "calmly", 60, 1),
            row("sit", "calmly", 5, 1), row("sit", "calmly", 60, 2)]
    r = level_ceiling(train, held)
    assert r["accuracy"] == pytest.approx(4 / 5) and r["key_seen_in_train"] == pytest.approx(4 / 5)
    assert r["majority_level_accuracy"] == pytest.approx(2 / 5)  # level 1 for everything
    with pytest.raises(ValueError):
        level_ceiling([], held)
