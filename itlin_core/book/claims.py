"""The papers' claims, judged from a recorded run: the shared part of every image chapter's
verdict table.

Each image chapter module has ``claims(results) -> rows`` built with :func:`judge`: one row per
claim of the paper, with what the paper reports, what the record shows (with its numbers) and a
verdict, ``"yes"``, ``"no"`` or ``"not recorded"``. The criteria are fixed in code, before any
record is read, and two accuracies count as equal within :func:`tolerance`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .image_records import accuracy_noise_points

#: The verdicts a row can carry.
VERDICTS = ("yes", "no", "not recorded")


def tolerance(rec) -> float:
    """The accuracy difference (a fraction) below which two runs of a record count as equal: a
    percentage point, or twice the binomial standard error of one accuracy on the record's
    evaluation images if that is larger (:func:`itlin_core.book.image_records.accuracy_noise_points`)."""
    return max(1.0, 2 * accuracy_noise_points(int(rec["n_eval"]))) / 100


def pct(a) -> str:
    """An accuracy (a fraction) as a percentage with one decimal."""
    return f"{100 * float(a):.1f}%"


def largest_finite_k(rec) -> int:
    """The index of the run with the largest integer K of a record (the "large K" its claims are
    about; rule specs and K = inf are not integers)."""
    return max((i for i, k in enumerate(rec["Ks"]) if isinstance(k, int)), key=lambda i: rec["Ks"][i])


def divergences(rec, runs=None) -> list:
    """``"K=5,000 at step 30,001"`` for each run of ``rec`` (the indices ``runs``, default all)
    that diverged (:func:`itlin_core.book.image_records.summarise`'s ``diverged_at``)."""
    gone = rec.get("diverged_at") or []
    runs = range(len(gone)) if runs is None else runs
    return [f"{rec['labels'][i]} at step {gone[i]:,}" for i in runs if i < len(gone) and gone[i] is not None]


def judge(results, specs: Sequence[tuple]) -> list:
    """The verdict table of ``results`` (``{group: record}``, or ``None``): for each
    ``(claim, paper, group, judge_fn)`` of ``specs`` a row ``{"claim", "paper", "shows",
    "verdict"}``. ``judge_fn(record, results) -> (shows, ok)`` is called with the record of
    ``group`` (the row is ``"not recorded"`` when there is none) and all results, for claims
    that compare groups; ``ok`` ``None`` means the record cannot decide (verdict ``"not
    recorded"``, with ``shows`` saying why). A judge that relies on a run that diverged says so
    in ``shows``; where it does not, and a run of ``group`` diverged, the row says which, so that
    no verdict hides a divergence."""
    results = results or {}
    rows = []
    for claim, paper, group, judge_fn in specs:
        rec = results.get(group)
        if rec is None:
            rows.append({"claim": claim, "paper": paper, "shows": "-", "verdict": "not recorded"})
            continue
        shows, ok = judge_fn(rec, results)
        gone = divergences(rec)
        if gone and "diverged" not in shows:
            shows += f" (diverged: {', '.join(gone)}; a diverged run's numbers come from before it diverged)"
        verdict = "not recorded" if ok is None else "yes" if ok else "no"
        rows.append({"claim": claim, "paper": paper, "shows": shows, "verdict": verdict})
    return rows


def claims_markdown(rows) -> str:
    """A verdict table (:func:`judge`) as Markdown."""
    lines = ["| claim | the paper reports | this record shows | reproduced here? |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['claim']} | {r['paper']} | {r['shows']} | {r['verdict']} |" for r in rows]
    return "\n".join(lines)


def claims_sentence(rows, results, reason: str) -> str:
    """The sentence under a chapter's verdict table, written from the verdicts: how many claims
    reproduce and which do not, with ``reason`` (the likely cause at this scale) when some do
    not; for stand-in data, that the verdicts test only the code."""
    judged = [r for r in rows if r["verdict"] in ("yes", "no")]
    failed = [r["claim"] for r in judged if r["verdict"] == "no"]
    if not judged:
        return "No record is shown on this page, so no claim is judged here."
    if results is not None and any(r.get("stand_in") for r in results.values()):
        return (f"These are tiny runs on stand-in images: the {len(judged)} verdicts above test the code and say "
                "nothing about the paper.")
    if failed:
        gone = sorted({f"{name}: {d}" for name, rec in (results or {}).items() for d in divergences(rec)})
        why = (f"{len(gone)} run{'s' if len(gone) > 1 else ''} of this record diverged ({'; '.join(gone)}), and a "
               "claim that rests on a diverged run is not reproduced. " if gone else "")
        return (f"Of the {len(judged)} claims judged, {len(judged) - len(failed)} reproduce at this scale and "
                f"{len(failed)} {'does' if len(failed) == 1 else 'do'} not: {'; '.join(failed)}. {why}{reason}")
    return f"All {len(judged)} claims judged reproduce at this scale."


__all__ = ["divergences", "VERDICTS", "tolerance", "pct", "largest_finite_k", "judge", "claims_markdown", "claims_sentence"]
