"""The paper's claims for Figs. 2, 3 and 11 judged from a record (cifar_few_updates.claims): on
small synthetic records built to reproduce each claim and built to contradict it."""

import numpy as np
import pytest

from itlin_core.book import cifar_few_updates as ch


def rec(Ks, final, best=None, updates=None, n_eval=10_000):
    """A record with two evaluations: accuracies 0.1 at the start, ``final`` at the end (and
    ``best`` in between when given)."""
    final = np.asarray(final, float)
    rows = [np.full(len(Ks), 0.1)] + ([np.asarray(best, float)] if best is not None else []) + [final]
    upd = np.asarray(updates if updates is not None else [1] * len(Ks))
    return {"Ks": list(Ks), "labels": [str(k) for k in Ks], "n_eval": n_eval,
            "eval_step": np.arange(len(rows)), "feature_updates": np.stack([np.ones(len(Ks), int), upd]),
            "metrics": {"test_accuracy_proxy": np.stack(rows)}}


def verdicts(results):
    return {r["claim"].split(" (")[0]: r["verdict"] for r in ch.claims(results)}


GOOD = {"fig2": rec([1, 5000], [0.60, 0.596], updates=[60000, 12]),
        "fig3": rec([1, 10, 100, 1000, None], [0.55, 0.552, 0.548, 0.50, 0.45]),
        "fig3_tgn": rec([500], [0.40]),
        "fig11_full": rec([1, 10, 100], [0.50, 0.49, 0.45]),
        "fig11_mini": rec([1, 10, 100, 1000], [0.52, 0.515, 0.50, 0.47])}


def test_a_record_that_reproduces_every_claim_says_yes():
    assert set(verdicts(GOOD).values()) == {"yes"}


@pytest.mark.parametrize("group, bad, claim", [
    ("fig2", rec([1, 5000], [0.60, 0.55]), "Few feature updates suffice"),
    ("fig3", rec([1, 10, 100, 1000, None], [0.55, 0.50, 0.548, 0.50, 0.45]), "A wide range of K behaves like SGD"),
    ("fig3", rec([1, 10, 100, 1000, None], [0.55, 0.552, 0.548, 0.50, 0.549]), "No feature learning costs accuracy"),
    ("fig3_tgn", rec([500], [0.549]), "Solving each linearisation generalises worse"),
    ("fig11_mini", rec([1, 10, 100, 1000], [0.52, 0.515, 0.47, 0.50]), "Full batch and minibatch order K alike")])
def test_a_record_built_to_contradict_a_claim_says_no(group, bad, claim):
    got = verdicts(dict(GOOD, **{group: bad}))
    assert got[claim] == "no"
    assert all(v == "yes" for k, v in got.items() if k != claim and not (group == "fig3" and k.startswith("Solving")))


def test_noise_widens_the_tolerance_and_missing_groups_are_not_judged():
    # 1.0 point apart: equal within noise on 1,000 images (2 x 1.58 points), not on 1,000,000
    fig2 = lambda n: rec([1, 300], [0.60, 0.588], n_eval=n)
    assert verdicts({"fig2": fig2(1000)})["Few feature updates suffice"] == "yes"
    assert verdicts({"fig2": fig2(1_000_000)})["Few feature updates suffice"] == "no"
    assert set(verdicts({}).values()) == {"not recorded"}
    table = ch.claims_markdown(ch.claims(GOOD))
    assert table.count("\n") == 6 and "| reproduced here? |" in table
