"""Train the tiny models' byte-level BPE tokenizer and tokenize the corpus.

    python3 tools/tiny_models/tokenizer.py CORPUS_DIR OUT_DIR

Reads CORPUS_DIR/{train,heldout}.txt (from corpus.py). Writes OUT_DIR/tokenizer/ (tokenizer.json and
tokenizer_config.json with a ChatML chat template, loadable by `AutoTokenizer`) and
OUT_DIR/{train,heldout}.bin: uint16 token ids, the documents joined by <|endoftext|>.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

VOCAB_SIZE = 8192
EOS, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer(texts: list[str]):
    "A GPT-2-style byte-level BPE of VOCAB_SIZE tokens (the three special tokens first)."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def main(corpus_dir: str, out_dir: str) -> None:
    from transformers import PreTrainedTokenizerFast

    corpus, out = Path(corpus_dir), Path(out_dir)
    docs = {s: (corpus / f"{s}.txt").read_text().split("\f") for s in ("train", "heldout")}
    tok = train_tokenizer(docs["train"])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=EOS, chat_template=CHAT_TEMPLATE
    )
    fast.model_max_length = 2048
    fast.save_pretrained(out / "tokenizer")
    eos = tok.token_to_id(EOS)
    counts = {}
    for split, texts in docs.items():
        ids = []
        for enc in tok.encode_batch(texts):
            ids += enc.ids + [eos]
        np.asarray(ids, dtype=np.uint16).tofile(out / f"{split}.bin")
        counts[split] = len(ids)
    info = dict(vocab_size=tok.get_vocab_size(), tokens=counts, eos_token_id=eos)
    (out / "tokens.json").write_text(json.dumps(info, indent=1) + "\n")
    print(info)


if __name__ == "__main__":
    main(*sys.argv[1:3])
