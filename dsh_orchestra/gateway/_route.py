"""Routing runtimes through a gateway: which specs need one, and the spec a runtime then gets.

The one hook the layers above use is :func:`gateway_for`: it starts a gateway for a spec that
runs the real ``dsh`` (unless one already routes it) and yields the spec to launch instead.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from .._logging import MIN_SECRET_LENGTH, register_secrets
from ..runtime import RuntimeSpec
from ._cache import ResponseCache
from ._options import DEFAULT_API_KEY_ENV, DEFAULT_UPSTREAM, GatewayOptions
from ._server import Gateway

_LIVE: set[str] = set()  # base URLs of the gateways running in this process


def needs_gateway(spec: RuntimeSpec | None) -> bool:
    """True for a spec that runs the real ``dsh`` (bundled, or a ``dsh`` command) and is not
    routed through a gateway of this process already. The simulator calls no model."""
    if spec is None or spec.connect is not None or spec.base_url in _LIVE:
        return False
    return spec.command is None or spec.unpatched_dsh


def upstream_of(spec: RuntimeSpec, options: GatewayOptions) -> str:
    """``options.upstream``, else ``DEEPSEEK_BASE_URL`` as the spec or the environment had it,
    else the provider's default."""
    inherited = os.environ.get("DEEPSEEK_BASE_URL") if spec.inherit_env else None
    return options.upstream or spec.base_url or spec.env.get("DEEPSEEK_BASE_URL") or inherited or DEFAULT_UPSTREAM


def api_key_of(spec: RuntimeSpec, options: GatewayOptions) -> str | None:
    """The real key: the spec's ``api_key``, else ``options.api_key_env`` in the spec's env or ours."""
    name = options.api_key_env
    return spec.api_key or spec.env.get(name) or os.environ.get(name) or None


def routed(spec: RuntimeSpec, gateway: Gateway, *, api_key: str | None) -> RuntimeSpec:
    """``spec`` pointed at ``gateway``, with its token as the key (see :func:`routed_to`)."""
    return routed_to(spec, base_url=gateway.base_url, token=gateway.token, api_key_env=gateway.options.api_key_env,
                     api_key=api_key)


def routed_to(spec: RuntimeSpec, *, base_url: str, token: str, api_key_env: str = DEFAULT_API_KEY_ENV,
              api_key: str | None = None) -> RuntimeSpec:
    """``spec`` pointed at the gateway at ``base_url``, with ``token`` as the key. The key
    variables (``DEEPSEEK_API_KEY``, ``api_key_env``), and any variable (inherited or the
    spec's) whose value holds ``api_key`` (when known here and at least ``MIN_SECRET_LENGTH``
    characters long, as for the logs' redaction: a placeholder key such as ``"k"`` is in
    ``PATH``), are set empty in its env."""
    names = {DEFAULT_API_KEY_ENV, api_key_env}
    seen = {**(os.environ if spec.inherit_env else {}), **spec.env}
    env = dict(spec.env)
    secret = api_key if api_key is not None and len(api_key) >= MIN_SECRET_LENGTH else None
    for name, value in seen.items():
        if name in names or (secret is not None and secret in value):
            env[name] = ""
    env.pop("DEEPSEEK_BASE_URL", None)  # base_url below wins in the process environment
    return spec.evolve(env=env, base_url=base_url, api_key=token)


@asynccontextmanager
async def open_gateway(spec: RuntimeSpec, options: GatewayOptions | None = None) -> AsyncIterator[tuple[Gateway, RuntimeSpec]]:
    """Run a gateway for ``spec``'s runtimes for the block; yield it and the spec to launch.

    Raises:
        CacheError: ``options.cache`` cannot be opened or is not a cache.
        OSError: no loopback port could be bound.
    """
    options = options or GatewayOptions()
    api_key = api_key_of(spec, options)
    cache = ResponseCache(options.cache) if options.cache is not None else None
    gateway = Gateway(options, upstream=upstream_of(spec, options), api_key=api_key, cache=cache)
    register_secrets([v for v in (api_key, gateway.token) if v])
    failure: BaseException | None = None  # of the block: raised bare, after the gateway closed
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(gateway.run)
            _LIVE.add(gateway.base_url)
            try:
                yield gateway, routed(spec, gateway, api_key=api_key)
            except BaseException as exc:  # noqa: B036 - re-raised below, outside the nursery
                failure = exc
            finally:
                _LIVE.discard(gateway.base_url)
                nursery.cancel_scope.cancel()
    finally:
        if cache is not None:
            cache.close()
    if failure is not None:
        raise failure


@asynccontextmanager
async def gateway_for(spec: RuntimeSpec | None, options: GatewayOptions | None) -> AsyncIterator[tuple[Gateway | None, RuntimeSpec | None]]:
    """The narrow hook: with ``options`` (not None) and a spec that needs one, a gateway runs
    for the block and the routed spec is yielded; otherwise ``(None, spec)``."""
    if options is None or spec is None or not needs_gateway(spec):
        yield None, spec
        return
    async with open_gateway(spec, options) as (gateway, spec_routed):
        yield gateway, spec_routed
