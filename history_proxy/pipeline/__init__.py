"""One request through the caller's chain: resolve, run, validate, report."""
