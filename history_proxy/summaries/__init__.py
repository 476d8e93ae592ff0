"""Summaries written once per span: single-flight cache and store (memory or Redis)."""
