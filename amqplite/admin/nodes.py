"""The node as RabbitMQ's ``/api/nodes`` describes it, and its health checks.

amqplite is one process, so there is one node. Monitoring tools and
Kubernetes probes written for RabbitMQ read these shapes; fields that have no
meaning here (Erlang processes, Mnesia) are left out rather than invented.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqplite import __version__

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView

NODE = "amqplite@localhost"
CLUSTER_NAME = "amqplite"
EXCHANGE_TYPES = [
    {"name": "direct", "description": "AMQP direct exchange", "enabled": True},
    {"name": "fanout", "description": "AMQP fanout exchange", "enabled": True},
    {"name": "topic", "description": "AMQP topic exchange", "enabled": True},
    {"name": "headers", "description": "AMQP headers exchange", "enabled": True},
    {"name": "x-federation-upstream", "description": "Federation upstream helper exchange",
     "internal_purpose": "federation", "enabled": True},
]
AUTH_MECHANISMS = [
    {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": True},
    {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": True},
]
#: what RabbitMQ plugins the admin API stands in for
PLUGINS = ["rabbitmq_management", "rabbitmq_prometheus"]


def _rss_bytes() -> int:
    """Resident memory now (/proc), else the peak (getrusage, kilobytes on Linux)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 0


def _fds_used() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def listener_ports(server: NodeView) -> list[int]:
    """Every TCP port this node listens on: AMQP, then the admin API."""
    ports = list(server.listen_ports)
    if server.admin_url:
        with contextlib.suppress(ValueError, IndexError):
            ports.append(int(server.admin_url.rstrip("/").rsplit(":", 1)[1]))
    return ports


def _memory(server: NodeView) -> dict[str, Any]:
    """The memory monitor's figures (RabbitMQ's names), or RSS and RAM without one."""
    m = server.memory
    if m is None:
        return {"mem_used": _rss_bytes(), "mem_limit": _physical_memory(), "mem_alarm": False}
    return {"mem_used": m.used if m.used is not None else _rss_bytes(), "mem_limit": m.limit,
            "mem_alarm": m.alarm}


def node_info(server: NodeView, alarms: list[dict[str, Any]]) -> dict[str, Any]:
    s = server.settings
    disk = server.disk
    fd_total = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return {
        "name": NODE,
        "type": "disc",
        "running": True,
        "being_drained": False,
        "uptime": int((time.time() - server.started_at) * 1000),
        "os_pid": str(os.getpid()),
        "processors": os.cpu_count() or 1,
        **_memory(server),
        "mem_calculation_strategy": "rss",
        "disk_free": disk.free if disk is not None else None,
        "disk_free_limit": disk.limit if disk is not None else None,
        "disk_free_alarm": any(a["resource"] == "disk" for a in alarms),
        "fd_used": _fds_used(),
        "fd_total": fd_total,
        "sockets_used": len(server.connections),
        "sockets_total": s.max_connections or fd_total,
        "partitions": [],
        "cluster_links": [],
        "rates_mode": "basic",
        "exchange_types": EXCHANGE_TYPES,
        "auth_mechanisms": AUTH_MECHANISMS,
        "enabled_plugins": PLUGINS,
        "applications": [{"name": "amqplite", "description": "AMQP 0-9-1 broker on SQLite",
                          "version": __version__}],
        "db_dir": str(Path(s.data_dir).resolve()),
        "log_files": [],
        "config_files": [],
    }

