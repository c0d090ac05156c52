"""Issue 22, item 5: a client that stops reading its stream costs memory that does not grow with the
output. Outputs are cumulative, so a stream keeps only its newest unread one, and the merge of a
response's choices waits for the reader instead of queueing every output."""

import asyncio
import time

from metainfer import SamplingParams
from metainfer.entrypoints.openai.engine_loop import AsyncLLMEngine
from metainfer.entrypoints.openai.streaming import merged
from test_generate_vs_hf import random_prompts


def test_unread_stream_holds_one_output(checkpoints):
    engine = AsyncLLMEngine.from_engine_args(
        str(checkpoints("qwen3-tiny")), dtype="float32", device="cpu"
    )
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)

    async def run():
        streams = [
            await engine.add_request(f"r{i}", p, params)
            for i, p in enumerate(random_prompts(3, seed=40))
        ]
        deadline = time.time() + 60
        while not engine.is_idle and time.time() < deadline:
            await asyncio.sleep(0.05)  # nobody reads: the engine runs every step regardless
        assert engine.is_idle
        sizes = [s.queue.qsize() for s in streams]
        outs = []
        for s in streams:
            outs.append([o async for o in s])
        return sizes, outs

    try:
        sizes, outs = asyncio.run(run())
    finally:
        engine.shutdown()
    assert sizes == [1, 1, 1]  # one marker each: "the newest output", not 48 snapshots
    for got in outs:
        assert len(got) == 1 and got[0].finished and len(got[0].outputs[0].token_ids) == 48


def test_merged_waits_for_its_reader():
    "Producers that could run ahead by 1,000 items are at most a few ahead of a reader that stops."
    made = [0, 0]

    async def producer(j):
        for i in range(1000):
            made[j] += 1
            yield (j, i)
            await asyncio.sleep(0)

    async def run():
        it = merged([producer(0), producer(1)])
        first = [await it.__anext__() for _ in range(3)]
        await asyncio.sleep(0.2)  # the reader stops; the producers get the loop to themselves
        ahead = sum(made) - 3
        await it.aclose()
        return first, ahead

    first, ahead = asyncio.run(run())
    assert len(first) == 3 and ahead <= 4, ahead
