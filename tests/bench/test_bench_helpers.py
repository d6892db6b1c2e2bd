"""The benchmark helpers: process-tree memory measurement, corpus subsets, ratios against the targets."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from bench.bench_preprocess import (
    CEILING,
    CEILING_OFFSETS,
    HF_STYLE,
    LMSHARDS,
    Input,
    Result,
    comparison_plan,
    memory_growth,
    parse_args,
    ratio_lines,
    ratios,
    scaled_input,
    scaled_ratios,
)
from bench.common import (
    COMMAND_ROLE,
    MB,
    ProcessFigures,
    run_checked,
    run_measured,
    take_subset,
)

CHILD_MB = 200
# A parent that stays small while its child holds CHILD_MB of touched memory for long enough for PSS samples.
PARENT_WITH_HUNGRY_CHILD = (
    "import subprocess, sys; subprocess.check_call([sys.executable, '-c', "
    f'"import time; b = bytearray({CHILD_MB} * 10**6); time.sleep(2.5)"])'
)


def test_peak_memory_counts_child_processes():
    m = run_checked([sys.executable, "-c", PARENT_WITH_HUNGRY_CHILD])
    assert m.returncode == 0
    assert m.peak_processes == 2
    # The child alone holds CHILD_MB; the tree sum must see it, plus two interpreters.
    assert m.max_single_rss_bytes >= CHILD_MB * MB
    assert m.peak_rss_bytes > m.max_single_rss_bytes  # both processes summed, not just the largest
    assert CHILD_MB * MB <= m.peak_pss_bytes <= m.peak_rss_bytes
    assert m.pss_samples >= 2
    assert 0.0 < m.cpu_s < m.wall_s  # both processes mostly sleep
    assert m.wall_s >= 2.5


def test_cpu_seconds_include_grandchildren():
    spin = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.5: pass')"
    m = run_checked(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.check_call([sys.executable, '-c', {spin!r}])",
        ]
    )
    assert m.cpu_s >= 0.5


def test_run_checked_reports_stderr_of_a_failing_command():
    with pytest.raises(RuntimeError, match="(?s)exited 3.*no such corpus"):
        run_checked(
            [sys.executable, "-c", "import sys; sys.stderr.write('no such corpus\\n'); sys.exit(3)"]
        )
    m = run_measured([sys.executable, "-c", "print('out')"])
    assert (m.returncode, m.stdout, m.stderr) == (
        0,
        "out\n",
        "",
    )  # the wrapper's rusage line is removed


def test_subset_takes_the_same_leading_share_of_every_file_at_line_ends(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    a = src / "a.txt"
    b = src / "b.txt"
    a.write_text("".join(f"line {i} of a\n" for i in range(1000)))
    b.write_text("".join(f"b{i}\n" for i in range(3000)))
    total = a.stat().st_size + b.stat().st_size

    out = take_subset([a, b], total // 4, tmp_path / "out")

    assert [p.name for p in out] == ["a.txt", "b.txt"]
    for source, part in zip((a, b), out):
        data, whole = part.read_bytes(), source.read_bytes()
        assert whole.startswith(data) and data.endswith(b"\n")
        assert abs(len(data) / len(whole) - 0.25) < 0.01
    assert total // 4 - 40 <= sum(p.stat().st_size for p in out) <= total // 4


def _result(system: str, wall_s: float, pss_mb: float) -> Result:
    return Result(
        system=system, input_label="all", input_bytes=int(100 * MB), tokens=1000, records=None, wall_s=wall_s,
        internal_s=None, cpu_s=wall_s, peak_rss_bytes=int(pss_mb * MB), peak_pss_bytes=int(pss_mb * MB),
        max_single_rss_bytes=0, peak_processes=1, load_before=(0.0, 0.0, 0.0), mean_load1=0.0,
    )  # fmt: skip


def test_ratios_compare_throughput_against_the_targets():
    results = [
        _result(CEILING, 20.0, 300),
        _result(LMSHARDS, 21.0, 900),
        _result(HF_STYLE, 84.0, 1100),
    ]
    summary = ratios(results, "all")
    assert summary["b_over_a"]["value"] == pytest.approx(20 / 21) and summary["b_over_a"]["met"]
    assert summary["b_over_a"]["by_cpu_time"] == pytest.approx(20 / 21)
    assert summary["b_over_c"]["value"] == pytest.approx(4.0) and summary["b_over_c"]["met"]
    assert summary["memory_b_below_c"]["met"]

    slow = ratios(
        [
            _result(CEILING, 20.0, 300),
            _result(LMSHARDS, 23.0, 1200),
            _result(HF_STYLE, 40.0, 1100),
        ],
        "all",
    )
    assert (
        not slow["b_over_a"]["met"]
        and not slow["b_over_c"]["met"]
        and not slow["memory_b_below_c"]["met"]
    )
    assert Input("all", ()).bytes == 0


def test_a_staged_runs_workers_are_every_process_but_the_command():
    def staged(cpu_s, command_cpu_s):
        processes = (ProcessFigures("multiprocessing child", cpu_s - command_cpu_s - 1, 0),
                     ProcessFigures(COMMAND_ROLE, command_cpu_s, 0))  # fmt: skip
        return dataclasses.replace(_result(LMSHARDS, cpu_s, 400), processes=processes)

    # Whole runs 1.3x, 1.2x and 1.25x the ceiling; the launcher's 10 CPU s left out: 1.05x, 0.95x, 1.0x.
    results = [_result(CEILING, 40.0, 300), staged(52.0, 10.0), staged(48.0, 10.0),
               _result(CEILING, 40.0, 300), _result(CEILING, 40.0, 300), staged(50.0, 10.0)]  # fmt: skip
    summary = ratios(results, "all")
    assert summary["b_over_a"]["cpu_ratio"] == pytest.approx(1.25)
    workers = summary["b_workers_over_a"]  # the fork server's 1 s and uncounted helpers stay in
    assert workers["pairs"] == pytest.approx([40 / 42, 40 / 38, 1.0])
    assert workers["value"] == pytest.approx(1.0) and workers["met"]
    assert (
        "per CPU second on all: 1.00 (median of 3 pairs: 0.95, 1.05, 1.00) (target >= 0.85: met)"
        in ("\n".join(ratio_lines(summary)))
    )
    # The default path: one busy process, the command's; no workers' figure.
    alone = dataclasses.replace(
        _result(LMSHARDS, 44.0, 400), processes=(ProcessFigures(COMMAND_ROLE, 44.0, 0),)
    )
    assert alone.workers_cpu_s is None and _result(LMSHARDS, 44.0, 400).workers_cpu_s is None
    assert "b_workers_over_a" not in ratios([results[0], alone], "all")


def test_on_a_larger_input_the_added_share_leaves_out_what_a_run_pays_once():
    def run(system, label, cpu_s):
        return dataclasses.replace(_result(system, cpu_s, 100), input_label=label)

    # lmshards pays 6 CPU s once and 1.1x the ceiling per byte: 0.83 at 1x, 0.87 at 2x, 1/1.1 added.
    results = [run(CEILING, "all", 30.0), run(LMSHARDS, "all", 39.0), run(LMSHARDS, "all", 35.0),
               run(CEILING, "all", 30.0), run(CEILING, "2x", 60.0), run(LMSHARDS, "2x", 70.0)]  # fmt: skip
    [row] = scaled_ratios(results, "all")
    assert row["input"] == "2x" and row["by_cpu_time"] == pytest.approx(60 / 70)
    assert row["added_by_cpu_time"] == pytest.approx(30 / 33)  # (60 - 30) / (70 - median(39, 35))
    assert scaled_ratios([r for r in results if r.system == LMSHARDS], "all") == []


def test_the_ceiling_verdict_is_the_median_of_alternating_pairs(tmp_path):
    config = parse_args(["--corpus", str(tmp_path), "--skip-dask", "--pairs", "3"])
    largest = Input("all", ())
    order = [system for system, _ in comparison_plan(largest, config)]
    pairs = [CEILING, LMSHARDS, LMSHARDS, CEILING, CEILING, LMSHARDS]
    assert order == [*pairs, CEILING_OFFSETS, HF_STYLE]  # encode_batch's line once, after the pairs
    # Pair ratios 20/25, 30/30 and 20/21 (in run order): one slow pair must not decide, nor the best.
    results = [
        _result(CEILING, 20.0, 300),
        _result(LMSHARDS, 25.0, 400),
        _result(LMSHARDS, 30.0, 400),
        _result(CEILING, 30.0, 300),
        _result(CEILING, 20.0, 300),
        _result(LMSHARDS, 21.0, 400),
    ]
    summary = ratios(results, "all")["b_over_a"]
    assert summary["pairs"] == pytest.approx([0.8, 1.0, 20 / 21])
    assert summary["value"] == pytest.approx(20 / 21) and summary["met"]
    # CPU seconds (here equal to wall) per pair: 25/20, 30/30, 21/20; the median 1.05 is within 1.15x.
    assert summary["cpu_pairs"] == pytest.approx([1.25, 1.0, 1.05])
    assert summary["cpu_ratio"] == pytest.approx(1.05) and summary["cpu_met"]
    offsets = ratios([*results, _result(CEILING_OFFSETS, 40.0, 300)], "all")["a_offsets"]
    # Against the medians: the fast ceiling's 20 s of encode_batch's 40 s; lmshards' median run, 25 s.
    assert offsets["fast_wall_share"] == pytest.approx(0.5)
    assert offsets["b_over_offsets_wall"] == pytest.approx(40 / 25)
    with pytest.raises(SystemExit):
        parse_args(["--corpus", str(tmp_path), "--pairs", "0"])


def test_flags_default_to_the_product_set_up_and_reject_bad_sizes(tmp_path, capsys):
    config = parse_args(["--corpus", str(tmp_path)])
    assert config.sizes == ("all",)
    assert config.scales == (1, 2, 4)
    with pytest.raises(SystemExit):
        parse_args(["--corpus", str(tmp_path), "--scales", "1,0"])
    assert config.lmshards_args == ()
    with pytest.raises(SystemExit):
        parse_args(["--corpus", str(tmp_path), "--sizes", "30,ten"])
    assert "'ten' is neither a number of MB nor 'all'" in capsys.readouterr().err


def test_scaled_inputs_repeat_every_file_under_other_names(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = [src / "a.txt", src / "b.txt"]
    for i, f in enumerate(files):
        f.write_text(f"text {i}\n" * 10)
    assert scaled_input(files, 1, tmp_path).files == tuple(files)
    four = scaled_input(files, 4, tmp_path / "work")
    assert four.label == "4x" and len({p.name for p in four.files}) == 8
    assert four.bytes == 4 * sum(f.stat().st_size for f in files)
    assert not any(p.is_symlink() for p in four.files)  # discovery reads a link's target once


def test_memory_growth_reports_bytes_per_token_and_the_slope():
    def run(label: str, tokens: int, rss_mb: float) -> Result:
        return dataclasses.replace(
            _result(LMSHARDS, 10.0, rss_mb), input_label=label, tokens_written=tokens
        )

    def flat_runs(run):
        return [
            run("all", 40_000_000, 400),
            run("2x", 80_000_000, 420),
            run("4x", 160_000_000, 440),
        ]

    flat = memory_growth(flat_runs(run))
    assert flat["met_bytes_per_token"] and flat["largest"]["met_2gb"]
    assert flat["slope_rss_bytes_per_added_token"] == pytest.approx(40 * MB / 120_000_000)
    repeated = memory_growth([run("all", 40_000_000, 390), *flat_runs(run)])
    assert [r["peak_rss_mb"] for r in repeated["runs"]] == [400, 420, 440]  # each input's worst run
    growing = memory_growth([run("all", 40_000_000, 1200), run("4x", 160_000_000, 4800)])
    assert not growing["met_bytes_per_token"] and not growing["largest"]["met_2gb"]
    assert growing["slope_rss_bytes_per_added_token"] == pytest.approx(3600 * MB / 120_000_000)


def test_an_orphaned_descendant_is_waited_for_and_its_cpu_counted():
    """A fork server outlives the command and waits for the workers it forked: their CPU seconds
    reach the wrapper only if it waits for the orphan (before, 0.0 of the 1.2 s spun here)."""
    spin = "import time\nend = time.process_time() + 1.2\nwhile time.process_time() < end: pass"
    orphan = f"import os, sys\nif os.fork() == 0:\n    exec({spin!r})\n    os._exit(0)\nsys.exit(0)"
    m = run_measured([sys.executable, "-c", orphan])
    assert m.returncode == 0 and m.cpu_s >= 1.1


def test_each_busy_process_of_the_tree_is_measured_with_its_role():
    spin = "import time\nend = time.process_time() + 1.2\nwhile time.process_time() < end: pass"
    script = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-m', 'timeit', '-n', '1', '-s', {spin!r}, 'pass'])\n"
        f"exec({spin!r})"
    )
    m = run_measured([sys.executable, "-c", script])
    roles = {p.role: p for p in m.processes}
    assert set(roles) == {"command", "timeit"}  # the wrapper itself is not counted
    for p in roles.values():
        assert 0.5 <= p.cpu_s <= m.cpu_s and p.peak_rss_bytes > 1_000_000
