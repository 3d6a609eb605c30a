"""Arguments that would silently select other data: episode indices that are not integers, delta_timestamps and
tolerances that are not finite numbers. Each is an error naming the value."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from episodic import EpisodicDataset, LeRobotDataset, StreamingLeRobotDataset


@pytest.mark.parametrize(
    "episodes",
    [[1.7], ["1"], [True], [np.float64(1.0)], [torch.tensor(1.0)], [torch.tensor(True)], np.array([1.0, 2.0]), "12", 3],
)
@pytest.mark.parametrize("cls", [LeRobotDataset, StreamingLeRobotDataset])
def test_episode_arguments_must_be_integers(small_root, episodes, cls):
    with pytest.raises(TypeError, match=r"episodes(\[0\])? must be"):
        cls("x", root=small_root, episodes=episodes, video_keys=[])


def test_integer_like_episode_arguments_are_accepted(small_root):
    want = LeRobotDataset("x", root=small_root, episodes=[1, 4], video_keys=[])
    for episodes in ([np.int64(1), np.int32(4)], np.array([4, 1]), torch.tensor([1, 4]), (4, 1, 1)):
        got = EpisodicDataset(small_root, episodes=episodes, video_keys=[])
        assert torch.equal(got.get_batch(np.arange(len(got)))["index"], want.get_batch(np.arange(len(want)))["index"])


@pytest.mark.parametrize(
    "seconds, pattern",
    [
        ([0.0, float("nan")], r"delta_timestamps\['action'\] must hold finite numbers, got \[nan\]"),
        ([float("inf")], r"finite numbers, got \[inf\]"),
        ([0.0, "0.1"], r"must hold numbers, got '0\.1'"),
        ([True], r"must hold numbers, got True"),
        ([1e12], r"1000000000000\.0 s is out of range"),
        ([], r"non-empty list"),
        (0.1, r"non-empty list of numbers"),
    ],
)
@pytest.mark.parametrize("cls", [LeRobotDataset, StreamingLeRobotDataset])
def test_delta_timestamps_must_be_finite_numbers(small_root, seconds, pattern, cls):
    with pytest.raises(ValueError, match=pattern):
        cls("x", root=small_root, delta_timestamps={"action": seconds}, video_keys=[])


@pytest.mark.parametrize("tolerance", [float("nan"), -1e-4, float("inf"), "0.1"])
def test_tolerance_must_be_a_finite_number(small_root, tolerance):
    with pytest.raises(ValueError, match=r"tolerance_s must be a number"):
        LeRobotDataset("x", root=small_root, tolerance_s=tolerance, video_keys=[])


@pytest.mark.parametrize("positions", [[1.7], np.array([0.0, 1.0]), [True, False], torch.tensor([0.5])])
def test_batch_positions_must_be_integers(small_root, positions):
    ds = EpisodicDataset(small_root, video_keys=[])
    with pytest.raises(TypeError, match="positions must be integers"):
        ds.get_batch(positions)
    assert ds.get_batch(torch.tensor([0, 3]))["index"].tolist() == [0, 3] and len(ds.get_batch([])["index"]) == 0


def test_episodes_table_lookups_must_be_integers(small_root):
    episodes = LeRobotDataset("x", root=small_root, video_keys=[]).meta.episodes
    assert episodes[np.int64(2)]["length"] == episodes[2]["length"] == episodes["length"][2]
    for key in (1.7, True, "1"):
        with pytest.raises((TypeError, KeyError)):
            episodes[key]
