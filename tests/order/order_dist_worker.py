"""Worker launched by torchrun from test_order_distributed.py (not a test module).

Trains nothing: iterates a DataLoader over a map-style dataset that returns its index,
with an EpisodicBatchSampler sharding one global order over the real process group,
all-reduces each step (as DDP would), and writes what this rank consumed to JSON.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from episodic.order import EpisodeAwareSampler, EpisodicBatchSampler, TrackedLoader


class IndexDataset(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(i, dtype=torch.int64)


def episodes(num_episodes):
    lengths = [3 + (7 * e) % 11 for e in range(num_episodes)]
    starts = [sum(lengths[:e]) for e in range(num_episodes)]
    return starts, [s + n for s, n in zip(starts, lengths)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stop-after", type=int, default=-1, help="checkpoint then die after this many steps")
    ap.add_argument("--state-in", default=None)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    starts, ends = episodes(args.episodes)
    sampler = EpisodeAwareSampler(starts, ends, drop_n_last_frames=1, shuffle=True, seed=args.seed)
    batch_sampler = EpisodicBatchSampler(sampler, args.batch_size)  # rank/world from the process group
    assert (batch_sampler.rank, batch_sampler.world_size) == (rank, world)
    if args.state_in:
        with open(args.state_in) as f:
            batch_sampler.load_state_dict(json.load(f)["order"])
    loader = DataLoader(IndexDataset(ends[-1]), batch_sampler=batch_sampler, num_workers=args.workers)

    batches, died = [], False
    for batch in TrackedLoader(loader, batch_sampler):
        total = batch.sum()
        dist.all_reduce(total)  # every rank takes part in every step
        batches.append(batch.tolist())
        if len(batches) == args.stop_after:
            died = True
            break
    record = {"rank": rank, "world": world, "batches": batches, "order": batch_sampler.state_dict()}
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.barrier()
    dist.destroy_process_group()
    if died:
        os._exit(17)  # a crash right after the checkpoint


if __name__ == "__main__":
    main()
