"""Corrupt data and video files (columns of the wrong type or shape, ragged lists, bookkeeping columns that
disagree with the metadata, a camera of another size, bytes damaged inside an mp4 or a parquet page): a named
error naming the file, the episode where known, and the column or camera; never items of silently wrong data."""

from __future__ import annotations

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.format import DatasetFormatError, VideoDecodeError
from episodic.video import VideoReader
from episodic.writer.video import VideoFileWriter

from hostile_data import CORRUPT, DATA, TOP, TOP_MP4, Case, column_edit
from support import assert_items_equal


@pytest.mark.parametrize("case", CORRUPT, ids=lambda c: c.name)
def test_map_style_names_the_problem(small_root, copy_of, case: Case):
    root = copy_of(small_root)
    case.edit(root)
    with pytest.raises(case.error, match=case.message):
        LeRobotDataset("x", root=root, video_keys=[])


@pytest.mark.parametrize(
    "case", [c for c in CORRUPT if c.name in ("ragged list column", "float frame_index")], ids=lambda c: c.name
)
def test_streaming_names_the_problem(small_root, copy_of, case: Case, tmp_path):
    root = copy_of(small_root)
    case.edit(root)
    ds = StreamingLeRobotDataset("x", root=root, video_keys=[], cache_dir=tmp_path)
    with pytest.raises(case.error, match=case.message):
        next(iter(ds.loader(batch_size=4)))


def test_whole_float_frame_index_loads_the_same_items(small_root, copy_of):
    """A float column of whole numbers is exact: accepted for an integer feature (nothing truncated)."""
    root = copy_of(small_root)
    column_edit(DATA, "frame_index", lambda v: v.astype(np.float64))(root)
    want, got = LeRobotDataset("x", root=small_root, video_keys=[]), LeRobotDataset("x", root=root, video_keys=[])
    for i in (0, 17, len(want) - 1):
        assert_items_equal(want[i], got[i])


def _reencode(path, height: int, width: int) -> None:
    reader = VideoReader(str(path))
    frames = reader.decode(np.arange(len(reader.index)))
    reader.close()
    w = VideoFileWriter(str(path), width, height, 30)
    w.add(np.ascontiguousarray(frames[:, :height, :width]))
    w.close()


def test_camera_of_another_size(small_root, copy_of):
    root = copy_of(small_root)
    _reencode(root / TOP_MP4, 32, 48)
    ds = LeRobotDataset("x", root=root)
    with pytest.raises(
        DatasetFormatError,
        match=rf"file-000\.mp4: camera '{TOP}' \(episode 0\): frames are 32x48 "
        r"\(height x width\) but info\.json says 48x64",
    ):
        ds[0]
    assert LeRobotDataset("x", root=root, video_keys=["observation.images.wrist"])[0]  # the other camera is fine


def _damage_packet(path, packet: int) -> float:
    """Overwrite one video packet's bytes (not the container's index) with 0xFF; returns the packet's time. AV1
    OBUs whose forbidden bit is set are invalid, so the decoder must refuse the packet (bits flipped at random
    inside a payload may instead decode into a wrong picture: no decoder can see that)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        pk = [(p.pos, p.size, float(p.pts * s.time_base)) for p in c.demux(s) if p.size]
    pos, size, t = pk[packet]
    data = bytearray(path.read_bytes())
    data[pos : pos + size] = b"\xff" * size
    path.write_bytes(bytes(data))
    return t


def test_damaged_bytes_inside_an_mp4(small_root, copy_of):
    root = copy_of(small_root)
    ds = LeRobotDataset("x", root=small_root)
    row = int(ds.meta.episodes.dataset_from_index[3]) + 2  # a frame in the middle of the file
    t = float(ds.meta.episodes.cameras[TOP].from_ts[3]) + 2 / 30
    packet = int(round(t * 30))
    assert abs(_damage_packet(root / TOP_MP4, packet) - t) < 1e-3
    bad = LeRobotDataset("x", root=root)
    with pytest.raises(VideoDecodeError, match=rf"episode 3, camera '{TOP}': .*file-000\.mp4: decoding the frame at"):
        bad[row]
    assert_items_equal(ds[0], bad[0])  # frames before the damage decode as before


def test_one_flipped_byte_in_a_page_is_caught_by_its_checksum(small_root, copy_of):
    """A flipped byte inside a page can decompress and decode into other values (silent wrong rows without a
    checksum): pages written by episodic carry a CRC that the loader verifies."""
    import io

    root = copy_of(small_root)
    path = root / DATA
    good = path.read_bytes()
    col = pq.ParquetFile(path).metadata.row_group(2).column(0)  # episode 2's observation.state
    ref = pq.read_table(io.BytesIO(good))
    for i in range(col.data_page_offset + col.total_compressed_size - 8, col.data_page_offset + 16, -1):
        data = bytearray(good)
        data[i] ^= 0x01
        try:  # what a reader that ignores checksums gets
            silent = pq.ParquetFile(io.BytesIO(bytes(data)), page_checksum_verification=False).read()
        except Exception:  # noqa: BLE001  this flip is caught anyway: try another byte
            continue
        if not silent.equals(ref):
            break
    else:
        pytest.skip("no single-byte flip in this page decodes silently")
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetFormatError, match=r"file-000\.parquet: not a readable parquet file .*(CRC|checksum)"):
        LeRobotDataset("x", root=root, video_keys=[])


def test_damaged_parquet_page(small_root, copy_of):
    root = copy_of(small_root)
    path = root / DATA
    md = pq.ParquetFile(path).metadata
    col = md.row_group(2).column(0)  # episode 2's observation.state
    data = bytearray(path.read_bytes())
    for i in range(col.data_page_offset + 16, col.data_page_offset + col.total_compressed_size - 8):
        data[i] ^= 0x33
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetFormatError, match=r"data/chunk-000/file-000\.parquet: not a readable parquet file"):
        LeRobotDataset("x", root=root, video_keys=[])
    assert len(LeRobotDataset("x", root=root, video_keys=[], episodes=[0, 1])) > 0  # row groups of other episodes


def test_a_camera_file_that_is_not_a_video_is_named_with_its_episodes(small_root, copy_of):
    """A batch's readers are taken from the decoder cache at once (one camera file each): the file that cannot be
    opened is named with the camera and the episodes the batch wanted from it."""
    root = copy_of(small_root)
    (root / TOP_MP4).write_bytes(b"not a video" * 100)
    ds = LeRobotDataset("x", root=root)
    row = int(ds.meta.episodes.dataset_from_index[3]) + 2
    with pytest.raises(VideoDecodeError, match=rf"episode 3, camera '{TOP}': .*file-000\.mp4: cannot open video"):
        ds.get_batch([row])
