"""The recall store: per tenant, bounded in bytes, expiring (``history_proxy.pipeline.recall``)."""

from __future__ import annotations

from history_proxy.pipeline.recall import MemoryRecallStore


def test_a_tenant_reads_only_what_it_put() -> None:
    store = MemoryRecallStore()
    store.put("a", "h", "text")
    store.put(None, "g", "open")
    assert store.get("a", "h") == "text"
    assert store.get("b", "h") is None and store.get(None, "h") is None
    assert store.get(None, "g") == "open" and store.get("a", "g") is None


def test_the_recall_store_is_bounded_in_bytes_per_tenant_and_in_all() -> None:
    store = MemoryRecallStore(max_bytes=10_000, max_tenant_bytes=4_000)
    for k in range(20):
        store.put("a", f"h{k}", "x" * 1000)
        store.put(f"t{k}", "h", "y" * 900)
        assert store.tenant_bytes("a") <= 4_000 and store.bytes <= 10_000
    assert store.get("a", "h19") is not None and store.get("a", "h0") is None
    store.put("a", "huge", "z" * 5_000)  # over a tenant's share: not held
    assert store.get("a", "huge") is None


def test_the_recall_store_forgets_after_its_ttl() -> None:
    now = [0.0]
    store = MemoryRecallStore(ttl_s=10, clock=lambda: now[0])
    store.put("a", "h", "text")
    now[0] = 9.0
    assert store.get("a", "h") == "text"  # a read renews it
    now[0] = 18.0
    assert store.get("a", "h") == "text"
    now[0] = 40.0
    assert store.get("a", "h") is None and store.bytes == 0
