"""What reopening an interrupted session reports (writer/recovery.py); the recovery itself is tested with real
interrupted sessions in test_session.py, tests/faults/test_writer_kill.py and tests/tools/test_repair.py."""

from episodic.writer.recovery import Recovery


def test_summary_names_what_was_kept_and_dropped():
    r = Recovery(
        episodes=3,
        frames=240,
        torn_bytes=17,
        partial_files=["s/episode-000000003.parquet", "s/episode-000000003.mp4"],
        joined_files=["s/episode-000000001.mp4"],
        temp_files=["data/x.tmp"],
    )
    assert r.summary() == (
        "3 complete episode(s), 240 frames kept; incomplete episode 3 dropped (2 file(s)); a partial journal line "
        "(17 bytes) dropped; 1 segment file(s) of already joined files removed; 1 temporary file(s) removed"
    )
    assert Recovery(2, 10, 0, [], [], []).summary() == "2 complete episode(s), 10 frames kept"
