#!/usr/bin/env bash
# FFmpeg for torchcodec in a LeRobot venv (sourced by setup_lerobot_venv.sh and setup_lerobot06_venv.sh with VENV
# set): symlink every lib of PyAV's av.libs (so their $ORIGIN rpaths resolve here too) plus the plain sonames
# (libavcodec.so.61, ...) that libtorchcodec_core7.so links against, into $VENV/ffmpeg-libs; $VENV/bin/lerobot-python
# and bin/activate put that directory on LD_LIBRARY_PATH.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
AVLIBS="$SITE/av.libs"
LIBDIR="$VENV/ffmpeg-libs"
rm -rf "$LIBDIR"
mkdir -p "$LIBDIR"
for f in "$AVLIBS"/*; do ln -sf "$f" "$LIBDIR/"; done
for f in "$AVLIBS"/lib{avcodec,avformat,avutil,avdevice,avfilter,swscale,swresample}-*.so.*; do
    b="$(basename "$f")"
    stem="${b%%-*}"                                        # libavcodec
    major="$(sed -E 's/.*\.so\.([0-9]+).*/\1/' <<<"$b")"   # 61
    ln -sf "$f" "$LIBDIR/$stem.so.$major"
done

cat > "$VENV/bin/lerobot-python" <<EOS
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$VENV/bin/python" "\$@"
EOS
chmod +x "$VENV/bin/lerobot-python"
grep -q "ffmpeg-libs" "$VENV/bin/activate" ||
    echo "export LD_LIBRARY_PATH=\"$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"" >> "$VENV/bin/activate"
