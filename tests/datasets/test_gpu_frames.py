"""decode_device="cuda" on a machine without a GPU: everything but the NVDEC decode itself.

Three things are replaced, nothing else: the driver's capability query (`nvdec_caps.load_driver`: a fake driver
answering as an H100 or an L4 would), the CUDA device (`gpu_frames.resolve_device`: the CPU) and the decode
library (`gpu_frames.open_backend`: PyAV sessions standing in for NVDEC sessions, full-size planar RGB by frame
index). So request planning (which frames, which files, which session), the references a worker writes, the
main process's completion, the capability decisions and their errors, the CPU fallback, transport through real
DataLoader workers, map-style, streaming and mixtures are all exercised for real, against the CPU path's items.
The tests that need the GPU itself are in test_gpu_device.py (skipped here, with the reason)."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time

import numpy as np
import pytest
import torch

from episodic import EpisodicDataset
from episodic.datasets import gpu_frames as G
from episodic.datasets.decode import FILES_KEY
from episodic.datasets.mixture import MixtureDataset
from episodic.datasets.nvdec_sessions import SessionPool
from episodic.datasets.streaming import StreamingLeRobotDataset
from episodic.datasets.streaming_mixture import StreamingMixtureDataset
from episodic.demo import write_demo_dataset
from episodic.format.errors import GpuDecodeError
from episodic.testing.synthetic import mixture_spec
from episodic.video import nvdec_caps as C
from episodic.video.decoder import VideoReader

from support import FIXTURES, H100, FakeNvdecDriver as FakeDriver, assert_items_equal


class PyAVBackend:
    """PyAV sessions in place of NVDEC's: planar RGB uint8 (K, 3, H, W) by frame index, on the CPU."""

    def __init__(self):
        self.opened, self.reopened, self.asked = 0, 0, []

    def open(self, path):
        self.opened += 1
        return VideoReader(path)

    def reopen(self, session, path):
        self.reopened += 1
        session.close()
        return VideoReader(path)

    def frames(self, session, indices):
        self.asked.append((session.path, list(indices)))
        return torch.from_numpy(session.decode(np.asarray(indices))).permute(0, 3, 1, 2).contiguous()


@pytest.fixture()
def gpu(monkeypatch):
    """A machine with a GPU as far as construction and completion can tell (see the module docstring)."""
    state = {"driver": FakeDriver(), "backend": PyAVBackend()}
    monkeypatch.setattr(C, "load_driver", lambda: state["driver"])
    monkeypatch.setattr(G, "resolve_device", lambda device: torch.device("cpu"))
    monkeypatch.setattr(G, "open_backend", lambda gpu_id: state["backend"])
    return state


@pytest.fixture(scope="module")
def h264_root(tmp_path_factory):
    """H.264 by episodic's writer: 5 episodes, 2 cameras of 48x64, two files per camera."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("gpu") / "h264",
        num_episodes=5,
        min_length=10,
        max_length=20,
        height=48,
        width=64,
        vcodec="h264",
        progress=False,
        video_files_size_in_mb=0.004,
    )


WINDOWS = {"observation.images.top": [-0.1, 0.0], "action": [0.0, 1 / 30]}


def test_items_equal_the_cpu_paths(gpu, h264_root):
    cpu = EpisodicDataset(h264_root, delta_timestamps=WINDOWS)
    dev = EpisodicDataset(h264_root, delta_timestamps=WINDOWS, decode_device="cuda")
    assert dev.gpu is not None and dev.spec.gpu_keys == tuple(cpu.spec.video_keys)
    every = np.arange(len(cpu))  # every frame, so each file's first and last
    assert_items_equal(cpu.get_batch(every), dev.get_batch(every))
    ds8 = EpisodicDataset(h264_root, decode_device="cuda", return_uint8=True)
    assert_items_equal(EpisodicDataset(h264_root, return_uint8=True).get_batch(every[::-1]), ds8.get_batch(every[::-1]))
    s = dev.stats()
    assert s["gpu_frames"] > 0 and s["gpu_fallback_frames"] == 0


def test_a_batch_holds_references_located_by_the_frame_index(gpu, h264_root):
    """What a worker sends: (file, frame, pts) per frame, the files by local path; checked against frame
    numbers computed here from the metadata (frame = round(time * fps)) and each file's own pts."""
    ds = EpisodicDataset(h264_root, delta_timestamps=WINDOWS, decode_device="cuda")
    idx = np.arange(len(ds))
    raw = ds._batch(idx).collated()
    files = raw[FILES_KEY]
    refs = raw["observation.images.top"]
    assert refs.dtype == torch.int64 and tuple(refs.shape) == (len(idx), 2, 3)
    meta = ds.meta
    cam = meta.episodes.cameras["observation.images.top"]
    ep = raw["episode_index"].numpy()
    frame = raw["frame_index"].numpy()
    for t, dt in enumerate(WINDOWS["observation.images.top"]):
        want_t = np.clip(frame + round(dt * 30), 0, meta.episodes.length[ep] - 1) / 30  # clamped at the edges
        in_file = np.rint((cam.from_ts[ep] + want_t) * 30).astype(int)
        got = refs[:, t].numpy()
        assert np.array_equal(got[:, 1], in_file)
        for i in range(len(idx)):
            path = files[got[i, 0]]
            assert path.endswith(cam.files[cam.file_id[ep[i]]])
            assert got[i, 2] == VideoReader(path).index.pts[got[i, 1]] if i % 17 == 0 else True
    assert sorted(set(files)) == sorted(files)  # each file listed once


