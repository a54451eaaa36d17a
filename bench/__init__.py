"""Timing scripts for custom_op: no asserts, only measurements.

Run everything on defaults from the repository root with ``python -m bench``
(or ``make bench``); ``python -m bench operator ...`` and
``python -m bench pipeline ...`` run one part, ``python -m bench --help`` lists
the options. Results go to bench/results/ as JSON plus a PNG chart.
"""
