"""The listeners: one per process and database alias, on a thread of its own,
that receive the releases this process's waiters wait for. Each backend names
the kind its database needs (``BackendFeatures.listener_class``), and
``registry.listener_for`` gives a process's one.

- ``registry``: this process's listeners, started on first use, stopped at exit;
- ``base``: the thread, the waiters' subscriptions and the hand-out of wake-ups;
- ``postgresql``: ``LISTEN`` on a connection of its own (releases ``NOTIFY``);
- ``sqlite``: the datagrams a release sends, both ends.
"""
