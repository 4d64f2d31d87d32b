"""Session plans: what persists between turns, and what the player's instruction says."""
from animegamer.world.instructions import parse_structured
from animegamer.world.sessions import plan_session, split_of
from animegamer.world.cast import load_cast
from animegamer.world.motion_catalog import load_motions


def test_place_props_and_looks_persist_until_the_place_changes():
    changes = 0
    for index in range(40):
        plan = plan_session(seed=0, index=index, n_turns=6)
        looks = {}
        for prev, turn in zip(plan.turns[:-1], plan.turns[1:]):
            if turn.place_changed:
                changes += 1
                assert turn.action.place != prev.action.place
            else:
                assert turn.action.place == prev.action.place
                assert turn.props == prev.props  # props stay put while the place stays
            assert turn.states_before == prev.states_after
        for turn in plan.turns:
            for actor in turn.actors:
                assert looks.setdefault(actor.name, actor.look) == actor.look  # outfit kept all session
    assert changes > 10  # places do change in some sessions


def test_actions_are_possible_where_they_happen():
    motions, _ = load_motions()
    for index in range(40):
        for turn in plan_session(seed=1, index=index, n_turns=5).turns:
            m = motions[turn.action.verb]
            assert m.allowed_in(turn.action.place)
            assert len(turn.action.characters) == (2 if m.pair else 1)
            if turn.action.place == "sky":
                assert turn.action.verb == "fly_broom"


def test_structured_instructions_state_the_truth():
    names = list(load_cast())
    seen = 0
    for index in range(60):
        for turn in plan_session(seed=2, index=index, n_turns=5).turns:
            if turn.template_id == "structured":
                assert parse_structured(turn.instruction, names) == turn.action
                seen += 1
    assert seen > 20


def test_held_out_templates_only_in_val_and_test():
    for index in range(60):
        plan = plan_session(seed=3, index=index, n_turns=5)
        assert plan.split == split_of(index)
        for turn in plan.turns:
            if turn.template_id != "structured":
                from animegamer.world.instructions import template_ids
                wanted = "train" if plan.split == "train" else "heldout"
                assert turn.template_id in template_ids(wanted)


def test_plans_are_deterministic():
    a = plan_session(seed=4, index=7, n_turns=5)
    b = plan_session(seed=4, index=7, n_turns=5)
    assert [t.instruction for t in a.turns] == [t.instruction for t in b.turns]
    assert [t.action for t in a.turns] == [t.action for t in b.turns]


def test_groups_do_a_verb_of_one_together_and_leave_the_world_as_it_was():
    """``groups``: some turns of a verb of one are done by two side by side (the evaluator's data); a world
    without them plans exactly as before, turn for turn."""
    motions, _ = load_motions()
    together = 0
    for index in range(30):
        plain = plan_session(seed=3, index=index, n_turns=5)
        assert plain.turns == plan_session(seed=3, index=index, n_turns=5, groups=0.0).turns
        for turn in plan_session(seed=3, index=index, n_turns=5, groups=0.5).turns:
            names = turn.action.characters
            if len(names) == 2 and not motions[turn.action.verb].pair:
                together += 1
                assert names[0] != names[1]
                assert all(n in turn.instruction for n in names)  # the player's words name both
    assert together > 10


def test_a_group_is_rendered_and_its_tracks_replanned():
    """A world rendered with groups: the rows say so, and each of two who lie down together has its own track
    (re-planned from the row as the animator's data are), neither of them a pair's partner."""
    from animegamer.world.shot import render_session
    from animegamer.world.sprite_tracks import row_tracks

    motions, _ = load_motions()
    for index in range(30):
        plan = plan_session(seed=3, index=index, n_turns=3, groups=1.0)
        if any(len(t.action.characters) == 2 and not motions[t.action.verb].pair for t in plan.turns):
            break
    shots = list(render_session(3, index, 3, height=48, width=72, n_frames=5, groups=1.0))
    row = next(s.row for s in shots if len(s.row["characters"]) == 2 and not motions[s.row["motion"]].pair)
    assert row["groups"] == 1.0
    tracks = row_tracks(row, 3, n_frames=5)
    assert [t.name for t in tracks] == row["characters"] and [t.role for t in tracks] == [0, 0]