def test_loader_workers_locate_and_the_main_process_decodes(gpu, h264_root, monkeypatch):
    real = VideoReader.decode_into

    def no_decode_in_workers(self, *a, **k):
        from episodic import runtime

        assert not runtime.in_worker(), "a worker decoded frames"
        return real(self, *a, **k)

    monkeypatch.setattr(VideoReader, "decode_into", no_decode_in_workers)
    cpu = EpisodicDataset(h264_root, delta_timestamps=WINDOWS)
    dev = EpisodicDataset(h264_root, delta_timestamps=WINDOWS, decode_device="cuda")
    got = list(dev.loader(batch_size=8, num_workers=2, seed=3))
    want = list(cpu.loader(batch_size=8, num_workers=0, seed=3))
    assert len(got) == len(want)
    for a, b in zip(want, got):
        assert_items_equal(a, b)
    assert gpu["backend"].opened <= dev.gpu.decoders  # sessions bounded and reused
    with pytest.raises(GpuDecodeError, match="main process"):  # a plain DataLoader's workers cannot decode
        list(torch.utils.data.DataLoader(dev, batch_size=4, num_workers=1))
    plain = list(torch.utils.data.DataLoader(dev, batch_size=4, num_workers=0))  # in the main process: fine
    assert torch.equal(plain[0]["observation.images.top"], cpu.get_batch(np.arange(4))["observation.images.top"])


class _Session:
    """A decoder session that tells when it is freed in a process other than the one that opened it: there, an
    NVDEC session's destructor calls into CUDA, which crashed forked DataLoader workers on an H100 (SIGSEGV)."""

    def __init__(self, path, marks):
        self.reader, self.pid, self.marks = VideoReader(path), os.getpid(), marks

    def __del__(self):
        if os.getpid() != self.pid:
            (self.marks / f"freed-in-{os.getpid()}").touch()


def test_forked_workers_never_free_the_parents_sessions(gpu, h264_root, tmp_path):
    class Backend(PyAVBackend):
        def open(self, path):
            self.opened += 1
            return _Session(path, tmp_path)

        def reopen(self, session, path):
            self.reopened += 1
            session.reader.close()
            session.reader = VideoReader(path)
            return session

        def frames(self, session, indices):
            return super().frames(session.reader, indices)

    gpu["backend"] = Backend()
    dev = EpisodicDataset(h264_root, decode_device="cuda")
    dev.get_batch(np.arange(len(dev)))  # sessions open in this process before the workers fork
    assert gpu["backend"].opened > 0
    for epoch in range(2):  # workers forked twice; a worker ends with its epoch
        assert sum(len(b["index"]) for b in dev.loader(batch_size=8, num_workers=2, seed=epoch)) == len(dev)
    assert list(tmp_path.iterdir()) == []


