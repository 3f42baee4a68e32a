"""The protocol-agnostic broker core (topics, groups, send, pull, pop, offsets, retry, ...)."""
