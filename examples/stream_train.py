"""Streaming a LeRobot-format dataset in a (multi-node) training job, with the stream position in checkpoints.

    # one node, 2 processes; --dummy only iterates and prints frames/s per process and in total
    torchrun --nproc_per_node=2 examples/stream_train.py --root DATASET --dummy --steps 50
    # two nodes (run on each, node_rank 0 and 1; MASTER = node 0's address)
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=MASTER --master_port=29500 \\
        examples/stream_train.py --root s3://bucket/dataset --ckpt /shared/stream_ckpt.pt
    # resume from the checkpoint on any number of processes: the epoch's remaining frames are re-split
    torchrun --nproc_per_node=1 examples/stream_train.py --root DATASET --steps 100
    # the same under Hugging Face accelerate (it starts the process group; the stream is not "prepared")
    accelerate launch --num_processes 2 examples/stream_train.py --accelerate --root DATASET
    # (on a CPU-only machine accelerate launch runs one process unless MPI is set up: start it with
    #  torchrun --nproc_per_node=2 examples/stream_train.py --accelerate ..., which Accelerator picks up)

`--root` is a local directory or any fsspec URL (https://, s3://, hf://...); without it a small demo
dataset is written to /tmp. Without `--dummy` a small model maps observation.state to the action window
under DistributedDataParallel (or accelerate). Every rank hands out the same number of batches per epoch
(`loader(even_batches=...)`, the default under several processes), so collective ops never wait on a rank
that ran dry. The checkpoint (written atomically by rank 0) holds the model, the optimizer, the step and
`dataset.state_dict()` ({"epoch", "batches_consumed", "batch_size", "seed", ...}, the same on every
rank). `--log-indices DIR` writes the frame indices each rank consumed (used by the tests).
Also runs as a plain `python examples/stream_train.py ...` (one process).
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import episodic.demo
from episodic import StreamingLeRobotDataset


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
    ap.add_argument("--accelerate", action="store_true", help="use Hugging Face accelerate (accelerate launch)")
    ap.add_argument("--log-indices", help="directory for rank<r>.jsonl files of consumed frame indices")
    args = ap.parse_args()

    accelerator = None
    if args.accelerate:
        from accelerate import Accelerator  # optional dependency

        accelerator = Accelerator(cpu=not torch.cuda.is_available())
        device = accelerator.device
    elif "RANK" in os.environ:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    if accelerator is None:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)

    if rank == 0 and "://" not in args.root and not (Path(args.root) / "meta" / "info.json").exists():
        episodic.demo.write_demo_dataset(args.root, num_episodes=16, progress=False)
    if distributed:
        dist.barrier()
    fps = 30
    dataset = StreamingLeRobotDataset(
        None,
        root=args.root,
        episode_pool_size=args.pool,
        delta_timestamps={"action": [i / fps for i in range(16)], "observation.state": [-1 / fps, 0.0]},
    )
    ckpt = Path(args.ckpt)
    state = torch.load(ckpt, weights_only=False) if ckpt.exists() else None
    step = 0
    if state is not None:
        dataset.load_state_dict(json.loads(state["stream"]))  # may come from another world size
        step = state["step"]
        if rank == 0:
            print(f"resumed at step {step} on {world} process(es): {state['stream']}", flush=True)

    model = optim = None
    if not args.dummy:
        n_state = dataset.features["observation.state"]["shape"][0] * 2  # LeRobot-style feature dicts
        n_action = dataset.features["action"]["shape"][0] * 16
        model = torch.nn.Sequential(torch.nn.Linear(n_state, 256), torch.nn.ReLU(), torch.nn.Linear(256, n_action))
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if state is not None and state.get("model") is not None:
            model.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
        if accelerator is not None:
            model, optim = accelerator.prepare(model, optim)  # not the loader: the stream shards itself
        else:
            model = model.to(device)
            if distributed:
                model = torch.nn.parallel.DistributedDataParallel(
                    model, device_ids=[device.index] if device.type == "cuda" else None
                )
    loader = dataset.loader(batch_size=args.batch_size, num_workers=args.workers)
    log = None
    if args.log_indices:
        Path(args.log_indices).mkdir(parents=True, exist_ok=True)
        log = open(Path(args.log_indices) / f"rank{rank}.jsonl", "a")  # noqa: SIM115 (closed after the loop)

    def save():
        if rank == 0:  # the stream state is identical on every rank
            plain = model.module if hasattr(model, "module") else model
            tmp = ckpt.with_name(ckpt.name + ".tmp")
            torch.save(
                {
                    "step": step,
                    "stream": json.dumps(dataset.state_dict()),
                    "model": plain.state_dict() if plain is not None else None,
                    "optim": optim.state_dict() if optim is not None else None,
                },
                tmp,
            )
            os.replace(tmp, ckpt)
        if distributed:
            dist.barrier()

    frames, t0, first = 0, time.perf_counter(), None
    while step < args.steps:
        for batch in loader:  # a finished pass moves the dataset to the next epoch
            if first is None:
                first = time.perf_counter() - t0
            frames += len(batch["index"])
            if log is not None:
                log.write(json.dumps({"step": step, "epoch": dataset.epoch, "index": batch["index"].tolist()}) + "\n")
            if model is not None:
                x = batch["observation.state"].flatten(1).to(device)
                y = batch["action"].flatten(1).to(device)
                loss = torch.nn.functional.mse_loss(model(x), y)
                optim.zero_grad()
                accelerator.backward(loss) if accelerator is not None else loss.backward()
                optim.step()
            step += 1
            if step % args.save_every == 0:
                save()
            if step >= args.steps:
                break
    save()
    if log is not None:
        log.close()
    seconds = time.perf_counter() - t0
    rate = torch.tensor([frames / seconds], dtype=torch.float64)
    print(
        f"rank {rank}: {frames} frames in {seconds:.2f} s = {rate.item():.0f} frames/s "
        f"(first batch after {first if first is not None else float('nan'):.2f} s)",
        flush=True,
    )
    if distributed:
        dist.all_reduce(rate)
    if rank == 0:
        print(f"total: {rate.item():.0f} frames/s over {world} process(es)", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
