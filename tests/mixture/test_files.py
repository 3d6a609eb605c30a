"""Which files of an entry training reads (mixture/files.py), against datasets rotated into many files: each
selected episode's data file and its video files of the mapped cameras, each once; nothing else."""

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from episodic.format import load_metadata
from episodic.mixture import MixtureSpec, preflight
from episodic.mixture.startup.files import entry_files, needed_files


def test_files_of_selected_episodes_and_mapped_cameras(multifile_root):
    meta = load_metadata(LocalFileSystem(), str(multifile_root))
    cams = meta.video_keys
    assert len(set(meta.episodes.data_file_id)) > 2 and cams
    for episodes in ([0], [1, 5, 11], list(range(meta.total_episodes)), []):
        for keys in ([], cams[:1], cams):
            got = needed_files(meta, np.array(episodes, dtype=np.int64), keys)
            want = {meta.data_file_of(e) for e in episodes} | {meta.video_file_of(e, k) for e in episodes for k in keys}
            assert len(got) == len(set(got)) and set(got) == want
    # image cameras and unknown keys need no file of their own
    assert needed_files(meta, np.array([0]), ["observation.images.nope"]) == [meta.data_file_of(0)]


def test_entry_files_follow_the_report(synthetic):
    d = next(x for x in synthetic if x.version == "v2.1" and x.episodes >= 3 and len(x.cameras) >= 2)
    role = d.cameras[1].rsplit(".", 1)[-1]
    spec = MixtureSpec.from_dict(
        {
            "entries": [
                {"source": d.path, "episodes": [0, 2], "roles": {role: d.cameras[1]}},
                {"source": d.path, "name": "all"},
                {"source": str(d.path) + "_missing", "name": "broken"},
            ],
            "on_error": "skip",
        }
    )
    report = preflight(spec)
    meta = report.metadata[0]
    assert set(entry_files(report, 0)) == {
        meta.data_file_of(0),
        meta.data_file_of(2),
        meta.video_file_of(0, d.cameras[1]),
        meta.video_file_of(2, d.cameras[1]),
    }
    assert len(entry_files(report, 1)) == d.episodes * (1 + len(d.cameras))  # v2.1: a file per episode and camera
    assert report.entries[2].status == "skipped" and entry_files(report, 2) == []
