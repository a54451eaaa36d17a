"""decode_batches and decode_epochs: the decode step added to a Ray Data dataset."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Optional

from ._decoder import JpegDecoder
from ._executions import execution_index
from ._pool import actor_pool

__all__ = ["EPOCH_COLUMN", "decode_batches", "decode_epochs"]

#: The column decode_epochs adds: each row's epoch, which keys its draws.
EPOCH_COLUMN = "epoch"

#: JpegDecoder's own keywords; every other keyword of decode_batches goes to map_batches.
_DECODER_OPTIONS = frozenset(inspect.signature(JpegDecoder).parameters) - {"transform"}
#: map_batches keywords the step sets itself (concurrency: Ray deprecates it for compute=).
_OWN_KEYWORDS = frozenset({"fn", "fn_args", "fn_kwargs", "fn_constructor_args",
                           "fn_constructor_kwargs", "batch_format", "concurrency"})


def decode_batches(dataset: Any, transform: Callable[[Any], Any], *, seed: int,
                   epoch: Optional[int] = None, batch_size: int = 256,
                   compute: Optional[Any] = None, num_cpus: float = 1,
                   **options: Any) -> Any:
    """``dataset`` decoded by :class:`JpegDecoder` in a pool of Ray actors.

    With ``epoch=None``, each execution of the returned dataset (each
    iteration, and each epoch of Ray Train, which iterates its dataset once
    per epoch) decodes the next epoch: new windows and flips every epoch, and
    the same sequence of epochs for the same seed.

    Args:
        dataset: A ``ray.data.Dataset`` of encoded images: ``read_binary_files(...,
            include_paths=True)`` (with ``Partitioning("dir")`` labels), ``read_parquet``
            of Hugging Face image structs, ``read_webdataset``.
        transform: The v2 transform of one image, as for :class:`JpegDecoder`.
        seed: The seed of every sample's stream.
        epoch: None: epochs follow the executions, the first being epoch 0; an int >= 0:
            every execution decodes that epoch.
        batch_size: Rows per native batch call and per actor task; ``iter_torch_batches``
            slices its own batches from them without a copy. Ray pays its own cost per
            block (a task, the object store, the driver's bookkeeping) whatever the
            rows, so a few hundred spread it thin.
        compute: A ``ray.data.ActorPoolStrategy`` (``size=``, or ``min_size=`` and
            ``max_size=`` to autoscale), or None for one autoscaling from 1 actor to the
            cluster's CPUs less the one kept for the reads.
        num_cpus: The CPUs each actor reserves; each decodes on one native thread.
        options: :class:`JpegDecoder`'s keywords (``bytes_column``, ``key_column``,
            ``label_column``, ``classes``, ``index_column``, ``options``, ``on_error``,
            ``keep_key``, ``epoch_column``); every other keyword is ``map_batches``'s
            (``memory``, ``num_gpus``, ``runtime_env``, ``resources``, ``label_selector``,
            ``accelerator_type``, ...) and goes to it as it is.

    Returns:
        The lazy ``ray.data.Dataset`` of ``{"image", ["label"], [key]}`` batches. A dead
        actor (a killed node, an out-of-memory kill) is restarted and its batches retried by
        Ray Data's policy for actor pools: no batch is lost or repeated, and a retried
        batch is decoded in its execution's epoch.

    Raises:
        TypeError: ``seed`` is not an int, ``compute`` is not an ActorPoolStrategy, or a
            keyword is one the step sets itself (``fn_constructor_kwargs``, ``concurrency``:
            give ``compute=``).
        ValueError: ``batch_size`` is not an int >= 1, ``epoch`` not an int >= 0, or the
            pool would hold every CPU the reads need (the message says what to lower).

    Example:
        >>> files = ray.data.read_binary_files("train/", include_paths=True,
        ...                                    shuffle=FileShuffleConfig(seed=0))
        >>> decoded = decode_batches(files, transform, seed=0)
        >>> for epoch in range(3):    # a new execution, so the next epoch's windows
        ...     for batch in decoded.iter_torch_batches(batch_size=256):
        ...         images = batch["image"]   # uint8 [256, 3, 224, 224]
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"decode_batches: batch_size must be an int >= 1, got {batch_size!r}")
    refused = sorted(_OWN_KEYWORDS & set(options))
    if refused:
        raise TypeError(f"decode_batches: {refused[0]}= is the decode step's own (give the pool "
                        "as compute=ray.data.ActorPoolStrategy(...), the decoder's arguments as "
                        "keywords)")
    constructor = {name: value for name, value in options.items() if name in _DECODER_OPTIONS}
    map_options = {name: value for name, value in options.items() if name not in constructor}
    constructor.update(transform=transform, seed=seed, epoch=epoch,
                       executions_before=0 if epoch is not None else
                       execution_index(dataset.context))
    JpegDecoder(**constructor)  # argument errors here, in the driver, not in every actor
    pool = actor_pool(compute, num_cpus, dataset.context)
    return dataset.map_batches(JpegDecoder, fn_constructor_kwargs=constructor,
                               batch_size=batch_size, batch_format="numpy", compute=pool,
                               num_cpus=num_cpus, **map_options)


