r"""Tiny training loop under Hugging Face ``accelerate`` with an exactly resumable sample order.

    accelerate launch --num_processes 2 examples/train_accelerate.py \
        --root /tmp/episodic_demo --ckpt /tmp/order_ckpt_acc.pt

``accelerate`` shards and resumes DataLoaders itself (``BatchSamplerShard``,
``skip_first_batches``, its own epoch counter); combined with an order that is already
sharded, that would split each rank's batch again and reset or mis-skip the epoch. So
the DataLoader is built here and NOT passed to ``accelerator.prepare``: only the model
and optimizer are. Batches are moved to ``accelerator.device`` by hand, and the order
state (``{"seed", "epoch", "consumed"}``) is saved as JSON inside our own checkpoint.
(Alternatively ``accelerator.register_for_checkpointing(batch_sampler)`` makes
``save_state``/``load_state`` carry it: the batch sampler has ``state_dict``/``load_state_dict``.)
"""

import argparse
import json
import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import episodic
import episodic.demo
from episodic.order import EpisodeAwareSampler, EpisodicBatchSampler, TrackedLoader


def main():
    from accelerate import Accelerator  # optional dependency, imported lazily

    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/episodic_demo")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--ckpt", default="/tmp/episodic_order_ckpt_accelerate.pt")
    ap.add_argument("--steps", type=int, default=20, help="train until this global step")
    ap.add_argument("--batch-size", type=int, default=16, help="per process")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=5)
    args = ap.parse_args()

    accelerator = Accelerator()
    root = Path(args.root)
    if accelerator.is_main_process and not (root / "meta" / "info.json").exists():
        episodic.demo.write_demo_dataset(root, num_episodes=args.episodes, seed=0)
    accelerator.wait_for_everyone()
    dataset = episodic.LeRobotDataset(repo_id="demo", root=root, video_keys=[])  # states only: no decoding

    episodes = dataset.meta.episodes
    sampler = EpisodeAwareSampler(
        episodes["dataset_from_index"], episodes["dataset_to_index"], drop_n_last_frames=1, shuffle=True, seed=0
    )
    batch_sampler = EpisodicBatchSampler(
        sampler, args.batch_size, rank=accelerator.process_index, world_size=accelerator.num_processes
    )
    loader = DataLoader(dataset, batch_sampler=batch_sampler, num_workers=args.workers)  # not prepared

    sample = dataset[0]
    model = torch.nn.Linear(sample["observation.state"].numel(), sample["action"].numel())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)  # the DataLoader stays ours

    step = 0
    if os.path.exists(args.ckpt):
        ckpt = torch.load(args.ckpt, map_location="cpu")
        accelerator.unwrap_model(model).load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        batch_sampler.load_state_dict(json.loads(ckpt["order"]))  # may come from another world size
        step = ckpt["step"]
        accelerator.print(f"resumed at step {step}, order {ckpt['order']}")

    def save():
        if accelerator.is_main_process:
            state = {
                "model": accelerator.unwrap_model(model).state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step,
                "order": json.dumps(batch_sampler.state_dict()),  # identical on every rank
            }
            torch.save(state, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)
        accelerator.wait_for_everyone()

    while step < args.steps:
        for batch in TrackedLoader(loader, batch_sampler):  # one global step per batch consumed here
            state = batch["observation.state"].to(accelerator.device).flatten(1)
            action = batch["action"].to(accelerator.device).flatten(1)
            loss = torch.nn.functional.mse_loss(model(state), action)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            accelerator.print(
                f"step {step} epoch {batch_sampler.epoch} consumed {batch_sampler.consumed} loss {loss.item():.4f}"
            )
            if step % args.save_every == 0 or step == args.steps:
                save()
            if step == args.steps:
                break


if __name__ == "__main__":
    main()
