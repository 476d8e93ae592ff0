"""Tools around the proxy: replay and the built-in mock upstream."""
