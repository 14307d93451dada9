"""Capacity planning: what fits on the farm now, and the best GPU layout for a demand file.

`fitnow.what_fits(observed)` counts how many more VMs of each offered profile fit without changing any host;
`demand.load_demand(path)` reads a demand file; `answer.plan_capacity(observed, demand)` answers it with a
greedy first-fit-decreasing layout and, when OR-Tools is installed, an exact CP-SAT model started from it.
Every rule about which vGPU fits where comes from vgpuctl.farm.placement.
"""

DEFAULT_TIME_LIMIT_S = 8.0  # seconds from the command's start: with Python's start and exit, within 10 s
