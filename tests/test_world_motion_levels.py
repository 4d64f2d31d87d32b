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
