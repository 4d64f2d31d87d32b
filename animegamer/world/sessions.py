"""Plans multi-turn game sessions: who does what, where, and how the states change.

A session is what a player would do: a protagonist (sometimes joined by a friend) in a place
that persists until an instruction moves them, actions chosen plausibly (tired characters
rest, nights end in sleep, swimming happens at the beach), and the instruction text the
player typed for each turn. Per-session looks (outfit variants) and props are sampled once
and kept: they appear in no instruction, so only the visual history can keep them.

This module only plans; animegamer.world.shot renders the plan into pixels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from animegamer.world import rules
from animegamer.world.cast import Look, load_cast, random_look
from animegamer.world.instructions import Action, render_instruction
from animegamer.world.motion_catalog import load_motions
from animegamer.world.place_art import load_places, sample_props
from animegamer.world.place_spec import PropInstance

SPLITS = ("train", "val", "test")
TIME_WEIGHTS = {"day": 0.5, "sunset": 0.2, "night": 0.3}
ADVERB_PLAIN_P = 0.25
PLACE_CHANGE_P = 0.3
TIME_CHANGE_P = 0.2
PAIR_P = 0.25
GROUP_STREAM = 1  # the random stream groups are decided on, apart from the session's own
RANDOM_START_P = 0.5  # half the sessions start "mid-life" with random states, so low stamina occurs


def split_of(session_index: int) -> str:
    """Fixed split by index: 18 of 20 sessions train, one val, one test."""
    r = session_index % 20
    return "test" if r == 19 else "val" if r == 18 else "train"


@dataclass
class ActorState:
    name: str
    look: Look
    x: float | None  # world position in the place, 0..1; None = where the last shot ended
    facing: int  # +1 right, -1 left; travelling actions re-aim at render time (see shot.py)


@dataclass
class TurnPlan:
    turn: int
    action: Action
    instruction: str
    template_id: str
    place_changed: bool
    time_changed: bool
    props: list[PropInstance]
    actors: list[ActorState]  # state at the start of the shot; [0] is the protagonist
    camera: str  # static | pan | follow
    states_before: dict[str, int]
    deltas: dict[str, int]
    states_after: dict[str, int]
    speed: float  # adverb speed x stamina sluggishness: what the renderer plays
    amplitude: float
    flip: bool  # a travelling action heads away from the open side (players do that too)


@dataclass
class SessionPlan:
    index: int
    seed: int
    split: str
    groups: float = 0.0  # plan_session's share of verbs of one done together
    looks: dict[str, Look] = field(default_factory=dict)
    turns: list[TurnPlan] = field(default_factory=list)


def _weighted(rng: np.random.Generator, options: dict[str, float]) -> str:
    keys = list(options)
    w = np.asarray([options[k] for k in keys], dtype=np.float64)
    return keys[int(rng.choice(len(keys), p=w / w.sum()))]


def _verb_weights(place: str, time: str, stamina: int, last_verb: str | None, allow_pair: bool) -> dict[str, float]:
    motions, _ = load_motions()
    if place == "sky":  # nobody stands in the sky
        return {"fly_broom": 1.0}
    weights = {}
    for key, m in motions.items():
        if not m.allowed_in(place) or (m.pair and not allow_pair):
            continue
        w = 1.0
        if m.pair:
            w = PAIR_P * 20 / 4  # pairs are 4 of ~20 verbs: about PAIR_P of turns overall
        if stamina < 35 and m.restful:
            w *= 3.0
        if stamina < 35 and m.effort >= 0.6:
            w *= 0.4
        if time == "night" and key in ("sleep", "lie_down", "read"):
            w *= 2.5
        if place == "bedroom" and key in ("sleep", "read", "sit", "lie_down"):
            w *= 2.0
        if key == "swim":
            w *= 3.0  # the one thing the beach is for
        if key == last_verb:
            w *= 0.2  # players rarely repeat themselves
        weights[key] = w
    return weights


def _adverb(rng: np.random.Generator) -> str:
    _, adverbs = load_motions()
    if rng.random() < ADVERB_PLAIN_P:
        return ""
    words = [w for w in adverbs if w]
    return str(words[int(rng.integers(len(words)))])


def _camera(rng: np.random.Generator, travel: float) -> str:
    """Travelling actions get a follow camera or a pan (a static camera would lose the runner
    within a few frames); the others a static camera. A pan over a still character would make
    it move relative to the background, i.e. add motion that no instruction asked for and the
    engine could not predict, so still actions are not panned."""
    if travel > 0:
        return _weighted(rng, {"follow": 0.6, "pan": 0.4})
    return "static"


def plan_session(seed: int, index: int, n_turns: int, split: str | None = None,
                 cast_file: str | None = None, groups: float = 0.0) -> SessionPlan:
    """Plan session `index` of a dataset made with `seed` (deterministic, independent of order);
    ``cast_file``: its characters (a cast file, e.g. of drawn characters; default: the world's cast).
    ``groups``: the share of turns of a verb of one that two characters do together, side by side
    ("Tomo and Yuki lie down"; 0: the world's films, where a verb of one has one actor). The evaluator learns
    from them to name each of several who do the same (a frame classifier that never saw two sleepers side by
    side named one of them: docs/layers.md); decided on a stream of their own, so a world without them plans
    exactly as before."""
    if n_turns < 1:
        raise ValueError(f"a session needs at least 1 turn, got {n_turns}")
    if not 0.0 <= groups <= 1.0:
        raise ValueError(f"groups is a share of turns in 0..1, got {groups}")
    rng = np.random.default_rng([seed, index])
    group_rng = np.random.default_rng([seed, index, GROUP_STREAM])
    cast = load_cast(cast_file)
    places = load_places()
    motions, adverbs = load_motions()
    split = split or split_of(index)
    template_split = "train" if split == "train" else "heldout"
    names = sorted(cast)
    protagonist = names[int(rng.integers(len(names)))]
    plan = SessionPlan(index=index, seed=seed, split=split, groups=groups)

    def look_of(name: str) -> Look:
        if name not in plan.looks:
            plan.looks[name] = random_look(cast[name], rng)
        return plan.looks[name]

    states = rules.initial_states()
    if rng.random() < RANDOM_START_P:
        states = {k: int(rng.integers(2, 19)) * 5 for k in rules.STATE_NAMES}
    place = _weighted(rng, {k: 1.0 for k in places})
    time = _weighted(rng, TIME_WEIGHTS)
    props = sample_props(places[place], rng)
    x = float(rng.uniform(0.3, 0.7))
    facing = 1 if rng.random() < 0.5 else -1
    partner: str | None = None
    last_verb = None
    for turn in range(n_turns):
        place_changed = turn == 0
        time_changed = turn == 0
        x: float | None = x if turn == 0 else None
        if turn > 0 and rng.random() < PLACE_CHANGE_P:
            place = _weighted(rng, {k: 1.0 for k in places if k != place})
            props = sample_props(places[place], rng)  # a new visit: new props, kept while here
            x = float(rng.uniform(0.3, 0.7))
            place_changed = True
        if turn > 0 and rng.random() < TIME_CHANGE_P:
            time = _weighted(rng, {k: w for k, w in TIME_WEIGHTS.items() if k != time})
            time_changed = True
        verb = _weighted(rng, _verb_weights(place, time, states["stamina"], last_verb, allow_pair=True))
        motion = motions[verb]
        adverb = _adverb(rng)
        actors = [ActorState(protagonist, look_of(protagonist), x, facing)]
        if motion.pair:
            if partner is None or rng.random() < 0.3:
                partner = names[int(rng.integers(len(names)))]
                while partner == protagonist:
                    partner = names[int(rng.integers(len(names)))]
            actors.append(ActorState(partner, look_of(partner), x, -facing))
        elif groups > 0 and group_rng.random() < groups:
            # two, as the instructions' paraphrases name at most two
            other = str(group_rng.choice([n for n in names if n != protagonist]))
            if other not in plan.looks:  # drawn on the groups' stream: the session's own stays as it was
                plan.looks[other] = random_look(cast[other], group_rng)
            actors.append(ActorState(other, plan.looks[other], x, facing))
        flip = bool(rng.random() < 0.2)
        characters = tuple(a.name for a in actors)
        action = Action(characters=characters, verb=verb, adverb=adverb, place=place, time=time)
        text, template_id = render_instruction(
            action, rng, split=template_split, place_changed=place_changed, time_changed=time_changed,
            pronoun=tuple(cast[c].pronoun for c in characters),
        )
        deltas = rules.action_deltas(motion, adverbs[adverb]).as_dict()
        after = rules.apply_deltas(states, deltas)
        speed, amplitude = rules.played_manner(adverbs[adverb], states["stamina"])
        plan.turns.append(TurnPlan(
            turn=turn, action=action, instruction=text, template_id=template_id,
            place_changed=place_changed, time_changed=time_changed, props=list(props), actors=actors,
            camera=_camera(rng, motion.travel), states_before=dict(states), deltas=deltas, states_after=after,
            speed=speed, amplitude=amplitude, flip=flip,
        ))
        states = after
        last_verb = verb
    return plan
