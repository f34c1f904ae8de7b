"""The papers' claims, judged from a recorded run: the shared part of every image chapter's
verdict table.

Each image chapter module has ``claims(results) -> rows`` built with :func:`judge` from a list
of :class:`Claim`: one row per claim of the paper, naming the metric it compares (the one the
paper plots: the best test accuracy over the run where the paper used optimal early stopping,
the final one where it plots curves), what the paper reports, what the record shows (with its
numbers) and a verdict:

* ``"yes"`` or ``"no"``: the record reproduces the claim, or contradicts it;
* ``"unjudged (<reason>)"``: the record cannot decide, for one of the :data:`REASONS`: a run the
  verdict rests on ``diverged`` (unless divergence is what the claim is about), is ``undertrained``
  (its best training accuracy stays below the level the row states: it did not fit its training
  set), the paper's
  ``setting not reached`` (e.g. its K beyond the run's steps), or the group is ``not recorded``.

The criteria are fixed in code, before any record is read, and two accuracies count as equal
within :func:`tolerance`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from .image_records import accuracy_noise_points, best_accuracy

#: Why a row can be unjudged.
REASONS = ("diverged", "undertrained", "setting not reached", "not recorded")
#: The verdicts a row can carry.
VERDICTS = ("yes", "no") + tuple(f"unjudged ({r})" for r in REASONS)
#: The training accuracy a run must reach (its best over the run, of the model being trained)
#: before a claim about a trained network is judged on it: the papers train to convergence.
FITTED = 0.9


class Claim(NamedTuple):
    """One row of a verdict table, before it is judged.

    Attributes:
      claim: the paper's claim, with its figure.
      paper: what the paper reports (its numbers where it gives them).
      metric: the quantity compared, as the paper plots it.
      group: the record's run group that judges it.
      judge: ``judge(record, results) -> (shows, ok)`` or ``(shows, ok, runs)``: what the record
        shows (with numbers), ``ok`` True / False, or one of :data:`REASONS` when the record
        cannot decide; ``runs`` lists the ``(group, run index)`` pairs the verdict rests on
        (default: every run of ``group``).
      trained: the best training accuracy each of those runs must reach (``None``: no
        requirement, for claims about stability or divergence).
      diverging: divergence is what the claim is about (a diverged run is then evidence, not a
        reason to leave the row unjudged).
    """

    claim: str
    paper: str
    metric: str
    group: str
    judge: Callable
    trained: float | None = FITTED
    diverging: bool = False


def tolerance(rec) -> float:
    """The accuracy difference (a fraction) below which two runs of a record count as equal: a
    percentage point, or twice the binomial standard error of one accuracy on the record's
    evaluation images if that is larger (:func:`itlin_core.book.image_records.accuracy_noise_points`).

    Examples:
      >>> tolerance({"n_eval": 10000}), tolerance({"n_eval": 100})   # 1 point; 2 x 5 points on 100 images
      (0.01, 0.1)
    """
    return max(1.0, 2 * accuracy_noise_points(int(rec["n_eval"]))) / 100


def pct(a) -> str:
    """An accuracy (a fraction) as a percentage with one decimal; "n/a" for a run with no value (diverged).

    Examples:
      >>> pct(0.4215), pct(float("nan"))
      ('42.1%', 'n/a')
    """
    return f"{100 * float(a):.1f}%" if np.isfinite(a) else "n/a"


def largest_finite_k(rec) -> int:
    """The index of the run with the largest integer K of a record (the "large K" its claims are
    about; rule specs and K = inf are not integers).

    Examples:
      >>> largest_finite_k({"Ks": [1, 100, None, "geometric(10, 1.5)", 10]})
      1
    """
    return max((i for i, k in enumerate(rec["Ks"]) if isinstance(k, int)), key=lambda i: rec["Ks"][i])


def final_accuracy(rec, metric: str = "test_accuracy_proxy") -> np.ndarray:
    """The last evaluation's value of ``metric`` per run (the accuracy the papers' curves end at).

    Examples:
      >>> rec = {"metrics": {"test_accuracy_proxy": [[0.1, 0.1], [0.7, 0.5], [0.6, 0.5]]}}   # (evaluations, runs)
      >>> final_accuracy(rec).tolist()
      [0.6, 0.5]
    """
    return np.asarray(rec["metrics"][metric], dtype=np.float64)[-1]


def best_train_accuracy(rec) -> np.ndarray | None:
    """Per run, the best training accuracy of the model being trained (the proxy, which is the
    network whenever K = 1) over the record's evaluations
    (:func:`~itlin_core.book.image_records.best_accuracy`), or ``None`` where the record does not
    hold it.

    Examples:
      >>> rec = {"metrics": {"train_accuracy_proxy": [[0.1, 0.1], [0.95, 0.6], [0.9, 0.7]]}}   # (evaluations, runs)
      >>> best_train_accuracy(rec).tolist(), best_train_accuracy({"metrics": {}})
      ([0.95, 0.7], None)
    """
    if "train_accuracy_proxy" not in rec.get("metrics", {}):
        return None
    return best_accuracy(rec, "train_accuracy_proxy")


def divergences(rec, runs=None) -> list:
    """``"K=5,000 at step 30,001"`` for each run of ``rec`` (the indices ``runs``, default all)
    that diverged (:func:`itlin_core.book.image_records.summarise`'s ``diverged_at``).

    Examples:
      >>> rec = {"labels": ["K=1", "K=100", "K=1e3"], "diverged_at": [None, 5601, 17001]}
      >>> divergences(rec), divergences(rec, [0, 1])
      (['K=100 at step 5,601', 'K=1e3 at step 17,001'], ['K=100 at step 5,601'])
    """
    gone = rec.get("diverged_at") or []
    runs = range(len(gone)) if runs is None else runs
    return [f"{rec['labels'][i]} at step {gone[i]:,}" for i in runs if i < len(gone) and gone[i] is not None]


def _verdict(spec: Claim, results: dict, shows: str, ok, runs) -> tuple[str, str]:
    """The verdict of one judged row, and ``shows`` with the reason added where one applies."""
    if isinstance(ok, str):
        if ok not in REASONS:
            raise ValueError(f"a judge returned {ok!r}; the reasons a row can be unjudged are {REASONS}.")
        return shows, f"unjudged ({ok})"
    by_group = {}
    for g, i in runs:
        by_group.setdefault(g, []).append(i)
    gone = [f"{g}: {d}" if g != spec.group else d
            for g, idx in by_group.items() if g in results for d in divergences(results[g], idx)]
    if gone and not spec.diverging:
        return shows + f" (diverged: {', '.join(gone)})", "unjudged (diverged)"
    if spec.trained is not None:
        short = []
        for g, idx in by_group.items():
            best = best_train_accuracy(results[g]) if g in results else None
            short += [] if best is None else [f"{results[g]['labels'][i]} {pct(best[i])}" for i in idx
                                              if not best[i] >= spec.trained]
        if short:
            return (shows + f" (best training accuracy {', '.join(short)}; the claim needs {pct(spec.trained)})",
                    "unjudged (undertrained)")
    if ok is None:
        raise ValueError("a judge returned ok=None; return True, False or one of the reasons " + ", ".join(REASONS))
    return shows, "yes" if ok else "no"


def judge(results, specs: Sequence[Claim]) -> list:
    """The verdict table of ``results`` (``{group: record}``, or ``None``): for each
    :class:`Claim` a row ``{"claim", "paper", "metric", "shows", "verdict"}``. A row whose group
    is not in ``results`` is ``"unjudged (not recorded)"``. Divergences of runs of the group that
    the verdict does not rest on are named in ``shows``, so that no verdict hides one."""
    results = results or {}
    rows = []
    for spec in specs:
        rec = results.get(spec.group)
        row = {"claim": spec.claim, "paper": spec.paper, "metric": spec.metric}
        if rec is None:
            rows.append(dict(row, shows="-", verdict="unjudged (not recorded)"))
            continue
        out = spec.judge(rec, results)
        shows, ok = out[0], out[1]
        runs = out[2] if len(out) > 2 else [(spec.group, i) for i in range(len(rec["Ks"]))]
        shows, verdict = _verdict(spec, results, shows, ok, runs)
        rest = divergences(rec, [i for i in range(len(rec["Ks"])) if (spec.group, i) not in runs])
        if rest and "diverged" not in shows:
            shows += f" (diverged, not used here: {', '.join(rest)})"
        rows.append(dict(row, shows=shows, verdict=verdict))
    return rows


def combine(tables) -> list:
    """One verdict per claim from several records of one chapter: ``tables`` is a list of
    ``(label, rows)`` (rows of :func:`judge` for the same claims, largest record first). Each claim
    takes the first "yes" or "no" among its records; a claim that no record decides keeps the first
    record's row. Every row gains ``record``, the label it was judged on; ``shows`` adds in brackets
    why the earlier records could not decide, and any later record that decides the other way, so
    that no disagreement between records is hidden.

    The rule is the same for every chapter and claim and is written in code: the largest record
    whose runs can decide a row gives its verdict, whatever a smaller record says.

    Examples:
      >>> gpu = [{"claim": "a", "shows": "40%", "verdict": "unjudged (undertrained)"},
      ...        {"claim": "b", "shows": "55%", "verdict": "no"}]
      >>> cpu = [{"claim": "a", "shows": "97%", "verdict": "yes"}, {"claim": "b", "shows": "38%", "verdict": "yes"}]
      >>> rows = combine([("colab", gpu), ("laptop", cpu)])
      >>> [(r["claim"], r["verdict"], r["record"]) for r in rows]
      [('a', 'yes', 'laptop'), ('b', 'no', 'colab')]
      >>> [r["shows"] for r in rows]
      ['97% [colab record: unjudged (undertrained)]', '55% [laptop record: yes]']
    """
    if not tables:
        return []
    claims = [[r["claim"] for r in rows] for _, rows in tables]
    if any(c != claims[0] for c in claims):
        raise ValueError("tables must judge the same claims in the same order; got claim lists "
                         f"{[len(c) for c in claims]} long that differ.")
    out = []
    for j in range(len(claims[0])):
        rows = [(label, t[j]) for label, t in tables]
        pick = next((k for k, (_, r) in enumerate(rows) if r["verdict"] in ("yes", "no")), 0)
        label, row = rows[pick]
        notes = [f"{lab} record: {r['verdict']}" for lab, r in rows[:pick]]
        if row["verdict"] in ("yes", "no"):      # a later record that decides the other way
            notes += [f"{lab} record: {r['verdict']}" for lab, r in rows[pick + 1:]
                      if r["verdict"] in ("yes", "no") and r["verdict"] != row["verdict"]]
        out.append(dict(row, record=label, shows=row["shows"] + (f" [{'; '.join(notes)}]" if notes else "")))
    return out


def recorded_verdicts(chapter: str, claims_of: Callable, results_dir=None) -> list:
    """The verdict per claim of ``chapter`` across all of its committed records
    (:data:`~itlin_core.book.records.RECORDED_PRESETS`, largest first): :func:`combine` of
    ``claims_of(record)`` for each record found; rows ``"unjudged (not recorded)"`` where there is
    none (outside the repository, say).

    Examples:
      >>> import tempfile
      >>> from itlin_core.book import cifar_few_updates, records
      >>> rows = recorded_verdicts("cifar_few_updates", cifar_few_updates.claims, tempfile.mkdtemp())
      >>> {r["verdict"] for r in rows}, {r["record"] for r in rows}      # nothing recorded in an empty folder
      ({'unjudged (not recorded)'}, {'none'})
    """
    from .records import RECORDED_PRESETS, load_results
    tables = []
    for preset in RECORDED_PRESETS:
        record = load_results(chapter, (preset,), results_dir)
        if record is not None:
            tables.append((preset, claims_of(record["data"])))
    return combine(tables) if tables else [dict(r, record="none") for r in claims_of(None)]


def claims_markdown(rows) -> str:
    """A verdict table (:func:`judge`) as Markdown; the metric column is left out when the rows
    name none (the toy chapters' tables, where one metric is stated in the text); rows of
    :func:`combine` gain a column naming the record each was judged on. The verdict comes right
    after the claim, so that a phone's screen shows both before the table scrolls sideways.

    Examples:
      >>> print(claims_markdown([{"claim": "K=1 fits", "paper": "100%", "shows": "99.9%", "verdict": "yes"}]))
      | claim | reproduced here? | the paper reports | this run shows |
      | --- | --- | --- | --- |
      | K=1 fits | yes | 100% | 99.9% |
      >>> print(claims_markdown([{"claim": "a | b", "paper": "-", "shows": "-", "verdict": "no"}]).splitlines()[-1])
      | a \\| b | no | - | - |
    """
    metric = bool(rows) and all("metric" in r for r in rows)
    record = bool(rows) and all("record" in r for r in rows)
    head = ("| claim | reproduced here? |" + (" judged on |" if record else "") + (" metric |" if metric else "")
            + " the paper reports |" + (" the record shows |" if record else " this run shows |"))
    lines = [head, "|" + " --- |" * (4 + metric + record)]
    cells = [{key: str(v).replace("|", "\\|") for key, v in r.items()} for r in rows]   # a "|" in a cell stays text
    lines += [f"| {c['claim']} | {c['verdict']} |" + (f" {c['record']} |" if record else "")
              + (f" {c['metric']} |" if metric else "") + f" {c['paper']} | {c['shows']} |" for c in cells]
    return "\n".join(lines)


def verdict_counts(rows) -> dict:
    """``{"claims", "yes", "no", "unjudged"}``: how many rows there are and how many carry each kind
    of verdict (the numbers a chapter glues into its sentence under the table).

    Examples:
      >>> verdict_counts([{"verdict": "yes"}, {"verdict": "no"}, {"verdict": "unjudged (diverged)"}])
      {'claims': 3, 'yes': 1, 'no': 1, 'unjudged': 1}
    """
    n = {v: sum(r["verdict"] == v for r in rows) for v in ("yes", "no")}
    return dict(claims=len(rows), **n, unjudged=len(rows) - n["yes"] - n["no"])


__all__ = ["REASONS", "VERDICTS", "FITTED", "Claim", "tolerance", "pct", "largest_finite_k", "final_accuracy",
           "best_train_accuracy", "divergences", "judge", "combine", "recorded_verdicts", "claims_markdown",
           "verdict_counts"]
