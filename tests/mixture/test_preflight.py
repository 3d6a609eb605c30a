"""Preflight over real tiny datasets: facts per entry, every problem of every entry at once, skip and re-spread,
remote and Hub sources read through their metadata only, bounded concurrency, cancellation."""

import functools
import http.server
import shutil
import threading
import time

import numpy as np
import pytest

from episodic import EpisodicDataset
from episodic.format.errors import MissingFileError, MixturePreflightError
from episodic.mixture import MixtureSpec, build_sampler, preflight
from episodic.mixture.checking import entry_sources as fetch_module
from episodic.mixture.checking.weights import raw_weights, shares
from episodic.testing.synthetic import mixture_spec


def test_facts_of_every_entry(synthetic):
    spec = MixtureSpec.from_dict(
        mixture_spec(
            synthetic,
            weighting={"rule": "temperature", "alpha": 0.5},
            delta_timestamps={"action": [0.0, 0.1], "state": [-0.1, 0.0]},
        )
    )
    report = preflight(spec, concurrency=4)
    assert report.ok, report.message()
    assert {d.version for d in synthetic} == {"v2.1", "v3.0"}
    for d, rep in zip(synthetic, report.entries):
        assert (rep.name, rep.version, rep.fps, rep.episodes, rep.frames) == (
            d.name,
            d.version,
            d.fps,
            d.episodes,
            d.frames,
        )
        assert rep.cameras == {k.rsplit(".", 1)[-1]: k for k in d.cameras}
        assert all(len(s) == 3 and s[2] == 3 for s in rep.camera_shapes.values())
        assert (rep.state_key, rep.state_dim, rep.action_dim) == (d.state_key, d.state_dim, d.action_dim)
        assert rep.delta_offsets["action"] == (0, round(0.1 * d.fps))  # each entry's own fps
        assert rep.status == "ok" and rep.robot_type == d.robot_type
    frames = np.array([d.frames for d in synthetic], dtype=float)
    assert np.allclose(report.shares, frames**0.5 / (frames**0.5).sum())
    shifted = [p for p in report.warnings if p.field == "delta_timestamps"]  # 0.1 s is not on a 15 or 25 fps grid
    assert len(shifted) == (any(d.fps in (15, 25) for d in synthetic))
    table = report.table()
    assert all(d.name in table for d in synthetic) and "share" in table.splitlines()[0]
    # the datasets are real: both layouts load and give items
    for d in (next(x for x in synthetic if x.version == "v2.1"), next(x for x in synthetic if x.version == "v3.0")):
        item = EpisodicDataset(d.path)[0]
        assert item[d.state_key].shape == (d.state_dim,) and item[d.cameras[0]].shape[0] == 3


def broken_spec(synthetic, tmp_path):
    mix = mixture_spec(
        synthetic,
        delta_timestamps={"action": [0.0, 0.02], "gripper_cam": [0.0]},
        delta_rounding="exact",
        max_state_dim=13,
    )
    e = mix["entries"]
    key = synthetic[2].cameras[0]
    e[2]["roles"][key.rsplit(".", 1)[-1]] = key + '"'  # an unknown camera key
    e[3]["episodes"] = [0, 50]
    e[3]["exclude_episodes"] = [77]
    e[4]["state_indices"] = [0, 99]
    e[5]["source"] = str(tmp_path / "no_such_dataset")
    e[6]["roles"]["state"] = synthetic[6].cameras[0]  # a camera where a vector belongs
    e[7]["roles"]["task"] = "instruction"
    e[8]["roles"]["action"] = "actions"
    return MixtureSpec.from_dict(mix)


