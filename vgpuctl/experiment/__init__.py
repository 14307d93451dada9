"""Experiments across GPU configurations: variants of one inventory, a benchmark in the guests, a report.

`schema` reads the experiment file and merges each variant onto the base inventory; `parsers` reads the
benchmarks' own output formats; `store` keeps one result per variant and repetition; `facts` and `report`
turn a results directory into tables, plots and flagged contradictions; `runner` drives apply, workload and
restore.
"""
