"""The benchmark harness: fast mock upstream, agent-shaped bodies, load generator, runner, profiles."""
