"""Load program: N concurrent streaming chat clients for T seconds against an OpenAI-style server.

    python3 tests/bench/load.py URL MODEL [--clients 1,4,16] [--seconds 20] [--max-tokens 64] [--json-schema FILE]
                                [--against LABEL=URL] [--rounds R]

Prints one row per client count: requests/s, generated tokens/s, p50/p99 time to first token and p50/p99
inter-token latency. Every request has a prompt of its own (client, request and cell numbered), so a prefix
cache finds only the shared opening. With --against, a second server gets the same load cell by cell,
the two alternated (who goes first swaps each round), and with --rounds the cells repeat; a last table
gives each cell's medians with their range and the first server's tokens/s over the other's. With --json-schema, every request asks for output valid against that schema
(response_format json_schema, which ftllmd and llama-server both enforce). Standard library only, so it
measures any server the same way.
"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def sse_events(resp):
    """The JSON events of a Server-Sent Events response, as they arrive ([DONE] and other lines skipped)."""
    buffer = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            return
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event.startswith(b"data: ") and event != b"data: [DONE]":
                yield json.loads(event[6:])


def client(url, model, max_tokens, deadline, index, results, lock, schema, book):
    parts = urllib.parse.urlsplit(url)
    sent = 0
    while time.monotonic() < deadline:
        prompt = f"Write a long story about a lighthouse keeper named Ada, chapter {index}, part {sent}, book {book}."
        sent += 1
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
        request = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                   "temperature": 0.8, "stream": True, "ignore_eos": True}
        if schema is not None:
            request["response_format"] = {"type": "json_schema", "json_schema": {"name": "bench", "schema": schema}}
        body = json.dumps(request)
        start = time.monotonic()
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            with lock:
                results["errors"] += 1
            resp.read()
            conn.close()
            continue
        first, last, tokens, gaps = None, None, 0, []
        for data in sse_events(resp):
            choices = data.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                now = time.monotonic()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                tokens += 1
        conn.close()
        with lock:
            results["requests"] += 1
            results["tokens"] += tokens
            if first is not None:
                results["ttft"].append(first - start)
            results["itl"].extend(gaps)


def run(url, model, clients, seconds, max_tokens, schema=None, book=0):
    results = {"requests": 0, "tokens": 0, "errors": 0, "ttft": [], "itl": []}
    lock = threading.Lock()
    start = time.monotonic()
    deadline = start + seconds
    threads = [threading.Thread(target=client, args=(url, model, max_tokens, deadline, i, results, lock, schema, book)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    return dict(clients=clients, rps=results["requests"] / elapsed, tps=results["tokens"] / elapsed,
                ttft50=percentile(results["ttft"], 50) * 1000, ttft99=percentile(results["ttft"], 99) * 1000,
                itl50=percentile(results["itl"], 50) * 1000, itl99=percentile(results["itl"], 99) * 1000,
                errors=results["errors"])


def summarize(rows, labels, clients):
    """Medians (min-max) of each server's cells over the rounds, and the first server's tokens/s over the other's."""
    def cell(values):
        return f"{statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})"
    print("\nmedians over rounds (min-max):", flush=True)
    for n in clients:
        medians = {}
        for label in labels:
            got = [r for (l, r) in rows if l == label and r["clients"] == n]
            medians[label] = statistics.median(r["tps"] for r in got)
            print(f"{label:10s} clients {n:3d}  tok/s {cell([r['tps'] for r in got])}  TTFT p50 {cell([r['ttft50'] for r in got])} ms"
                  f"  ITL p99 {cell([r['itl99'] for r in got])} ms  errors {sum(r['errors'] for r in got)}", flush=True)
        if len(labels) == 2 and medians[labels[1]] > 0:
            print(f"{'':10s} clients {n:3d}  {labels[0]} / {labels[1]} tok/s: {medians[labels[0]] / medians[labels[1]]:.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--label", default="")
    ap.add_argument("--json-schema", help="a file holding a JSON schema every answer must follow")
    ap.add_argument("--against", help="LABEL=URL: a second server measured alternately with the first")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    schema = None
    if a.json_schema:
        with open(a.json_schema) as f:
            schema = json.load(f)
    servers = [(a.label or "server", a.url)]
    if a.against:
        label, _, url = a.against.partition("=")
        servers.append((label, url))
    clients = [int(x) for x in a.clients.split(",")]
    rows = []
    for round in range(a.rounds):
        for cell, n in enumerate(clients):
            # A book of prompts per cell, the same for each server: no prompt comes back in a later cell
            # or round, where a cache of whole prompts (llama-server's slots) would find it.
            book = round * len(clients) + cell
            for label, url in servers if round % 2 == 0 else servers[::-1]:
                r = run(url, a.model, n, a.seconds, a.max_tokens, schema, book)
                rows.append((label, r))
                print_row(label, r)
    if a.rounds > 1 or len(servers) > 1:
        summarize(rows, [label for label, _ in servers], clients)


def print_row(label, r):
    print(f"{label:10s} clients {r['clients']:3d}  {r['rps']:6.2f} req/s  {r['tps']:7.1f} tok/s  "
          f"TTFT p50 {r['ttft50']:7.1f} ms p99 {r['ttft99']:7.1f} ms  ITL p50 {r['itl50']:6.1f} ms p99 {r['itl99']:6.1f} ms"
          f"  errors {r['errors']}", flush=True)


if __name__ == "__main__":
    main()
