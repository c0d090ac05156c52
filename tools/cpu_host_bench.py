"""Host-side costs that a GPU run only shows as idle time, measured on the CPU. Writes a JSON with
its command.

Usage:  python tools/cpu_host_bench.py --out docs/benchmarks/cpu-host.json
- control message rank 0 -> 1 (a decode StepInput): gloo `broadcast_object_list` vs `ControlChannel`
(shared memory)
- one engine decode step's host work at B=256 (schedule, prepare, postprocess, outputs; the model
replaced by
  fixed token ids) and `DecodeGraphs.replay`'s staging of that step (graph faked), tiny Qwen3 model.
"""

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _channel_rank(rank: int, port: int, out) -> None:
    from metainfer.distributed.parallel import ControlChannel
    from metainfer.engine.step_input import StepInput

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    step, res = StepInput(False, [123], [list(range(20))], [300], [1], [0]), {}
    for name in ("gloo_broadcast_object_list", "control_channel"):
        ch = ControlChannel(rank, 2) if name == "control_channel" else None
        for i in range(2200):
            if i == 200:
                start = time.perf_counter()
            if ch is None:
                box = [step if rank == 0 else None]
                dist.broadcast_object_list(box, src=0)
            elif rank == 0:
                ch.send(step)
            else:
                ch.recv()
        res[name + "_us"] = (time.perf_counter() - start) / 2000 * 1e6
        if ch is not None:
            ch.close()
    if rank == 0:
        out.put(res)
    dist.destroy_process_group()


def control_channel() -> dict:
    from metainfer.distributed.parallel import free_port

    ctx = mp.get_context("spawn")
    out, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_channel_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    res = out.get(timeout=300)
    for p in procs:
        p.join(30)
    return res


def decode_host(batch: int = 256, steps: int = 100) -> dict:
    from metainfer import LLM, SamplingParams
    from metainfer.engine.cuda_graphs import DecodeGraphs
    from metainfer.engine.logits_processing import LaunchedStep
    from metainfer.testing import write_random_checkpoint

    llm = LLM(
        write_random_checkpoint(os.path.join(tempfile.mkdtemp(), "m"), "qwen3-tiny"),
        dtype="float32",
        device="cpu",
        max_num_seqs=batch,
    )
    engine, runner = llm.engine, llm.engine.runner
    vocab, rng = engine.model_config.vocab_size, random.Random(0)
    for i in range(batch):
        engine.add_request(
            str(i),
            [rng.randrange(vocab) for _ in range(rng.randint(100, 1024))],
            SamplingParams(temperature=0, max_tokens=400, ignore_eos=True),
            stream=False,
        )
    while engine.scheduler.waiting:
        engine.step()  # prefills (real model)
    tokens = torch.zeros(batch, dtype=torch.long)

    def launch(b):  # no model from here on: the step is prepared, fixed ids come back
        runner.prepare(b)
        runner.last_token_ids, runner.last_rows = (
            tokens[: len(b.seqs)],
            {s.seq_id: i for i, s in enumerate(b.seqs)},
        )
        return LaunchedStep(b, tokens[: len(b.seqs)], time.perf_counter())

    runner.launch = launch
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    engine_us = (time.perf_counter() - start) / steps * 1e6
    step = runner.prepare(engine.scheduler.schedule())
    g = DecodeGraphs.__new__(DecodeGraphs)  # staging only: the graph is faked
    g.block_size, g.null_block, g.buckets = runner.block_size, runner.null_block, [batch]
    g._allocate_buffers(batch, -(-runner.max_model_len // runner.block_size), torch.device("cpu"))
    g.graphs, g.logits = (
        {batch: type("NoGraph", (), {"replay": lambda self: None})()},
        {batch: torch.zeros(batch, 1)},
    )
    start = time.perf_counter()
    for _ in range(steps):
        g.replay(step, runner.last_token_ids)
    llm.shutdown()
    return {
        "batch": batch,
        "engine_step_host_us": engine_us,
        "graph_staging_us": (time.perf_counter() - start) / steps * 1e6,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    res = {
        "command": " ".join(["python", *sys.argv]),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "control_message": control_channel(),
        "decode_host": decode_host(),
    }
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
