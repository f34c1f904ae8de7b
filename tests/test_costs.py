"""The GPU page's measured costs (itlin_core.tools.costs): read back from the files the runs wrote,
and computed the way the page says."""

import pytest

from itlin_core.book import image_chapters, records
from itlin_core.tools import costs


def test_chapter_times_span_from_first_begin_to_last_end(tmp_path):
    log = tmp_path / "q.log"
    log.write_text("100 queue-start\n110 bench rc=0\n120 begin a g1\n150 end a g1 rc=0\n150 begin a g2\n"
                   "200 end a g2 rc=1\n200 begin b g1\n")
    assert costs.chapter_times(log) == {"a": (80, 2, False)}      # b never ended: left out
    log.write_text("100 begin a g1\nnot a line\n")
    with pytest.raises(ValueError, match="line 2"):
        costs.chapter_times(log)


def test_bench_result_reads_the_benchmarks_output(tmp_path):
    out = tmp_path / "b.txt"
    out.write_text("LeNet-50 ...\ndevice: cpu (cpu), x86_64, 2 CPU cores, jax 0.10.2\nmedian ...\n"
                   "IL step / SGD step = 1.326  (per-round ratios 1.179 .. 1.504)\n")
    assert costs.bench_result(out) == ("cpu (cpu), x86_64, 2 CPU cores, jax 0.10.2", 1.326)
    out.write_text("something else\n")
    with pytest.raises(ValueError, match="not the output"):
        costs.bench_result(out)


def test_group_rows_are_the_records_own_costs():
    """Each row's numbers are the record's: steps/s is steps / (seconds - compile seconds)."""
    rows, sources = costs.group_costs("colab")
    for chapter, name, device, runs, steps, compile_s, rate, peak, seconds in rows:
        record = records.load_results(chapter, ("colab",))
        rec = record["data"][name]
        full = records.group_origin(record, name)["device"]["device_kind"]
        assert device == costs.short_device(full) and device in full and full in costs.costs_markdown("colab")
        assert runs == len(rec["labels"]) and steps == f"{int(rec['eval_step'][-1]):,}"
        want = int(rec["eval_step"][-1]) / (rec["seconds"] - rec["compile_seconds"])
        assert rate == f"{want:.0f}" and seconds == f"{rec['seconds']:.0f}"
        assert peak == f"{rec['peak_device_bytes'] / 2**30:.2f}"
    assert {s[0] for s in sources} | set(costs.missing("colab")) == set(image_chapters.CHAPTERS)


def test_the_saved_timings_are_readable_and_name_their_device():
    text = costs.costs_markdown("colab")
    timings = records.default_results_dir() / "timings"
    for bench in timings.glob("*-bench.txt"):
        device, ratio = costs.bench_result(bench)
        assert ratio > 1 and device in text       # an IL step costs more than an SGD step
    for log in timings.glob("*-queue.log"):
        for chapter, (seconds, groups, ok) in costs.chapter_times(log).items():
            assert chapter in image_chapters.CHAPTERS and seconds > 0 and groups >= 1
