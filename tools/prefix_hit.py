"""How long a freshly started server takes to answer requests that hit a cached prefix (issue 23,
acceptance 5): one request of a PREFIX-token prompt + NEW tokens (cold), then REPEAT requests of the
same prefix + other NEW tokens, each timed to its whole (1-token) response. Writes JSON.

Usage:  python tools/prefix_hit.py --base-url http://127.0.0.1:8000 --out prefix-hit.json
"""

import argparse
import json
import random
import sys
import time
import urllib.request


def complete(base_url: str, model: str, prompt: list[int]) -> float:
    "Seconds to the whole response of a 1-token greedy completion of `prompt` (token ids)."
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(
        f"{base_url}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    assert out["usage"]["prompt_tokens"] == len(prompt), out["usage"]
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--prefix", type=int, default=4096)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with urllib.request.urlopen(f"{args.base_url}/v1/models", timeout=10) as r:
        model = json.loads(r.read())["data"][0]["id"]
    rng = random.Random(0)
    tokens = lambda n: [rng.randrange(1000, 10000) for _ in range(n)]
    prefix = tokens(args.prefix)
    cold = complete(args.base_url, model, prefix + tokens(args.new))
    hits = [complete(args.base_url, model, prefix + tokens(args.new)) for _ in range(args.repeat)]
    res = {
        "command": " ".join(["python", *sys.argv]),
        "prefix_tokens": args.prefix,
        "new_tokens": args.new,
        "cold_s": cold,
        "first_hit_s": hits[0],
        "hits_s": hits,
    }
    open(args.out, "w").write(json.dumps(res, indent=2) + "\n")
    print(f"cold {cold * 1e3:.1f} ms, first hit {hits[0] * 1e3:.1f} ms, then", hits[1:])


if __name__ == "__main__":
    main()
