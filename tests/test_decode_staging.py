"""The host side of a CUDA-graph decode step (DecodeGraphs.replay's staging), checked on the CPU.

Graphs need a GPU, but what `replay` writes into the graph's static inputs is plain tensor work: it
must equal what `make_metadata` gives for the same step, and rows padded up to the bucket must point
at the null block."""

import random
import pytest
import torch
from metainfer.layers.attention import make_metadata
from metainfer.engine.cuda_graphs import DecodeGraphs
from metainfer.engine.step_input import StepInput


class _NoGraph:
    def replay(self):
        pass


def staged(
    step: StepInput, bucket: int, block_size: int, null_block: int, max_blocks: int
) -> DecodeGraphs:
    g = DecodeGraphs.__new__(DecodeGraphs)  # the buffers and staging of __init__, minus the capture
    g.block_size, g.null_block, g.buckets = block_size, null_block, [bucket]
    g._allocate_buffers(bucket, max_blocks, torch.device("cpu"))
    g.graphs, g.logits = {bucket: _NoGraph()}, {bucket: torch.zeros(bucket, 7)}
    g.replay(step)
    return g


def test_replay_stages_what_make_metadata_computes():
    rng, bs, null_block = random.Random(0), 4, 99
    for n, bucket in ((1, 1), (5, 8), (13, 16)):
        ctx = [rng.randint(1, 40) for _ in range(n)]
        tables = [rng.sample(range(null_block), -(-c // bs)) for c in ctx]
        step = StepInput(
            False, [rng.randrange(1000) for _ in range(n)], tables, ctx, [1] * n, list(range(n))
        )
        g = staged(step, bucket, bs, null_block, max_blocks=10)
        positions, meta = make_metadata(tables, ctx, [1] * n, bs, is_prefill=False)
        assert g.input_ids[:n].tolist() == step.input_ids
        assert g.positions[:n].tolist() == positions.tolist()
        assert g.slot_mapping[:n].tolist() == meta.slot_mapping.tolist()
        assert g.context_lens[:n].tolist() == ctx
        assert g.cu_seqlens_k[: n + 1].tolist() == meta.cu_seqlens_k.tolist()
        for i, t in enumerate(tables):
            assert g.block_tables[i, : len(t)].tolist() == t
        # padded rows: one token of context in the null block, so their writes and reads touch
        # nothing real
        assert g.slot_mapping[n:bucket].tolist() == [null_block * bs] * (bucket - n)
        assert g.context_lens[n:bucket].tolist() == [1] * (bucket - n)
        assert g.block_tables[n:bucket, 0].tolist() == [null_block] * (bucket - n)
        assert g.cu_seqlens_k[n : bucket + 1].tolist() == list(
            range(sum(ctx), sum(ctx) + bucket - n + 1)
        )


def test_restaging_writes_only_what_changed_and_still_all_of_it():
    """Rows keep their block tables between steps; a grown table, a new list in a row and a shorter
    batch all restage."""
    bs, null_block = 4, 99
    a, b, c = [1, 2], [3, 4, 5], [6]
    step1 = StepInput(False, [7, 8, 9], [a, b, c], [6, 10, 2], [1, 1, 1], [0, 1, 2])
    g = staged(step1, 4, bs, null_block, max_blocks=10)
    a.append(11)  # a grows by a block (its list is the same object)
    d = [12, 13, 14, 15]  # row 1 now holds another sequence, longer than b
    step2 = StepInput(False, [1, 2], [a, d], [9, 14], [1, 1], [0, 1])
    g.replay(step2)
    assert g.block_tables[0, :3].tolist() == [1, 2, 11] and g.block_tables[1, :4].tolist() == [
        12,
        13,
        14,
        15,
    ]
    _, meta = make_metadata([a, d], [9, 14], [1, 1], bs, is_prefill=False)
    assert g.slot_mapping[:2].tolist() == meta.slot_mapping.tolist()


@pytest.mark.parametrize(
    "preset", ["qwen3-tiny", "deepseek-v2-tiny"]
)  # paged K/V; MLA's paged latents
def test_graph_decode_path_on_cpu_gives_eager_tokens(preset, checkpoints, monkeypatch):
    """The whole CUDA-graph decode path on the CPU: `torch.cuda.graph` faked to record nothing and
    each graph's replay re-running its bucket's forward on the static buffers. Greedy tokens must
    equal the eager engine's for batches that are padded (3 -> 4 rows) and that shrink as sequences
    finish."""
    import contextlib
    from metainfer import LLM, SamplingParams

    class FakeGraph:
        def pool(self):
            return None

        def reset(self):
            pass

        def replay(self):
            self.run()

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)

    ckpt = checkpoints(preset)
    prompts = [[1, 2, 3, 4, 5], [6, 7, 8], list(range(10, 40))]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (12, 20, 7)]
    with LLM(ckpt, dtype="float32", device="cpu", block_size=4) as llm:
        eager = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        runner = llm.engine.runner
        graphs = runner.graphs = DecodeGraphs(runner, 8)  # buckets 1, 2, 4, 8
        for b, graph in graphs.graphs.items():
            graph.run = lambda b=b: graphs.logits[b].copy_(graphs._forward(b))
        replays = []
        replay = graphs.replay
        graphs.replay = lambda step, last_ids: (
            replays.append(len(step.input_ids)) or replay(step, last_ids)
        )
        with_graphs = [
            o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)
        ]
    assert with_graphs == eager
    assert (
        3 in replays and 2 in replays and 1 in replays
    )  # padded to 4, then 2, then 1 as sequences finish
