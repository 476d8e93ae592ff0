"""deploy/: the Kubernetes manifests, the compose file, the alert rules and the Grafana dashboard.

Offline: ``kubectl kustomize`` builds the base and the Redis overlay and every object validates against
the Kubernetes schemas (``kubernetes-validate``, strict); ``promtool`` checks and unit-tests the alert
rules; every metric the dashboard and the rules query is one the proxy exports. And live: a real
Prometheus scrapes three ``history-proxy serve`` replicas, and every dashboard panel's query returns
data. Tools that are missing skip their test with the reason (``.ci/run`` installs them).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import openai
import pytest
import redis
import yaml
from openai.types.chat import ChatCompletionMessageParam

from history_proxy.config.loading import load_config
from history_proxy.server.app import create_app
from history_proxy.server.inflight import worst_case_memory
from tests.support.redis_server import RedisServer, redis_server
from tests.support.serve_process import REPO, free_port, start

DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "history-proxy.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
KUBERNETES_VERSION = "1.30.0"
METRIC = re.compile(r"\bhistory_proxy_[a-z_]+")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
FLEET_KEY = "proxy-key-of-team-a-0123456789"

__all__ = ["redis_server"]  # the fixture, used by name below


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (.ci/run installs it from Debian)")
    return found


def dashboard_queries() -> dict[str, list[str]]:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    return {panel["title"]: [target["expr"] for target in panel["targets"]] for panel in panels}


def exported_metrics() -> set[str]:
    """Every metric family an app on the default config registers (its /metrics, before any request)."""
    app = create_app(load_config(REPO / "config" / "default.yaml"))
    return {family.name for family in app.state.proxy.metrics.registry.collect()}


def family_of(sample: str) -> str:
    for suffix in SUFFIXES:
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def test_every_metric_the_dashboard_and_the_alerts_query_is_one_the_proxy_exports() -> None:
    text = ALERTS.read_text(encoding="utf-8") + json.dumps(dashboard_queries())
    queried = {family_of(name) for name in METRIC.findall(text)}
    assert queried and queried <= exported_metrics(), queried - exported_metrics()


def test_promtool_checks_and_unit_tests_the_alert_rules() -> None:
    promtool = tool("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts.test.yaml"], cwd=ALERTS.parent, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def kustomize(path: Path) -> list[dict[str, Any]]:
    built = subprocess.run([tool("kubectl"), "kustomize", str(path)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


@pytest.mark.parametrize("path", ["base", "overlays/redis"])
def test_the_kustomizations_build_and_every_object_validates_against_the_kubernetes_schemas(
    path: str,
) -> None:
    objects = kustomize(DEPLOY / "kubernetes" / path)
    kinds = sorted(obj["kind"] for obj in objects)
    for obj in objects:
        if obj["kind"] == "ServiceMonitor":  # a CRD: no schema in kubernetes-validate
            assert (
                obj["apiVersion"] == "monitoring.coreos.com/v1"
                and obj["spec"]["endpoints"][0]["port"] == "http"
            )
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    for kind in (
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "PodDisruptionBudget",
    ):
        assert kind in kinds
    proxy = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "history-proxy")
    container = proxy["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"readinessProbe", "livenessProbe", "startupProbe", "resources"} <= set(container)
    redis_urls = [env.get("value") for env in container["env"] if env["name"] == "REDIS_URL"]
    assert redis_urls == (["redis://history-proxy-redis:6379/0"] if path == "overlays/redis" else [])


def test_the_packaged_configs_of_the_deployments_load() -> None:
    config = load_config(DEPLOY / "kubernetes" / "base" / "config.yaml")
    assert config.limits.redis_url is None  # REDIS_URL unset: each replica counts alone


def test_the_cluster_runs_this_version_with_the_default_configs_upstreams_and_chains() -> None:
    """Issue 35, M4: what the README and config/default.yaml promise is what the cluster serves."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    base = DEPLOY / "kubernetes" / "base"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text(encoding="utf-8"))
    assert [image["newTag"] for image in kustomization["images"]] == [version]
    cluster = load_config(base / "config.yaml", env={})
    default = load_config(REPO / "config" / "default.yaml", env={})
    assert cluster.policies == default.policies, "the role chains of config/default.yaml, planner included"
    assert (cluster.routes, cluster.identity) == (default.routes, default.identity)
    assert {
        name: (u.base_url, u.api, u.cache_control, u.is_mock) for name, u in cluster.upstreams.items()
    } == {name: (u.base_url, u.api, u.cache_control, u.is_mock) for name, u in default.upstreams.items()}
    service = yaml.safe_load((base / "service.yaml").read_text(encoding="utf-8"))
    (port,) = [p["port"] for p in service["spec"]["ports"]]
    operations = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    assert f"Service (port {port} to the pods' 8080" in operations


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity)).groups()  # type: ignore[union-attr]
    return int(number) * units.get(unit, 1)


