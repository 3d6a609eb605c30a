"""StreamState: the streaming position, validated and JSON round-trippable in the released dict format."""

from __future__ import annotations

import json

import pytest

from episodic.order.stream_state import StreamState


def test_round_trip_and_format():
    s = StreamState(seed=3, episode_pool_size=4, shuffle=True).open_segment(2, 1, 8).advanced(3)
    d = s.to_dict()
    assert d == {
        "seed": 3,
        "epoch": 0,
        "batches_consumed": 3,
        "batch_size": 8,
        "world_size": 2,
        "num_workers": 1,
        "history": [],
        "episode_pool_size": 4,
        "shuffle": True,
    }
    assert StreamState.from_dict(json.loads(json.dumps(d))) == s


def test_a_new_topology_closes_the_open_segment():
    s = StreamState().open_segment(2, 0, 8).advanced(5).open_segment(1, 2, 4)
    assert s.history == ((2, 0, 8, 5),) and s.segment == (1, 2, 4) and s.batches_consumed == 0
    same = StreamState().open_segment(2, 0, 8).advanced(5).open_segment(2, 0, 8)
    assert same.history == () and same.batches_consumed == 5
    assert s.at_epoch(4) == StreamState(epoch=4, segment=(1, 2, 4))


def test_no_open_segment_reports_the_current_world_size():
    assert StreamState().to_dict(world_size=3)["world_size"] == 3
    assert StreamState.from_dict({"seed": 0, "epoch": 1}).segment is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"epoch": 0}, "missing field 'seed'"),
        ({"seed": 0, "epoch": -1}, "field 'epoch' must be >= 0, got -1"),
        ({"seed": 0, "epoch": "1"}, "field 'epoch' must be an int"),
        ({"seed": 0, "epoch": 0, "batches_consumed": 2}, "missing field 'batch_size'"),
        ({"seed": 0, "epoch": 0, "batches_consumed": 2, "batch_size": 0}, "field 'batch_size' must be >= 1"),
        ({"seed": 0, "epoch": 0, "history": [[1, 0, 8]]}, r"history\[0\] must be"),
        ({"seed": 0, "epoch": 0, "history": [[0, 0, 8, 1]]}, "field 'world_size' must be >= 1"),
        ({"seed": 0, "epoch": 0, "shuffle": 1}, "field 'shuffle' must be true or false"),
        ({"seed": 0, "epoch": 0, "episode_pool_size": 0}, "field 'episode_pool_size' must be >= 1"),
        ([1, 2], "stream state must be a dict"),
    ],
)
def test_every_field_is_validated_by_name(bad, message):
    with pytest.raises(ValueError, match=message):
        StreamState.from_dict(bad)


def test_a_state_of_another_order_is_refused():
    s = StreamState.from_dict({"seed": 0, "epoch": 0, "episode_pool_size": 4, "shuffle": True})
    s.check_compatible(4, True)
    with pytest.raises(ValueError, match="episode_pool_size=4, this dataset has 8"):
        s.check_compatible(8, True)
