from __future__ import annotations

from benchmarks.run import main

main()
