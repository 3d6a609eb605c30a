"""The command line: info, validate (all problems at once, exit status), demo."""

from __future__ import annotations

import subprocess
import sys

from episodic import LeRobotDataset
from episodic.cli import main


def test_info(small_root, capsys):
    assert main(["info", str(small_root)]) == 0
    out = capsys.readouterr().out
    assert "episodes     6" in out and "observation.images.top" in out and "av1" in out and "fold the towel" in out


def test_validate_ok(multifile_root, capsys):
    assert main(["validate", str(multifile_root), "-q"]) == 0
    quick = capsys.readouterr().out
    assert main(["validate", str(multifile_root), "-q", "--full"]) == 0
    full = capsys.readouterr().out
    assert quick.startswith("OK:") and full.startswith("OK:")
    frames = [int(out.split(" frames decoded")[0].rsplit(" ", 1)[1]) for out in (quick, full)]
    assert frames[1] == 2 * sum(LeRobotDataset("x", root=multifile_root).meta.episodes.length) > frames[0]


def test_validate_reports_every_problem(multifile_root, copy_of, capsys):
    root = copy_of(multifile_root)
    data = sorted(root.glob("data/*/*.parquet"))
    data[0].unlink()
    data[1].write_bytes(data[1].read_bytes()[:100])
    video = sorted(root.glob("videos/observation.images.wrist/*/*.mp4"))[-1]
    video.write_bytes(b"not a video")
    assert main(["validate", str(root), "-q"]) == 1
    out = capsys.readouterr().out
    assert "3 problem(s)" in out
    assert data[0].name in out and "not found" in out
    assert "not a readable parquet" in out and video.name in out


def test_info_on_missing_dataset_is_a_clean_error(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing")]) == 2
    assert "dataset directory not found" in capsys.readouterr().err


def test_demo_runs(tmp_path):
    env = {"EPISODIC_CACHE": str(tmp_path), "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-m", "episodic.cli", "demo", "--episodes", "3", "--workers", "0", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "frames/s" in out.stdout and (tmp_path / "demo/demo-3ep/meta/info.json").exists()


def test_mixture_check_prints_the_table(small_root, multifile_root, tmp_path, capsys):
    import json

    spec = tmp_path / "mix.json"
    spec.write_text(
        json.dumps(
            {
                "weighting": "uniform",
                "entries": [str(small_root), str(small_root), {"source": str(multifile_root), "name": "multi"}],
            }
        )
    )
    assert main(["mixture", "check", str(spec), "-q", "--json", str(tmp_path / "report.json")]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0].split()
    assert head == [
        "#",
        "entry",
        "status",
        "ver",
        "episodes",
        "frames",
        "cameras",
        "state/action",
        "fps",
        "weight",
        "share",
    ]
    assert f"{small_root}#2" in out and "multi" in out and "33.3%" in out and "2 (top,wrist)" in out
    assert "0 error(s)" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and [e["episodes"] for e in report["entries"]] == [6, 6, 12]


def test_mixture_check_exits_1_with_every_problem(small_root, multifile_root, tmp_path, capsys):
    import json

    spec = tmp_path / "mix.json"
    spec.write_text(
        json.dumps(
            {
                "entries": [
                    {"source": str(small_root), "roles": {"wrist": "observation.images.wirst"}},
                    {"source": str(multifile_root), "episodes": [3, 40]},
                    {"source": str(tmp_path / "gone")},
                ]
            }
        )
    )
    assert main(["mixture", "check", str(spec), "-q"]) == 1
    out = capsys.readouterr().out
    assert "3 error(s)" in out and "observation.images.wirst" in out and "closest: 'observation.images.wrist'" in out
    assert "out of range [40]" in out and "gone" in out and "error" in out.splitlines()[2]
    assert main(["mixture", "check", str(spec), "-q", "--on-error", "skip"]) == 1  # still an error: reported
    assert "skipped (3)" in capsys.readouterr().out
    spec.write_text(json.dumps({"entries": [{"sorce": "x"}]}))
    assert main(["mixture", "check", str(spec), "-q"]) == 1
    assert "unknown field 'sorce' (did you mean 'source'" in capsys.readouterr().out


def test_mixture_check_escapes_dataset_text(small_root, tmp_path, capsys):
    import json

    spec = tmp_path / "mix.json"
    spec.write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "source": str(small_root),
                        "name": "evil\x1b[2Jname",
                        "roles": {"wrist": "observation.images.\x1b[31mred"},
                    }
                ]
            }
        )
    )
    assert main(["mixture", "check", str(spec), "-q"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2Jname" in out and "\\x1b[31mred" in out


def test_mixture_check_of_a_spec_nested_too_deep_is_one_clean_error(tmp_path):
    """100,000 levels of nesting: one line naming the file and the bound, exit status 1, no traceback."""
    spec = tmp_path / "deep.json"
    spec.write_text('{"entries": [{"source": "/x", "storage_options": {"a": ' + "[" * 100000 + "]" * 100000 + "}}]}")
    out = subprocess.run(
        [sys.executable, "-m", "episodic.cli", "mixture", "check", str(spec), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-2000:]
    assert f"{spec}: nested deeper than 100 levels" in text and "Traceback" not in text and "RecursionError" not in text
