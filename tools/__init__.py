"""Harnesses run by CI that are not tests themselves: the torture run
(``tools.torture``) and the Patroni cluster (``tools.cluster``)."""
