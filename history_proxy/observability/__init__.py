"""What operators see: Prometheus metrics, the access line, log setup."""
