"""Is the engine's motion level limited by its hidden state or by its level read-out?

    .venv/bin/python experiments/engine_level_probe.py dump ENGINE SESSIONS_DIR OUT.pt [--limit N] [--window 3]
    .venv/bin/python experiments/engine_level_probe.py fit TRAIN.pt [TRAIN2.pt ..] --test TEST.pt [TEST2.pt ..]
    .venv/bin/python experiments/engine_level_probe.py score A.pt [B.pt ..] [--with OTHER_A.pt ..]

``dump`` runs the engine teacher forced (true history, the last ``window`` turns, batched) over
every turn of the sessions and saves the final hidden state at each turn's <ML> tag, the engine's
own level logits there, and the true level. ``fit`` fits a fresh linear read-out (multinomial
logistic regression, L2 chosen on a split of the training features) on hidden states of sessions
the engine never trained on, and compares its held-out accuracy with the engine's own read-out.
``score`` prints the level accuracy of each dump and of all of them pooled (mean +- standard
error); ``--with`` gives dumps of a second engine on the same turns, in the same order, and adds
the accuracy of the two engines' averaged probabilities (an ensemble) and the paired difference
of the two engines' accuracies on the same turns (mean +- standard error).
"""
from __future__ import annotations

import argparse
import sys

import torch


def dump(engine_dir: str, sessions_dir: str, out: str, limit: int | None, window: int, batch: int,
         skip: int = 0) -> None:
    from tqdm.auto import tqdm

    from animegamer.engine.data import EngineCollate, EngineDataset, load_sessions
    from animegamer.engine.model import load_engine
    from animegamer.core.runs import resolve_engine

    engine = load_engine(resolve_engine(engine_dir))
    sessions, _ = load_sessions(sessions_dir, limit=None if limit is None else skip + limit)
    sessions = sessions[skip:]
    ds = EngineDataset(sessions, engine.builder, max_turns=window + 1, lengths="max")
    collate = EngineCollate(engine.builder.vocab["<PAD>"], engine.cfg.rep_tokens)
    order = sorted(range(len(ds)), key=lambda j: ds.index[j][2])  # by history length: less padding
    hs, logits, target, where = [], [], [], []
    with torch.no_grad():
        for i in tqdm(range(0, len(ds), batch), desc="dump", unit="batch"):
            idx = order[i:i + batch]
            b = collate([ds[j] for j in idx])
            hv = engine.hidden_states(b)[1][:, 0].float()  # (B, H) at <ML>
            hs.append(hv)
            logits.append(engine.value_logits(hv, 0))
            target.append(b.value_targets[:, 0])
            where += [ds.index[j][:2] for j in idx]
    torch.save({"h": torch.cat(hs), "logits": torch.cat(logits), "target": torch.cat(target),
                "where": torch.tensor(where), "sessions": sessions_dir, "skip": skip, "engine": engine_dir, "window": window}, out)
    t = torch.cat(target)
    print(f"{out}: {len(t)} turns, engine read-out accuracy {float((torch.cat(logits).argmax(-1) == t).float().mean()):.3f}")


def _logreg(X: torch.Tensor, y: torch.Tensor, l2: float) -> torch.Tensor:
    """Multinomial logistic regression with an L2 penalty, by L-BFGS: (H+1, 5) weights."""
    Xb = torch.cat([X, torch.ones(len(X), 1)], 1)
    W = torch.zeros(Xb.shape[1], 5, requires_grad=True)
    opt = torch.optim.LBFGS([W], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(Xb @ W, y) + l2 * (W[:-1] ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)
    return W.detach()


def _predict(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    return (torch.cat([X, torch.ones(len(X), 1)], 1) @ W).argmax(-1)


def fit(train: list[str], test: list[str]) -> None:
    def load(paths):
        d = [torch.load(p) for p in paths]
        return torch.cat([x["h"] for x in d]), torch.cat([x["target"] for x in d]), torch.cat([x["logits"] for x in d])

    Xtr, ytr, Ltr = load(train)
    mu, sd = Xtr.mean(0), Xtr.std(0) + 1e-6
    z = lambda X: (X - mu) / sd  # noqa: E731
    print(f"train: {len(ytr)} turns, engine read-out {float((Ltr.argmax(1) == ytr).float().mean()):.3f}")
    n = int(0.8 * len(ytr))
    best = None
    for l2 in (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4):
        W = _logreg(z(Xtr[:n]), ytr[:n], l2)
        acc = float((_predict(W, z(Xtr[n:])) == ytr[n:]).float().mean())
        print(f"  l2={l2}: validation {acc:.3f}")
        if best is None or acc > best[0]:
            best = (acc, l2)
    W = _logreg(z(Xtr), ytr, best[1])
    for p in test:
        X, y, L = load([p])
        print(f"{p}: {len(y)} turns: engine read-out {float((L.argmax(1) == y).float().mean()):.3f}, "
              f"refit read-out (l2={best[1]}) {float((_predict(W, z(X)) == y).float().mean()):.3f}")


def score(paths: list[str], others: list[str] | None) -> None:
    if others and len(others) != len(paths):
        raise SystemExit("score: --with needs one dump per dump, same turns in the same order")
    pooled: dict[str, list[torch.Tensor]] = {"engine": [], "ensemble": [], "engine - other (paired)": []}
    for i, p in enumerate(paths):
        d = torch.load(p)
        ok = (d["logits"].argmax(-1) == d["target"]).float()
        pooled["engine"].append(ok)
        line = f"{p}: {len(ok)} turns, level accuracy {float(ok.mean()):.3f}"
        if others:
            o = torch.load(others[i])
            if not (torch.equal(o["target"], d["target"]) and torch.equal(o["where"], d["where"])):
                raise SystemExit(f"score: {others[i]} is not on the turns of {p}")
            ens = ((d["logits"].softmax(-1) + o["logits"].softmax(-1)).argmax(-1) == d["target"]).float()
            pooled["ensemble"].append(ens)
            pooled["engine - other (paired)"].append(ok - (o["logits"].argmax(-1) == o["target"]).float())
            line += f", other {float((o['logits'].argmax(-1) == o['target']).float().mean()):.3f}, ensemble {float(ens.mean()):.3f}"
        print(line)
    for name, oks in pooled.items():
        if oks:
            ok = torch.cat(oks)
            print(f"pooled {name}: {len(ok)} turns, {float(ok.mean()):.3f} +- {float(ok.std() / len(ok) ** 0.5):.3f}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("engine")
    d.add_argument("sessions")
    d.add_argument("out")
    d.add_argument("--limit", type=int)
    d.add_argument("--skip", type=int, default=0, help="leave out the first SKIP sessions")
    d.add_argument("--window", type=int, default=3)
    d.add_argument("--batch", type=int, default=8)
    f = sub.add_parser("fit")
    f.add_argument("train", nargs="+")
    f.add_argument("--test", nargs="+", required=True)
    c = sub.add_parser("score")
    c.add_argument("dumps", nargs="+")
    c.add_argument("--with", dest="others", nargs="+")
    a = ap.parse_args(argv)
    if a.cmd == "dump":
        dump(a.engine, a.sessions, a.out, a.limit, a.window, a.batch, a.skip)
    elif a.cmd == "fit":
        fit(a.train, a.test)
    else:
        score(a.dumps, a.others)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
