"""StreamOptions: validated up front, with the allowed range in the message; no silent clamping."""

from __future__ import annotations

import pytest

from episodic.datasets.stream_options import StreamOptions


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("episode_pool_size", 0, r"episode_pool_size must be an int in \[1, inf\], got 0"),
        ("chunk_size", 0, r"chunk_size must be an int in \[1, inf\], got 0"),
        ("prefetch_episodes", -1, r"prefetch_episodes must be an int in \[0, inf\], got -1"),
        ("prefetch_threads", 0, r"prefetch_threads must be an int in \[1, 256\], got 0"),
        ("tabular_block", 1.5, r"tabular_block must be an int in \[1, inf\], got 1.5"),
        ("decoder_cache_size", 0, r"decoder_cache_size must be an int in \[1, inf\], got 0"),
    ],
)
def test_bad_values_are_refused_with_the_allowed_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        StreamOptions(**{field: value})


def test_decoder_cache_default_covers_pool_and_prefetch_within_the_budget(monkeypatch):
    """One rule for every dataset (`video.decoder_cache.default_cache_size`): a reader per file in reach (each camera's
    pooled and prefetched episodes), within the decoder memory budget of the process that decodes, at least 32."""
    from episodic import runtime

    monkeypatch.setattr(runtime, "usable_memory", lambda: 4 << 30)  # an eighth of it: the 512 MB floor

    def size(option):
        return option if isinstance(option, int) else option.size()

    assert size(StreamOptions(episode_pool_size=30, prefetch_episodes=2).decoders_for([(96, 128)] * 2)) == 64
    assert size(StreamOptions().decoders_for([(480, 640)] * 2)) == 144  # 2 x (64 + 8)
    assert size(StreamOptions().decoders_for([(720, 1280)] * 3)) == 216  # readers hold no pictures: any size
    wide = StreamOptions(episode_pool_size=1200, prefetch_episodes=0).decoders_for([(720, 1280)] * 2)
    assert size(wide) == 2048  # 2400 in reach, 256 KB each (estimate): 512 MB allow 2048
    monkeypatch.setattr(runtime, "usable_memory", lambda: 32 << 30)  # 4 GB: every file in reach
    assert size(wide) == 2400
    assert StreamOptions(decoder_cache_size=5).decoders_for([(96, 128)] * 3) == 5
    assert size(StreamOptions(episode_pool_size=4, prefetch_episodes=0).decoders_for([(96, 128)])) == 32
    assert size(StreamOptions().decoders_for([])) == 32


def test_the_streaming_dataset_validates_its_arguments(small_root):
    from episodic import StreamingLeRobotDataset

    with pytest.raises(ValueError, match=r"chunk_size must be an int in \[1, inf\], got 0"):
        StreamingLeRobotDataset("x", root=small_root, chunk_size=0)
    with pytest.raises(ValueError, match=r"retries must be an int in \[0, 100\], got 101"):
        StreamingLeRobotDataset("x", root=small_root, fetch_retries=101)
    with pytest.warns(DeprecationWarning, match="renamed decoder_cache_size"):
        ds = StreamingLeRobotDataset("x", root=small_root, video_decoder_cache_size=7)
    assert ds.decoders.max_open == 7


def test_options_are_accepted_whole_and_not_beside_their_fields(small_root, synthetic):
    from episodic import StreamingLeRobotDataset, StreamingMixtureDataset
    from episodic.storage import FetchPolicy
    from episodic.testing.synthetic import mixture_spec

    options = StreamOptions(
        episode_pool_size=3, chunk_size=5, mirror_max_bytes=123, decoder_cache_size=9, fetch=FetchPolicy(retries=2)
    )
    ds = StreamingLeRobotDataset("x", root=small_root, options=options)
    assert ds.options is options and ds.decoders.max_open == 9 and ds.episode_pool_size == 3
    by_fields = StreamingLeRobotDataset(
        "x",
        root=small_root,
        episode_pool_size=3,
        chunk_size=5,
        mirror_max_bytes=123,
        decoder_cache_size=9,
        fetch_retries=2,
    )
    assert by_fields.options == options
    spec = mixture_spec(synthetic[:3])
    assert StreamingMixtureDataset(spec, options=options, image_size=(16, 32)).options is options
    with pytest.raises(ValueError, match=r"options=StreamOptions\(\.\.\.\) or its fields \['chunk_size'\], not both"):
        StreamingLeRobotDataset("x", root=small_root, options=options, chunk_size=4)
    with pytest.raises(ValueError, match=r"not both"):
        StreamingLeRobotDataset("x", root=small_root, options=options, fetch_retries=3)
    with pytest.raises(ValueError, match=r"not both"):
        StreamingMixtureDataset(spec, options=options, episode_pool_size=2, image_size=(16, 32))
    with pytest.raises(TypeError, match="options must be a StreamOptions"):
        StreamingLeRobotDataset("x", root=small_root, options={"chunk_size": 4})


def test_the_mirror_bound_has_its_own_name(small_root):
    from episodic import StreamingLeRobotDataset

    with pytest.warns(DeprecationWarning, match="renamed mirror_max_bytes"):
        ds = StreamingLeRobotDataset("x", root=small_root, cache_max_bytes=1000)
    assert ds.options.mirror_max_bytes == 1000
    with pytest.raises(ValueError, match=r"mirror_max_bytes must be an int in \[0, inf\], got -1"):
        StreamOptions(mirror_max_bytes=-1)