def decode_epochs(epochs: Mapping[int, Any], transform: Callable[[Any], Any], *, seed: int,
                  batch_size: int = 256, compute: Optional[Any] = None, num_cpus: float = 1,
                  **options: Any) -> Any:
    """Several epochs decoded in ONE Ray Data execution, so one pool of actors serves them all.

    Ray Data starts a map step's actors with each execution and stops them at its end, so
    :func:`decode_batches` iterated once per epoch starts its actors every epoch (a
    process each, torch imported: seconds). This gives one dataset holding every epoch's
    rows, each drawn in its own epoch's stream (the pixels decode_batches gives it in that
    epoch) and tagged in the ``"epoch"`` column. The epochs' rows interleave (Ray Data's
    ``union`` takes blocks from each epoch's dataset in turn): the stream of a dataset
    repeated ``len(epochs)`` times, without an epoch's end for a schedule, an evaluation
    or a checkpoint to wait for; a loop that needs one iterates decode_batches instead.

    Args:
        epochs: Each epoch's dataset of encoded images, by epoch.
        transform, seed, batch_size, compute, num_cpus, options: as
            :func:`decode_batches` (``epoch`` and ``epoch_column`` are this function's).

    Returns:
        The lazy ``ray.data.Dataset`` of ``{"image", ["label"], [key], "epoch"}`` batches.

    Raises:
        ValueError: ``epochs`` is empty, an epoch is not an int >= 0, or as decode_batches.
        TypeError: as decode_batches.

    Example:
        >>> decoded = decode_epochs({epoch: files for epoch in range(3)}, transform, seed=0)
        >>> for batch in decoded.iter_torch_batches(batch_size=256):
        ...     images, epochs = batch["image"], batch["epoch"]   # uint8 [256, 3, 224, 224]
    """
    if not epochs:
        raise ValueError("decode_epochs: epochs is empty; give {epoch: dataset}")
    for epoch in epochs:
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"decode_epochs: an epoch must be an int >= 0, got {epoch!r}")
    for name in ("epoch", "epoch_column"):
        if name in options:
            raise TypeError(f"decode_epochs: {name}= is decode_epochs' own: the epochs are "
                            "the keys of epochs")
    from ray.data.expressions import lit

    # An expression, not a Python function: the reading tasks that add the column need not
    # import custom_op (and torch) in every worker they run in.
    tagged = [epochs[epoch].with_column(EPOCH_COLUMN, lit(epoch)) for epoch in sorted(epochs)]
    rows = tagged[0].union(*tagged[1:]) if len(tagged) > 1 else tagged[0]
    return decode_batches(rows, transform, seed=seed, epoch=min(epochs), batch_size=batch_size,
                          compute=compute, num_cpus=num_cpus, epoch_column=EPOCH_COLUMN,
                          **options)