def test_streaming_equals_the_cpu_path(gpu, h264_root):
    kw = dict(delta_timestamps=WINDOWS, episode_pool_size=2, seed=5)
    cpu = StreamingLeRobotDataset(None, root=h264_root, **kw)
    dev = StreamingLeRobotDataset(None, root=h264_root, decode_device="cuda", **kw)
    got = list(dev.loader(batch_size=6, num_workers=2))
    want = list(cpu.loader(batch_size=6, num_workers=2))
    assert len(got) == len(want)
    for a, b in zip(want, got):
        assert_items_equal(a, b)
    items = list(StreamingLeRobotDataset(None, root=h264_root, decode_device="cuda", **kw))  # direct iteration
    assert_items_equal(dict(list(StreamingLeRobotDataset(None, root=h264_root, **kw))[3]), dict(items[3]))


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    """The CPU path's resize (swscale) vs the GPU path's (bilinear, antialiased): video.output's tolerance."""
    d = (a.float() - b.float()).abs()
    if a.dtype == torch.uint8:
        d = d / 255
    assert d.mean() < 2 / 255 and torch.quantile(d.flatten()[:1_000_000], 0.99) < 6 / 255, (d.mean(), d.max())


@pytest.mark.parametrize("resize_mode", ["stretch", "letterbox"])
def test_mixture_equals_the_cpu_path_within_the_resize_tolerance(gpu, synthetic, tmp_path, resize_mode):
    # the synthetic datasets are AV1 of 32 pixels wide and less: a GPU taking them, as an L4 takes AV1
    gpu["driver"] = FakeDriver("NVIDIA L4", av1=True, min_width=16)
    spec = mixture_spec(synthetic, delta_timestamps={"action": [0.0, 0.1]})
    kw = dict(image_size=(24, 40), resize_mode=resize_mode, cache_dir=tmp_path)
    cpu, dev = MixtureDataset(spec, **kw), MixtureDataset(spec, decode_device="cuda", **kw)
    idx = np.arange(0, len(cpu), 3)
    a, b = cpu.get_batch(idx), dev.get_batch(idx)
    assert set(a) == set(b)
    for k in a:
        if k in cpu.camera_keys:
            _close(a[k], b[k])
            absent = a[k].flatten(1).abs().sum(1) == 0  # entries without the camera: zeros in both
            assert torch.equal(b[k].flatten(1)[absent].abs().sum(1), torch.zeros(int(absent.sum())))
        elif isinstance(a[k], list):
            assert a[k] == b[k]
        else:
            assert torch.equal(a[k], b[k]), k
    stream = StreamingMixtureDataset(spec, decode_device="cuda", episode_pool_size=3, seed=1, **kw)
    ref = StreamingMixtureDataset(spec, episode_pool_size=3, seed=1, **kw)
    for x, y in zip(ref.loader(batch_size=16, num_workers=2), stream.loader(batch_size=16, num_workers=2)):
        assert torch.equal(x["index"], y["index"])
        for k in cpu.camera_keys:
            _close(x[k], y[k])


def test_av1_is_a_named_error_at_construction(gpu, small_root):
    with pytest.raises(GpuDecodeError) as e:
        EpisodicDataset(small_root, decode_device="cuda")
    msg = str(e.value)
    for word in (
        "camera 'observation.images.top'",
        "camera 'observation.images.wrist'",
        "codec av1",
        H100,
        "episodic reencode",
        "cpu_fallback",
    ):
        assert word in msg, (word, msg)
    assert ("av1", 420, 8) in gpu["driver"].asked  # decided by the driver's answer, not a table


def _small_hevc(tmp_path, height: int, width: int):
    """HEVC by episodic's writer (no B-frames): 2 episodes of 5-8 frames, 2 cameras of `height` x `width`."""
    return write_demo_dataset(
        tmp_path / f"hevc{height}x{width}",
        num_episodes=2,
        min_length=5,
        max_length=8,
        height=height,
        width=width,
        vcodec="hevc",
        progress=False,
    )


def test_a_camera_under_the_codecs_minimum_size_is_a_named_error(gpu, tmp_path):
    # NVDEC takes H.264 from 48x16 but HEVC only from 144x144: a 48x64 HEVC camera is refused at construction
    with pytest.raises(GpuDecodeError) as e:
        EpisodicDataset(_small_hevc(tmp_path, 48, 64), decode_device="cuda")
    for word in ("codec hevc", "64x48 is under NVDEC's minimum 144x144", H100, "observation.images.top"):
        assert word in str(e.value), (word, str(e.value))
    assert ("hevc", 420, 8) in gpu["driver"].asked


