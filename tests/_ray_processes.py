"""Ray's processes below a test's own, to check that shutting Ray down leaves none behind, and
the local two-node cluster the Ray tests run on."""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path
from typing import Iterator


def _is_ray(pid: int) -> bool:
    """Whether ``pid`` runs one of Ray's programs (raylet, GCS, its workers and actors)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"ray" in command


def ray_descendants(pid: int) -> set[int]:
    """The live processes of Ray's below ``pid``, from /proc (a test worker has others of its
    own, torch.compile's, multiprocessing's, that Ray's shutdown must leave alone)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[parent].append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children[todo.pop()]:
            found.add(child)
            todo.append(child)
    return {process for process in found if _is_ray(process)}


def wait_until_gone(pid: int, before: set[int], seconds: float = 30) -> set[int]:
    """Waits up to ``seconds`` for the processes of ``before`` still below ``pid`` to end;
    those left."""
    deadline = time.monotonic() + seconds
    while ray_descendants(pid) & before and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray_descendants(pid) & before


def two_node_cluster(test_module: str) -> Iterator[object]:
    """A local cluster of two nodes of two logical CPUs each (the reading tasks beside the
    decoding actors, and under Ray Train the training worker), as Ray's own tests make one on
    a machine; ``test_module``'s functions pickled by value. Shut down after, checking that
    Ray left no process behind. For a module-scoped fixture: ``yield from``."""
    import ray
    from ray.cluster_utils import Cluster

    import custom_op

    # Workers import custom_op as this process does (a checkout on PYTHONPATH, or installed).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(custom_op.__file__).parents[1]),
                                                             os.environ.get("PYTHONPATH")]))
    ray.cloudpickle.register_pickle_by_value(sys.modules[test_module])
    # Ray starts its workers (the decoding actors, the training worker) at nice 15, below the
    # test processes beside them: on a machine busy with other tests they then wait for the
    # CPU, and a test of seconds takes minutes. At the tests' own priority they take their
    # share. (The raylets read it from the environment they start in.)
    os.environ["RAY_worker_niceness"] = "0"
    # No usage statistics: an actor of its own per cluster that reports to nobody here.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    before = ray_descendants(os.getpid())
    assert before, "no Ray process found below this one: the check would check nothing"
    ray.shutdown()
    cluster.shutdown()
    assert not wait_until_gone(os.getpid(), before), "Ray left processes behind"
