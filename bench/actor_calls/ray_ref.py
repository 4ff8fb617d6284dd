"""bench/actor_calls/ray_ref.py - the reference for bench actor_calls, measured live: Ray's own
microbenchmark rows (ray/_private/ray_perf.py) on a local Ray started with num_cpus = CORES:
  sync    1:1 actor calls, one in flight: ray.get(a.small_value.remote())       (calls/s)
  async   1:1 actor calls, 1000 in flight: ray.get([a.small_value.remote() ...]) (calls/s)
  create  N actors created and each answering one call, all submitted at once   (actors/s)
The actor is ray_perf's (num_cpus=0, small_value returns b"ok", no argument: Ray's best case).
Warm-up first: 1 s of calls, and one actor created, called and killed before the create row.
Each Ray actor is a Python process of its own (~100 MB), hence N well below ct's 500.

  ray_ref.py SECONDS N CORES     prints "sync <v>", "async <v>", "create <v>" lines.
Shuts Ray down (its raylet, GCS and workers) before it exits, also on error."""
import os
import sys
import time

# Ray's single-host mode (its default on macOS): every address is 127.0.0.1, not this host's
# interface address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402 (reads the variable above on import)

secs, n_create, cores = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


@ray.remote(num_cpus=0)
class Actor:
    def small_value(self):
        return b"ok"


def rate(batch, calls_per_batch):
    """Runs batch() for secs seconds; returns calls per second."""
    n, t0 = 0, time.perf_counter()
    while True:
        batch()
        n += calls_per_batch
        t = time.perf_counter() - t0
        if t >= secs:
            return n / t


ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
try:
    a = Actor.remote()
    ray.get(a.small_value.remote())
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.0:  # warm-up
        ray.get(a.small_value.remote())
    print(f"sync {rate(lambda: ray.get(a.small_value.remote()), 1):.0f}", flush=True)
    window = lambda: ray.get([a.small_value.remote() for _ in range(1000)])  # noqa: E731
    print(f"async {rate(window, 1000):.0f}", flush=True)
    ray.kill(a)

    w = Actor.remote()  # warm-up of the creation path
    ray.get(w.small_value.remote())
    ray.kill(w)
    t0 = time.perf_counter()
    actors = [Actor.remote() for _ in range(n_create)]
    ray.get([x.small_value.remote() for x in actors])
    print(f"create {n_create / (time.perf_counter() - t0):.2f}", flush=True)
    for x in actors:
        ray.kill(x)
finally:
    ray.shutdown()
