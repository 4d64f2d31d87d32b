import pytest

from animegamer.world import rules
from animegamer.world.motion_catalog import load_motions


@pytest.fixture(scope="module")
def vocab():
    return load_motions()


def test_vocabulary_covers_the_issue(vocab):
    motions, adverbs = vocab
    required = {"walk", "run", "fly_broom", "jump", "sit", "lie_down", "sleep", "turn_head", "wave", "talk",
                "laugh", "eat", "dance", "read", "swim", "fall"}
    assert required <= set(motions)
    assert sum(m.pair for m in motions.values()) >= 3
    assert {"slowly", "gently", "quickly", "happily"} <= set(adverbs)


def test_deltas_in_paper_ranges_for_every_action(vocab):
    motions, adverbs = vocab
    for m in motions.values():
        for a in adverbs.values():
            d = rules.action_deltas(m, a).as_dict()
            for name, values in rules.DELTA_VALUES.items():
                assert d[name] in values, (m.key, a.word, d)


def test_specific_rules(vocab):
    motions, adverbs = vocab
    assert rules.action_deltas(motions["sleep"], adverbs[""]).stamina == 1
    assert rules.action_deltas(motions["run"], adverbs["quickly"]).stamina == -1
    assert rules.action_deltas(motions["run"], adverbs["slowly"]).stamina == 0  # a jog is not tiring
    assert rules.action_deltas(motions["walk"], adverbs[""]).stamina == 0
    assert rules.action_deltas(motions["hug"], adverbs[""]).social == 1
    assert rules.action_deltas(motions["run"], adverbs[""]).social == 0
    assert rules.action_deltas(motions["dance"], adverbs[""]).entertainment == 1
    assert rules.action_deltas(motions["walk"], adverbs["happily"]).entertainment == 1
    assert rules.action_deltas(motions["walk"], adverbs[""]).entertainment == 0


def test_absolute_states_start_at_50_step_5_and_clamp():
    s = rules.initial_states()
    assert s == {"stamina": 50, "social": 50, "entertainment": 50}
    s = rules.apply_deltas(s, {"stamina": -1, "social": 1, "entertainment": 0})
    assert s == {"stamina": 45, "social": 55, "entertainment": 50}
    top = {"stamina": 100, "social": 100, "entertainment": 0}
    assert rules.apply_deltas(top, {"stamina": 1, "social": 1, "entertainment": 0}) == top
    assert rules.apply_deltas({"stamina": 0, "social": 0, "entertainment": 0},
                              {"stamina": -1, "social": 0, "entertainment": 0})["stamina"] == 0


def test_bad_delta_is_refused():
    with pytest.raises(ValueError, match="social"):
        rules.apply_deltas(rules.initial_states(), {"stamina": 0, "social": -1, "entertainment": 0})


def test_low_stamina_is_sluggish():
    assert rules.sluggish_factor(80) == 1.0
    assert rules.sluggish_factor(30) == 1.0
    assert rules.sluggish_factor(15) < 1.0
    assert rules.sluggish_factor(0) == pytest.approx(rules.SLUGGISH_MIN_FACTOR)
    assert rules.sluggish_factor(5) < rules.sluggish_factor(20)
