"""pocketmq's test suite (a package, so that tests/grpc is ``tests.grpc`` and never shadows the
grpc library on sys.path)."""
