#!/usr/bin/env python3
"""SecAgg+'s exposure to a coalition (docs/guide/strategies.md §Secure aggregation): the chance
that a random fraction of the clients holds more than half of one client's neighbourhood (k
neighbours and itself: the threshold is ⌊(k + 1) / 2⌋ + 1 shares, all from its k neighbours),
so that it can rebuild that client's secrets; per degree k and coalition fraction.

    python3 scripts/secagg-coalition.py [K ...]      default 32 40 54 (the default degrees at
                                                      256, 1,000 and 10,000 clients)
"""
import sys
from math import comb


def exposed(k, fraction):
    need = (k + 1) // 2 + 1
    return sum(comb(k, i) * fraction**i * (1 - fraction) ** (k - i) for i in range(need, k + 1))


degrees = [int(a) for a in sys.argv[1:]] or [32, 40, 54]
fractions = (0.05, 0.1, 0.2, 1 / 3)
print("| neighbours | " + " | ".join(f"coalition {f:.2f}" for f in fractions) + " |")
print("|---|" + "---|" * len(fractions))
for k in degrees:
    print(f"| {k} | " + " | ".join(f"{exposed(k, f):.1e}" for f in fractions) + " |")
