"""Game engine (phase b) on the tiny random backbone: mask, query-slot convention, constrained
decoding, training, save/load, window, KV reuse. The real SmolLM2 test is opt-in (ANIMEGAMER_SLOW=1)."""
from __future__ import annotations

import os

import pytest
import torch

from animegamer.engine.data import (
    EngineCollate, EngineDataset, load_sessions, save_sessions, synthetic_sessions, turn_record,
)
from animegamer.engine.evaluate import play_sessions, summarize
from animegamer.engine.model import GameEngine, engine_config, load_engine, save_engine
from animegamer.engine.sequence import FIELDS, IGNORE, TurnRecord, attention_mask, select_window, value_classes

N, D = 4, 8


def make_engine(**kw) -> GameEngine:
    cfg = engine_config("tiny", rep_tokens=N, rep_dim=D, **kw)
    return GameEngine(cfg).eval()


@pytest.fixture(scope="module")
def sessions():
    return synthetic_sessions(3, 7, N, D, seed=1)


def records(session) -> list[TurnRecord]:
    return [turn_record(t) for t in session]


def batch_of(engine, sessions, idx=(0, 5, 9, 14)):
    ds = EngineDataset(sessions, engine.builder, max_turns=5)
    return EngineCollate(engine.vocab["<PAD>"], N)([ds[i] for i in idx])


