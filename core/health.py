"""The health and metrics HTTP server (``SELFMIND_METRICS_PORT``), over aiohttp.

Routes:

- ``GET /healthz``: 200 when :class:`core.metrics.Readiness` is ready (store open and
  platform connected), else 503; the JSON body is ``Readiness.report()`` either way, e.g.
  ``{"ready": false, "not_ready": ["platform"], "store": {"open": true}, "platform": {...}}``.
- ``GET /metrics``: the process's registry in the Prometheus text format
  (``prometheus_client.generate_latest``, content type ``CONTENT_TYPE_LATEST``).
- anything else: 404.

Slack's HTTP mode mounts :func:`healthz_handler` on its own port as well, over the same
readiness.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

from aiohttp import web

from core.errors import ConfigError
from core.metrics import Metrics, Readiness

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def healthz_handler(readiness: Readiness) -> Handler:
    """``GET /healthz``: 200 ready / 503 not ready, with ``readiness.report()`` as JSON."""

    async def healthz(request: web.Request) -> web.StreamResponse:
        report = readiness.report()
        return web.json_response(report, status=200 if report["ready"] else 503)

    return healthz


def metrics_handler(metrics: Metrics) -> Handler:
    """``GET /metrics``: the Prometheus text format of ``metrics.registry`` (404 without)."""

    async def serve_metrics(request: web.Request) -> web.StreamResponse:
        if metrics.registry is None:
            raise web.HTTPNotFound()
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return serve_metrics


class HealthServer:
    """A running ``/healthz`` + ``/metrics`` server; ``port`` is the bound port."""

    def __init__(self, runner: web.AppRunner, port: int) -> None:
        self._runner = runner
        self.port = port

    @classmethod
    async def start(
        cls, *, host: str, port: int, readiness: Readiness, metrics: Metrics
    ) -> HealthServer:
        """Listen on ``host:port`` (0 picks a free port).

        Raises ``ConfigError`` naming ``SELFMIND_METRICS_PORT`` when it cannot listen (port
        in use, no permission, unknown host).
        """
        app = web.Application()
        app.add_routes(
            [
                web.get("/healthz", healthz_handler(readiness)),
                web.get("/metrics", metrics_handler(metrics)),
            ]
        )
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConfigError(
                f"SELFMIND_METRICS_PORT: cannot listen on {host}:{port} ({reason}); "
                "choose a free port or stop what holds it"
            ) from None
        bound = int(runner.addresses[0][1])
        logger.info("health and metrics on http://%s:%d (/healthz, /metrics)", host, bound)
        return cls(runner, bound)

    async def close(self) -> None:
        """Stop listening."""
        await self._runner.cleanup()
