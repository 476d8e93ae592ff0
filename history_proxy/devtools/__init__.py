"""Tools around the proxy: replay (the built-in mock upstream is :mod:`history_proxy.mock`)."""
