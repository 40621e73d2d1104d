#!/usr/bin/env python3
"""The object key's date against DMI's rule, computed by Python itself.

Usage: key_date_test.py PACK_KEY_DATES [SEED]

DMI dates a key with datetime.fromtimestamp(captured_at_ns / 1e9, tz=UTC):
a float number of seconds, rounded to microseconds, so the last few hundred
nanoseconds before a UTC midnight get the next day's date. capstore follows
it exactly (docs/format.md section 6). This test feeds the helper
(tests/pack_key_dates.c, the C key function) timestamps around every UTC
midnight from 1970 to 2100 (each day's exact switching point found by
bisection), around every 97th midnight up to 2554, the u64 extremes and
powers of two, and random u64 values, and requires the same date as Python's.
"""

import datetime
import random
import subprocess
import sys

U64_MAX = 2**64 - 1
DAY_NS = 86400 * 10**9
OFFSETS = (-1025, -1024, -768, -767, -641, -640, -639, -501, -500, -499, -1, 0)


def dmi_date(ns):
    return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc).strftime("%Y-%m-%d")


def switch_point(midnight):
    """The first ns that Python dates as the day starting at midnight."""
    target = dmi_date(midnight)
    low, high = max(midnight - 5000, 0), midnight
    while low < high:
        mid = (low + high) // 2
        if dmi_date(mid) == target:
            high = mid
        else:
            low = mid + 1
    return low


def timestamps(seed):
    values = {0, 1, 499, 500, 501, U64_MAX, U64_MAX - 1, 1700006399999999999}
    for bit in range(64):
        for delta in (-1, 0, 1):
            values.add(2**bit + delta)
    last_day = U64_MAX // DAY_NS
    for day in list(range(1, 47483)) + list(range(47483, last_day + 1, 97)) + [last_day]:
        midnight = day * DAY_NS
        for offset in OFFSETS:
            values.add(midnight + offset)
        if day < 47483 or day % 970 == 0:
            point = switch_point(midnight)
            values.update((point - 1, point))
    rng = random.Random(seed)
    values.update(rng.randrange(0, 2**64) for _ in range(50000))
    values.update(rng.randrange(0, 4102444800 * 10**9) for _ in range(50000))
    return sorted(v for v in values if 0 <= v <= U64_MAX)


def main(argv):
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    seed = int(argv[1]) if len(argv) == 2 else random.randrange(2**32)
    values = timestamps(seed)
    text = "".join(f"{v}\n" for v in values)
    result = subprocess.run([argv[0]], input=text, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"FAIL: {argv[0]} exited {result.returncode}: {result.stderr}", file=sys.stderr)
        return 1
    lines = result.stdout.splitlines()
    if len(lines) != len(values):
        print(f"FAIL: {len(lines)} answers for {len(values)} timestamps", file=sys.stderr)
        return 1
    failures = 0
    for value, line in zip(values, lines):
        want = f"{value} {dmi_date(value)}"
        if line != want:
            failures += 1
            if failures <= 20:
                print(f"FAIL: captured_at_ns {value}: capstore {line.split()[-1]}, "
                      f"DMI {dmi_date(value)}", file=sys.stderr)
    if dmi_date(1700006399999999999) != "2023-11-15":
        print("FAIL: Python no longer dates 1700006399999999999 as 2023-11-15", file=sys.stderr)
        failures += 1
    print(f"key dates: {len(values)} timestamps, seed {seed}, {failures} differ from Python "
          f"(replay: key_date_test.py {argv[0]} {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
