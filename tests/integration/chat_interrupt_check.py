"""ftllmctl chat as a user at a terminal meets it: Ctrl-C (SIGINT) while a reply streams stops it (the daemon
cancels the request: it ends well short of the reply's 300 tokens), the chat
goes on with the next message, and Ctrl-C twice at the prompt leaves with status 0.

Usage: chat_interrupt_check.py FTLLMCTL SOCKET BASE_URL MODEL; prints "ok"."""
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request


def metric(base, name, model, absent=None):
    for line in urllib.request.urlopen(base + "/metrics").read().decode().splitlines():
        if line.startswith('%s{model="%s"}' % (name, model)):
            return int(float(line.split()[-1]))
    if absent is not None:  # a counter appears with the model's first request
        return absent
    raise AssertionError("no %s for %s" % (name, model))


def running(base, model):
    return metric(base, "ftllm_requests_running", model)


class Chat:
    def __init__(self, ctl, socket, model):
        self.p = subprocess.Popen([ctl, "--socket", socket, "chat", model, "--max_tokens", "300", "--temperature", "0"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out = b""
        self.err = b""

    def say(self, text):
        self.p.stdin.write(text.encode() + b"\n")
        self.p.stdin.flush()

    def pump(self, timeout):
        """Takes what the chat printed within `timeout` seconds."""
        ready, _, _ = select.select([self.p.stdout, self.p.stderr], [], [], timeout)
        for f in ready:
            chunk = os.read(f.fileno(), 65536)
            if f is self.p.stdout:
                self.out += chunk
            else:
                self.err += chunk

    def wait_for(self, what, stream="out", timeout=60):
        deadline = time.time() + timeout
        while what not in getattr(self, stream):
            left = deadline - time.time()
            assert left > 0, "waited for %r; stdout %r stderr %r" % (what, self.out, self.err)
            self.pump(left)


def main(ctl, socket, base, model):
    generated = metric(base, "ftllm_generation_tokens_total", model, absent=0)
    chat = Chat(ctl, socket, model)
    chat.say("Tell me a very long story about a dragon and a knight, with many chapters.")
    chat.wait_for(b" ")  # the reply has begun
    started = time.time()
    chat.p.send_signal(signal.SIGINT)
    chat.wait_for(b"(stopped)")
    while running(base, model) != 0:
        assert time.time() - started < 60, "the request went on after Ctrl-C"
        time.sleep(0.02)
    # Cancelled: it ended well short of the 300 tokens it was allowed.
    assert metric(base, "ftllm_generation_tokens_total", model) - generated < 250
    assert chat.p.poll() is None, "one Ctrl-C during a reply must not end the chat"

    mark = len(chat.out)
    chat.say("Now say hello.")
    chat.wait_for(b" ")
    deadline = time.time() + 60
    while running(base, model) != 0 or len(chat.out) == mark:
        assert time.time() < deadline, chat.out[mark:]
        chat.pump(0.05)
    chat.pump(0.3)  # the reply's last bytes
    assert chat.p.poll() is None
    assert len(chat.out) > mark + 5, chat.out[mark:]

    chat.p.send_signal(signal.SIGINT)
    chat.wait_for(b"Ctrl-C again", "err")
    assert chat.p.poll() is None, "one Ctrl-C at the prompt only says how to leave"
    chat.p.send_signal(signal.SIGINT)
    assert chat.p.wait(timeout=10) == 0
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:5])
