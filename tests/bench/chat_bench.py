"""Multi-turn chat benchmark: time to first token per turn as a conversation grows, for servers side by side.

    python3 tests/bench/chat_bench.py [--turns 8] [--rounds 3] [--reply 96] LABEL=URL [LABEL=URL ...]

Each round is a new conversation (its own document, so no round finds another's prefix): turn 1 sends a
system prompt and a document of about 2,500 tokens with a question; every later turn adds the previous
reply and a new question, growing to about 4k tokens by turn 8. Replies are greedy, `--reply` tokens
long. The servers take turns round by round (alternated, so a noisy machine hurts each alike); the table
gives each turn's median time to first token over the rounds, with its spread (min-max), the prompt tokens
the server counted and the tokens it said it read from its cache. Standard library only.
"""
import argparse
import http.client
import json
import random
import statistics
import time
import urllib.parse

from load import sse_events  # beside this file

WORDS = ("lighthouse keeper harbour storm lantern ledger tide rope gull island beacon shift supply boat "
         "winter signal captain weather coast night morning glass oil wick spiral stair fog horn chart "
         "rock current season letter inspector brass bell mainland keeper's log wreck rescue").split()


def document(rng, words):
    sentences = []
    while sum(len(s.split()) for s in sentences) < words:
        n = rng.randint(8, 18)
        sentences.append(" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + ".")
    return " ".join(sentences)


def ask(url, model, messages, reply_tokens):
    """One streamed turn: (seconds to the first content token, reply text, prompt tokens, cached tokens)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    body = json.dumps({"model": model, "messages": messages, "max_tokens": reply_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
                       "cache_prompt": True})
    start = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{url}: HTTP {resp.status}: {resp.read()[:300]!r}")
    first, text, prompt, cached, timings = None, "", None, None, {}
    for data in sse_events(resp):
        for c in data.get("choices") or []:
            piece = (c.get("delta") or {}).get("content")
            if piece:
                first = first or time.monotonic()
                text += piece
        usage = data.get("usage")
        if usage:
            prompt = usage.get("prompt_tokens")
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if data.get("timings"):
            timings = data["timings"]  # llama-server's: prompt_n tokens computed, the rest from its slot
    conn.close()
    if cached is None and prompt is not None and "prompt_n" in timings:
        cached = prompt - timings["prompt_n"]
    return (first or time.monotonic()) - start, text, prompt, cached


def conversation(url, model, seed, turns, reply_tokens, words):
    rng = random.Random(seed)
    messages = [{"role": "system", "content": "You answer questions about the keeper's log below, briefly."},
                {"role": "user", "content": "Here is the log:\n" + document(rng, words) + "\n\nWhat happened first?"}]
    out = []
    for turn in range(turns):
        if turn > 0:
            messages.append({"role": "user", "content": "And then? " + document(rng, 25)})
        ttft, reply, prompt, cached = ask(url, model, messages, reply_tokens)
        messages.append({"role": "assistant", "content": reply})
        out.append((ttft, prompt, cached))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("servers", nargs="+", help="LABEL=URL (the model is the server's only one: named 'model')")
    ap.add_argument("--model", default="model")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reply", type=int, default=96)
    ap.add_argument("--words", type=int, default=2700, help="the document's words (about 1.15 tokens each for SmolLM2)")
    a = ap.parse_args()
    servers = [s.split("=", 1) for s in a.servers]
    runs = {label: [] for label, _ in servers}
    for r in range(a.rounds):
        for label, url in (servers if r % 2 == 0 else servers[::-1]):
            runs[label].append(conversation(url, a.model, r, a.turns, a.reply, a.words))
    print(f"{'turn':>4}  " + "  ".join(f"{label + ' TTFT ms (spread)':>30} {'prompt':>6} {'cached':>6}" for label, _ in servers))
    medians = {label: [] for label, _ in servers}
    for t in range(a.turns):
        cells = []
        for label, _ in servers:
            ttfts = [run[t][0] * 1000 for run in runs[label]]
            med = statistics.median(ttfts)
            medians[label].append(med)
            _, prompt, cached = runs[label][-1][t]
            cells.append(f"{med:>14.0f} ({min(ttfts):>5.0f}-{max(ttfts):>6.0f})   {prompt if prompt is not None else '-':>6} "
                         f"{cached if cached is not None else '-':>6}")
        print(f"{t + 1:>4}  " + "  ".join(cells))
    if len(servers) > 1:
        base = servers[0][0]
        for label, _ in servers[1:]:
            ratios = [other / mine for mine, other in zip(medians[base], medians[label])]
            print(f"{label} / {base} TTFT, turns 2-{a.turns}: " + " ".join(f"{x:.1f}" for x in ratios[1:]))


if __name__ == "__main__":
    main()
