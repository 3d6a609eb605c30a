"""Encode frames of the width given on the command line with PyAV's x265 alone (no episodic code), 30 short
videos in memory; exits 0 when all went through. tests/writer/test_video.py runs it in a child process: x265 as
PyAV bundles it corrupts the heap at widths 33-48 and glibc then aborts the process."""

import io
import sys

import av
import numpy as np

width, height = int(sys.argv[1]), 64
for _ in range(30):
    with av.open(io.BytesIO(), "w", format="mp4") as container:
        stream = container.add_stream("libx265", rate=30, options={"g": "2", "crf": "30", "bf": "0"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.options = {"g": "2", "crf": "30", "bf": "0", "x265-params": "log-level=error"}
        for t in range(3):
            img = (
                (
                    np.arange(width)[None, :, None] * 5
                    + np.arange(height)[:, None, None] * 3
                    + t * 40
                    + np.arange(3) * 70
                )
                % 256
            ).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
