"""Acceptance (issue 3, CPU part): TP over gloo processes equals TP=1 and HF; clean exit; a dead
worker is reported."""

import multiprocessing as mp
import os
import signal
import time
import psutil
import pytest
from metainfer import LLM, SamplingParams
from metainfer.testing import hf_greedy
from metainfer.distributed.workers import WorkerDied
from test_generate_vs_hf import random_prompts, GREEDY


def run(ckpt, prompts, tp, dtype="float32", **kw):
    with LLM(ckpt, dtype=dtype, device="cpu", tensor_parallel_size=tp, **kw) as llm:
        return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize(
    "preset", ["qwen3-tiny", "qwen3-tiny-mqa"]
)  # 2 KV heads (split), 1 KV head (replicated)
def test_tp2_equals_tp1_and_hf(preset, checkpoints, hf_models):
    ckpt = checkpoints(preset)
    prompts = random_prompts(8, seed=11)
    tp1 = run(ckpt, prompts, 1)
    assert tp1 == hf_greedy(hf_models(ckpt), prompts, 64)
    assert run(ckpt, prompts, 2) == tp1
    assert not mp.active_children()


def test_tp2_bf16_rounds_like_tp1(checkpoints):
    """bf16: row-parallel layers sum float32 partial products and round each output once, as TP=1's
    GEMM does, so TP=2 follows TP=1's greedy path (bf16 partial sums would round twice more per
    layer)."""
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(8, seed=14)
    assert run(ckpt, prompts, 2, dtype="bfloat16") == run(ckpt, prompts, 1, dtype="bfloat16")


def test_tp2_async_scheduling_with_sampling(checkpoints):
    """Under TP, a step that starts before the last one is read back gets that step's sampled ids by
    broadcast from rank 0: seeded sampling gives the same tokens (and logprobs) with async
    scheduling as without."""
    ckpt = checkpoints("qwen3-tiny")
    prompts = random_prompts(4, seed=15)
    params = SamplingParams(
        temperature=0.9,
        top_p=0.95,
        max_tokens=24,
        seed=7,
        ignore_eos=True,
        logprobs=2,
        prompt_logprobs=1,
    )  # every rank computes the prompts' logits, rank 0 scores them
    outs = []
    for async_scheduling in (False, True):
        with LLM(
            ckpt,
            dtype="float32",
            device="cpu",
            tensor_parallel_size=2,
            async_scheduling=async_scheduling,
        ) as llm:
            outs.append(
                [
                    (o.outputs[0].token_ids, o.outputs[0].logprobs, o.prompt_logprobs)
                    for o in llm.generate(prompts, params, use_tqdm=False)
                ]
            )
    assert (
        outs[0] == outs[1] and len(outs[0][0][0]) == len(outs[0][0][1]) == 24
    )  # logprobs too: rank 0 samples
    with LLM(
        ckpt, dtype="float32", device="cpu"
    ) as llm:  # the prompts' scores: TP=1's, from the same weights
        tp1 = [o.prompt_logprobs for o in llm.generate(prompts, params, use_tqdm=False)]
    for (_, _, scored), ref, p in zip(outs[0], tp1, prompts):
        assert len(scored) == len(p) and scored[0] is None
        assert [e[t].logprob for t, e in zip(p[1:], scored[1:])] == pytest.approx(
            [e[t].logprob for t, e in zip(p[1:], ref[1:])], abs=1e-5
        )


def test_vocab_not_divisible_by_tp(checkpoints, hf_models):
    ckpt = checkpoints(
        "qwen3-tiny", vocab_size=1001
    )  # 1001 = 2 * 500 + 1: the last rank holds a padding row
    prompts = random_prompts(8, seed=12, vocab=1001)
    ref = hf_greedy(hf_models(ckpt), prompts, 64)
    assert run(ckpt, prompts, 2) == ref


def test_tp4_kv_head_replication(checkpoints):
    ckpt = checkpoints("qwen3-tiny")  # 4 query heads, 2 KV heads: each KV head on 2 of 4 ranks
    prompts = random_prompts(4, seed=13)
    assert run(ckpt, prompts, 4) == run(ckpt, prompts, 1)