def test_every_problem_of_every_entry_at_once(synthetic, tmp_path):
    spec = broken_spec(synthetic, tmp_path)
    with pytest.raises(MixturePreflightError) as err:
        preflight(spec)
    report = err.value.report
    by = {(p.entry, p.field): p for p in report.errors}
    key = synthetic[2].cameras[0]
    cam = by[(2, f"roles.{key.rsplit('.', 1)[-1]}")]
    assert key + '"' in cam.message and cam.suggestions[0] == key
    assert (
        "out of range [50]" in by[(3, "episodes")].message
        and "out of range [77]" in by[(3, "exclude_episodes")].message
    )
    assert "[99] out of range" in by[(4, "state_indices")].message
    assert "no_such_dataset" in by[(5, "source")].message and "not found" in by[(5, "source")].message
    assert "must be a 1-d numeric vector" in by[(6, "roles.state")].message
    assert "no feature 'instruction'" in by[(7, "roles.task")].message
    assert by[(8, "roles.action")].suggestions[0] == "action"
    assert "no entry has a role 'gripper_cam'" in by[(-1, "delta_timestamps.gripper_cam")].message
    too_big = [d for d in synthetic if d.state_dim > 13 and synthetic.index(d) not in (4, 5, 6)]
    assert too_big
    for d in too_big:
        assert "max_state_dim=13" in by[(synthetic.index(d), "roles.state")].message
    off_grid = [i for i, d in enumerate(synthetic) if (0.02 * d.fps) % 1 and i not in (5, 8)]
    assert len(off_grid) > 3
    for i in off_grid:
        assert "not multiples of 1/fps" in by[(i, "delta_timestamps.action")].message
    text = str(err.value)
    assert all(str(p) in text for p in report.errors)  # one error message names all of them
    assert f"entry 2 ({synthetic[2].name})" in text


def test_skip_re_spreads_the_weight_and_is_recorded(synthetic, tmp_path):
    spec = broken_spec(synthetic, tmp_path)
    spec = MixtureSpec.from_dict({**spec.to_dict(), "delta_timestamps": {"action": [0.0]}})
    report = preflight(spec, on_error="skip")
    bad = {2, 3, 4, 5, 6, 7, 8} | {i for i, d in enumerate(synthetic) if d.state_dim > 13}
    assert {i for i, r in enumerate(report.entries) if r.status == "skipped"} == bad
    assert report.skipped == [synthetic[i].name for i in sorted(bad)]
    keep = [i not in bad for i in range(len(synthetic))]
    raw = raw_weights(spec, [d.frames for d in synthetic], [d.episodes for d in synthetic])
    assert np.allclose(report.shares, shares(raw, keep)) and abs(sum(report.shares) - 1) < 1e-12
    assert "re-spread" in report.summary()
    sampler, used = build_sampler(report, seed=1)
    assert used == [i for i in range(len(synthetic)) if keep[i]]
    assert sampler.mixture_state()["skipped"] == report.skipped  # the decision travels with the order state
    entry, row = sampler.locate(np.arange(len(sampler)), 0)
    for k, i in enumerate(used):
        assert row[entry == k].max() < synthetic[i].frames


def test_build_sampler_draws_only_selected_episodes(synthetic):
    mix = mixture_spec(synthetic[:3])
    mix["entries"][0]["exclude_episodes"] = [0]
    mix["entries"][1]["episodes"] = [1]
    report = preflight(MixtureSpec.from_dict(mix))
    sampler, _ = build_sampler(report)
    entry, row = sampler.locate(np.arange(3 * len(sampler)), 0)
    for k in range(3):
        eps = report.metadata[k].episodes
        episode_of_row = np.searchsorted(eps.dataset_to_index, row[entry == k], side="right")
        allowed = {0: set(range(1, len(eps))), 1: {1}, 2: set(range(len(eps)))}[k]
        assert set(episode_of_row.tolist()) == allowed


class _Counting(http.server.SimpleHTTPRequestHandler):
    paths: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).paths.append(self.path)
        super().do_GET()

    def do_HEAD(self):
        type(self).paths.append(self.path)
        super().do_HEAD()


