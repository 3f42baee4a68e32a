"""``python -m pocketmq`` is the ``pocketmq`` command."""

from pocketmq.cli import main

main()