def test_exit_leaves_no_children_and_dead_worker_is_reported(checkpoints):
    ckpt = checkpoints("qwen3-tiny")
    llm = LLM(ckpt, dtype="float32", device="cpu", tensor_parallel_size=2)
    llm.generate([[1, 2, 3]], GREEDY, use_tqdm=False)
    pids = [p.pid for p in llm.engine.workers.procs.values()]
    os.kill(pids[0], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerDied, match="rank 1"):
        llm.generate([[4, 5, 6]], GREEDY, use_tqdm=False)
    assert time.monotonic() - start < 10
    llm.shutdown()
    assert not mp.active_children()
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )

    with LLM(
        ckpt, dtype="float32", device="cpu", tensor_parallel_size=2
    ) as llm:  # the next engine starts cleanly
        pids = [p.pid for p in llm.engine.workers.procs.values()]
        llm.generate([[1, 2, 3]], GREEDY, use_tqdm=False)
    assert not mp.active_children() and not any(psutil.pid_exists(p) for p in pids)


def _channel_rank(rank: int, port: int, messages: list, out) -> None:
    import torch.distributed as dist
    from metainfer.distributed.parallel import ControlChannel

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=3)
    ch = ControlChannel(rank, 3, capacity=1 << 16)
    got = [ch.send(m) for m in messages] if rank == 0 else [ch.recv() for _ in messages]
    ch.close()
    dist.destroy_process_group()
    out.put((rank, got))


