"""Prometheus scrape endpoints (see :mod:`amqplite.admin.metrics`)."""

from __future__ import annotations

import functools

import trio

from amqplite.admin import metrics
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response


class MetricsHandlers(HandlerBase):
    """Routes tagged ``metrics``: snapshot on the loop, render in a thread."""

    async def _scrape(self, per_object: bool) -> Response:
        snap = metrics.snapshot(self.server)
        text = await trio.to_thread.run_sync(functools.partial(metrics.render, snap, per_object))
        return Response(text, content_type=metrics.CONTENT_TYPE)

    async def metrics(self, req: Request) -> Response:
        return await self._scrape(per_object=False)

    async def metrics_per_object(self, req: Request) -> Response:
        return await self._scrape(per_object=True)
