"""ApiVersions (18): the API keys and version ranges this broker answers."""

from __future__ import annotations

from typing import Any

from crossbeat.broker.codec import api_versions_body
from crossbeat.broker.handlers.context import Context


async def handle(ctx: Context, req: Any) -> Any:
    return api_versions_body(ctx.version)
