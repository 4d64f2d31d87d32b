"""Motion measured from pixels follows the action's intensity (adverbs, stamina)."""
import numpy as np

from animegamer.world.flow import MotionQuantizer, flow_magnitude
from animegamer.world.instructions import Action
from animegamer.world.shot import render_action

CAST = ("Qiqi", "Ren", "Hana", "Kaito")


def _mean_flow(verb: str, adverb: str, stamina: int = 50, place: str = "meadow") -> float:
    return float(np.mean([flow_magnitude(render_action(Action((c,), verb, adverb, place, "day"), seed=i, stamina=stamina))
                          for i, c in enumerate(CAST)]))


def test_motion_grows_with_adverb_intensity():
    for verb in ("run", "dance", "wave"):
        slow, plain, fast = (_mean_flow(verb, a) for a in ("slowly", "", "wildly"))
        assert slow < plain < fast, (verb, slow, plain, fast)


def test_motion_levels_order_on_a_batch():
    q = MotionQuantizer.load()
    slow = [q.level(flow_magnitude(render_action(Action((c,), "run", "slowly", "town", "day"), seed=i))) for i, c in enumerate(CAST)]
    fast = [q.level(flow_magnitude(render_action(Action((c,), "run", "quickly", "town", "day"), seed=i))) for i, c in enumerate(CAST)]
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


def test_additive_level_model_uses_who_acts_and_where():
    """A level that depends on the character and the place beyond the verb: the additive model
    with the scene features predicts it exactly; without them it cannot, and the table neither."""
    import numpy as np
    import pytest

    from animegamer.world.level_ceiling import AdditiveLevelModel, additive_level_ceiling

    rng = np.random.default_rng(0)
    thresholds = [0.1, 0.2, 0.4, 0.8]

    def row(verb, char, place):
        flow = {"walk": 0.15, "run": 0.3}[verb] * {"Big": 2.0, "Small": 1.0}[char] * {"city": 1.3, "field": 0.7}[place]
        return {"motion": verb, "adverb": "", "states_before": {"stamina": 50}, "characters": [char], "place": place,
                "time": "day", "flow_magnitude": flow, "motion_level": 1 + int(np.searchsorted(thresholds, flow))}

    combos = [(v, c, p) for v in ("walk", "run") for c in ("Big", "Small") for p in ("city", "field")]
    train = [row(*combos[i]) for i in rng.integers(0, len(combos), 400)]
    held = [row(*c) for c in combos]
    truth = np.array([r["motion_level"] for r in held])
    assert (AdditiveLevelModel(train, scene=True).predict(held) == truth).all()
    assert (AdditiveLevelModel(train, scene=False).predict(held) == truth).mean() < 1
    r = additive_level_ceiling(train, held)
    assert r["additive_with_characters_and_place"]["accuracy"] == pytest.approx(1.0)
    assert r["additive_verb_adverb_stamina_cast"]["accuracy"] < 1.0
    with pytest.raises(ValueError):
        additive_level_ceiling([], held)
