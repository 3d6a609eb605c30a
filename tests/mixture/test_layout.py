"""The shared item layout of a preflighted mixture: roles, dimensions, windows, image size; every problem at once."""

import numpy as np
import pytest

from episodic.format.errors import MixtureLayoutError
from episodic.mixture import preflight
from episodic.mixture.layout import MixtureLayout, camera_key
from episodic.testing.synthetic import mixture_spec


def test_layout_of_a_mixture(synthetic):
    spec = mixture_spec(synthetic, delta_timestamps={"action": [0.0, 0.1, 0.2], "state": [-0.1, 0.0]})
    spec["entries"][3]["state_indices"] = [2, 0]
    report = preflight(spec)
    layout = MixtureLayout.from_report(report, image_size=(24, 40), resize_mode="letterbox")
    roles = list(dict.fromkeys(k.rsplit(".", 1)[-1] for d in synthetic for k in d.cameras))
    assert list(layout.cameras) == roles and layout.camera_keys == [camera_key(r) for r in roles]
    dims = [2 if i == 3 else d.state_dim for i, d in enumerate(synthetic)]
    assert layout.state_dim == max(dims) and layout.action_dim == max(d.action_dim for d in synthetic)
    assert dict(layout.windows) == {"state": 2, "action": 3} and layout.image_size == (24, 40)
    for i, (d, e) in enumerate(zip(synthetic, layout.entries)):
        assert (e.index, e.slot, e.name, e.fps, e.state_key, e.state_dim) == (i, i, d.name, d.fps, d.state_key, dims[i])
        assert e.state_indices == ((2, 0) if i == 3 else None)
        assert e.offsets["action"] == (0, round(0.1 * d.fps), round(0.2 * d.fps))
        # the windows as seconds on the entry's own grid: what its single dataset is given
        assert np.allclose(np.asarray(e.delta_timestamps()[d.state_key]) * d.fps, [-round(0.1 * d.fps), 0])
        assert set(e.data_keys) >= {"timestamp", "task_index", "index", d.state_key, "action"}
        assert not any(k.startswith("observation.images") for k in e.data_keys)
    from episodic.datasets.item_layout import features, mixture_layout

    feats = features(mixture_layout(layout))
    assert feats[layout.camera_keys[0]]["shape"] == [24, 40, 3]
    assert feats["observation.state"]["shape"] == [layout.state_dim] and feats["action_mask"]["dtype"] == "bool"


def test_every_layout_problem_at_once(synthetic):
    spec = mixture_spec(synthetic[:4], delta_timestamps={"action": [0.0, 0.1]})
    spec["entries"][1]["delta_timestamps"] = {"action": [0.0, 0.1, 0.2]}  # another window length
    spec["entries"][2]["delta_timestamps"] = {}  # no window at all
    report = preflight(spec)
    with pytest.raises(MixtureLayoutError) as err:
        MixtureLayout.from_report(report, resize_mode="crop")
    problems = err.value.problems
    assert len(problems) == 3, problems
    assert "resize_mode must be one of" in problems[0]
    window = next(p for p in problems if p.startswith("role 'action'"))
    assert "2 steps in 2 entries" in window and "3 steps in 1 entry ('synthetic/ds001')" in window
    assert "no window in 1 entry ('synthetic/ds002')" in window
    sizes = next(p for p in problems if "sizes" in p)
    assert "give image_size=(H, W)" in sizes and "16x32" in sizes
    with pytest.raises(MixtureLayoutError, match=r"image_size must be \(height, width\)"):
        MixtureLayout.from_report(preflight(mixture_spec(synthetic[:2])), image_size=(0, 32))


def test_one_camera_size_needs_no_image_size(synthetic):
    full = preflight(mixture_spec(synthetic))
    by_size = {}
    for rep in full.entries:
        for role, shape in rep.camera_shapes.items():
            by_size.setdefault(shape[:2], []).append((rep.index, rep.cameras[role]))
    size, picks = max(by_size.items(), key=lambda kv: len(kv[1]))
    picks = dict(picks)  # one camera per entry
    assert len(picks) >= 2
    spec = mixture_spec([synthetic[i] for i in picks])
    for entry, (i, key) in zip(spec["entries"], picks.items()):
        entry["roles"] = {"front": key, "state": synthetic[i].state_key, "action": "action"}
    layout = MixtureLayout.from_report(preflight(spec))
    assert layout.cameras == ("front",) and layout.image_size == size


def _doc_examples() -> dict[str, str]:
    """The spec examples as the docs print them: the first ```yaml block of docs/mixtures.md and the ``::`` block of the
    `episodic.mixture.checking.spec` docstring, read from the files (so the docs cannot drift from what loads)."""
    import re
    from pathlib import Path

    import episodic.mixture.checking.spec as spec_module

    doc = (Path(__file__).resolve().parents[2] / "docs" / "mixtures.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", doc, re.S).group(1)
    text = spec_module.__doc__.split("::\n", 1)[1]
    lines = []
    for line in text.splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return {"docs/mixtures.md": block, "mixture/spec.py": "\n".join(lines)}


@pytest.fixture(scope="module")
def doc_datasets(tmp_path_factory):
    """Two datasets the examples' entries can stand for: 8 episodes with cameras 'up' and 'side' (the Hub entry's
    mapped keys), and 4 episodes with one camera (the koch entry)."""
    from episodic.demo import write_demo_dataset

    base = tmp_path_factory.mktemp("docs")
    so101 = write_demo_dataset(
        base / "so101",
        num_episodes=8,
        min_length=8,
        max_length=12,
        height=32,
        width=48,
        cameras=("observation.images.up", "observation.images.side"),
        progress=False,
    )
    koch = write_demo_dataset(
        base / "koch",
        num_episodes=4,
        min_length=8,
        max_length=12,
        height=32,
        width=48,
        cameras=("observation.images.top",),
        progress=False,
    )
    return [str(so101), str(koch)]


@pytest.mark.parametrize("where", ["docs/mixtures.md", "mixture/spec.py"])
def test_the_documented_spec_example_builds_a_mixture(doc_datasets, where, tmp_path):
    """The example exactly as printed, only its sources pointed at local datasets of the keys it names (and the
    Hub copy's `root` dropped): it preflights, shares one layout and gives items with the windows it asks for."""
    import yaml

    from episodic.datasets.mixture import MixtureDataset
    from episodic.mixture import MixtureSpec

    raw = yaml.safe_load(_doc_examples()[where])
    assert len(raw["entries"]) == len(doc_datasets)
    for entry, path in zip(raw["entries"], doc_datasets):
        entry["source"] = path
        entry.pop("root", None)
    spec = MixtureSpec.from_dict(raw)
    report = preflight(spec)
    assert report.ok, report.message()
    ds = MixtureDataset(report, cache_dir=tmp_path)
    layout = ds.layout
    want = {role: len(seconds) for role, seconds in (raw.get("delta_timestamps") or {}).items()}
    assert dict(layout.windows) == want
    batch = ds.get_batch(ds.sampler.indices_at(np.arange(8), 0))
    assert batch["action"].shape[:2] == (8, want["action"])
    assert set(np.asarray(batch["dataset_name"]).tolist()) <= {e.name for e in spec.entries}
