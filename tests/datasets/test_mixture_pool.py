"""A streaming mixture's batches, gathered from its pooled episodes in the mixture's layout (`mixture_pool`),
equal the map-style mixture's items of the same frames (`harmonise.build` over each entry's `FrameEngine.part`):
windowed camera roles, per-entry windows on each entry's fps grid, index selections, remapped roles, a camera
in two roles, an image feature, entries without a role; a frame outside tolerance is a named error."""

from __future__ import annotations

import re
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from episodic.datasets.mixture import MixtureDataset
from episodic.datasets.streaming_mixture import StreamingMixtureDataset
from episodic.format.errors import FrameTimestampError, VideoDecodeError
from episodic.mixture import MixtureSpec, preflight
from episodic.testing.synthetic import mixture_spec

from support import add_image_feature

SIZE = (24, 40)


def _assert_stream_equals_map(spec: dict, tmp_path, batch_size: int = 7, **kw) -> list[dict]:
    report = preflight(MixtureSpec.from_dict(spec))
    ds = StreamingMixtureDataset(report, image_size=SIZE, episode_pool_size=5, seed=3, cache_dir=tmp_path, **kw)
    batches = list(ds.loader(batch_size=batch_size, num_workers=0))
    mds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, **kw)
    slot_of = {e.index: e.slot for e in ds.layout.entries}
    for b in batches:
        flat = [int(ds.sampler.flat_index(slot_of[int(d)], int(i))) for d, i in zip(b["dataset_index"], b["index"])]
        ref = mds.get_batch(flat)
        assert ref.keys() == b.keys()
        for k, v in ref.items():
            assert torch.equal(b[k], v) if torch.is_tensor(v) else b[k] == v, k
    return batches


def test_heterogeneous_entries_with_windows_selections_and_remapped_roles(synthetic, tmp_path):
    spec = mixture_spec(synthetic, delta_timestamps={"action": [0.0, 0.1, 0.2], "state": [-0.1, 0.0]})
    e = spec["entries"]
    e[6]["roles"] = {
        "front": synthetic[6].cameras[2],
        "wrist": synthetic[6].cameras[0],
        "state": synthetic[6].state_key,
        "action": "action",
    }
    e[0]["state_indices"] = [4, 0, 2]
    e[1]["action_indices"] = [1]
    e[1]["tolerance_s"] = 0.001
    e[2]["exclude_episodes"] = [0]
    e[3]["delta_timestamps"] = {"action": [0.0, 0.05, 0.1], "state": [-0.05, 0.0]}
    e[5]["roles"] = {k: v for k, v in e[5]["roles"].items() if k != "state"}  # an entry without a state
    roles = Counter(r for x in e for r in x["roles"] if r not in ("state", "action"))
    windowed = roles.most_common(1)[0][0]
    spec["delta_timestamps"][windowed] = [-0.1, 0.0, 0.1]  # a windowed camera role
    e[3]["delta_timestamps"][windowed] = [-0.05, 0.0, 0.05]
    batches = _assert_stream_equals_map(spec, tmp_path)
    pads = torch.cat([b[f"observation.images.{windowed}_is_pad"] for b in batches])
    assert pads.any() and not pads.all()  # padded at episode edges, and for entries without the camera
    state_pad = torch.cat([b["observation.state_is_pad"] for b in batches])
    names = [n for b in batches for n in b["dataset_name"]]
    assert state_pad[[n == synthetic[5].name for n in names]].all()


def test_a_camera_in_two_roles_and_uint8_frames(synthetic, tmp_path):
    spec = mixture_spec(synthetic[:4], delta_timestamps={"action": [0.0, 0.1]})
    cam = synthetic[1].cameras[0]
    spec["entries"][1]["roles"] = {"front": cam, "wrist": cam, "state": synthetic[1].state_key, "action": "action"}
    batches = _assert_stream_equals_map(spec, tmp_path, return_uint8=True)
    rows = torch.cat([b["dataset_index"] for b in batches]) == 1
    front = torch.cat([b["observation.images.front"] for b in batches])[rows]
    assert front.dtype == torch.uint8 and front.any()
    assert torch.equal(front, torch.cat([b["observation.images.wrist"] for b in batches])[rows])


def test_an_image_feature_in_the_data_file(synthetic, copy_of, tmp_path):
    root = copy_of(synthetic[0].path)
    add_image_feature(root, "observation.images.still", 16, 32)
    spec = mixture_spec(synthetic[:3], delta_timestamps={"still": [-0.1, 0.0]})
    spec["entries"][0]["source"] = str(root)
    spec["entries"][0]["roles"]["still"] = "observation.images.still"
    batches = _assert_stream_equals_map(spec, tmp_path)
    still = torch.cat([b["observation.images.still"] for b in batches])
    assert still[torch.cat([b["dataset_index"] for b in batches]) == 0].any()


def _off_grid_copy(d, copy_of):
    """A copy of dataset `d` whose row 3 (episode 0) has a timestamp between two frames."""
    root = copy_of(d.path)
    path = sorted((root / "data").rglob("*.parquet"))[0]
    t = pq.read_table(path)
    ts = t.column("timestamp").to_numpy().copy()
    ts[3] += 0.4 / d.fps  # between two frames
    pq.write_table(
        t.set_column(
            t.schema.get_field_index("timestamp"), "timestamp", pa.array(ts, t.schema.field("timestamp").type)
        ),
        path,
    )
    return root


def test_a_frame_outside_tolerance_is_an_error_naming_episode_and_camera(synthetic, copy_of, tmp_path):
    d = synthetic[0]
    root = _off_grid_copy(d, copy_of)
    spec = mixture_spec([d])
    spec["entries"][0]["source"] = str(root)
    ds = StreamingMixtureDataset(preflight(MixtureSpec.from_dict(spec)), image_size=SIZE, cache_dir=tmp_path)
    with pytest.raises(FrameTimestampError, match=r"episode 0, camera 'observation\.images\.\w+': .*no frame within"):
        list(ds.loader(batch_size=4, num_workers=0))


