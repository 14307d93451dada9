"""Records vgpuctl reads from vCenter and the hosts, or stores there: a host's unfinished work and run leases
(`work`), a host's network facts (`netfacts`), VM classes and supervisor namespaces as vCenter shows them
(`classes`), the GPU performance counters and samples vCenter answers (`perf`). Plain data with their codecs; no
I/O."""
