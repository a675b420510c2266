"""What ``manage.py dlock`` stands on, one concept a module:

- ``arguments``: the argparse ``type=`` validators of its options (and ``purge_locks``');
- ``holds``: the holds and waiters it reads, and the force-release of one hold;
- ``inspect``: ``list``, ``show`` and ``release``;
- ``process_group``: CMD in a process group of its own, signalled and stopped as one;
- ``run``: ``run``, which keeps CMD running while it holds the lock.
"""
