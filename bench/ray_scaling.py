"""How Ray Data's decode step scales from 1 node to 2 on a local cluster: a ratio and Ray's cost, not a speed.

Run from the repository root (not part of ``python -m bench`` / ``make bench``):

    python -m bench ray --scaling                      # generated and real 500x375 files
    python -m bench ray --scaling --images generated --json scaling.json

The question (issue 43): does adding a CPU node to the decode step add its
throughput, and what does Ray cost per image on top of the decode? Two local
clusters (ray.cluster_utils.Cluster, as tests/_ray_processes.py makes one),
one after the other, each on this machine:

  1 node    a head node of 0 logical CPUs + 1 worker node of 1 CPU: 1 JpegDecoder actor
  2 nodes   a head node of 0 logical CPUs + 2 worker nodes of 1 CPU each: 2 actors, one per node

How the CPUs are allotted: the head node has no logical CPU, so no actor and no
read task is scheduled on it; it holds the GCS, its raylet, the driver (this
process) and Ray Data's executor, which need a core's time to schedule. Each
worker node's one CPU runs the read tasks while the files are materialized,
then its one actor. The logical CPUs are what Ray schedules by, not cores: on
a 2-core machine the 1-node cluster leaves a core for the head, the driver
and the raylets, but the 2-node one runs two busy actors on the 2 cores beside
them, so the 2-node figure OVERSUBSCRIBES the machine slightly and its ratio
is a lower bound of what two machines would give. The table shows how many
cores Ray's processes used ("Ray cores") and how busy the machine's cores
were in all ("machine cores", every process of the machine, from /proc/stat),
with the load average before and after: the machine is shared. Each worker
node's object store holds 2 GiB (OBJECT_STORE_BYTES), so that nothing spills.

What is timed is the decode step alone: the files (--lane-files of the ray
part's 375x500 set, bench/lane_bench.py's, or with --photos DIR its JPEGs as
they are) are copied to a temporary folder, read with read_binary_files
(include_paths=True) repeated to --scaling-rows rows in blocks of 256, and
materialized (the read tasks run on the worker nodes) before any timing; the
copies are then deleted, so that the path keys name no file and no actor
uses the MCU-row index cache (the first cluster would build the indexes the
second one finds). Each execution is ``map_batches(JpegDecoder,
compute=ActorPoolStrategy(size=N), num_cpus=1, batch_size=256)`` with
RandomResizedCrop(224) + RandomHorizontalFlip, epoch 0 (the same windows in
every execution and both clusters: the same work), consumed by
iter_internal_ref_bundles, which drops each decoded block's reference without
fetching it into the driver. Ray Data starts a pool's actors with each
execution and stops them at its end (wait_for_min_actors_s makes it wait for
all N before the first block), so a warm-up execution would leave no warm
actor to the next: instead each of the --scaling-rounds executions is timed
from the arrival of its N-th block (each actor has decoded one: the actors'
start and first block are behind it) to its last, and its start ("start s":
the first block's arrival less one block's steady decode; the actors'
processes, torch and custom_op imported) is reported on its own. CPU
us/image is the CPU time of this process and every process below it (the
nodes' GCS and raylets, the actors) over the same span, per image; Ray's
overhead is that less the CPU time per image of the same JpegDecoder called
in this process on the same batches without Ray ("in process", measured
again just before each cluster starts, on 1024 images, so that both sides of
the difference see the machine alike). The 2-node span is half the 1-node
one (7 block times at the default 4096 rows): read its min and max. Ray Data warns at each execution that the cluster has no free CPU: the actors
hold them all, and the materialized input needs none. ``--json FILE`` merges ``{"ray-scaling-KIND": {nodes_1_images_per_s, ...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any, Iterator

import numpy as np

from bench import images, lane_bench, report

BLOCK_ROWS = 256
NODES = (1, 2)
#: Each worker node's object store: the materialized rows (4096 generated files are 550 MB) and
#: the decoded blocks in flight. ray.cluster_utils gives a node 150 MiB, which spills the rows
#: to disk and restores them during the decode: Ray's cost, but a disk's, not the decode's.
OBJECT_STORE_BYTES = 2 << 30
HEIGHT, WIDTH = 375, 500
_TICKS = os.sysconf("SC_CLK_TCK")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ray scaling")
    group.add_argument("--scaling-rows", type=int, default=4096,
                       help="rows of each timed execution, a multiple of 512 from 1024 (default 4096)")
    group.add_argument("--scaling-rounds", type=int, default=2,
                       help="timed executions per cluster (default 2)")
    if not any(action.dest == "lane_files" for action in parser._actions):
        lane_bench.add_arguments(parser)  # --lane-files: the ray part's files


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of every core of the machine so far (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def _mark() -> tuple[float, float, int]:
    """(wall s, CPU s of this process tree, busy jiffies of the machine) now."""
    from bench import ray_bench

    return time.perf_counter(), ray_bench._tree_cpu_seconds(), _machine_jiffies()[0]


def _paths(args: argparse.Namespace, source: images.ImageSource) -> list[pathlib.Path]:
    if source.kind == "real" and args.photos is not None:
        return sorted(path for path in args.photos.rglob("*")
                      if path.suffix.lower() in images.JPEG_SUFFIXES and path.is_file())
    return sorted(source.files(HEIGHT, WIDTH, args.lane_files).paths)  # the set's first ones


def _decoder_kwargs(seed: int) -> dict[str, Any]:
    return {"transform": lane_bench._transform(), "seed": seed, "epoch": 0, "key_column": "path"}


def _in_process(keys: list[str], encoded: list[bytes], seed: int) -> dict[str, float]:
    """The same JpegDecoder on the same batches, in this process without Ray: CPU and wall
    time per image of 4 blocks (1024 images) after one warm-up block."""
    from custom_op.ray import JpegDecoder

    decoder = JpegDecoder(**_decoder_kwargs(seed))
    blocks = 4
    order = [i % len(keys) for i in range(BLOCK_ROWS * (blocks + 1))]
    batches = [{"bytes": np.array([encoded[i] for i in order[start:start + BLOCK_ROWS]], dtype=object),
                "path": np.array([keys[i] for i in order[start:start + BLOCK_ROWS]])}
               for start in range(0, len(order), BLOCK_ROWS)]
    decoder(batches[0])
    cpu, wall = time.process_time(), time.perf_counter()
    for batch in batches[1:]:
        decoder(batch)
    count = BLOCK_ROWS * blocks
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu_us_per_image": 1e6 * cpu / count, "images_per_s": count / wall}


@contextlib.contextmanager
def _cluster(nodes: int) -> Iterator[Any]:
    """A local cluster: a head of 0 CPUs and ``nodes`` worker nodes of 1 CPU, shut down after."""
    import ray
    from ray.cluster_utils import Cluster

    import custom_op

    saved = {name: os.environ.get(name) for name in
             ("PYTHONPATH", "RAY_worker_niceness", "RAY_USAGE_STATS_ENABLED", "RAY_DATA_LOG_LEVEL")}
    # As tests/_ray_processes.py: workers import this checkout, at the driver's priority (Ray's
    # default nice 15 would hand the cores to anything else running), no usage reporter.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [
        str(pathlib.Path(custom_op.__file__).parents[1]), saved["PYTHONPATH"]]))
    os.environ["RAY_worker_niceness"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # Not every execution's start and end at INFO between the tables (Ray Data reads it each
    # time it sets its loggers up, in every execution).
    os.environ["RAY_DATA_LOG_LEVEL"] = "WARNING"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        context = ray.data.DataContext.get_current()
        before = context.enable_progress_bars, context.wait_for_min_actors_s
        context.enable_progress_bars = False
        context.wait_for_min_actors_s = 300  # every actor up before the first block
        try:
            yield ray
        finally:
            context.enable_progress_bars, context.wait_for_min_actors_s = before
    finally:
        ray.shutdown()
        cluster.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _execution(dataset: Any, actors: int, rows: int) -> dict[str, float]:
    """One execution consumed block by block: its rate, CPU and start (see the docstring)."""
    start = time.perf_counter()
    done, first, marks = 0, None, []
    for bundle in dataset.iter_internal_ref_bundles():
        done += bundle.num_rows()
        del bundle  # the block is freed, never fetched
        if first is None:
            first = time.perf_counter() - start
        # Marks taken before asking for the next block: at the last one the actors still live.
        if (not marks and done >= actors * BLOCK_ROWS) or (len(marks) == 1 and done >= rows):
            marks.append((_mark(), done))
    if done != rows or len(marks) != 2:
        raise ValueError(f"bench ray --scaling: {done} rows decoded, {rows} expected, "
                         f"{len(marks)} of 2 marks taken")
    ((wall0, cpu0, busy0), done0), ((wall1, cpu1, busy1), _) = marks
    counted, span = rows - done0, wall1 - wall0
    rate = counted / span
    return {"images_per_s": rate, "cpu_us_per_image": 1e6 * (cpu1 - cpu0) / counted,
            "first_block_s": first, "startup_s": first - BLOCK_ROWS * actors / rate,
            "ray_cores": (cpu1 - cpu0) / span, "machine_cores": (busy1 - busy0) / _TICKS / span}


def _nodes_row(nodes: int, paths: list[pathlib.Path], copies: list[pathlib.Path],
               args: argparse.Namespace) -> dict[str, Any]:
    """The in-process decode, then ``nodes`` worker nodes: the files copied, read and
    materialized, the copies deleted, the timed executions."""
    from custom_op.ray import JpegDecoder

    load_before = os.getloadavg()
    in_process = _in_process([str(copy) for copy in copies], [path.read_bytes() for path in paths],
                             args.seed)
    with _cluster(nodes) as ray:
        for path, copy in zip(paths, copies):
            shutil.copyfile(path, copy)
        listed = [str(copy) for copy in (copies * (args.scaling_rows // len(copies) + 1))[:args.scaling_rows]]
        try:
            files = ray.data.read_binary_files(
                listed, include_paths=True,
                override_num_blocks=args.scaling_rows // BLOCK_ROWS).materialize()
        finally:
            for copy in copies:  # the keys now name no file: no index cache (see the docstring)
                copy.unlink()

        def decoded(dataset: Any) -> Any:
            return dataset.map_batches(JpegDecoder, fn_constructor_kwargs=_decoder_kwargs(args.seed),
                                       batch_size=BLOCK_ROWS, batch_format="numpy", num_cpus=1,
                                       compute=ray.data.ActorPoolStrategy(size=nodes))

        timed = [_execution(decoded(files), nodes, args.scaling_rows) for _ in range(args.scaling_rounds)]
    rates = [run["images_per_s"] for run in timed]
    row = {"nodes": nodes, "actors": nodes, "images_per_s": float(np.median(rates)),
           "min_images_per_s": min(rates), "max_images_per_s": max(rates),
           "in_process": in_process, "load_average_before": load_before,
           "load_average_after": os.getloadavg(), "rounds": timed}
    for key in ("cpu_us_per_image", "startup_s", "ray_cores", "machine_cores"):
        row[key] = float(np.median([run[key] for run in timed]))
    return row


def _scaling(rows: list[dict[str, Any]], load_before: tuple[float, ...]) -> dict[str, Any]:
    """The headline figures (the JSON's ray_scaling) from the two clusters' rows, each with the
    in-process decode measured before it."""
    for row in rows:
        row["ray_overhead_us_per_image"] = row["cpu_us_per_image"] - row["in_process"]["cpu_us_per_image"]
        row["vs_1_node"] = row["images_per_s"] / rows[0]["images_per_s"]
    one, two = rows
    return {"nodes_1_images_per_s": one["images_per_s"], "nodes_2_images_per_s": two["images_per_s"],
            "ratio": two["images_per_s"] / one["images_per_s"],
            "ray_overhead_us_per_image": one["ray_overhead_us_per_image"],
            "nodes_2_ray_overhead_us_per_image": two["ray_overhead_us_per_image"],
            "nodes_1_cpu_us_per_image": one["cpu_us_per_image"],
            "nodes_2_cpu_us_per_image": two["cpu_us_per_image"],
            "in_process_cpu_us_per_image": float(np.median(
                [row["in_process"]["cpu_us_per_image"] for row in rows])),
            "in_process_images_per_s": float(np.median(
                [row["in_process"]["images_per_s"] for row in rows])),
            "nodes_1_startup_s": one["startup_s"], "nodes_2_startup_s": two["startup_s"],
            "nodes_2_machine_cores": two["machine_cores"],
            "load_average_before": tuple(load_before), "load_average_after": os.getloadavg()}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    # Each execution is timed from every actor's first block (2 blocks of 256 on 2 nodes) to
    # its last: 2 nodes need more than 2 blocks, and as many blocks for each actor.
    if args.scaling_rows < 1024 or args.scaling_rows % 512:
        raise ValueError(f"--scaling-rows must be a multiple of 512 from 1024, got {args.scaling_rows}")
    paths = _paths(args, source)
    if not paths:
        raise ValueError(f"bench ray --scaling: no JPEG for the {source.kind} images")
    load_before = os.getloadavg()
    # One folder for the whole run, so that every sample's key (its path: it keys the sample's
    # window and flip) is the same in this process and in both clusters: the same work.
    with tempfile.TemporaryDirectory(prefix="custom_op-bench-scaling-") as folder:
        copies = [pathlib.Path(folder) / f"{index:05d}{path.suffix}" for index, path in enumerate(paths)]
        rows = [_nodes_row(nodes, paths, copies, args) for nodes in NODES]
    scaling = _scaling(rows, load_before)
    if args.json is not None:
        merged = json.loads(args.json.read_text(encoding="utf-8")) if args.json.exists() else {}
        merged[f"ray-scaling-{source.kind}"] = {key: value if isinstance(value, tuple) else round(value, 3)
                                                for key, value in scaling.items()}
        args.json.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    return {"config": {"images": source.kind, "files": len(paths), "rows": args.scaling_rows,
                       "block_rows": BLOCK_ROWS, "rounds": args.scaling_rounds,
                       "size": "as they are" if source.kind == "real" and args.photos else f"{HEIGHT}x{WIDTH}",
                       "cpus": "head 0 logical CPUs; each worker node 1 CPU, one actor",
                       "cores": os.cpu_count()},
            "ray_scaling": scaling, "nodes": rows}


def format_table(result: dict[str, Any]) -> str:
    config, scaling = result["config"], result["ray_scaling"]
    headers = ["nodes", "actors", "images/s", "min", "max", "start s", "CPU us/image",
               "Ray overhead us/image", "Ray cores", "machine cores", "vs 1 node"]
    rows = [[str(row["nodes"]), str(row["actors"]), f"{row['images_per_s']:.0f}",
             f"{row['min_images_per_s']:.0f}", f"{row['max_images_per_s']:.0f}",
             f"{row['startup_s']:.1f}", f"{row['cpu_us_per_image']:.0f}",
             f"{row['ray_overhead_us_per_image']:.0f}", f"{row['ray_cores']:.2f}",
             f"{row['machine_cores']:.2f}", report.format_ratio(row["vs_1_node"])]
            for row in result["nodes"]]
    load = "; ".join(f"{name} {', '.join(f'{value:.2f}' for value in scaling[key])}"
                     for name, key in (("before", "load_average_before"), ("after", "load_average_after")))
    cores = config.get("cores")
    return "\n".join([
        f"Ray Data decode scaling on {config['images']} files ({config['files']} files, "
        f"{config['size']}): RandomResizedCrop(224) + flip, uint8, blocks of {config['block_rows']}, "
        f"{config['rows']} materialized rows per execution; median of {config['rounds']} executions "
        "per cluster, each timed from every actor's first block to its last",
        report.markdown_table(headers, rows, right=[True] * len(headers)),
        f"2 nodes / 1 node: {report.format_ratio(scaling['ratio'])}; Ray's overhead "
        f"{scaling['ray_overhead_us_per_image']:.0f} us of CPU per image on 1 node "
        f"({scaling['nodes_2_ray_overhead_us_per_image']:.0f} on 2), over the in-process decode's "
        f"{scaling['in_process_cpu_us_per_image']:.0f} us ({scaling['in_process_images_per_s']:.0f} "
        "images/s on one thread, no Ray; median of its run before each cluster, each row's overhead "
        "over its own).",
        f"CPUs: {config['cpus']}; {cores} cores, so 2 nodes' 2 actors, the driver and the raylets "
        f"share {cores} cores (machine cores: every process's use of them). Load average {load}."])


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