def test_hevc_with_b_frames_is_a_named_error(gpu, tmp_path):
    # NVDEC's library did not reach every frame of LeRobot's HEVC (B-frames) on an H100; episodic's HEVC (none) is
    # decoded on the GPU
    lerobot = FIXTURES / "lerobot_hevc" / "dataset"
    with pytest.raises(GpuDecodeError) as e:
        EpisodicDataset(lerobot, decode_device="cuda")
    for word in ("camera 'observation.images.top'", "codec hevc", "has B-frames", "episodic reencode"):
        assert word in str(e.value), (word, str(e.value))
    ds = EpisodicDataset(lerobot, decode_device="cuda", cpu_fallback=True)
    idx = np.arange(len(ds))
    assert_items_equal(EpisodicDataset(lerobot).get_batch(idx), ds.get_batch(idx))
    assert ds.gpu.stats()["cpu_fallback"] == ["observation.images.top", "observation.images.wrist"]
    ours = _small_hevc(tmp_path, 160, 216)
    dev = EpisodicDataset(ours, decode_device="cuda")
    assert dev.gpu.stats()["cpu_fallback"] == []
    idx = np.arange(len(dev))
    assert_items_equal(EpisodicDataset(ours).get_batch(idx), dev.get_batch(idx))


def test_per_camera_cpu_fallback_is_logged_and_counted(gpu, small_root, caplog):
    with caplog.at_level(logging.WARNING, logger="episodic.datasets.gpu_frames"):
        with pytest.raises(GpuDecodeError, match="observation.images.wrist"):  # only top may fall back
            EpisodicDataset(small_root, decode_device="cuda", cpu_fallback=["observation.images.top"])
        ds = EpisodicDataset(small_root, decode_device="cuda", cpu_fallback=True)
    assert sum("decoded on the CPU instead" in r.message for r in caplog.records) >= 2
    idx = np.arange(len(ds))
    assert_items_equal(EpisodicDataset(small_root).get_batch(idx), ds.get_batch(idx))
    s = ds.stats()
    assert s["gpu_fallback_frames"] > 0 and s["gpu_frames"] == 0
    assert ds.gpu.stats()["cpu_fallback"] == ["observation.images.top", "observation.images.wrist"]
    with pytest.raises(ValueError, match="not cameras"):
        EpisodicDataset(small_root, decode_device="cuda", cpu_fallback=["observation.images.nope"])