def test_control_channel_order_and_big_messages():
    """Every reader gets every message in order, small ones through shared memory, one past the slot
    over gloo."""
    from metainfer.distributed.parallel import free_port

    messages = [{"step": i, "ids": list(range(i))} for i in range(50)] + [
        list(range(100_000)),
        None,
        "after",
    ]
    ctx, port = mp.get_context("spawn"), free_port()
    out = ctx.Queue()
    procs = [ctx.Process(target=_channel_rank, args=(r, port, messages, out)) for r in range(3)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(10)
    assert results[1] == results[2] == messages
    assert not [
        f for f in os.listdir("/dev/shm") if f.startswith("metainfer-control-")
    ]  # unlinked once mapped


def _channel_dead_reader(rank: int, port: int, out) -> None:
    import torch.distributed as dist
    from metainfer.distributed.parallel import ControlChannel

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    pids = [None, None]
    dist.all_gather_object(pids, os.getpid())
    ch = ControlChannel(rank, 2)
    if rank == 1:
        ch.recv()  # takes "first", then dies without taking "second"
        os._exit(0)

    def check():
        if (
            not psutil.pid_exists(pids[1])
            or psutil.Process(pids[1]).status() == psutil.STATUS_ZOMBIE
        ):
            raise RuntimeError("rank 1 is gone")

    ch.check_peers = check
    ch.send("first")
    ch.send("second")
    start = time.time()
    try:
        ch.send("third")  # waits for rank 1 to take "second": it never will
    except RuntimeError as e:
        out.put(("raised", str(e), time.time() - start))
    else:
        out.put(("sent",))
    out.close()
    out.join_thread()  # flushed: the exit below skips the usual teardown
    os._exit(0)  # (the group's other member is gone)


def test_control_channel_sender_notices_a_dead_reader():
    """Rank 0 waiting on a reader that died gets the error its check raises, within about a second,
    not a hang."""
    from metainfer.distributed.parallel import free_port

    ctx, port = mp.get_context("spawn"), free_port()
    out = ctx.Queue()
    procs = [ctx.Process(target=_channel_dead_reader, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=60)
    for p in procs:
        p.join(10)
    assert result[:2] == ("raised", "rank 1 is gone") and result[2] < 5


def _same_on_every_rank(rank: int, port: int, values: list[int], out) -> None:
    import torch
    import torch.distributed as dist
    from metainfer.distributed.communicators import same_on_every_rank

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(values)
    )
    out.put((rank, same_on_every_rank(values[rank], torch.device("cpu"))))
    dist.destroy_process_group()


@pytest.mark.parametrize("values,expected", [([3, 3], True), ([3, 0], False), ([0, 5], False)])
def test_same_on_every_rank(values, expected):
    """The guard before symmetric-memory rendezvous (a second TP engine in one process: rank 0 has
    done some, its fresh workers none) answers alike on every rank."""
    from metainfer.distributed.parallel import free_port

    ctx = mp.get_context("spawn")
    out, port = ctx.Queue(), free_port()
    procs = [
        ctx.Process(target=_same_on_every_rank, args=(r, port, values, out))
        for r in range(len(values))
    ]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert got == {r: expected for r in range(len(values))}


def _check_all_reduce_rank(rank: int, port: int, out) -> None:
    import torch
    import torch.distributed as dist
    from metainfer.distributed.communicators import TorchDistCommunicator, check_all_reduce

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    out.put(
        (
            rank,
            [
                check_all_reduce(TorchDistCommunicator(), rank, 2, torch.device("cpu"), dt)
                for dt in (torch.float32, torch.bfloat16)
            ],
        )
    )
    dist.destroy_process_group()


def test_start_up_check_passes_on_gloo():
    """The communicator's start-up check (`check_all_reduce`: plain all-reduces, and the all-reduce
    + norm with and without a residual) holds for the plain collectives, whose all-reduce sums in
    place: a check that reused a summed input would send every GPU run to the NCCL fallback."""
    from metainfer.distributed.parallel import free_port

    ctx = mp.get_context("spawn")
    out, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_check_all_reduce_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert got == {0: [True, True], 1: [True, True]}


@pytest.mark.parametrize("grammar", [False, True])
def test_rank0_failing_mid_step_ends_the_group(checkpoints, monkeypatch, grammar):
    """Rank 0 fails alone mid-step (scoring prompt logprobs, which only it does): the others are
    left mid-step, so the group reports itself failed (the server's /health) and the next step
    says why at once instead of hanging; shutdown is quick and gives back rank 0's CPU threads.
    With a grammar in the batch, the step's forward runs apart from its sampling: the same."""
    import torch
    from metainfer.engine import logits_processing
    from metainfer.engine.structured_outputs import StructuredOutputsParams

    threads = torch.get_num_threads()
    llm = LLM(checkpoints("qwen3-tiny"), dtype="float32", device="cpu", tensor_parallel_size=2)

    def out_of_memory(*args, **kwargs):
        raise MemoryError("injected: rank 0 out of memory")

    monkeypatch.setattr(logits_processing, "token_logprobs", out_of_memory)
    so = StructuredOutputsParams(choice=["yes", "no"]) if grammar else None
    scored = SamplingParams(max_tokens=1, prompt_logprobs=1, structured_outputs=so)
    with pytest.raises(MemoryError):
        llm.generate([list(range(1, 40))], scored, use_tqdm=False)
    assert llm.engine.workers.failed
    start = time.monotonic()
    with pytest.raises(WorkerDied, match="mid-step"):
        llm.generate([[1, 2, 3]], GREEDY, use_tqdm=False)
    llm.shutdown()
    assert time.monotonic() - start < 5 and not mp.active_children()
    assert torch.get_num_threads() == threads


def test_one_gpu_for_every_rank_is_refused(checkpoints):
    "`device='cuda:1'` under TP would put every rank's model on one GPU: refused before spawning."
    with pytest.raises(ValueError, match="names one GPU"):
        LLM(checkpoints("qwen3-tiny"), device="cuda:1", tensor_parallel_size=2)
    assert not mp.active_children()


def test_a_second_tp_engine_waits_for_the_first(checkpoints):
    "One tensor-parallel group per process: a second LLM is refused by name, the first still works."
    ckpt = checkpoints("qwen3-tiny")
    with LLM(ckpt, dtype="float32", device="cpu", tensor_parallel_size=2) as first:
        with pytest.raises(ValueError, match="already holds a tensor-parallel group"):
            LLM(ckpt, dtype="float32", device="cpu", tensor_parallel_size=2)
        assert first.generate([[1, 2, 3]], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    assert not mp.active_children()
