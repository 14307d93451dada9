"""Records vgpuctl reads from vCenter and the hosts, or stores there: a host's unfinished work and run leases
(`work`), a host's network facts (`netfacts`), VM classes and supervisor namespaces as vCenter shows them
(`classes`). Plain data with their codecs; no I/O."""
