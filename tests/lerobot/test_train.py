"""`episodic lerobot-train`: LeRobot 0.4.4's own training script, unchanged, on episodic's datasets.

The runs happen in LeRobot's venv (benchmarks/setup_lerobot_venv.sh; found by `support.lerobot_python`, the
tests skip without it), on a dataset written by LeRobot's own writer, on CPU, with no network (pretrained
backbone weights off, wandb off, no Hub push, HF_HUB_OFFLINE=1). Each configuration runs `lerobot_train` once
with LeRobot's dataset and once through `episodic.lerobot.train` (same seed, same arguments), and every step's
loss and grad norm must be equal, bit for bit (recorded by tests/lerobot/train_recorder.py, which also keeps
LeRobot's logged `step:` lines, compared too). Small ACT and Diffusion Policy models keep a step short; all
runs share one process (LeRobot is imported once). 11-19 minutes on a shared 2-core machine (load average
7-13; 13 runs of 5, 4 or 2 steps): marked slow, run with `pytest -m slow tests/lerobot`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import LEROBOT_FIXTURE, REPO, lerobot_python

RECORDER = Path(__file__).with_name("train_recorder.py")
STEPS, BATCH, SEED = 5, 4, 7

COMMON = [
    "--dataset.repo_id=lerobot-fixture",
    f"--dataset.root={LEROBOT_FIXTURE / 'dataset'}",
    "--policy.device=cpu",
    "--policy.push_to_hub=false",
    "--wandb.enable=false",
    f"--seed={SEED}",
    "--eval_freq=0",
    f"--batch_size={BATCH}",
    "--log_freq=1",
]
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
]  # Diffusion Policy: LeRobot's EpisodeAwareSampler (drop_n_last_frames=7)
PAIRS = {
    "act-w0": ACT + ["--num_workers=0"],
    "act-w2": ACT + ["--num_workers=2"],
    "act-w2-transforms-episodes": ACT
    + ["--num_workers=2", "--dataset.image_transforms.enable=true", "--dataset.episodes=[2,5,6,11,17]"],
    "diffusion-w0": DIFFUSION + ["--num_workers=0"],
    "diffusion-w2": DIFFUSION + ["--num_workers=2"],
}
# streaming: a deterministic ACT (no dropout, no VAE sampling), so a resumed run must repeat the uninterrupted
# one exactly: same frames, same losses
STREAM = ACT + [
    "--policy.dropout=0",
    "--policy.use_vae=false",
    "--dataset.streaming=true",
    "--num_workers=2",
    "--save_freq=2",
]

needs_lerobot = pytest.mark.skipif(
    lerobot_python() is None,
    reason=(
        "no LeRobot 0.4.4 venv: make one with benchmarks/setup_lerobot_venv.sh .bench/lerobot-venv, or set "
        "EPISODIC_LEROBOT_VENV to one"
    ),
)


def _runs(out: Path) -> list[dict]:
    runs = []
    for name, args in PAIRS.items():
        for loader in ("lerobot", "episodic"):
            runs.append(
                {
                    "name": f"{name}/{loader}",
                    "loader": loader,
                    "args": COMMON
                    + args
                    + [f"--steps={STEPS}", "--save_checkpoint=false", f"--output_dir={out / name / loader}"],
                }
            )
    stream = out / "stream"
    runs += [
        {
            "name": "stream/whole",
            "loader": "episodic",
            "args": COMMON + STREAM + ["--steps=4", f"--output_dir={stream / 'whole'}"],
        },
        {
            "name": "stream/first-half",
            "loader": "episodic",
            "args": COMMON + STREAM + ["--steps=2", f"--output_dir={stream / 'halves'}"],
        },
        {
            "name": "stream/resumed",
            "loader": "episodic",
            "args": [
                "--resume=true",
                "--steps=4",
                f"--config_path={stream / 'halves/checkpoints/last/pretrained_model/train_config.json'}",
            ],
        },
    ]
    return runs


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[dict, Path]:
    """Every run of this module, in one LeRobot process: (results by run name, output directory)."""
    tmp = tmp_path_factory.mktemp("lerobot-train")
    out = tmp / "out"
    (tmp / "runs.json").write_text(json.dumps(_runs(out)))
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO / "src"),
        HF_HUB_OFFLINE="1",
        WANDB_MODE="disabled",
        HF_HOME=str(tmp / "hf"),
        HF_LEROBOT_HOME=str(tmp / "lerobot-home"),
        EPISODIC_CACHE=str(tmp / "cache"),
    )
    proc = subprocess.run(
        [str(lerobot_python()), str(RECORDER), str(tmp / "results.json"), str(tmp / "runs.json")],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=3300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads((tmp / "results.json").read_text()), out


_LOGGED = re.compile(r"^step:(\d+) .*\bloss:(\S+) grdn:(\S+) ")


def _logged(run: dict) -> list[tuple[int, str, str]]:
    """(step, loss, grad norm) as LeRobot logged them."""
    found = [_LOGGED.match(line) for line in run["log"]]
    assert all(found), run["log"]
    return [(int(m[1]), m[2], m[3]) for m in found]


@needs_lerobot
@pytest.mark.slow
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
    # what LeRobot logged: one line per step, the same in both runs, and the values recorded above
    logged = _logged(ours)
    assert logged == _logged(theirs)
    assert [s for s, _, _ in logged] == list(range(1, STEPS + 1))
    for (_, loss, grad_norm), rec in zip(logged, ours["steps"]):
        assert (loss, grad_norm) == (f"{rec['loss']:.3f}", f"{rec['grad_norm']:.3f}")


@needs_lerobot
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_streaming_resumes_from_the_state_saved_with_the_checkpoint(trained):
    results, out = trained
    whole, first, resumed = (results[f"stream/{n}"]["steps"] for n in ("whole", "first-half", "resumed"))
    assert len(whole) == 4 and all(len(s["index"]) == BATCH for s in whole)
    frames = [i for s in whole for i in s["index"]]
    assert len(set(frames)) == len(frames)  # one epoch: no frame twice
    state_file = out / "stream/halves/checkpoints/000002/training_state/episodic_stream_state.json"
    state = json.loads(state_file.read_text())
    assert (state["epoch"], state["batches_consumed"], state["batch_size"], state["seed"]) == (0, 2, BATCH, SEED)
    assert first == whole[:2]
    assert resumed == whole[2:]  # the same frames, losses and grad norms as the uninterrupted run


@needs_lerobot
@pytest.mark.slow
@pytest.mark.parametrize(
    "entry",
    [
        ["-m", "episodic.lerobot"],
        ["-c", "import sys; from episodic.cli import main; sys.exit(main(sys.argv[1:]))", "lerobot-train"],
    ],
    ids=["python-m", "episodic-cli"],
)
def test_entry_points_hand_every_argument_to_lerobot(entry, tmp_path):
    """`python -m episodic.lerobot --help` and `episodic lerobot-train --help` print LeRobot's own help."""
    proc = subprocess.run(
        [str(lerobot_python()), *entry, "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--dataset.repo_id" in proc.stdout and "--policy.type" in proc.stdout


def _lerobot_installed() -> bool:
    try:  # (not find_spec("lerobot"): this test directory is a namespace package of that name)
        return importlib.util.find_spec("lerobot.scripts.lerobot_train") is not None
    except ImportError:
        return False


@pytest.mark.skipif(_lerobot_installed(), reason="LeRobot is installed here")
def test_without_lerobot_a_clear_error():
    """`episodic lerobot-train` where LeRobot is not installed: SystemExit with a message saying so (exit status 1)."""
    from episodic.cli import main

    with pytest.raises(SystemExit) as err:
        main(["lerobot-train", "--policy.type=act", "--dataset.repo_id=x"])
    assert "LeRobot" in str(err.value) and "pip install lerobot" in str(err.value)
    # the package itself imports nothing of LeRobot
    code = (
        "import sys, episodic.lerobot, episodic.lerobot.train; print(any(m.startswith('lerobot') for m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "src"))
    )
    assert proc.stdout.strip() == "False", proc.stderr


def _script(*names: str):
    import types

    module = types.ModuleType("lerobot_train")
    for name in names:
        setattr(module, name, lambda *a, _name=name, **kw: _name)
    return module


@pytest.mark.parametrize(
    "names, factory",
    [
        (("make_train_eval_datasets", "cycle", "save_checkpoint"), "make_train_eval_datasets"),  # LeRobot 0.6
        (("make_dataset", "cycle", "save_checkpoint"), "make_dataset"),  # LeRobot 0.4
    ],
    ids=["0.6", "0.4"],
)
def test_the_script_s_names_pick_the_factory_replaced(names, factory):
    """One entry point for both versions: the dataset factory `lerobot_train` has is the one replaced for the run
    (with `cycle` and `save_checkpoint`), and every name is LeRobot's again afterwards. (The runs themselves:
    test_train06.py with LeRobot 0.6.1, the tests above with 0.4.4, both slow.)"""
    from episodic.lerobot import factory as episodic_factory
    from episodic.lerobot.train import _Run

    script = _script(*names)
    originals = {n: getattr(script, n) for n in names}
    with _Run(script) as run:
        assert run.factory == factory
        for n in names:
            assert getattr(script, n) == getattr(run, n) and getattr(script, n) is not originals[n]
        assert getattr(episodic_factory, factory).__name__ == factory  # what run's method calls
    assert {n: getattr(script, n) for n in names} == originals


@pytest.mark.parametrize(
    "names, missing",
    [(("cycle", "save_checkpoint"), "make_train_eval_datasets or make_dataset"), (("make_dataset",), "cycle")],
)
def test_a_script_of_another_version_is_a_clear_error(names, missing):
    from episodic.lerobot.train import _factory_of

    with pytest.raises(SystemExit) as err:
        _factory_of(_script(*names))
    assert f"has no {missing}" in str(err.value) and "supported: LeRobot 0.4.x and 0.6.x" in str(err.value)
