"""Helpers shared by test modules (servers, upstreams, cases); no tests live here.

A test module imports from here, from ``tests/factories.py`` and the other support modules beside it,
never from another test module (``tests/test_architecture.py`` holds that).
"""
