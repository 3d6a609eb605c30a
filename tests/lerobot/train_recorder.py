"""Run LeRobot's `lerobot_train` in LeRobot's venv and record what every step computed (used by test_train.py with
LeRobot 0.4.4 and test_train06.py with LeRobot 0.6.1).

    python train_recorder.py OUT.json RUNS.json

RUNS.json is a list of {"name", "loader": "lerobot" | "episodic", "args": [lerobot-train arguments]}, run one
after the other in this process: LeRobot is imported once; each run starts from `set_seed(cfg.seed)` as
`lerobot_train` does, and with LeRobot's per-process video decoder cache emptied as in a new process (forked
DataLoader workers must not inherit the open decoders of an earlier run). "lerobot" runs LeRobot's own
script as it is (`lerobot_train.main()`); "episodic" runs `episodic.lerobot.train.main(args)`.

Recorded per step: what `lerobot_train.update_policy` stored in the metrics tracker (loss and grad norm, full
precision) and the `index` of the batch's frames (a wrapper around `update_policy`), and the line LeRobot
logged (`step:N ... loss:X grdn:Y ...`, captured by a handler added after LeRobot's `init_logging`). LeRobot 0.6's
held-out evaluation (`--eval_steps`): its logged `step N: eval_loss=X` lines, and the `index` and `episode_index`
of every batch it evaluates (the batches its preprocessor gets with gradients off; a wrapper around the
preprocessor `make_pre_post_processors` returns).
OUT.json gets {name: {"steps": [{"loss", "grad_norm", "index"}], "eval": [{"after_step", "index",
"episode_index"}], "log": [line, ...], "seconds"}}, rewritten after each run.
"""

from __future__ import annotations

import json
import logging
import sys
import time


class _StepLines(logging.Handler):
    def __init__(self, lines: list):
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("step:") or (msg.startswith("step ") and "eval_loss=" in msg):
            self.lines.append(msg)


class _RecordingPreprocessor:
    """LeRobot's preprocessor, recording the frames of each batch it gets with gradients off (an evaluation)."""

    def __init__(self, inner, evals: list, steps: list):
        self._inner, self._evals, self._steps = inner, evals, steps

    def __call__(self, batch, *a, **kw):
        import torch

        if not torch.is_grad_enabled():
            self._evals.append(
                {
                    "after_step": len(self._steps),
                    "index": batch["index"].flatten().tolist(),
                    "episode_index": batch["episode_index"].flatten().tolist(),
                }
            )
        return self._inner(batch, *a, **kw)

    def __getattr__(self, name):  # save_pretrained, ... (checkpoints)
        return getattr(self._inner, name)


def main() -> int:
    out, runs = sys.argv[1], json.load(open(sys.argv[2]))
    from lerobot.datasets import video_utils
    from lerobot.scripts import lerobot_train

    from episodic.lerobot.train import main as episodic_train

    steps: list = []
    evals: list = []
    lines: list = []
    update_policy, init_logging = lerobot_train.update_policy, lerobot_train.init_logging
    make_processors = getattr(lerobot_train, "make_pre_post_processors", None)

    def recording_make_processors(*a, **kw):
        preprocessor, postprocessor = make_processors(*a, **kw)
        return _RecordingPreprocessor(preprocessor, evals, steps), postprocessor

    def recording_update_policy(train_metrics, policy, batch, *a, **kw):
        index = batch.get("index")
        train_metrics, output = update_policy(train_metrics, policy, batch, *a, **kw)
        steps.append(
            {
                "loss": train_metrics.loss.val,
                "grad_norm": train_metrics.grad_norm.val,
                "index": index.flatten().tolist() if index is not None else None,
            }
        )
        return train_metrics, output

    def capturing_init_logging(*a, **kw):
        init_logging(*a, **kw)  # clears the root logger's handlers, then adds LeRobot's
        logging.getLogger().addHandler(_StepLines(lines))

    lerobot_train.update_policy = recording_update_policy
    lerobot_train.init_logging = capturing_init_logging
    if make_processors is not None:
        lerobot_train.make_pre_post_processors = recording_make_processors
    results = {}
    for run in runs:
        steps.clear()
        evals.clear()
        lines.clear()
        video_utils._default_decoder_cache.clear()
        t0 = time.perf_counter()
        if run["loader"] == "lerobot":
            sys.argv = ["lerobot-train", *run["args"]]
            lerobot_train.main()
        else:
            episodic_train(run["args"])
        results[run["name"]] = {
            "steps": list(steps),
            "eval": list(evals),
            "log": list(lines),
            "seconds": time.perf_counter() - t0,
        }
        with open(out, "w") as f:
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