def test_options_checked_up_front(h264_root):
    for bad in ("gpu", "cuda:x", 3):
        with pytest.raises(ValueError, match="decode_device must be"):
            EpisodicDataset(h264_root, decode_device=bad)
    with pytest.raises(ValueError, match="apply to decode_device='cuda'"):
        EpisodicDataset(h264_root, cpu_fallback=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_the_error_says_so(h264_root):
    with pytest.raises(GpuDecodeError, match="torch sees no CUDA GPU"):
        EpisodicDataset(h264_root, decode_device="cuda")


def test_the_driver_libraries_are_what_is_asked(monkeypatch):
    """The capability answer comes from libcuda + libnvcuvid: probe_nvdec opens them (and says which is
    missing); on this machine without them, the probe says why."""
    opened = []

    class Lib:
        def __getattr__(self, name):
            return lambda *a: 0

    def cdll(name):
        opened.append(name)
        if name == C.LIBNVCUVID:
            raise OSError(f"{name}: cannot open shared object file")
        return Lib()

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    probe = C.probe_nvdec()
    assert opened == [C.LIBCUDA, C.LIBNVCUVID]
    assert probe.gpus == [] and "libnvcuvid.so.1 not found" in probe.why and "NVIDIA_DRIVER_CAPABILITIES" in probe.why
    monkeypatch.undo()
    try:
        ctypes.CDLL(C.LIBCUDA)
    except OSError:
        assert "libcuda.so.1 not found" in C.probe_nvdec().why


def test_decode_caps_struct_matches_cuviddec_h():
    """Field offsets of CUVIDDECODECAPS as laid out in the Video Codec SDK's cuviddec.h."""
    want = {
        "eCodecType": 0,
        "eChromaFormat": 4,
        "nBitDepthMinus8": 8,
        "reserved1": 12,
        "bIsSupported": 24,
        "nNumNVDECs": 25,
        "nOutputFormatMask": 26,
        "nMaxWidth": 28,
        "nMaxHeight": 32,
        "nMaxMBCount": 36,
        "nMinWidth": 40,
        "nMinHeight": 42,
        "bIsHistogramSupported": 44,
        "nCounterBitDepth": 45,
        "nMaxHistogramBins": 46,
        "reserved3": 48,
    }
    assert {name: getattr(C._DecodeCaps, name).offset for name in want} == want
    assert ctypes.sizeof(C._DecodeCaps) >= 88  # the header's size; ours has room for more
    assert (C.CODEC_IDS["h264"], C.CODEC_IDS["hevc"], C.CODEC_IDS["av1"]) == (4, 8, 11)


def test_unsupported_reasons():
    ok = C.CodecSupport("h264", supported=True, engines=7, max_width=4096, max_height=4096, min_width=48, min_height=16)
    assert C.unsupported_reason(ok, 480, 640) is None
    assert "exceeds" in C.unsupported_reason(ok, 480, 8192)
    assert "minimum" in C.unsupported_reason(ok, 8, 640)
    assert "no av1 decoder" in C.unsupported_reason(C.CodecSupport("av1"), 480, 640)


class CountingBackend:
    def __init__(self, delay=0.01):
        self.delay, self.live, self.most, self.opened, self.reopened = delay, 0, 0, 0, 0
        self.lock = threading.Lock()

    def open(self, path):
        with self.lock:
            self.opened += 1
        return {"path": path}

    def reopen(self, s, path):
        with self.lock:
            self.reopened += 1
        s["path"] = path
        return s

    def frames(self, s, indices):
        with self.lock:
            self.live += 1
            self.most = max(self.most, self.live)
        time.sleep(self.delay)
        with self.lock:
            self.live -= 1
        return torch.zeros(len(indices), 3, 2, 2, dtype=torch.uint8)


def test_session_pool_is_bounded_and_reuses_sessions():
    backend = CountingBackend()
    pool = SessionPool(backend, 3)
    paths = [f"f{i % 5}" for i in range(40)]

    def work(path):
        s = pool.acquire(path)
        assert s["path"] == path
        backend.frames(s, [0])
        pool.release(path, s)

    threads = [threading.Thread(target=work, args=(p,)) for p in paths]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert backend.opened == 3 and backend.most <= 3  # never more sessions than the bound
    assert backend.reopened > 0  # sessions reconfigured for other files, not opened anew
    s = pool.acquire("f9")  # an idle session on another file is reconfigured (LRU)
    assert s["path"] == "f9" and backend.opened == 3
    pool.drop()  # a failed session frees its place
    assert pool.acquire("f1")["path"] == "f1"


def test_fit_frames_places_as_the_cpu_path():
    from episodic.video.output import FrameOutput

    frames = torch.full((2, 3, 48, 64), 200, dtype=torch.uint8)
    out = G.fit_frames(frames, FrameOutput(size=(32, 32), resize_mode="letterbox"))
    h, w, top, left = FrameOutput(size=(32, 32), resize_mode="letterbox").placement((48, 64))
    assert out.shape == (2, 3, 32, 32) and (h, w) == (24, 32)
    assert (
        (out[:, :, :top] == 0).all() and (out[:, :, top + h :] == 0).all() and (out[:, :, top : top + h] == 200).all()
    )
    assert G.fit_frames(frames, FrameOutput()) is frames


def test_batches_decoded_ahead_count_when_handed_out(gpu, h264_root):
    """The loader decodes a few batches ahead; its state still counts the batches the loop received."""
    dev, cpu = EpisodicDataset(h264_root, decode_device="cuda"), EpisodicDataset(h264_root)
    assert dev.gpu.prefetch >= 2
    a, b = dev.loader(batch_size=4, seed=1), cpu.loader(batch_size=4, seed=1)
    ia, ib = iter(a), iter(b)
    for _ in range(2):
        assert_items_equal(next(ib), next(ia))
    assert a.state_dict() == b.state_dict()
    resumed = EpisodicDataset(h264_root, decode_device="cuda").loader(batch_size=4, seed=1)
    resumed.load_state_dict(a.state_dict())
    assert_items_equal(next(ib), next(iter(resumed)))
    s1 = StreamingLeRobotDataset(None, root=h264_root, decode_device="cuda", episode_pool_size=2)
    s2 = StreamingLeRobotDataset(None, root=h264_root, episode_pool_size=2)
    l1, l2 = s1.loader(batch_size=4), s2.loader(batch_size=4)
    i1, i2 = iter(l1), iter(l2)
    for _ in range(3):
        assert_items_equal(next(i2), next(i1))
    assert l1.state_dict() == l2.state_dict()
    i1.close()
    i2.close()
