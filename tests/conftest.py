"""Settings for the whole suite.

Hypothesis's per-example deadline (200 ms) is a timing assertion: on a shared 2-core machine
under load an example can take longer for reasons that are not the code's (a run at load 8
failed once on ``test_any_single_bit_flip_is_detected`` with DeadlineExceeded). Speed
is measured in benchmarks, not in timed tests (docs/testing.md), so the deadline is off.
"""

from hypothesis import settings

settings.register_profile("pocketmq", deadline=None)
settings.load_profile("pocketmq")
