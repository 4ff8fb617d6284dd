"""bench/cluster_up/ray_ref.py - the reference for bench cluster_up: Ray's own multi-node-on-one-
host launcher (ray.cluster_utils.Cluster, what Ray's tests use) starts a head and 2 worker nodes
of 2 CPUs each and waits until all 3 are registered (Cluster.wait_for_nodes); the dashboard is
off (Ray's best case). Prints one time in ms per repetition: 'ray_up_ms <ms>'. Ray's head is
also a node (raylet), so this is 3 raylets + GCS against ct's head + 2 nodes."""
import os
import sys
import time

# Ray's single-host mode (its default on macOS): every address is 127.0.0.1, not this host's
# interface address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402 (reads the variable above on import)
from ray.cluster_utils import Cluster  # noqa: E402

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for _ in range(reps):
    t0 = time.perf_counter()
    c = Cluster(initialize_head=True, connect=False,
                head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2)
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    ms = (time.perf_counter() - t0) * 1e3
    print(f"ray_up_ms {ms:.1f}", flush=True)
    c.shutdown()
