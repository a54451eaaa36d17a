"""The decode step's actor pool: Ray's own ActorPoolStrategy, sized so that the reads still run.

Ray Data gives a map step's actors their CPUs first; the reading tasks that
feed them need CPUs of their own. A pool whose actors hold every CPU of the
cluster leaves the reads waiting for ever, and the first batch never comes,
with nothing said. So the default pool autoscales from one actor up to the
cluster's CPUs less one, and a pool whose actors would hold every CPU is
refused before anything runs, naming what to change.
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["READ_CPUS", "actor_pool"]

#: CPUs kept for Ray Data's reading tasks (one runs on each, by Ray's default).
READ_CPUS = 1


def _cluster_cpus(context: Any) -> Optional[float]:
    """The CPUs Ray Data may use: the cluster's, or the dataset's resource limit if lower;
    None when Ray is not running here (a dataset built before ``ray.init``)."""
    import ray

    if not ray.is_initialized():
        return None
    cpus = float(ray.cluster_resources().get("CPU", 0))
    limit = getattr(getattr(context, "execution_options", None), "resource_limits", None)
    limited = getattr(limit, "cpu", None)
    if isinstance(limited, (int, float)) and math.isfinite(limited):
        cpus = min(cpus, float(limited))
    return cpus


def actor_pool(compute: Any, num_cpus: float, context: Any) -> Any:
    """The pool the decode step runs in: ``compute`` checked, or the default one.

    Args:
        compute: A ``ray.data.ActorPoolStrategy`` (a fixed ``size``, or ``min_size`` and
            ``max_size`` for an autoscaling pool), or None for the default: from one actor
            up to the CPUs that leave :data:`READ_CPUS` free.
        num_cpus: The CPUs each actor reserves, a number > 0.
        context: The dataset's ``DataContext`` (its resource limits count).

    Returns:
        The ``ActorPoolStrategy`` to pass to ``map_batches``.

    Raises:
        TypeError: ``compute`` is not an ActorPoolStrategy (the decoder is a class: Ray runs
            it in actors only), or ``num_cpus`` is not a number.
        ValueError: ``num_cpus`` is not > 0, or the pool's smallest size would hold every CPU
            but :data:`READ_CPUS` of the cluster; the message says what to lower.

    Example:
        >>> actor_pool(None, 1, files.context)   # 4 CPUs: ActorPoolStrategy(min_size=1, max_size=3)
    """
    from ray.data import ActorPoolStrategy

    if not isinstance(num_cpus, (int, float)) or isinstance(num_cpus, bool):
        raise TypeError(f"custom_op.ray: num_cpus must be a number, got {num_cpus!r}")
    if not num_cpus > 0:
        raise ValueError(f"custom_op.ray: num_cpus must be > 0, got {num_cpus!r}")
    if compute is not None and not isinstance(compute, ActorPoolStrategy):
        raise TypeError("custom_op.ray: compute must be a ray.data.ActorPoolStrategy (the "
                        f"decoder is a callable class, which Ray runs in actors), got {compute!r}")
    cpus = _cluster_cpus(context)
    if cpus is None:
        return compute or ActorPoolStrategy(min_size=1)
    room = cpus - READ_CPUS
    if compute is None:
        if room < num_cpus:
            raise ValueError(f"custom_op.ray: an actor of num_cpus={num_cpus} leaves less than "
                             f"{READ_CPUS} of the cluster's {cpus:g} CPUs for the reads: lower "
                             "num_cpus or add CPUs")
        return ActorPoolStrategy(min_size=1, max_size=max(1, math.floor(room / num_cpus)))
    # The pool starts its initial actors whatever the load, so those are what must fit.
    started = max(compute.min_size, getattr(compute, "initial_size", None) or 0)
    if started * num_cpus > room:
        fits = max(0, math.floor(room / num_cpus))
        raise ValueError(
            f"custom_op.ray: compute=ActorPoolStrategy(min_size={compute.min_size}, "
            f"max_size={compute.max_size}) starts {started} actors of num_cpus={num_cpus}, "
            f"{started * num_cpus:g} of the cluster's {cpus:g} "
            f"CPUs, which leaves less than {READ_CPUS} for the reads that feed them (they would "
            f"wait for ever): start at most {fits} actors of num_cpus={num_cpus} (size=, "
            "min_size=, initial_size=), lower num_cpus, or leave compute=None for a pool sized to the cluster")
    return compute
