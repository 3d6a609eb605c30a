"""What a failed request was, in the words of a FetchError (storage/failures.py): what happened (connection refused,
timed out, name resolution failed) and where, not the wrapper an HTTP client raised it in (fsspec's HTTP `info`
and huggingface_hub raise FileNotFoundError from whatever failed). Real servers on 127.0.0.1."""

from __future__ import annotations

import socket

import fsspec
import pytest

from episodic.format import FetchError
from episodic.storage import FetchPolicy, with_retries
from episodic.storage.failures import RETRY, classify, describe, unanswered
from episodic.storage.fetch import file_size, timeout_options

from support import FaultServer

pytest.importorskip("aiohttp")

POLICY = FetchPolicy(backoff_s=0.01, max_backoff_s=0.05, retry_window_s=0.5, timeout_s=1, connect_timeout_s=1)


def _size(server: FaultServer) -> int | None:
    """A size request (fsspec's HTTP `info`: HEAD, then GET), the one that raised FileNotFoundError from the
    failure."""
    fs = fsspec.filesystem("http", skip_instance_cache=True, **timeout_options("http", {}, POLICY))
    url = server.url + "/f.bin"
    return file_size(fs, url, url, POLICY)


def test_a_killed_server_reads_connection_refused_naming_the_host():
    with FaultServer(files={"/f.bin": b"x" * 10}) as server:
        assert _size(server) == 10
        server.kill()
        with pytest.raises(FetchError) as info:
            _size(server)
    text = str(info.value)
    assert text.startswith(f"{server.url}/f.bin: cannot fetch after ")
    assert f"(last: connection refused (ClientConnectorError: Cannot connect to host 127.0.0.1:{server.port}" in text
    assert "FileNotFoundError" not in text


def test_a_hung_server_reads_timed_out():
    with FaultServer(files={"/f.bin": b"x" * 10}) as server:
        server.hang.set()
        with pytest.raises(FetchError) as info:
            _size(server)
    assert f"{server.url}/f.bin: cannot fetch after " in str(info.value)
    assert "(last: timed out (" in str(info.value) and "FileNotFoundError" not in str(info.value)


def test_name_resolution_and_the_host_of_a_description():
    """A failure to resolve a name (as aiohttp and httpx raise it: a gaierror inside), reported for the host given
    apart from a description (what Hub calls pass)."""

    def unresolvable():
        try:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        except socket.gaierror as e:
            raise FileNotFoundError("An error happened while trying to locate the files on the Hub") from e

    with pytest.raises(FetchError) as info:
        with_retries(
            unresolvable, "hub dataset 'a/b' (revision main)", FetchPolicy(retry_window_s=0), host="https://hub.invalid"
        )
    assert str(info.value) == (
        "hub dataset 'a/b' (revision main) (host https://hub.invalid): cannot fetch after 1 "
        "attempt in 0.0 s (last: name resolution failed (gaierror: [Errno -2] Name or service "
        "not known))"
    )


def test_answers_are_not_silence():
    class Answer(OSError):
        status = 503

    try:
        raise FileNotFoundError("http://x/f") from Answer("Service Unavailable")
    except FileNotFoundError as e:
        wrapped = e
    assert classify(wrapped) == RETRY and not unanswered(wrapped)
    assert describe(wrapped) == "Answer: Service Unavailable"
    assert unanswered(ConnectionResetError(104, "Connection reset by peer"))
    assert describe(ConnectionResetError(104, "reset")) == "connection reset (ConnectionResetError: [Errno 104] reset)"