def test_map_style_entries_built_alike_name_the_episode_of_a_frame_outside_tolerance(synthetic, copy_of, tmp_path):
    """Entries built alike are gathered as one part, their frames located once per episode: an episode with a row
    outside tolerance is located when decoded instead, so the error names it, and its other rows still load."""
    d = synthetic[0]
    spec = mixture_spec([d, d, d])
    spec["entries"][0]["source"] = str(_off_grid_copy(d, copy_of))
    for i, e in enumerate(spec["entries"]):
        e["name"] = f"copy{i}"
    ds = MixtureDataset(preflight(MixtureSpec.from_dict(spec)), image_size=SIZE, cache_dir=tmp_path)
    slot = {e.index: e.slot for e in ds.layout.entries}
    flat = lambda entry, row: int(ds.sampler.flat_index(slot[entry], row))  # noqa: E731
    good = ds.get_batch([flat(0, 5), flat(1, 3), flat(2, 4), flat(0, 6)])
    same = MixtureDataset(preflight(MixtureSpec.from_dict(mixture_spec([d]))), image_size=SIZE, cache_dir=tmp_path)
    alone = same.get_batch([int(same.sampler.flat_index(0, r)) for r in (5, 3, 4, 6)])
    cams = [k for k in good if k.startswith("observation.images.") and not k.endswith("_is_pad")]
    assert cams
    for k in cams:  # the frames of the episode with the bad row, and of the other entries, are the dataset's
        assert torch.equal(good[k], alone[k]), k
    with pytest.raises(FrameTimestampError, match=r"episode 0, camera 'observation\.images\.\w+': .*no frame within"):
        ds.get_batch([flat(1, 3), flat(0, 3), flat(2, 4)])


def test_map_style_names_the_file_and_episode_of_a_video_that_cannot_be_opened(synthetic, copy_of, tmp_path):
    """An entry's camera file that is not a video is named with the episode and camera a batch wanted from it (its
    frames are located, opening it, before the batch decodes); the other entries' items load as before."""
    d = synthetic[0]
    spec = mixture_spec([d, d, d])
    broken = copy_of(d.path)
    mp4 = sorted((broken / "videos").rglob("*.mp4"))[0]
    mp4.write_bytes(b"not a video" * 100)
    spec["entries"][1]["source"] = str(broken)
    for i, e in enumerate(spec["entries"]):
        e["name"] = f"copy{i}"
    ds = MixtureDataset(preflight(MixtureSpec.from_dict(spec)), image_size=SIZE, cache_dir=tmp_path)
    slot = {e.index: e.slot for e in ds.layout.entries}
    flat = lambda entry, row: int(ds.sampler.flat_index(slot[entry], row))  # noqa: E731
    good = ds.get_batch([flat(0, 5), flat(2, 4)])
    same = MixtureDataset(preflight(MixtureSpec.from_dict(mixture_spec([d]))), image_size=SIZE, cache_dir=tmp_path)
    alone = same.get_batch([int(same.sampler.flat_index(0, r)) for r in (5, 4)])
    for k in [k for k in good if k.startswith("observation.images.") and not k.endswith("_is_pad")]:
        assert torch.equal(good[k], alone[k]), k
    camera = mp4.parent.parent.name
    with pytest.raises(VideoDecodeError, match=rf"episode 0, camera '{re.escape(camera)}': .*{mp4.name}: cannot open"):
        ds.get_batch([flat(0, 3), flat(1, 3), flat(2, 4)])


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_batch_over_more_files_than_the_decoder_cache_holds(synthetic, tmp_path, monkeypatch, threads):
    """A batch whose frames come from more video files than the decoder cache holds open decodes them one file after
    the other (a reader is never evicted by the batch that took it): the items equal those of a cache that holds
    every file, on one decode thread and on two."""
    monkeypatch.setenv("EPISODIC_DECODE_THREADS", threads)
    report = preflight(MixtureSpec.from_dict(mixture_spec(synthetic[:6])))
    roomy = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    small = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path, decoder_cache_size=2)
    flat = [int(i) for i in range(0, len(roomy), max(1, len(roomy) // 16))][:16]
    want, got = roomy.get_batch(flat), small.get_batch(flat)
    cameras = [k for k in want if k.startswith("observation.images.") and not k.endswith("_is_pad")]
    assert cameras and len(set(got["dataset_index"].tolist())) > 2
    for k in cameras:
        assert torch.equal(got[k], want[k]), k


def test_entries_without_cameras(synthetic, tmp_path):
    """A tabular-only entry among entries with cameras (its frames zeros, padding), and a mixture without any."""
    from episodic.testing.synthetic import write_synthetic_datasets

    tabular = write_synthetic_datasets(tmp_path / "tabular", 2, seed=4, cameras=(0, 0))
    spec = mixture_spec([*synthetic[:3], tabular[0]], delta_timestamps={"action": [0.0, 0.1]})
    spec["entries"][3]["name"] = "tabular-only"
    batches = _assert_stream_equals_map(spec, tmp_path / "a")
    rows = torch.cat([b["dataset_index"] for b in batches]) == 3
    assert rows.any()
    for key in [k for k in batches[0] if k.startswith("observation.images.") and k.endswith("_is_pad")]:
        assert torch.cat([b[key] for b in batches])[rows].all()
    batches = _assert_stream_equals_map(mixture_spec(tabular), tmp_path / "b")
    assert not any(k.startswith("observation.images.") for k in batches[0])
