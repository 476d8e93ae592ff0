"""The ``history-proxy`` command: serve, init, check, preview, replay, demo, schema, mock-upstream.

Every failure is one clear line on stderr and exit status 1 (argparse's usage errors: 2); a config
that does not validate prints every located error and nothing starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from history_proxy import __version__
from history_proxy.config.loading import json_schema, summary
from history_proxy.config.locate import CONFIG_ENV, STARTER_NAME
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity, match_role
from history_proxy.mock.profiles import PROFILES
from history_proxy.observability.logs import LOG_FORMATS
from history_proxy.serve import CommandError, cmd_init, cmd_serve, config_in_use, load, uvicorn_options

if TYPE_CHECKING:
    from history_proxy.core.cost import Pricing

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
CONFIG_DEFAULTS = (
    f"${CONFIG_ENV}, else ./{STARTER_NAME}, else ./config/default.yaml, else the packaged default config"
)


def cmd_check(args: argparse.Namespace) -> int:
    config, _ = load(args.path)
    print(summary(config) if args.path else f"{config_in_use(None)}: {summary(config)}")
    return 0


def _read_body(source: str) -> Any:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CommandError(f"{source}: not UTF-8 text") from None
    where = "stdin" if source == "-" else source
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{where}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None


def _add_caller_options(parser: argparse.ArgumentParser) -> None:
    """The config and the caller a chain is run for (``preview`` and ``replay``)."""
    parser.add_argument("--config", metavar="PATH", help=f"config file (default: {CONFIG_DEFAULTS})")
    parser.add_argument("--role", help="caller's role (default: the config's identity.default_role)")
    parser.add_argument("--agent", metavar="NAME", help="caller's agent name")
    parser.add_argument("--phase", metavar="ID", help="current phase id")
    parser.add_argument("--tenant", metavar="T", help="tenant whose chain applies")
    parser.add_argument("--api", choices=["chat", "responses", "messages"], help="default: detected")


def _caller(args: argparse.Namespace, config: Config) -> Identity:
    """The caller ``--role`` and friends name, read as the proxy reads the identity headers."""
    role, notes = match_role(args.role, config.policies.roles, config.identity.default_role)
    notes = notes if args.role else ()  # no --role is a choice here, not a missing header
    return Identity(
        role=role,
        agent=args.agent,
        phase=args.phase,
        tenant=args.tenant,
        notes=notes,
        role_sent=args.role if notes and args.role else None,
    )


def cmd_preview(args: argparse.Namespace) -> int:
    from history_proxy.core.tokens import TokenCounters
    from history_proxy.errors import ProxyError
    from history_proxy.pipeline.run import Pipeline
    from history_proxy.surfaces.shape import preview

    if args.file is None and sys.stdin.isatty():  # nothing piped in: say what to give, never wait
        raise CommandError(f"give a request body FILE, or pipe one in (FILE -)\n{args.usage.strip()}")
    config, _ = load(args.config)
    if not args.config:  # stdout is the JSON; which file shaped it goes to stderr
        print(f"history-proxy preview: {config_in_use(None)}", file=sys.stderr)
    body = _read_body(args.file or "-")
    pipeline = Pipeline(config, TokenCounters())
    try:
        shaped = asyncio.run(preview(pipeline, body, _caller(args, config), args.api))
    except ProxyError as exc:
        raise CommandError(f"the proxy would answer {exc.status_code}: {exc.message}") from None
    print(json.dumps({"body": shaped.body, "report": shaped.result.report}, indent=2, ensure_ascii=False))
    return 0


def _pricing(value: str | None) -> Pricing | None:
    """``--pricing``: a preset name, or a YAML/JSON file holding a pricing mapping."""
    from history_proxy.config.pricing import pricing_option

    try:
        return pricing_option(value) if value is not None else None
    except ValueError as exc:
        raise CommandError(str(exc)) from None


class _Splits:
    """The split files (``split.tsv``) of the folders ``replay --split`` looks in, each read once."""

    def __init__(self) -> None:
        self.read: dict[Path, dict[str, str] | None] = {}

    def of(self, folder: Path) -> dict[str, str] | None:
        from history_proxy.devtools.replay_split import SPLIT_FILE, SplitError, parse_split

        folder = folder.resolve()
        if folder not in self.read:
            path = folder / SPLIT_FILE
            try:
                self.read[folder] = (
                    parse_split(path.read_text(encoding="utf-8"), str(path)) if path.is_file() else None
                )
            except (OSError, UnicodeDecodeError, SplitError) as exc:
                raise CommandError(f"{path}: cannot read the split: {exc}") from None
        return self.read[folder]

    def half(self, file: Path) -> str | None:
        from history_proxy.devtools.replay_split import half_of

        resolved = file.resolve()
        for folder in resolved.parents:
            self.of(folder)
        return half_of(resolved, {k: v for k, v in self.read.items() if v is not None})


def _replay_paths(files: list[str], half: str | None) -> list[str]:
    """The FILE arguments with each folder expanded (its split file's conversations, else its ``*.json``)
    and, with ``--split``, only the conversations of that half."""
    from history_proxy.devtools.replay_split import SPLIT_FILE, in_half

    splits, out = _Splits(), []
    for file in files:
        path = Path(file)
        listed = splits.of(path) if path.is_dir() else None
        if path.is_dir() and listed is None and half is not None:
            raise CommandError(f"{file}: no {SPLIT_FILE} to take the {half} half from")
        if path.is_dir():
            out += (
                [str(path / p) for p in in_half(listed, half)]
                if listed
                else sorted(map(str, path.glob("*.json")))
            )
        elif half is None:
            out.append(file)
        else:
            side = splits.half(path)
            if side is None:
                raise CommandError(f"{file}: no {SPLIT_FILE} in its folder or above lists it")
            out += [file] if side == half else []
    if not out:
        raise CommandError(
            f"no conversation in the {half} half among the files" if half else "no FILE to replay"
        )
    return out


def _say_skipped(files: list[str], kept: dict[str, Any], tool_loops: int) -> None:
    """On stderr: the files ``--tool-loops N`` left out, and why (stdout stays the table or the JSON)."""
    skipped = [file for file in files if file not in kept]
    if not tool_loops or not skipped:
        return
    named = ", ".join(Path(file).name for file in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
    print(
        f"replay: skipped {len(skipped)} of {len(files)} files, not tool loops of {tool_loops} messages or "
        f"more with a tool call: {named}",
        file=sys.stderr,
    )


def _client_edits(value: str | None) -> list[dict[str, Any]] | None:
    """``--client-edits``: a JSON list of Messages context edits, or ``@FILE`` holding one."""
    if value is None:
        return None
    text = Path(value[1:]).read_text(encoding="utf-8") if value.startswith("@") else value
    try:
        edits = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"--client-edits: not JSON ({exc})") from None
    if isinstance(edits, dict):
        edits = edits.get("edits", edits.get("context_management", {}).get("edits"))
    if not isinstance(edits, list) or not all(isinstance(edit, dict) for edit in edits):
        raise CommandError(
            '--client-edits: give a JSON list of edits, e.g. \'[{"type": "clear_tool_uses_20250919"}]\''
        )
    return edits


def cmd_replay(args: argparse.Namespace) -> int:
    from history_proxy.core.tokens import TokenCounters
    from history_proxy.devtools.replay import ReplayError
    from history_proxy.devtools.replay_compare import chat_bodies, replay_files
    from history_proxy.devtools.replay_html import render_html
    from history_proxy.devtools.replay_render import many_totals, render_many, render_text
    from history_proxy.pipeline.run import Pipeline

    args.file = _replay_paths(args.file, args.split)
    if args.compare:
        return _compare(args)
    config, _ = load(args.config)
    identity = _caller(args, config)
    if args.html and len(args.file) > 1:
        raise CommandError("--html draws one conversation: give one FILE")
    tokens = TokenCounters()
    try:
        bodies = chat_bodies({file: _read_body(file) for file in args.file}, args.api, args.tool_loops)
        _say_skipped(args.file, bodies, args.tool_loops)
        edits = _client_edits(args.client_edits)
        results = replay_files(
            bodies, lambda: Pipeline(config, tokens), identity, _pricing(args.pricing), edits
        )
    except ReplayError as exc:
        raise CommandError(str(exc)) from None
    if not results:
        raise CommandError(f"no tool loop of {args.tool_loops} messages or more among the files")
    if len(args.file) > 1:
        if args.json:
            files = {name: r.to_json()["totals"] for name, r in results.items()}
            print(json.dumps({"files": files, "totals": many_totals(results)}, indent=2))
        else:
            print("".join(f"note: {note}\n" for note in identity.notes) + render_many(results))
        return 0
    result = next(iter(results.values()))
    if args.html:
        title = f"history-proxy replay: {Path(args.file[0]).name}, role {result.role}"
        try:
            Path(args.html).write_text(render_html(result, title), encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"{args.html}: cannot write: {exc.strerror or exc}") from None
    if args.json:
        print(
            json.dumps(
                {**result.to_json(), **({"notes": list(identity.notes)} if identity.notes else {})}, indent=2
            )
        )
    else:
        print("".join(f"note: {note}\n" for note in identity.notes) + render_text(result))
    if args.html:
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """``replay --compare CONFIG...``: every chain on the same conversations, under both pricings."""
    from history_proxy.core.tokens import TokenCounters
    from history_proxy.devtools.replay import ReplayError
    from history_proxy.devtools.replay_compare import chat_bodies, compare, render_compare
    from history_proxy.pipeline.run import Pipeline

    def chain(path: str) -> tuple[Callable[[], Pipeline], Identity]:
        config, _ = load(path)
        return (lambda: Pipeline(config, TokenCounters())), _caller(args, config)

    try:
        bodies = chat_bodies({file: _read_body(file) for file in args.file}, args.api, args.tool_loops)
        _say_skipped(args.file, bodies, args.tool_loops)
        chains = {path: chain(path) for path in args.compare}
        rows = compare(bodies, chains, _pricing(args.pricing), _client_edits(args.client_edits))
    except ReplayError as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        print(json.dumps({"conversations": len(bodies), "chains": [r.to_json() for r in rows]}, indent=2))
    else:
        print(render_compare(rows, len(bodies)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Send the packaged conversation through a running proxy as each role; print and draw the figures."""
    from history_proxy.devtools.demo import DEMO_ROLES, ProxyUnreachable, render_demo, run_demo
    from history_proxy.devtools.replay import ReplayError
    from history_proxy.devtools.replay_html import render_html

    roles = tuple(args.roles.split(",")) if args.roles else DEMO_ROLES
    pricing = _pricing(args.pricing)
    assert pricing is not None  # the option has a default
    try:
        runs = asyncio.run(run_demo(args.url, pricing, roles, os.environ.get("HISTORY_PROXY_DEMO_KEY")))
    except (ProxyUnreachable, ReplayError) as exc:
        raise CommandError(str(exc)) from None
    print(render_demo(runs, args.url))
    drawn = next((run for run in runs if run.role == args.html_role), runs[-1])
    title = f"history-proxy demo: tau-bench airline task 9, role {drawn.role}"
    try:
        Path(args.html).write_text(render_html(drawn.result, title), encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{args.html}: cannot write: {exc.strerror or exc}") from None
    print(
        f"\nwrote {args.html}: the {drawn.role}'s requests one by one, cost and evidence "
        "(open it in a browser; `history-proxy replay FILE --role R --html OUT` draws any conversation)"
    )
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_mock_upstream(args: argparse.Namespace) -> int:
    import uvicorn

    from history_proxy.mock.upstream import create_mock_app

    app = create_mock_app(
        chunks=args.chunks,
        chunk_delay_s=args.chunk_delay_ms / 1000,
        input_token_factor=args.input_token_factor,
        messages_profile=args.messages_profile,
    )
    print(f"history-proxy mock upstream on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **uvicorn_options())  # type: ignore[arg-type]
    return 0


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.1 <= value <= 10:
        raise argparse.ArgumentTypeError("must be between 0.1 and 10")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a TCP port (0-65535)")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _add_serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``serve`` subcommand and its options."""
    serve = commands.add_parser("serve", help="serve the proxy", description="Serve the proxy.")
    serve.add_argument("--config", metavar="PATH", help=f"config file (default: {CONFIG_DEFAULTS})")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8080, help="port to bind (default: 8080)")
    serve.add_argument("--workers", type=_positive, default=1, help="worker processes (default: 1)")
    serve.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="serve without auth.keys on a non-loopback host even though an upstream has its own api_key",
    )
    serve.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="(default: info)")
    serve.add_argument(
        "--mock",
        action="store_true",
        help="answer every request from the built-in mock upstream, offline (also: HISTORY_PROXY_MOCK=1); "
        "each answer carries x-history-mock: 1",
    )
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="one JSON object per log line, or text for humans (default: text on a terminal, else json)",
    )
    serve.set_defaults(handler=cmd_serve)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="history-proxy",
        description="OpenAI-compatible reverse proxy that shapes each agent's conversation history in flight.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_serve_parser(commands)

    init = commands.add_parser(
        "init",
        help="write a commented starter config",
        description="Write the default config, with its comments, to a file to edit (nothing else changes).",
    )
    init.add_argument(
        "path", nargs="?", default=STARTER_NAME, metavar="PATH", help=f"(default: {STARTER_NAME})"
    )
    init.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    init.set_defaults(handler=cmd_init)

    check = commands.add_parser("check", help="validate a config file", description="Validate a config file.")
    check.add_argument("path", nargs="?", metavar="PATH", help=f"config file (default: {CONFIG_DEFAULTS})")
    check.set_defaults(handler=cmd_check)

    preview = commands.add_parser(
        "preview",
        help="print a request body as it would be sent upstream, with its token report",
        description="Filter a chat, Responses or Messages body and print {body, report}. Nothing is sent anywhere.",
    )
    _add_caller_options(preview)
    preview.add_argument(
        "file", nargs="?", metavar="FILE|-", help="request body (default: stdin, when it is not a terminal)"
    )
    preview.set_defaults(handler=cmd_preview, usage=preview.format_usage())

    replay_ = commands.add_parser(
        "replay",
        help="replay a conversation as an agent grows it: tokens sent and prompt-cache reuse per request",
        description=(
            "Cut a conversation into the requests an agent sends while it grows (the history before "
            "each model answer), run the chain on each, and print per request the tokens unfiltered, the "
            "tokens sent and the share of sent tokens that repeat the previous request's prefix, then "
            "totals. Nothing is sent anywhere (a summarize filter shows its fallback)."
        ),
    )
    replay_.add_argument(
        "file",
        metavar="FILE",
        nargs="+",
        help="a chat, Responses or Messages body holding the whole conversation, or a folder of them; "
        "several: a line each, totals",
    )
    replay_.add_argument(
        "--pricing",
        metavar="openai|anthropic|FILE",
        help="prompt-cache prices to bill with (default: the routed upstream's pricing model)",
    )
    replay_.add_argument(
        "--tool-loops",
        type=int,
        default=0,
        metavar="N",
        help="replay only tool loops: conversations of N messages or more with a tool call (the cost target: 12)",
    )
    _add_caller_options(replay_)
    replay_.add_argument(
        "--client-edits",
        metavar="JSON|@FILE",
        help="apply a client's Messages context_management edits after the chain, as the proxy emulates "
        "them (a JSON list of edits, or @FILE; docs/replay.md)",
    )
    replay_.add_argument("--html", metavar="OUT", help="also write a self-contained HTML page with a chart")
    replay_.add_argument(
        "--compare",
        nargs="+",
        metavar="CONFIG",
        help="replay the files through each config's chain and print the cost/evidence frontier",
    )
    replay_.add_argument(
        "--split",
        choices=["tune", "held-out"],
        help="replay one half of a corpus split: FILE may be a folder holding split.tsv (docs/replay.md)",
    )
    replay_.add_argument(
        "--json", action="store_true", help="print JSON (steps and totals) instead of a table"
    )
    replay_.set_defaults(handler=cmd_replay)

    demo = commands.add_parser(
        "demo",
        help="send a recorded agent conversation through a running proxy as each role: what shaping does",
        description=(
            "Send tau-bench's airline task 9 (62 messages, 31 requests as the agent grew it) through the "
            "running proxy's /v1/history/preview as each role, and print tokens, cost with prompt caching "
            "and evidence kept with its context, unfiltered beside shaped; write the replay page. Nothing "
            "goes to a model except a summarize filter's summaries. A proxy key, when the proxy needs one: "
            "$HISTORY_PROXY_DEMO_KEY."
        ),
    )
    demo.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the running proxy (default: http://127.0.0.1:8080)"
    )
    demo.add_argument("--roles", metavar="R,R", help="roles to send as (default: the default config's five)")
    demo.add_argument(
        "--pricing",
        default="openai",
        metavar="openai|anthropic|FILE",
        help="prompt-cache prices to bill with (default: openai, the conversation's model's)",
    )
    demo.add_argument(
        "--html", default="demo.html", metavar="OUT", help="the replay page (default: demo.html)"
    )
    demo.add_argument(
        "--html-role", default="worker", metavar="R", help="the role it draws (default: worker)"
    )
    demo.set_defaults(handler=cmd_demo)

    schema = commands.add_parser("schema", help="print the config file's JSON Schema")
    schema.set_defaults(handler=cmd_schema)

    mock = commands.add_parser(
        "mock-upstream",
        help="run the built-in fake OpenAI upstream",
        description="Run the built-in OpenAI-compatible fake upstream; its answers state what it received.",
    )
    mock.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    mock.add_argument("--port", type=_port, default=8081, help="port to bind (default: 8081)")
    mock.add_argument("--chunks", type=_positive, default=5, help="pieces per streamed answer (default: 5)")
    mock.add_argument(
        "--chunk-delay-ms",
        type=_non_negative,
        default=0.0,
        metavar="MS",
        help="pause between pieces (default: 0)",
    )
    mock.add_argument(
        "--messages-profile",
        choices=PROFILES,
        default="lenient",
        help="unknown top-level Messages fields: accepted (lenient), refused with Anthropic's 400 (strict), "
        "or context_management applied as Anthropic applies it (honour) (default: lenient)",
    )
    mock.add_argument(
        "--input-token-factor",
        type=_ratio,
        default=1.0,
        metavar="F",
        help="report input tokens times F, as a provider with another tokenizer would (default: 1)",
    )
    mock.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="(default: info)")
    mock.set_defaults(handler=cmd_mock_upstream)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 1
    try:
        status: int = args.handler(args)
        return status
    except CommandError as exc:
        print(f"history-proxy {args.command}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly, as other CLI tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        print(f"history-proxy {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1