def test_the_worst_case_memory_of_the_mounted_config_fits_the_memory_limit_of_each_deployment() -> None:
    """Issue 34, R7: a replica admits no more request bytes than its memory limit holds."""
    limits = load_config(DEPLOY / "kubernetes" / "base" / "config.yaml").limits
    deployment = yaml.safe_load(
        (DEPLOY / "kubernetes" / "base" / "deployment.yaml").read_text(encoding="utf-8")
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    workers = int(next(env["value"] for env in container["env"] if env["name"] == "WORKERS"))
    budget = limits.max_inflight_bytes
    worst = worst_case_memory(limits, budget)
    assert worst is not None, "nothing bounds the bytes in flight: set limits.max_inflight_bytes"
    assert worst * workers <= _bytes(container["resources"]["limits"]["memory"]), worst
    assert budget is not None and budget >= limits.max_body_bytes  # one largest body is still admitted
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    (mounted,) = [v.split(":")[0] for v in compose["x-proxy"]["volumes"] if ":/config/config.yaml" in v]
    fleet = load_config(
        DEPLOY / mounted, env={"REDIS_URL": "redis://redis:6379/0", "PROXY_KEY_TEAM_A": "k"}
    ).limits
    fleet_worst = worst_case_memory(fleet, fleet.max_inflight_bytes)
    assert fleet_worst is not None, "the config compose mounts bounds no bytes in flight"
    assert fleet_worst <= _bytes(compose["x-proxy"]["mem_limit"])  # one worker per compose replica


def test_the_compose_file_mounts_files_that_exist_and_scrapes_the_replicas_nginx_balances() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert {"proxy-1", "proxy-2", "proxy-3", "redis", "prometheus", "grafana", "lb"} <= set(services)
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (DEPLOY / source).exists(), source
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yaml").read_text(encoding="utf-8"))
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    balanced = re.findall(r"server (\S+) ", (DEPLOY / "compose" / "nginx.conf").read_text(encoding="utf-8"))
    assert sorted(targets) == sorted(balanced) == [f"proxy-{n}:8080" for n in (1, 2, 3)]


def fleet_config(deployment: str) -> str:
    """The config a deployment that sets ``REDIS_URL`` mounts: the compose replicas' volume, or the
    Redis overlay's ConfigMap as kustomize builds it."""
    if deployment == "compose":
        proxy = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))["services"]["proxy-1"]
        assert proxy["environment"]["REDIS_URL"]
        mounted = next(v.split(":")[0] for v in proxy["volumes"] if ":/config/config.yaml" in v)
        return (DEPLOY / str(mounted)).read_text(encoding="utf-8")
    objects = kustomize(DEPLOY / "kubernetes" / deployment)
    proxy = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "history-proxy")
    env = {e["name"] for e in proxy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "REDIS_URL" in env and "PROXY_KEY_TEAM_A" in env
    maps = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("history-proxy-config")
    ]
    assert len(maps) == 1
    return str(maps[0]["data"]["config.yaml"])


