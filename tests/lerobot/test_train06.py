"""`episodic lerobot-train` on LeRobot 0.6.1: its own training script, unchanged, on episodic's datasets.

The runs happen in the LeRobot 0.6.1 venv (benchmarks/setup_lerobot06_venv.sh, which installs LeRobot's
`accelerate-dep` and `diffusers-dep` extras that its script and Diffusion Policy need; found by
`support.lerobot06_python`, the tests skip without it), on a dataset written by LeRobot 0.6.1's own writer
(src/episodic/tools/bench/lerobot_side.py `write`: 8 episodes of 12-24 frames, 2 cameras 48x64, 2 tasks drawn at
random), on CPU, with no network. Each configuration runs `lerobot_train` once with LeRobot's dataset and once
through `episodic.lerobot.train` (same seed, same arguments, LeRobot 0.6's defaults: spawned, persistent workers,
prefetch 4, uint8 cameras): every step's frames, loss and grad norm must be equal, bit for bit; with
`--dataset.eval_split` the evaluated frames (so the held-out episodes) and the logged `eval_loss` too (recorded by
tests/lerobot/train_recorder.py). A run with 2 spawned workers must end by itself (the recorder process has a
timeout). A resumed run (from the checkpoint of step 2) must continue with the frames of the uninterrupted run, and
its losses must be those of LeRobot's own resumed run. Small ACT and Diffusion Policy models; all runs in one
process. Marked slow: `pytest -m slow tests/lerobot/test_train06.py`.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from support import REPO, lerobot06_python

RECORDER = Path(__file__).with_name("train_recorder.py")
SIDE = REPO / "src" / "episodic" / "tools" / "bench" / "lerobot_side.py"
STEPS, BATCH, SEED = 4, 4, 7

ACT = [
    "--policy.type=act",
    "--policy.pretrained_backbone_weights=null",
    "--policy.dim_model=64",
    "--policy.dim_feedforward=128",
    "--policy.n_heads=2",
    "--policy.n_encoder_layers=1",
    "--policy.n_decoder_layers=1",
    "--policy.chunk_size=10",
    "--policy.n_action_steps=10",
    "--policy.latent_dim=8",
    "--policy.n_vae_encoder_layers=1",
]
DIFFUSION = [
    "--policy.type=diffusion",
    "--policy.pretrained_backbone_weights=null",
    "--policy.down_dims=[32,64]",
    "--policy.diffusion_step_embed_dim=32",
    "--policy.spatial_softmax_num_keypoints=8",
    "--policy.n_groups=4",
]  # Diffusion Policy: EpisodeAwareSampler with drop_n_last_frames=7
SPLIT = ["--dataset.eval_split=0.25", "--eval_steps=2"]
PAIRS = {
    "act-w0": ACT + ["--num_workers=0"],
    "act-w2-split-transforms": ACT + ["--num_workers=2", "--dataset.image_transforms.enable=true"] + SPLIT,
    # an episode list: LeRobot's rule takes the episodes in the order given, per task
    "act-w0-split-episodes": ACT
    + ["--num_workers=0", "--dataset.episodes=[7,1,4,2,6,0]", "--dataset.eval_split=0.4", "--eval_steps=2"],
    "diffusion-w0-split": DIFFUSION + ["--num_workers=0"] + SPLIT,
    # --max_eval_samples: LeRobot evaluates the first frames of each task of the held-out side
    "act-w0-split-max-eval": ACT + ["--num_workers=0", "--max_eval_samples=5"] + SPLIT,
    "diffusion-w2": DIFFUSION + ["--num_workers=2"],
}
# resume: a deterministic ACT (no dropout, no VAE sampling), checkpoints every 2 steps
RESUME = ACT + ["--policy.dropout=0", "--policy.use_vae=false", "--num_workers=0", "--save_freq=2"]
# streaming (episodic only: its counting loader, on 2 spawned workers; the position saved with each checkpoint)
STREAM = ACT + ["--policy.dropout=0", "--policy.use_vae=false", "--dataset.streaming=true", "--num_workers=2"]
LOADERS = ("lerobot", "episodic")


def _venv_problem() -> str | None:
    python = lerobot06_python()
    if python is None:
        return "no LeRobot 0.6.1 venv: run benchmarks/setup_lerobot06_venv.sh (or set EPISODIC_LEROBOT06_VENV)"
    code = "import accelerate, diffusers"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, env=_env(Path("/nonexistent")), timeout=300)
    if proc.returncode != 0:
        return (
            "the LeRobot 0.6.1 venv lacks accelerate or diffusers (its training script and Diffusion Policy need "
            "them): rerun benchmarks/setup_lerobot06_venv.sh"
        )
    return None


def _env(tmp: Path) -> dict:
    # PYTHONPATH: this checkout's episodic first, then what the caller set (e.g. a folder with accelerate)
    path = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return dict(
        os.environ,
        PYTHONPATH=path,
        HF_HUB_OFFLINE="1",
        WANDB_MODE="disabled",
        HF_HOME=str(tmp / "hf"),
        HF_LEROBOT_HOME=str(tmp / "lerobot-home"),
        EPISODIC_CACHE=str(tmp / "cache"),
    )


_PROBLEM = _venv_problem()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]


def _common(root: Path) -> list[str]:
    return [
        "--dataset.repo_id=lerobot06-fixture",
        f"--dataset.root={root}",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        "--wandb.enable=false",
        f"--seed={SEED}",
        f"--batch_size={BATCH}",
        "--log_freq=1",
    ]


def _runs(root: Path, out: Path) -> list[dict]:
    runs = []
    for name, args in PAIRS.items():
        for loader in LOADERS:
            extra = [f"--steps={STEPS}", "--save_checkpoint=false", f"--output_dir={out / name / loader}"]
            runs.append({"name": f"{name}/{loader}", "loader": loader, "args": _common(root) + args + extra})
    for loader in LOADERS:
        whole = out / "resume" / loader
        runs.append(
            {
                "name": f"resume/{loader}/whole",
                "loader": loader,
                "args": _common(root) + RESUME + [f"--steps={STEPS}", f"--output_dir={whole}"],
            }
        )
        config = whole / "checkpoints" / "000002" / "pretrained_model" / "train_config.json"
        runs.append(
            {
                "name": f"resume/{loader}/resumed",
                "loader": loader,
                "args": ["--resume=true", f"--steps={STEPS}", f"--config_path={config}"],
            }
        )
    stream = out / "stream"
    runs.append(
        {
            "name": "stream/whole",
            "loader": "episodic",
            "args": _common(root) + STREAM + ["--save_freq=2", f"--steps={STEPS}", f"--output_dir={stream}"],
        }
    )
    config = stream / "checkpoints" / "000002" / "pretrained_model" / "train_config.json"
    runs.append(
        {
            "name": "stream/resumed",
            "loader": "episodic",
            "args": ["--resume=true", f"--steps={STEPS}", f"--config_path={config}"],
        }
    )
    return runs


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[dict, Path]:
    """Every run of this module, in one LeRobot 0.6.1 process: (results by run name, the output directory's parent,
    which holds the dataset's root `ds` and the runs' `out`)."""
    tmp = tmp_path_factory.mktemp("lerobot06-train")
    root = tmp / "ds"
    write = [str(SIDE), "write", "--root", str(root), "--episodes", "8", "--min-len", "12", "--max-len", "24"]
    write += ["--height", "48", "--width", "64", "--vcodec", "h264"]
    proc = subprocess.run([str(lerobot06_python()), *write], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp / "runs.json").write_text(json.dumps(_runs(root, tmp / "out")))
    proc = subprocess.run(
        [str(lerobot06_python()), str(RECORDER), str(tmp / "results.json"), str(tmp / "runs.json")],
        cwd=tmp,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=3000,  # a run whose spawned workers keep the process alive ends here, failing
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads((tmp / "results.json").read_text()), tmp


_STEP = re.compile(r"^step:(\d+) .*\bloss:(\S+) grdn:(\S+) ")
_EVAL = re.compile(r"^step (\d+): eval_loss=(\S+)$")


def _logged(run: dict) -> tuple[list, list]:
    """((step, loss, grad norm) and (step, eval loss)) as LeRobot logged them."""
    steps = [(int(m[1]), m[2], m[3]) for m in map(_STEP.match, run["log"]) if m]
    evals = [(int(m[1]), m[2]) for m in map(_EVAL.match, run["log"]) if m]
    assert len(steps) + len(evals) == len(run["log"]), run["log"]
    return steps, evals


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("config", list(PAIRS))
def test_every_step_equals_lerobot_dataset(trained, config):
    results, _ = trained
    theirs, ours = results[f"{config}/lerobot"], results[f"{config}/episodic"]
    assert len(theirs["steps"]) == len(ours["steps"]) == STEPS
    for step, (a, b) in enumerate(zip(theirs["steps"], ours["steps"]), start=1):
        assert len(a["index"]) == BATCH and math.isfinite(a["loss"]) and math.isfinite(a["grad_norm"])
        assert b["index"] == a["index"], f"step {step}: other frames"
        assert (b["loss"], b["grad_norm"]) == (a["loss"], a["grad_norm"]), f"step {step}"
    steps, evals = _logged(ours)
    assert (steps, evals) == _logged(theirs)
    assert [s for s, _, _ in steps] == list(range(1, STEPS + 1))
    for (_, loss, grad_norm), rec in zip(steps, ours["steps"]):
        assert (loss, grad_norm) == (f"{rec['loss']:.3f}", f"{rec['grad_norm']:.3f}")
    # the held-out evaluation: the same frames, batch by batch, after the same steps, and the same eval loss
    assert ours["eval"] == theirs["eval"]
    if "--eval_steps=2" in PAIRS[config]:
        assert [s for s, _ in evals] == [2, 4]
        held_out = {e for b in ours["eval"] for e in b["episode_index"]}
        trained_on = set()
        for b in ours["steps"]:
            trained_on |= set(b["index"])
        assert held_out and all(math.isfinite(float(v)) for _, v in evals)
        # every frame evaluated, once per evaluation, none of them trained on
        first = [i for b in ours["eval"] if b["after_step"] == 2 for i in b["index"]]
        assert len(first) == len(set(first)) and not set(first) & trained_on
    else:
        assert ours["eval"] == [] and evals == []


def test_the_held_out_episodes_are_lerobot_s_rule(trained):
    """The episodes evaluated are the last ceil(n * eval_split) of each task, in the order listed (LeRobot 0.6's rule,
    written out here from the dataset's own episodes table)."""
    import pyarrow.parquet as pq

    results, tmp = trained
    root = tmp / "ds"
    first_task = {}
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        rows = pq.read_table(path, columns=["episode_index", "tasks"]).to_pylist()
        first_task.update({int(r["episode_index"]): (r["tasks"][0] if r["tasks"] else "") for r in rows})
    assert len(first_task) == 8 and len(set(first_task.values())) > 1
    for config, listed, fraction in (
        ("act-w2-split-transforms", list(range(8)), 0.25),
        ("act-w0-split-episodes", [7, 1, 4, 2, 6, 0], 0.4),
    ):
        by_task: dict[str, list[int]] = {}
        for e in listed:
            by_task.setdefault(first_task[e], []).append(e)
        want = {e for eps in by_task.values() for e in eps[len(eps) - math.ceil(len(eps) * fraction) :]}
        for loader in LOADERS:
            got = {e for b in results[f"{config}/{loader}"]["eval"] for e in b["episode_index"]}
            assert got == want, (config, loader)


@pytest.mark.timeout(3600)
def test_a_resumed_run_continues_with_the_same_batches(trained):
    results, _ = trained
    for loader in LOADERS:
        whole, resumed = (results[f"resume/{loader}/{n}"]["steps"] for n in ("whole", "resumed"))
        assert len(whole) == STEPS and len(resumed) == STEPS - 2, loader
        assert [s["index"] for s in resumed] == [s["index"] for s in whole[2:]], loader
        # (a deterministic ACT: the losses of the uninterrupted run too, on both sides)
        assert resumed == whole[2:], loader
    # episodic's run, uninterrupted and resumed, is LeRobot's
    for part in ("whole", "resumed"):
        assert results[f"resume/episodic/{part}"]["steps"] == results[f"resume/lerobot/{part}"]["steps"], part


def test_entry_point_prints_lerobot06_help(tmp_path):
    """`python -m episodic.lerobot --help` in the LeRobot 0.6.1 venv prints LeRobot's own help (0.6's options)."""
    proc = subprocess.run(
        [str(lerobot06_python()), "-m", "episodic.lerobot", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--dataset.eval_split" in proc.stdout and "--policy.type" in proc.stdout


@pytest.mark.timeout(3600)
def test_streaming_resumes_from_the_state_saved_with_the_checkpoint(trained):
    """`--dataset.streaming=true` on LeRobot 0.6.1, 2 spawned workers: the stream's position is saved with each
    checkpoint, and a run resumed from step 2 repeats the uninterrupted run's steps 3-4 (frames and losses)."""
    results, tmp = trained
    whole, resumed = (results[f"stream/{n}"]["steps"] for n in ("whole", "resumed"))
    assert len(whole) == STEPS and all(len(s["index"]) == BATCH for s in whole)
    frames = [i for s in whole for i in s["index"]]
    assert len(set(frames)) == len(frames)  # one epoch: no frame twice
    state_file = tmp / "out/stream/checkpoints/000002/training_state/episodic_stream_state.json"
    state = json.loads(state_file.read_text())
    assert (state["epoch"], state["batches_consumed"], state["batch_size"], state["seed"]) == (0, 2, BATCH, SEED)
    assert resumed == whole[2:]
