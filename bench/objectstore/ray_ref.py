"""bench/objectstore/ray_ref.py - the reference for bench objectstore, measured live, the mirror of
bench_objectstore_rt.c's rows at 64 MiB on Ray: a 2-node ray.cluster_utils.Cluster on this host
(head + 1 node, 1 GiB object store each, dashboard off); the driver is on the head.
  put          ray.put of a 64 MiB numpy array (copy into the head's object store)
  get_read     ray.get of it (a zero-copy numpy view) + reading every byte
  remote_get   ray.get of it inside an actor on the other node (pull into that node's store),
               timed inside the actor
Each object is freed after its gets (warm: the stores reuse their memory, as ct's warm rows).
One warm-up round, then the median of REPS rounds, in GB/s (1e9 bytes/s).

  ray_ref.py REPS CORES     prints "put <GB/s>", "get_read <GB/s>", "remote_get <GB/s>".
Shuts Ray and the cluster down before it exits, also on error."""
import os
import statistics
import sys
import time

# Ray's single-host mode (its default on macOS): every address is 127.0.0.1, not this host's
# interface address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import numpy as np  # noqa: E402
import ray  # noqa: E402 (reads the variable above on import)
from ray.cluster_utils import Cluster  # noqa: E402

reps, cores = int(sys.argv[1]), int(sys.argv[2])
SIZE = 64 << 20
STORE = 1 << 30


@ray.remote(num_cpus=0, resources={"second": 1})
class Fetcher:
    def fetch(self, refs):
        """ray.get of refs[0] on this node; returns the seconds it took."""
        t0 = time.perf_counter()
        ray.get(refs[0])
        return time.perf_counter() - t0


cluster = Cluster(initialize_head=True, connect=False,
                  head_node_args={"num_cpus": cores, "object_store_memory": STORE,
                                  "include_dashboard": False})
try:
    cluster.add_node(num_cpus=cores, object_store_memory=STORE, resources={"second": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    fetcher = Fetcher.remote()
    src = np.frombuffer(bytes(i * 131 % 256 for i in range(256)) * (SIZE // 256), np.uint8)
    put, get_read, remote = [], [], []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        ref = ray.put(src)
        t1 = time.perf_counter()
        view = ray.get(ref)
        view.view(np.uint64).sum()  # read every byte
        t2 = time.perf_counter()
        del view
        dt = ray.get(fetcher.fetch.remote([ref]))  # in a list: the actor gets the ref itself
        del ref
        if rep:  # round 0 is the warm-up
            put.append(SIZE / (t1 - t0) / 1e9)
            get_read.append(SIZE / (t2 - t1) / 1e9)
            remote.append(SIZE / dt / 1e9)
    for name, v in (("put", put), ("get_read", get_read), ("remote_get", remote)):
        print(f"ray {name} GB/s:", " ".join(f"{x:.2f}" for x in v), file=sys.stderr)
    print(f"put {statistics.median(put):.2f}")
    print(f"get_read {statistics.median(get_read):.2f}")
    print(f"remote_get {statistics.median(remote):.2f}", flush=True)
finally:
    ray.shutdown()
    cluster.shutdown()
