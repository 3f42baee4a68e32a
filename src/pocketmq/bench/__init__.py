"""Benchmarks behind ``pocketmq bench``: each prints a rich table and can return its figures."""
