"""Streaming a LeRobot-format dataset under torchrun, with the stream position in checkpoints.

    # one node, 2 processes; --dummy just iterates and reports frames/s per process and in total
    torchrun --nproc_per_node=2 examples/stream_torchrun.py --root /work/bench-data/lerobot200 --dummy --steps 50
    # resume from the checkpoint, on any number of processes (the epoch's remaining frames are re-split)
    torchrun --nproc_per_node=1 examples/stream_torchrun.py --root /work/bench-data/lerobot200 --dummy --steps 100
    # several nodes: torchrun --nnodes=N --node_rank=i --rdzv_endpoint=HOST:PORT ... (same arguments)

`--root` may be a local directory or any fsspec URL (https://, s3://, hf://...). Without `--dummy`, a
linear model maps observation.state to the action window. The checkpoint holds the model, the optimizer
and `dataset.state_dict()` ({"epoch", "batches_consumed", "batch_size", "seed", ...}, the same on every
rank). Also runs as a plain `python examples/stream_torchrun.py ...` (one process).
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import episodic.demo
from episodic.datasets.streaming import StreamingLeRobotDataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/episodic_stream_demo")
    ap.add_argument("--ckpt", default="/tmp/episodic_stream_ckpt.pt")
    ap.add_argument("--steps", type=int, default=50, help="run until this many steps in total (over restarts)")
    ap.add_argument("--batch-size", type=int, default=32, help="per process")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pool", type=int, default=64, help="episodes in RAM per consumer")
    ap.add_argument("--save-every", type=int, default=20)
    ap.add_argument("--dummy", action="store_true", help="only iterate and report throughput")
    args = ap.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")

    if rank == 0 and "://" not in args.root and not (Path(args.root) / "meta" / "info.json").exists():
        episodic.demo.write_demo_dataset(args.root, num_episodes=16, progress=False)
    if distributed:
        dist.barrier()
    fps = 30
    dataset = StreamingLeRobotDataset(None, root=args.root, episode_pool_size=args.pool,
                                      delta_timestamps={"action": [i / fps for i in range(16)],
                                                        "observation.state": [-1 / fps, 0.0]})
    step = 0
    model = optim = None
    ckpt = Path(args.ckpt)
    state = torch.load(ckpt, weights_only=False) if ckpt.exists() else None
    if state is not None:
        dataset.load_state_dict(json.loads(state["stream"]))
        step = state["step"]
        if rank == 0:
            print(f"resumed at step {step}: {state['stream']}", flush=True)
    loader = dataset.loader(batch_size=args.batch_size, num_workers=args.workers)

    def save():
        if rank == 0:  # the stream state is identical on every rank
            torch.save({"step": step, "stream": json.dumps(dataset.state_dict()),
                        "model": model.state_dict() if model is not None else None}, ckpt)

    frames, t0, first = 0, time.perf_counter(), None
    done = False
    while not done:
        for batch in loader:  # an exhausted pass moves the dataset to the next epoch
            if first is None:
                first = time.perf_counter() - t0
            frames += len(batch["index"])
            if not args.dummy:
                x = batch["observation.state"].flatten(1).to(device)
                y = batch["action"].flatten(1).to(device)
                if model is None:
                    model = torch.nn.Linear(x.shape[1], y.shape[1]).to(device)
                    if state is not None and state.get("model") is not None:
                        model.load_state_dict(state["model"])
                    optim = torch.optim.SGD(model.parameters(), lr=1e-3)
                loss = torch.nn.functional.mse_loss(model(x), y)
                optim.zero_grad()
                loss.backward()
                if distributed:
                    for p in model.parameters():
                        dist.all_reduce(p.grad)
                        p.grad /= world
                optim.step()
            step += 1
            if step % args.save_every == 0:
                save()
            if step >= args.steps:
                done = True
                break
    save()
    seconds = time.perf_counter() - t0
    rate = torch.tensor([frames / seconds])
    print(f"rank {rank}: {frames} frames in {seconds:.1f}s = {rate.item():.0f} frames/s "
          f"(first batch {first:.2f}s) {dataset.timing_stats()}", flush=True)
    if distributed:
        dist.all_reduce(rate)
        dist.destroy_process_group()
    if rank == 0:
        print(f"total: {rate.item():.0f} frames/s over {world} processes", flush=True)


if __name__ == "__main__":
    main()
