"""How long `/health` waits while one big non-streamed response is built: 128 completions of an
echoed 1,900-word prompt with 20 logprobs a token (~140 MB of JSON), against a running
`metainfer serve`. Polls `/health` every 50 ms until the big response has arrived.
Usage: python health_during_big_response.py URL OUT.json"""

import json
import sys
import threading
import time
import urllib.request


def post(url: str, body: dict) -> tuple[float, int]:
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    t = time.monotonic()
    data = urllib.request.urlopen(req, timeout=600).read()
    return time.monotonic() - t, len(data)


url, out = sys.argv[1], sys.argv[2]
model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
body = {"model": model, "prompt": " ".join(["word"] * 1900), "max_tokens": 1, "n": 128,
        "logprobs": 20, "echo": True}  # fmt: skip
res = {}
big = threading.Thread(target=lambda: res.update(big=post(url, body)))
big.start()
waits = []
while big.is_alive():
    t = time.monotonic()
    urllib.request.urlopen(url + "/health", timeout=600).read()
    waits.append(time.monotonic() - t)
    time.sleep(0.05)
big.join()
cmd = "python tools/server_probes/health_during_big_response.py " + " ".join(sys.argv[1:])
row = dict(command=cmd, big_request_s=res["big"][0], body_bytes=res["big"][1],
           health_polls=len(waits), health_worst_s=max(waits),
           health_median_s=sorted(waits)[len(waits) // 2])  # fmt: skip
json.dump(row, open(out, "w"), indent=1)
print(row)
