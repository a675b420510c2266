"""A Patroni cluster on this machine (etcd, three PostgreSQL 15 nodes, HAProxy,
PgBouncer) and app hosts in network namespaces, for the high-availability tests,
``scripts/cluster.sh`` and the capacity benchmark. Needs root (namespaces, the
``postgres`` user) and installs its Debian packages when they are missing."""
