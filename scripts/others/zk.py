"""ZooKeeper's lock recipe (kazoo's `Lock`, PyPI `kazoo`) under the
workloads of examples/bench and examples/contention, for
scripts/bench-others.sh. A lock is a sequential ephemeral znode under the
resource's path; the lowest holds, the next watches the one before it.

  python3 zk.py latency SECONDS HOSTS       sequential lock + unlock
  python3 zk.py throughput SECONDS HOSTS    64 threads at once
  python3 zk.py contend SECONDS TASKS CHECKER_URL HOSTS
      TASKS threads on one lock; the holder INCRs `holders` on the checker
      Redis (it must read 1), waits 1 ms, DECRs. Prints
      "acquired failed overlaps".

HOSTS: ZooKeeper's connection string (host:port,host:port,...). kazoo is
pure Python: its figures are the client's as much as the ensemble's.
"""
import os
import sys
import threading
import time

import redis
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout


def run_threads(loop, count):
    """Runs `loop(task)` for tasks 0..count, each in a thread; returns when
    all have ended."""
    threads = [threading.Thread(target=loop, args=(task,)) for task in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def client(hosts):
    zk = KazooClient(hosts=hosts, timeout=10.0)
    zk.start(timeout=15)
    return zk


def latency(seconds, hosts):
    zk = client(hosts)
    stop = time.monotonic() + seconds
    took = []
    n = 0
    while time.monotonic() < stop:
        start = time.perf_counter()
        lock = zk.Lock(f"/others/latency/{os.getpid()}-{n}")
        lock.acquire()
        lock.release()
        took.append((time.perf_counter() - start) * 1e3)
        n += 1
    took.sort()
    p = lambda q: took[min(len(took) - 1, int(q / 100 * len(took)))]
    print(f"latency {p(50):.3f} {p(99):.3f} ms {len(took) / seconds:.1f} cycles/s")
    zk.stop()


def throughput(seconds, hosts):
    zk = client(hosts)
    stop = time.monotonic() + seconds
    counts = [0] * 64

    def loop(task):
        n = 0
        while time.monotonic() < stop:
            lock = zk.Lock(f"/others/throughput/{os.getpid()}-{task}-{n}")
            lock.acquire()
            lock.release()
            counts[task] += 1
            n += 1

    started = time.monotonic()
    run_threads(loop, 64)
    print(f"throughput {sum(counts) / (time.monotonic() - started):.1f} cycles/s")
    zk.stop()


def contend(seconds, tasks, checker_url, hosts):
    zk = client(hosts)
    stop = time.monotonic() + seconds
    # No call fails here but by the run's end (see `loop`): "failed" stays 0.
    totals = {"acquired": 0, "failed": 0, "overlaps": 0}
    guard = threading.Lock()

    def loop():
        checker = redis.Redis.from_url(checker_url)
        lock = zk.Lock("/others/contended")
        while time.monotonic() < stop:
            # Patience: what is left of the run (a call cut off by the end
            # is not a failed call). kazoo raises LockTimeout or returns
            # False, by version.
            try:
                if not lock.acquire(timeout=max(0.001, stop - time.monotonic())):
                    continue
            except LockTimeout:
                continue
            overlap = checker.incr("holders") != 1
            time.sleep(0.001)
            checker.decr("holders")
            lock.release()
            with guard:
                totals["acquired"] += 1
                totals["overlaps"] += overlap

    run_threads(lambda _task: loop(), tasks)
    print(f"{totals['acquired']} {totals['failed']} {totals['overlaps']}")
    zk.stop()


if __name__ == "__main__":
    mode, seconds = sys.argv[1], float(sys.argv[2])
    if mode == "latency":
        latency(seconds, sys.argv[3])
    elif mode == "throughput":
        throughput(seconds, sys.argv[3])
    elif mode == "contend":
        contend(seconds, int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        sys.exit(f"unknown mode {mode}")
