"""The command line of the fleet tools: `episodic convert SRC DST` / `repack` (one dataset, or a list), `episodic
fleet TOOL LIST OUT` (options, shards, the summary, exit statuses), and the one line that says what to install
when Ray is missing."""

from __future__ import annotations

import json
import sys

from episodic.cli import main

from fleet_checks import items_equal, make_list


def test_convert_one_dataset_then_again(synthetic, tmp_path, capsys):
    src = synthetic[2].path  # v2.1
    assert main(["convert", src, str(tmp_path / "new"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "done" in out and "1 done, 0 skipped" in out
    items_equal(src, tmp_path / "new")
    assert main(["repack", src, str(tmp_path / "new"), "-q", "--data-file-mb", "5"]) == 0  # another tool: redone
    assert main(["repack", src, str(tmp_path / "new"), "-q", "--data-file-mb", "5"]) == 0
    assert "0 done, 1 skipped" in capsys.readouterr().out


def test_fleet_over_a_list(fleet_sources, tmp_path, capsys):
    listing = make_list(tmp_path / "list.txt", [fleet_sources[0], fleet_sources[-1]])
    out = tmp_path / "out"
    assert main(["fleet", "validate", str(listing), str(out), "-q", "--option", "full=true", "--workers", "1"]) == 1
    text = capsys.readouterr().out
    assert "broken" in text and "failed" in text and "1 done" in text
    summary = json.loads((out / "fleet-validate.json").read_text())
    assert summary["failed"] == 1 and summary["results"][0]["status"] == "failed"
    assert (
        main(
            [
                "fleet",
                "validate",
                str(listing),
                str(out),
                "-q",
                "--shard",
                "0/2",
                "--option",
                "full=true",
                "--summary",
                str(tmp_path / "s.json"),
            ]
        )
        == 0
    )  # the same options: the done one is skipped
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["shard"] == "0/2" and [r["status"] for r in s["results"]] == ["skipped"]


def test_bad_arguments_fail_before_any_dataset(fleet_sources, tmp_path, capsys):
    listing = make_list(tmp_path / "list.txt", fleet_sources[:2])
    out = tmp_path / "out"
    assert main(["convert", str(listing), str(out), "--shard", "2/2"]) == 2
    assert "--shard takes K/N" in capsys.readouterr().err
    assert main(["fleet", "convert", str(listing), str(out), "--option", "row_group_mbs=3"]) == 2
    assert "unknown relayout option(s) ['row_group_mbs']" in capsys.readouterr().err
    assert main(["repack", str(listing), str(out), "--chunks-size", "0"]) == 2
    assert "chunks_size must be an int" in capsys.readouterr().err
    assert not out.exists()


def test_ray_missing_is_one_line(fleet_sources, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    listing = make_list(tmp_path / "list.txt", fleet_sources[:1])
    assert main(["fleet", "stats", str(listing), str(tmp_path / "out"), "--executor", "ray", "-q"]) == 2
    err = capsys.readouterr().err
    assert err == 'episodic fleet stats: the ray executor needs Ray: pip install "episodic[ray]"\n'
