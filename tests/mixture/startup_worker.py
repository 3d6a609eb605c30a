"""One rank of a mixture start-up, launched by torchrun or as a plain process (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in the environment) from test_startup.py (not a test module).

Preflights the spec (JSON), or with --spec-in-prepare leaves that to prepare; runs
`episodic.mixture.startup.distributed.prepare` on the real gloo process group and writes what it got to
<out>/rank<r>.json: the result's figures, roots and report (entries, episode lengths, where each entry is read from), or
the error's type, message and fields.
With --tamper-handover, a rank that reads a handed-over report first overwrites the file with a pickle that would
create <out>/code-ran-rank<r> when loaded (someone who can write the hand-over directory).
With --again N, prepare runs N more times in the job (the --late-rank sleeping --again-late-s before each), each
run's outcome in "again" (ok, message, seconds).
Exits 0 either way (torchrun would tear the other ranks down on a failure), after the process group is gone.
"""

import argparse
import json
import logging
import os
import sys
import time

import torch.distributed as dist

from episodic.format.errors import MixtureStartupError
from episodic.mixture import preflight
from episodic.mixture.startup.distributed import prepare


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def tamper(marker: str) -> None:
    """Before this rank reads the handed-over report, every file in the hand-over directory becomes a payload."""
    import pickle

    import episodic.mixture.startup.distributed as startup
    from episodic.mixture.startup.handover import handover_dir

    real = startup.read_report

    def read_tampered(*args, **kwargs):
        directory = handover_dir()
        for name in os.listdir(directory):
            with open(directory / name, "wb") as f:
                f.write(pickle.dumps({"report": Payload(marker)}))
        return real(*args, **kwargs)

    startup.read_report = read_tampered


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--late-rank", type=int, default=-1)
    ap.add_argument("--late-s", type=float, default=0.0)
    ap.add_argument("--shared-cache", action="store_true")
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--poll-s", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--spec-in-prepare", action="store_true", help="give prepare the spec (it preflights)")
    ap.add_argument("--other-spec", default=None, help="RANK:PATH: that rank reads another spec")
    ap.add_argument("--tamper-handover", action="store_true", help="overwrite the hand-over file with a payload")
    ap.add_argument("--again", type=int, default=0, help="start-ups after the first, in the same job")
    ap.add_argument("--again-late-s", type=float, default=0.0, help="the late rank's delay before each of those")
    args = ap.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s [rank {os.environ['RANK']}] %(message)s"
    )

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.tamper_handover:
        tamper(os.path.join(args.out, f"code-ran-rank{rank}"))
    if rank == args.late_rank:
        time.sleep(args.late_s)
    record = {"rank": rank, "world": dist.get_world_size(), "pid": os.getpid()}
    spec = args.spec
    if args.other_spec and int(args.other_spec.split(":", 1)[0]) == rank:
        spec = args.other_spec.split(":", 1)[1]
    mixture = spec if args.spec_in_prepare else preflight(spec)
    record["prepare_start"] = time.time()
    try:
        result = prepare(
            mixture,
            shared_cache=args.shared_cache,
            concurrency=args.concurrency,
            timeout_s=args.timeout_s,
            poll_s=args.poll_s,
        )
        report = result.report
        record.update(
            ok=True,
            roots=list(result.roots),
            downloader=result.downloader,
            needed=result.files_needed,
            missing=result.files_missing,
            fetched=result.files_fetched,
            bytes=result.bytes_fetched,
            nodes=result.nodes,
            sources=[s.root if s is not None else None for s in report.sources],
            local=[bool(s is not None and s.is_local) for s in report.sources],
            meta_roots=[m.root if m is not None else None for m in report.metadata],
            preflight_rank=result.preflight_rank,
            preflight_seconds=result.preflight_seconds,
            seconds=result.seconds,
            entries=[e.to_dict() for e in report.entries],
            episode_lengths=[m.episodes.length.tolist() if m is not None else None for m in report.metadata],
        )
    except MixtureStartupError as e:
        record.update(
            ok=False,
            type=type(e).__name__,
            message=str(e),
            entry=e.entry,
            url=e.url,
            failed_rank=e.rank,
            error_type=e.error_type,
            cause=type(e.__cause__).__name__ if e.__cause__ else None,
        )
    record["prepare_end"] = time.time()
    record["again"] = []
    for _ in range(args.again):
        if rank == args.late_rank:
            time.sleep(args.again_late_s)
        t0 = time.time()
        try:
            result = prepare(
                spec if args.spec_in_prepare else mixture,
                shared_cache=args.shared_cache,
                concurrency=args.concurrency,
                timeout_s=args.timeout_s,
                poll_s=args.poll_s,
            )
            record["again"].append(
                {
                    "ok": True,
                    "seconds": time.time() - t0,
                    "roots": list(result.roots),
                    "entries": [e.to_dict() for e in result.report.entries],
                }
            )
        except MixtureStartupError as e:
            record["again"].append({"ok": False, "seconds": time.time() - t0, "message": str(e)})
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 -- a group broken by a dead rank
        pass


if __name__ == "__main__":
    main()
