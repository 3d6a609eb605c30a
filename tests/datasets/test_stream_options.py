"""StreamOptions: validated up front, with the allowed range in the message; no silent clamping."""

from __future__ import annotations

import pytest

from episodic.datasets.stream_options import StreamOptions


@pytest.mark.parametrize("field, value, message", [
    ("episode_pool_size", 0, r"episode_pool_size must be an int in \[1, inf\], got 0"),
    ("chunk_size", 0, r"chunk_size must be an int in \[1, inf\], got 0"),
    ("prefetch_episodes", -1, r"prefetch_episodes must be an int in \[0, inf\], got -1"),
    ("prefetch_threads", 0, r"prefetch_threads must be an int in \[1, 256\], got 0"),
    ("tabular_block", 1.5, r"tabular_block must be an int in \[1, inf\], got 1.5"),
    ("decoder_cache_size", 0, r"decoder_cache_size must be an int in \[1, inf\], got 0"),
])
def test_bad_values_are_refused_with_the_allowed_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        StreamOptions(**{field: value})


def test_decoder_cache_default_covers_pool_and_prefetch():
    assert StreamOptions(episode_pool_size=10, prefetch_episodes=2).decoders_for(2) == 24
    assert StreamOptions(decoder_cache_size=5).decoders_for(3) == 5
    assert StreamOptions().decoders_for(0) == 16


def test_the_streaming_dataset_validates_its_arguments(small_root):
    from episodic import StreamingLeRobotDataset

    with pytest.raises(ValueError, match=r"chunk_size must be an int in \[1, inf\], got 0"):
        StreamingLeRobotDataset("x", root=small_root, chunk_size=0)
    with pytest.raises(ValueError, match=r"retries must be an int in \[0, 100\], got 101"):
        StreamingLeRobotDataset("x", root=small_root, fetch_retries=101)
    with pytest.warns(DeprecationWarning, match="renamed decoder_cache_size"):
        ds = StreamingLeRobotDataset("x", root=small_root, video_decoder_cache_size=7)
    assert ds.decoders.max_open == 7
