"""The built-in mock upstream: fake OpenAI and Anthropic APIs whose answers say what they received.

The server starts it (:class:`history_proxy.mock.server.MockUpstreamServer`) when an upstream's ``base_url``
is ``mock://``; ``history-proxy mock`` serves it alone. :mod:`history_proxy.mock.upstream` answers chat
completions, :mod:`history_proxy.mock.surfaces` Responses and Messages, :mod:`history_proxy.mock.strict` refuses what
the real APIs refuse, :mod:`history_proxy.mock.cache` reports prompt-cache reads, and :mod:`history_proxy.mock.common`
holds what they share.

Whether the mock may reuse the proxy's own adapters: only to *describe* what it received (the
``mock: received ...`` text and the answer ids read the body through
:func:`history_proxy.surfaces.responses.to_view` / :func:`history_proxy.surfaces.messages.to_view`, so the text
reads alike on every API). Whether a request is *valid* is judged by :mod:`history_proxy.mock.strict`,
written from the APIs' documented rules without the proxy's adapters, checks or validators: a test
oracle that shared the adapters' code would accept what the adapters wrongly build. A new check of
validity goes in ``strict``, never through an adapter. The one exception is ``--messages-profile honour``
(:mod:`history_proxy.mock.profiles`), which applies ``context_management`` with the proxy's own edit
modules: it stands in for an upstream that applies them, so the proxy's ``native`` mode (which applies
nothing) can be tested; the edits themselves are tested against the spec in tests/surfaces/.
"""
