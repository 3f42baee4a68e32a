"""Placeholder until the command line lands (issue 3)."""

import sys


def main() -> None:
    print("pocketmq: the broker command arrives with the broker core", file=sys.stderr)
    sys.exit(2)