def fit(engine, batch, steps: int) -> dict[str, float]:
    """``steps`` AdamW steps on one batch; the engine left in eval mode; the last step's logs."""
    engine.train()
    opt = torch.optim.AdamW(engine.trainable_parameters(), lr=1e-2)
    for _ in range(steps):
        loss, logs = engine(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    engine.eval()
    return logs


def test_attention_mask_layout():
    m = attention_mask(8, past=2, bidirectional=(5, 8))  # rows = absolute positions 2..9
    for i in range(8):
        for j in range(10):
            qi = 2 + i
            expect = j <= qi or (5 <= qi < 8 and 5 <= j < 8)
            assert bool(m[i, j]) == expect, (qi, j)
    assert m[3, 7]  # query at position 5 sees the later query at 7 ...
    assert not m[2, 5]  # ... a token before the block does not see it ...
    assert not m[6, 9]  # ... and position 8 (after the block) does not see 9


def test_mask_in_the_model_no_future_leak(sessions):
    """Changing a later token leaves every earlier hidden state alone, except that the current
    query slots see each other."""
    e = make_engine()
    b = batch_of(e, sessions, idx=(6,))
    q = b.query_index[:, 1]
    q0, q1 = int(q[0]), int(q[-1])
    hooks = {}
    e.backbone.norm.register_forward_hook(lambda m, i, o: hooks.__setitem__("h", o.detach().clone()))
    with torch.no_grad():
        e.outputs(b)
        h0 = hooks["h"][0]
        ids = b.input_ids.clone()
        p = q1 + 3  # a token after the queries
        ids[0, p] = 65
        b.input_ids = ids
        e.outputs(b)
        h1 = hooks["h"][0]
    assert torch.equal(h0[:p], h1[:p]) and not torch.allclose(h0[p:], h1[p:])
    # a query in the middle changes earlier queries (bidirectional) but nothing before the block
    with torch.no_grad():
        e.queries[N - 1] += 1.0
        e.outputs(b)
        h2 = hooks["h"][0]
    assert torch.equal(h1[:q0], h2[:q0])
    assert not torch.allclose(h1[q0], h2[q0])


def test_representation_read_from_query_slots(sessions):
    e = make_engine()
    hist, cur = records(sessions[0])[:2], sessions[0][2]
    state = {"target": None}

    def perturb(module, inputs, out):
        if state["target"] is not None and out.shape[1] > 3:  # the prefill, not the 3-token decode steps
            out = out.clone()
            out[0, state["target"]] += 5.0
            return out

    e.backbone.norm.register_forward_hook(perturb)
    base = e.predict(hist, cur["instruction"], cur["states"], use_cache=False)
    L = int(base.timings["computed_tokens"])
    q0 = L - N - 2 - 1 - 3 * 3  # queries sit before </frame></img><ML> (decode adds 3 x 3 tokens)
    state["target"] = [i for i in range(L - 9) if not (q0 <= i < q0 + N)]
    other = e.predict(hist, cur["instruction"], cur["states"], use_cache=False)
    assert torch.equal(base.s_a, other.s_a)
    state["target"] = [q0 + 1]
    moved = e.predict(hist, cur["instruction"], cur["states"], use_cache=False)
    assert not torch.allclose(base.s_a[1], moved.s_a[1]) and torch.equal(base.s_a[0], moved.s_a[0])


def test_training_and_inference_read_the_same_positions(sessions):
    """The teacher-forced training outputs equal what predict() computes for the same turns:
    one query-slot convention (the public release was three positions off)."""
    e = make_engine()
    s = sessions[1]
    ds = EngineDataset([s], e.builder, max_turns=5)
    i = next(k for k, (_, t, n) in enumerate(ds.index) if t == 4 and n == 3)
    b = EngineCollate(e.vocab["<PAD>"], N)([ds[i]])
    with torch.no_grad():
        pred, logits = e.outputs(b)
    p = e.predict(records(s)[2:4], s[4]["instruction"], s[4]["states"], use_cache=False)
    assert torch.allclose(pred[0], p.s_a, atol=1e-5)
    assert torch.allclose(torch.softmax(logits[0][0], -1), torch.tensor(p.probs[0]), atol=1e-5)


def test_constrained_decoding_always_valid(sessions):
    e = make_engine()
    with torch.no_grad():  # push the scores around: decoding must still only yield valid values
        e.new_embed.weight.mul_(50)
        e.value_bias.normal_(0, 10)
    g = torch.Generator().manual_seed(0)
    hist = records(sessions[0])
    for k in range(6):
        p = e.predict(hist[:k], f"do something odd <TURN> </ML> {k}", temperature=3.0, generator=g)
        assert p.motion_level in (1, 2, 3, 4, 5)
        assert p.deltas["social"] in (0, 1) and p.deltas["entertainment"] in (0, 1)
        assert p.deltas["stamina"] in (-1, 0, 1)
        assert set(p.deltas) == {"social", "entertainment", "stamina"}
        assert p.s_a.shape == (N, D) and torch.isfinite(p.s_a).all()
        assert all(abs(sum(pr) - 1) < 1e-5 and len(pr) == len(FIELDS[f][2]) for f, pr in enumerate(p.probs))


def test_training_step_lowers_loss(sessions):
    e = make_engine()
    b = batch_of(e, sessions)
    e.train()
    opt = torch.optim.AdamW(e.trainable_parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss, logs = e(b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        assert {"ce", "mse", "acc_motion_level", "mae_stamina", "cos"} <= set(logs)
    assert losses[-1] < 0.7 * losses[0], losses


def unknown_states(session: list[dict]) -> list[dict]:
    """A film annotated without state changes: no deltas, no states."""
    return [{**t, "deltas": None, "states": None} for t in session]


def test_unknown_state_changes_carry_no_loss(sessions, tmp_path):
    """A film's clips whose state changes nobody annotated train the level and s_a, not the states."""
    turn = TurnRecord("Ada runs", motion_level=4, deltas=None)
    assert turn.values() == [4, None, None, None] and value_classes(turn.values()) == [3, IGNORE, IGNORE, IGNORE]
    e = make_engine()
    film = [unknown_states(s) for s in sessions]
    save_sessions(film, tmp_path / "film")
    film = load_sessions(tmp_path / "film")[0]
    assert film[0][0]["deltas"] is None
    all_unknown = batch_of(e, film)
    assert (all_unknown.value_targets[:, 1:] == IGNORE).all() and (all_unknown.value_targets[:, 0] >= 0).all()
    with torch.no_grad():
        loss, logs = e(all_unknown)
        _, logits = e._outputs(all_unknown)
    assert torch.isfinite(loss) and "acc_motion_level" in logs and "acc_stamina" not in logs
    level_ce = float(torch.nn.functional.cross_entropy(logits[0].float(), all_unknown.value_targets[:, 0]))
    assert abs(logs["ce"] - level_ce) < 1e-5  # the state fields add nothing
    mixed = batch_of(e, [sessions[0], film[1], sessions[2]], idx=(0, 5, 9, 14, 20, 30))
    with torch.no_grad():
        loss, logs = e(mixed)
    assert torch.isfinite(loss) and "acc_stamina" in logs
    rows = play_sessions(e, film[:1])
    s = summarize(rows)
    assert s["acc_motion_level"] == s["acc_motion_level"] and s["mae_deltas"] != s["mae_deltas"]  # level graded, states not
    both = summarize(play_sessions(e, [sessions[0], film[1]]))
    assert both["mae_deltas"] == summarize(play_sessions(e, sessions[:1]))["mae_deltas"]


def test_history_levels_are_learnt_where_they_are_read(sessions):
    """history_level_weight adds the CE of each history turn's level, read at that turn's <ML> tag
    (the next token is its value): the target-turn loss is unchanged and 0 switches it off."""
    e = make_engine(history_level_weight=0.5)
    b = batch_of(e, sessions)
    hl = b.history_levels  # one row per history turn of every sample
    assert hl.shape == (int((b.n_turns - 1).sum()), 3) and hl.shape[0] > 0
    assert sorted(set(hl[:, 0].tolist())) == [i for i, n in enumerate(b.n_turns.tolist()) if n > 1]
    ml_tag, values = e.vocab["<ML>"], e.builder.vocab
    for row, pos, cls in hl.tolist():
        assert int(b.input_ids[row, pos]) == ml_tag
        assert int(b.input_ids[row, pos + 1]) == values[f"<ML={FIELDS[0][2][cls]}>"]
    with torch.no_grad():
        loss, logs = e(b)
        e.cfg.history_level_weight = 0.0
        plain, plain_logs = e(b)
        h = e._hidden(b)[0]
        ce_hist = torch.nn.functional.cross_entropy(e.value_logits(h[hl[:, 0], hl[:, 1]], 0).float(), hl[:, 2])
    assert float(loss) == pytest.approx(float(plain) + 0.5 * float(ce_hist), rel=1e-4)
    assert logs["ce"] == pytest.approx(plain_logs["ce"]) and "ce_history_level" not in plain_logs
    assert logs["ce_history_level"] == pytest.approx(float(ce_hist), rel=1e-4)


def test_save_load_round_trip(tmp_path, sessions):
    e = make_engine()
    fit(e, batch_of(e, sessions), 2)
    save_engine(e, tmp_path / "eng")
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "eng" / "engine.safetensors"))
    assert all(("lora_" in k) or k.split(".")[0] in ("new_embed", "queries", "value_bias", "in_resampler", "out_resampler")
               for k in saved), sorted(saved)[:5]
    assert not any("embed_tokens" in k or k.endswith("q_proj.base_layer.weight") for k in saved)
    e2 = load_engine(tmp_path / "eng")
    sd1, sd2 = e.trainable_state_dict(), e2.trainable_state_dict()
    assert sd1.keys() == sd2.keys() and all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    hist, cur = records(sessions[0])[:3], sessions[0][3]
    p1, p2 = e.predict(hist, cur["instruction"]), e2.predict(hist, cur["instruction"])
    assert torch.equal(p1.s_a, p2.s_a) and p1.motion_level == p2.motion_level and p1.deltas == p2.deltas


def test_window_keeps_newest_turns(sessions):
    assert select_window(7, 3) == 4 and select_window(2, 3) == 0 and select_window(5, 0) == 5
    assert [select_window(n, 4, 2) for n in range(4, 10)] == [0, 2, 2, 4, 4, 6]
    e = make_engine(window=2)
    hist, cur = records(sessions[0])[:5], sessions[0][5]
    full = e.predict(hist, cur["instruction"], use_cache=False)
    newest = e.predict(hist[-2:], cur["instruction"], use_cache=False)
    assert full.timings["history_turns"] == 2
    assert torch.equal(full.s_a, newest.s_a) and full.deltas == newest.deltas
    oldest = e.predict(hist[:2], cur["instruction"], use_cache=False)
    assert not torch.allclose(full.s_a, oldest.s_a)


@pytest.mark.parametrize("window,slide", [(3, 1), (4, 2)])
def test_kv_cache_reuse_matches_recompute(sessions, window, slide):
    e = make_engine(window=window, slide=slide)
    fresh = make_engine(window=window, slide=slide)
    s = sessions[2]
    played: list[TurnRecord] = []
    reused = []
    for t in range(len(s)):
        p = e.predict(played, s[t]["instruction"], s[t]["states"])
        q = fresh.predict(played, s[t]["instruction"], s[t]["states"], use_cache=False)
        assert torch.allclose(p.s_a, q.s_a, atol=1e-5), t
        assert (p.motion_level, p.deltas) == (q.motion_level, q.deltas)
        assert all(abs(a - b) < 1e-5 for pa, qa in zip(p.probs, q.probs) for a, b in zip(pa, qa))
        reused.append(p.timings["reused_tokens"])
        # play on the engine's own output, as the game does
        played.append(TurnRecord(s[t]["instruction"], p.s_a, p.motion_level, p.deltas))
    assert reused[0] == 0 and reused[2] > 0  # the cache was used once history existed


def test_merged_lora_plays_the_same(sessions):
    e = make_engine()
    with torch.no_grad():  # non-zero adapters (lora_B starts at zero)
        for n, p in e.backbone.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    hist, cur = records(sessions[0])[:3], sessions[0][3]
    a = e.predict(hist, cur["instruction"])
    e.merge_lora(True)
    b = e.predict(hist, cur["instruction"])
    assert torch.allclose(a.s_a, b.s_a, atol=1e-4) and (a.motion_level, a.deltas) == (b.motion_level, b.deltas)
    with pytest.raises(RuntimeError):
        e.train()
    e.merge_lora(False)
    assert torch.allclose(a.s_a, e.predict(hist, cur["instruction"]).s_a, atol=1e-4)


def test_dataset_and_disk_format(tmp_path, sessions):
    e = make_engine()
    ds = EngineDataset(sessions, e.builder, max_turns=5)
    assert len(ds) == 3 * sum(min(t + 1, 5) for t in range(7))
    assert len(EngineDataset(sessions, e.builder, max_turns=5, lengths="max")) == 3 * 7
    b = batch_of(e, sessions, idx=(0, 1, 2))
    assert b.target_rep.shape == (3, N, D) and b.query_index.shape == (3 * N, 2)
    assert int(b.n_turns.max()) <= 5 and b.reps.shape[0] == N * int((b.n_turns - 1).sum())
    save_sessions(sessions, tmp_path / "d")
    back, meta = load_sessions(tmp_path / "d")
    assert meta["rep_tokens"] == N and len(back) == len(sessions)
    assert all(torch.equal(a["s_a"], c["s_a"]) and a["deltas"] == c["deltas"]
               for sa, sb in zip(sessions, back) for a, c in zip(sa, sb))
    with pytest.raises(ValueError, match="stamina"):
        EngineDataset([[{**sessions[0][0], "deltas": {"stamina": 2, "social": 0, "entertainment": 0}}]], e.builder)


def test_phase_runs_end_to_end_on_synthetic(tmp_path):
    import argparse

    from animegamer.training import phase_b as phase

    parser = argparse.ArgumentParser()
    phase.add_arguments(parser)
    args = parser.parse_args(["--preset", "tiny", "--synthetic", "4", "--steps", "3", "--batch-size", "2",
                              "--out", str(tmp_path / "run"), "--rep-tokens", "4", "--rep-dim", "8",
                              "--no-progress", "--eval-sessions", "1", "--synthetic-turns", "3"])
    assert phase.run(args) == 0
    e = load_engine(tmp_path / "run" / "final")
    assert e.cfg.rep_tokens == 4
    assert (tmp_path / "run" / "eval.json").is_file()
    args.train_steps, args.resume = 5, True
    assert phase.run(args) == 0
    from animegamer.training.loop import read_log

    assert read_log(tmp_path / "run")[-1]["step"] == 5


@pytest.mark.skipif(os.environ.get("ANIMEGAMER_SLOW") != "1", reason="loads the real SmolLM2 (set ANIMEGAMER_SLOW=1)")
def test_default_backbone_predicts():
    e = GameEngine(engine_config("default", rep_tokens=8)).eval()
    s = synthetic_sessions(1, 3, 8, e.cfg.rep_dim, seed=0)[0]
    p = e.predict(records(s)[:2], s[2]["instruction"], s[2]["states"])
    assert p.s_a.shape == (8, e.cfg.rep_dim) and p.motion_level in range(1, 6)


VERBS = ("run", "walk", "sleep", "talk", "dance", "read", "wave", "play")


def with_motion_texts(sessions, table: torch.Tensor) -> list:
    """The synthetic sessions with s_a's first token the table row of the turn's verb (as a world's s_a begins with
    E_a's tokens of its motion text), and that text on the turn."""
    out = []
    for s in sessions:
        turns = []
        for t in s:
            verb = t["instruction"].split("Motion: ")[1].split(";")[0].split()[-1]
            s_a = t["s_a"].clone()
            s_a[:1] = table[VERBS.index(verb)]
            turns.append({**t, "s_a": s_a, "motion_text": verb})
        out.append(turns)
    return out


def test_motion_head_says_which_motion(tmp_path, sessions):
    """The head learns the motion text with cross-entropy; predict puts the chosen text's own tokens in s_a; the
    head, its texts and table survive save/load; an engine without the head starts one (--init)."""
    table = torch.randn(len(VERBS), 1, D, generator=torch.Generator().manual_seed(3))
    data = with_motion_texts(sessions, table)
    plain = make_engine()
    e = make_engine(motion_texts=VERBS, n_text=1)
    e.load_trainable_state_dict(plain.trainable_state_dict(), new_motion_head=True)
    e.set_motion_table(table)
    b = batch_of(e, data)
    labels = e.motion_labels(b.target_rep)
    index = EngineDataset(data, e.builder, max_turns=5).index  # (session, target turn, n turns) per sample
    assert [VERBS[int(i)] for i in labels] == [data[index[k][0]][index[k][1]]["motion_text"] for k in (0, 5, 9, 14)]
    other = b.target_rep.clone()
    other[1, 0] += 1.0  # a film's own motion text: no label, no loss
    assert int(e.motion_labels(other)[1]) == IGNORE
    logs = fit(e, b, 30)
    assert logs["acc_motion"] == 1.0 and logs["ce_motion"] < 0.5, logs
    save_engine(e, tmp_path / "eng")
    e2 = load_engine(tmp_path / "eng")
    assert e2.cfg.motion_texts == VERBS and torch.equal(e2.motion_table, table)
    rows = play_sessions(e2, data[:1])
    si, t, n = index[5]  # a trained sample, as play sees it
    p = e2.predict(records(data[si])[t - n + 1:t], data[si][t]["instruction"], data[si][t]["states"])
    assert p.motion_text == data[si][t]["motion_text"]
    assert torch.equal(p.s_a[:1], table[VERBS.index(p.motion_text)])  # the text's tokens, not a regression
    assert summarize(rows)["acc_motion_text"] == pytest.approx(sum(r["motion_ok"] for r in rows) / len(rows))
    with pytest.raises(ValueError, match="missing"):
        e2.load_trainable_state_dict(plain.trainable_state_dict())
    with pytest.raises(ValueError, match="motion table"):
        e2.set_motion_table(table[:3])
