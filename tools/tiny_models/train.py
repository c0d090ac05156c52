"""Train the tiny Qwen3 and DeepSeek-V2 models on the tokenized corpus, with plain PyTorch.

    python3 tools/tiny_models/train.py DATA_DIR OUT_DIR [qwen3|deepseek-v2 ...] [--steps N]

DATA_DIR is tokenizer.py's output. The models are transformers' own classes (built from a published
config with smaller shapes), trained in fp32 with bf16 autocast on a GPU; each is written with
`save_pretrained` in bf16 to OUT_DIR/<name>/ with the tokenizer, and its loss curve to
OUT_DIR/<name>/training.json. `--keep best` keeps the step with the lowest held-out loss, `--keep
last` the last step (trained on past that point, the model grows surer of the text it has seen at
the cost of held-out perplexity). Needs metainfer importable (the dev venv, or PYTHONPATH=. from
the repo root) for its configs.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

COMMON = dict(
    vocab_size=8192,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    rope_scaling=None,  # drops the published DeepSeek-V2-Lite's YaRN: plain RoPE at 2,048 positions
)
MODELS = {
    # Qwen3: q/k norm, GQA (6 heads, 2 KV heads), tied embeddings. ~11.7M parameters.
    "metainfer-tiny-qwen3": (
        "Qwen3-0.6B",
        COMMON
        | dict(
            hidden_size=384,
            intermediate_size=896,
            num_hidden_layers=6,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=64,
            tie_word_embeddings=True,
            max_window_layers=6,
            use_sliding_window=False,
        ),
    ),
    # DeepSeek-V2: MLA with q-LoRA, 8 routed experts (top 2 of 4 groups' best 2) + 1 shared; the
    # first layer dense. ~11M parameters.
    "metainfer-tiny-deepseek-v2": (
        "DeepSeek-V2-Lite",
        COMMON
        | dict(
            hidden_size=256,
            intermediate_size=768,
            moe_intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=4,
            q_lora_rank=128,
            kv_lora_rank=64,
            qk_rope_head_dim=16,
            qk_nope_head_dim=32,
            v_head_dim=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            topk_method="group_limited_greedy",
            n_group=4,
            topk_group=2,
            routed_scaling_factor=1.0,
            tie_word_embeddings=False,
        ),
    ),
}
SHORT = {"qwen3": "metainfer-tiny-qwen3", "deepseek-v2": "metainfer-tiny-deepseek-v2"}
SEQ_LEN, BATCH, LR, WARMUP, EVAL_EVERY = 1024, 16, 2e-3, 100, 50
# z-loss (PaLM's), z * mean(log Z^2), pulls the softmax normalizer log Z (and the top logits) to 0,
# where bf16's grid is finer. Off: at 1e-4 to 3e-2 it moved log Z from 11.9 to 0.1 but gave no more
# bf16 greedy completions identical to HF's (README.md); the shipped models are trained without it.
Z_LOSS = 0.0


def build(name: str, device: str):
    "The untrained transformers model of `name`, fp32, on `device`."
    from transformers import AutoModelForCausalLM
    from metainfer.testing import hf_config

    base, overrides = MODELS[name]
    config = hf_config(base, **overrides)  # the published config with the smaller shapes
    if hasattr(config, "auto_map"):  # DeepSeek's names code that is not shipped: run HF's
        del config.auto_map
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def batches(tokens: np.ndarray, gen: torch.Generator, device: str):
    "Endless random windows of SEQ_LEN + 1 tokens, BATCH at a time."
    data = torch.from_numpy(tokens.astype(np.int64))
    while True:
        start = torch.randint(0, len(data) - SEQ_LEN - 1, (BATCH,), generator=gen)
        yield torch.stack([data[s : s + SEQ_LEN + 1] for s in start.tolist()]).to(device)


def loss_of(model, x: torch.Tensor, z_loss: float) -> tuple[torch.Tensor, torch.Tensor]:
    "Cross-entropy plus `z_loss` times the mean squared log-normalizer; and the mean log Z."
    logits = model(input_ids=x[:, :-1]).logits.float().flatten(0, 1)
    log_z = logits.logsumexp(-1)
    ce = F.cross_entropy(logits, x[:, 1:].flatten())
    return ce + z_loss * log_z.pow(2).mean(), ce, log_z.mean()


@torch.no_grad()
def heldout_loss(model, tokens: np.ndarray, device: str) -> tuple[float, float]:
    "Mean next-token loss (cross-entropy) and mean log Z over the held-out text, SEQ_LEN windows."
    model.eval()
    data = torch.from_numpy(tokens.astype(np.int64))
    n = (len(data) - 1) // SEQ_LEN
    total, total_z = 0.0, 0.0
    for i in range(0, n, BATCH):
        rows = [data[j * SEQ_LEN : (j + 1) * SEQ_LEN + 1] for j in range(i, min(i + BATCH, n))]
        with torch.autocast(device, torch.bfloat16, enabled=device == "cuda"):
            _, ce, log_z = loss_of(model, torch.stack(rows).to(device), 0.0)
        total, total_z = total + ce.item() * len(rows), total_z + log_z.item() * len(rows)
    model.train()
    return total / n, total_z / n


def train(
    name: str, data: Path, out: Path, steps: int, z_loss: float, keep: str, device: str
) -> dict:
    train_ids = np.fromfile(data / "train.bin", dtype=np.uint16)
    held_ids = np.fromfile(data / "heldout.bin", dtype=np.uint16)
    model = build(name, device)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [dict(params=decay, weight_decay=0.1), dict(params=rest, weight_decay=0)],
        lr=LR,
        betas=(0.9, 0.95),
        fused=device == "cuda",
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1, (s + 1) / WARMUP) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / steps))))
        ),
    )
    gen = torch.Generator().manual_seed(0)
    log, best, start = [], (float("inf"), -1, None), time.perf_counter()
    for step, x in zip(range(1, steps + 1), batches(train_ids, gen, device)):
        with torch.autocast(device, torch.bfloat16, enabled=device == "cuda"):
            loss, _, _ = loss_of(model, x, z_loss)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), sched.step(), opt.zero_grad(set_to_none=True)
        if step % max(EVAL_EVERY, steps // 30) == 0 or step == steps:
            held, log_z = heldout_loss(model, held_ids, device)
            log.append(
                dict(
                    step=step,
                    train_loss=loss.item(),
                    heldout_loss=held,
                    heldout_log_z=log_z,
                    seconds=round(time.perf_counter() - start, 1),
                )
            )
            print(name, log[-1], flush=True)
            if held < best[0] or (keep == "last" and step == steps):
                best = (held, step, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[2])
    dest = out / name
    model.to(torch.bfloat16).save_pretrained(dest, max_shard_size="12MB")
    for f in (data / "tokenizer").iterdir():
        shutil.copy(f, dest / f.name)
    if (data / "sources.json").exists():  # corpus.py's record of the packages, carried along
        shutil.copy(data / "sources.json", dest / "corpus.json")
    summary = dict(
        model=name,
        parameters=n_params,
        steps=steps,
        keep=keep,
        kept_step=best[1],
        heldout_loss=best[0],
        heldout_perplexity=math.exp(best[0]),
        tokens_seen=steps * BATCH * SEQ_LEN,
        train_tokens=len(train_ids),
        heldout_tokens=len(held_ids),
        seq_len=SEQ_LEN,
        batch=BATCH,
        lr=LR,
        warmup=WARMUP,
        z_loss=z_loss,
        heldout_log_z=next(e["heldout_log_z"] for e in log if e["step"] == best[1]),
        seconds=round(time.perf_counter() - start, 1),
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        torch=torch.__version__,
        log=log,
    )
    (dest / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data"), ap.add_argument("out")
    ap.add_argument("models", nargs="*", default=list(SHORT))
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--z-loss", type=float, default=Z_LOSS)
    ap.add_argument("--keep", choices=("best", "last"), default="best")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for m in args.models:
        name, data, out = SHORT.get(m, m), Path(args.data), Path(args.out)
        s = train(name, data, out, args.steps, args.z_loss, args.keep, device)
        print({k: v for k, v in s.items() if k != "log"}, flush=True)


if __name__ == "__main__":
    main()