@pytest.mark.parametrize("deployment", ["compose", "overlays/redis"])
def test_a_fleet_that_sets_redis_url_counts_its_tenants_and_keeps_its_summaries_in_redis(
    deployment: str, redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(fleet_config(deployment), encoding="utf-8")
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("PROXY_KEY_TEAM_A", FLEET_KEY)
    config = load_config(path)
    assert config.auth.keys and config.limits.max_concurrent_per_tenant is not None
    assert config.limits.per_tenant.requests_per_minute is not None
    assert config.limits.redis_url is not None and config.summary_cache.backend == "redis"
    base = load_config(DEPLOY / "kubernetes" / "base" / "config.yaml")
    same = "the fleet's config serves what the base config serves (keep them in step)"
    assert (config.upstreams, config.routes, config.identity) == (
        base.upstreams,
        base.routes,
        base.identity,
    ), same
    assert config.policies.global_ == base.policies.global_, same
    assert {
        r: c for r, c in config.policies.roles.items() if r in base.policies.roles
    } == base.policies.roles, same
    turns = [
        {"role": role, "content": f"{role} turn {n}"} for n in range(8) for role in ("user", "assistant")
    ]
    body = {"model": "gpt-4o", "messages": [*turns, {"role": "user", "content": "and now?"}]}
    # offline: the built-in mock stands in for the providers
    with started(
        "serve", "--config", str(path), "--mock", log=tmp_path / "serve.log", ready_path="/healthz"
    ) as server:
        anonymous = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
        keyed = httpx.post(
            f"{server.url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {FLEET_KEY}", "x-agent-role": "planner"},
            timeout=30,
        )
    assert anonymous.status_code == 401
    assert keyed.status_code == 200, keyed.text
    store = redis.Redis(port=redis_server.port, decode_responses=True)
    assert store.keys("history-proxy:limits:tenant:team-a:*")  # the tenant's rates, shared
    assert store.keys("history-proxy:summary:*")  # the planner's summary, written once for the fleet


# --- a real Prometheus scraping three replicas -------------------------------------------------------


def prometheus_config(folder: Path, ports: list[int]) -> Path:
    """deploy/prometheus/prometheus.yaml with the replicas on loopback and a 1 s scrape."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yaml").read_text(encoding="utf-8"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(ALERTS)]
    config["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{port}" for port in ports]}]
    path = folder / "prometheus.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def traffic(url: str) -> None:
    """Every role of the default config, each surface, streamed and not, twice (so caches are read),
    and one body that is not JSON (a 400)."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    # the global chain strips the key-like string (tokens removed by remove_regex)
    history: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "list the files; my key is sk-abcdefghijklmnopqrstuvwxyz0123"}
    ]
    for role in ("orchestrator", "manager", "worker", "planner", "default"):
        for stream in (False, True):
            answer = client.chat.completions.create(
                model="gpt-4o", messages=history, stream=stream, extra_headers={"X-Agent-Role": role}
            )
            if stream:
                list(answer)
    for _ in range(2):
        client.responses.create(model="gpt-4o", input="hello", instructions="be brief")
        httpx.post(
            f"{url}/v1/messages",
            json={"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert httpx.post(f"{url}/v1/chat/completions", content=b"{not json").status_code == 400


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    folder = tmp_path_factory.mktemp("replicas")
    with ExitStack() as stack:
        urls = []
        for n in range(3):
            server = stack.enter_context(
                started("serve", "--mock", log=folder / f"replica-{n}.log", ready_path="/healthz")
            )
            urls.append(server.url)
        yield urls


started = contextmanager(start)


# Panels whose series only exist once something went wrong (or a request overflowed its window).
ONLY_ON_TROUBLE = {
    "Overflow retries (requests refused as too long)",
    "Re-fetches by role (a tool call repeating one whose output the chain hid)",
}


def test_a_real_prometheus_scrapes_three_replicas_and_every_dashboard_panel_has_data(
    replicas: list[str], tmp_path: Path
) -> None:
    binary = tool("prometheus")
    for url in replicas:
        traffic(url)
    port = free_port()
    config = prometheus_config(tmp_path, [int(url.rsplit(":", 1)[1]) for url in replicas])
    with (tmp_path / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v1"
    try:

        def query(expr: str) -> list[Any]:
            answer = httpx.get(f"{api}/query", params={"query": expr}, timeout=5).json()
            assert answer["status"] == "success", answer
            return list(answer["data"]["result"])

        deadline = time.monotonic() + 60
        while True:
            try:
                up = query('sum(up{job="history-proxy"})')
                if up and float(up[0]["value"][1]) == 3 and len(query("history_proxy_requests_total")) >= 3:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text(errors="replace")[
                -2000:
            ]
            time.sleep(0.5)
        time.sleep(2.5)  # a few scrapes, so rate() has two samples of every series
        empty = {
            title for title, exprs in dashboard_queries().items() if not any(query(expr) for expr in exprs)
        }
        instances = query("count by (instance) (history_proxy_requests_total)")
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert empty <= ONLY_ON_TROUBLE, sorted(empty - ONLY_ON_TROUBLE)
    assert len(instances) == 3  # each replica is its own target