def test_a_remote_entry_is_read_through_its_metadata_only(synthetic):
    pytest.importorskip("aiohttp")
    root = synthetic[0].path
    _Counting.paths = []
    handler = functools.partial(_Counting, directory=str(root.rsplit("/", 1)[0]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{root.rsplit('/', 1)[1]}"
        mix = mixture_spec(synthetic[:2])
        mix["entries"][0]["source"] = url
        report = preflight(MixtureSpec.from_dict(mix))
    finally:
        server.shutdown()
        server.server_close()
    assert report.ok, report.message()
    assert report.entries[0].frames == synthetic[0].frames
    assert _Counting.paths and all("/meta/" in p for p in _Counting.paths), _Counting.paths


def test_hub_entries_use_the_local_copy_or_fetch_only_metadata(synthetic, tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    shutil.copytree(f"{synthetic[1].path}/meta", hub / "org/cached/meta")  # metadata only: no data, no videos
    monkeypatch.setenv("HF_LEROBOT_HOME", str(hub))
    calls = []

    def download(repo_id, local_dir, revision=None, episodes=None, **kw):
        calls.append((repo_id, revision, episodes))
        raise MissingFileError(f"hub dataset {repo_id!r}: not found on the Hub")

    monkeypatch.setattr("episodic.storage.hub.download", download)
    mix = mixture_spec(synthetic[:1])
    mix["entries"] += [
        {"source": "org/cached", "roles": mix["entries"][0]["roles"] | {}},
        {"source": "org/missing", "revision": "0123456789abcdef0123456789abcdef01234567"},
    ]
    mix["entries"][1]["roles"] = {k.rsplit(".", 1)[-1]: k for k in synthetic[1].cameras} | {
        "state": synthetic[1].state_key
    }
    report = preflight(MixtureSpec.from_dict(mix), on_error="skip")
    assert report.entries[1].status == "ok" and report.entries[1].frames == synthetic[1].frames
    assert report.entries[2].status == "skipped" and "not found on the Hub" in report.problems_of(2)[0].message
    assert calls == [("org/missing", "0123456789abcdef0123456789abcdef01234567", [])]  # no episode: meta/ only


def test_concurrency_is_bounded(synthetic, monkeypatch):
    active, peak, lock = [0], [0], threading.Lock()
    real = fetch_module.fetch_entry

    def tracked(entry, refresh_hub=False, keep_files=False):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.05)
            return real(entry, refresh_hub, keep_files)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(fetch_module, "fetch_entry", tracked)
    report = preflight(MixtureSpec.from_dict(mixture_spec(synthetic)), concurrency=3)
    assert report.ok and peak[0] == 3
    with pytest.raises(ValueError, match=r"concurrency must be an int in \[1, 256\]"):
        preflight(MixtureSpec.from_dict(mixture_spec(synthetic)), concurrency=0)


def test_a_cancelled_preflight_reads_no_further_entry(synthetic, monkeypatch):
    """`cancel` set by another thread (here: while the second entry is read, one at a time): the entries not started
    are never read, and preflight raises InterruptedError instead of reporting them as problems."""
    read, cancel = [], threading.Event()
    real = fetch_module.fetch_entry

    def reading(entry, refresh_hub=False, keep_files=False):
        read.append(entry.name)
        if len(read) == 2:
            cancel.set()
        return real(entry, refresh_hub, keep_files)

    monkeypatch.setattr(fetch_module, "fetch_entry", reading)
    spec = MixtureSpec.from_dict(mixture_spec(synthetic))
    with pytest.raises(InterruptedError, match="preflight cancelled"):
        preflight(spec, concurrency=1, cancel=cancel)
    assert read == [e.name for e in spec.entries[:2]]
    read.clear()
    assert preflight(spec, concurrency=4, cancel=threading.Event()).ok and len(read) == len(spec.entries)


def test_missing_statistics_are_a_warning(synthetic, copy_of):
    import json as _json

    root = copy_of(synthetic[0].path)
    stats = _json.loads((root / "meta/stats.json").read_text())
    del stats["action"]
    (root / "meta/stats.json").write_text(_json.dumps(stats))
    mix = mixture_spec(synthetic[:1])
    mix["entries"][0]["source"] = str(root)
    report = preflight(MixtureSpec.from_dict(mix))
    assert report.ok and [(p.field, p.severity) for p in report.problems] == [("roles.action", "warning")]
    assert "no statistics for 'action'" in report.problems[0].message
