"""Target vs realised shares: the table (entries, groups, largest deviation), the order's counts, the chart and
`episodic mixture shares`."""

import json

import numpy as np
import pytest

from episodic.cli import main
from episodic.mixture import build_sampler, preflight
from episodic.mixture.shares import order_counts, share_table
from episodic.testing.synthetic import mixture_spec

from support import assert_picture, read_png


def test_share_table():
    t = share_table(["a", "b", "c"], ["x", "y", "x"], [0.5, 0.3, 0.2], [6, 3, 1])
    assert t["items"] == 10 and [e["realised"] for e in t["entries"]] == [0.6, 0.3, 0.1]
    assert [(g["group"], g["entries"], g["items"]) for g in t["groups"]] == [("x", 2, 7), ("y", 1, 3)]
    assert np.isclose(t["groups"][0]["target"], 0.7) and np.isclose(t["groups"][0]["realised"], 0.7)
    assert np.isclose(t["max_abs_error"], 0.1) and np.isclose(t["max_abs_error_groups"], 0.0)
    empty = share_table(["a"], [None], [1.0], [0])
    assert empty["entries"][0]["realised"] == 0 and empty["max_abs_error"] == 0
    with pytest.raises(ValueError, match="one name, group, target and count per entry"):
        share_table(["a"], [None], [0.5, 0.5], [1, 1])


def test_order_counts_follow_the_weights(synthetic):
    spec = mixture_spec(synthetic, weighting={"rule": "temperature", "alpha": 0.3})
    spec["entries"][4]["weight"] = 0.01  # far below one sample in a batch
    report = preflight(spec)
    sampler, _ = build_sampler(report, seed=3)
    counts = order_counts(sampler, 100_000, chunk=777)
    entry, _ = sampler.draws_at(np.arange(len(sampler)), 0)  # one epoch, looked up at once
    assert counts.sum() == 100_000
    assert np.array_equal(order_counts(sampler, len(sampler)), np.bincount(entry, minlength=len(synthetic)))
    realised = counts / counts.sum()
    assert np.abs(realised - np.asarray(report.shares)).max() < 0.01  # within 1% of the weights
    # the quota: every entry within 3 samples of its share over any prefix
    assert (np.abs(counts - 100_000 * np.asarray(report.shares)) < 3).all()


def test_mixture_shares_command(synthetic, tmp_path, capsys):
    (tmp_path / "mix.json").write_text(json.dumps(mixture_spec(synthetic)))
    png, out = tmp_path / "shares.png", tmp_path / "shares.json"
    assert (
        main(
            [
                "mixture",
                "shares",
                str(tmp_path / "mix.json"),
                "--samples",
                "5000",
                "-o",
                str(png),
                "--json",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    groups = {d.robot_type for d in synthetic}
    assert all(g in text for g in groups) and "largest |realised - target|" in text
    table = json.loads(out.read_text())
    assert table["items"] == 5000 and len(table["entries"]) == len(synthetic)
    assert {g["group"] for g in table["groups"]} == groups
    assert_picture(read_png(png), min_colours=20)
