r"""Tiny training loop under torchrun with an exactly resumable sample order.

    torchrun --nproc_per_node=2 examples/train_torchrun.py \
        --root /tmp/episodic_demo --ckpt /tmp/order_ckpt.pt --steps 20
    # stop it (or let it finish), then resume on any number of processes:
    torchrun --nproc_per_node=3 examples/train_torchrun.py \
        --root /tmp/episodic_demo --ckpt /tmp/order_ckpt.pt --steps 40

A linear model maps ``observation.state`` to ``action``. The checkpoint holds the model,
the optimizer, the step and the order state as JSON (``{"seed", "epoch", "consumed"}``);
the resumed run consumes exactly the samples the first one had not, whatever the world
size. Also runs as a plain ``python examples/train_torchrun.py`` (one process).
"""

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import episodic
import episodic.demo
from episodic.order import EpisodeAwareSampler, EpisodicBatchSampler, TrackedLoader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/episodic_demo")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--ckpt", default="/tmp/episodic_order_ckpt.pt")
    ap.add_argument("--steps", type=int, default=20, help="train until this global step")
    ap.add_argument("--batch-size", type=int, default=16, help="per process")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=5)
    args = ap.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu")

    root = Path(args.root)
    if rank == 0 and not (root / "meta" / "info.json").exists():
        episodic.demo.write_demo_dataset(root, num_episodes=args.episodes, seed=0)
    if distributed:
        dist.barrier()
    dataset = episodic.LeRobotDataset(repo_id="demo", root=root, video_keys=[])  # states only: no decoding

    episodes = dataset.meta.episodes
    sampler = EpisodeAwareSampler(
        episodes["dataset_from_index"], episodes["dataset_to_index"], drop_n_last_frames=1, shuffle=True, seed=0
    )
    batch_sampler = EpisodicBatchSampler(sampler, args.batch_size)  # rank/world size from torch.distributed
    loader = DataLoader(dataset, batch_sampler=batch_sampler, num_workers=args.workers)

    sample = dataset[0]
    model = torch.nn.Linear(sample["observation.state"].numel(), sample["action"].numel()).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    step = 0
    if os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, map_location=device)
        (model.module if distributed else model).load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        batch_sampler.load_state_dict(json.loads(ckpt["order"]))  # may come from another world size
        step = ckpt["step"]
        if rank == 0:
            print(f"resumed at step {step}, order {ckpt['order']}")

    def save():
        if rank == 0:
            state = {
                "model": (model.module if distributed else model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step,
                "order": json.dumps(batch_sampler.state_dict()),  # identical on every rank
            }
            torch.save(state, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)

    while step < args.steps:
        # TrackedLoader advances the order by one global step per batch handed to this loop
        # (not per batch prefetched by the workers); at the end of an epoch it rolls over.
        for batch in TrackedLoader(loader, batch_sampler):
            state = batch["observation.state"].to(device).flatten(1)
            action = batch["action"].to(device).flatten(1)
            loss = torch.nn.functional.mse_loss(model(state), action)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0:
                print(
                    f"step {step} epoch {batch_sampler.epoch} consumed {batch_sampler.consumed} loss {loss.item():.4f}"
                )
            if step % args.save_every == 0 or step == args.steps:
                save()
            if step == args.steps:
                break
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
