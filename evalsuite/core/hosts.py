"""Where a request, and the credential it carries, may go: this machine, or a host the user named.

evalsuite sends $VLLM_API_KEY to an attached server (`engine.base_url`), MLflow sends
$MLFLOW_TRACKING_TOKEN (or a user and password) to its tracking server (`tracking.uri`), Ray sends
its token to a cluster (`scheduler.address`). A config may come from a pull request or a web page,
a run folder from anyone: a host other than loopback is reached only where the config's
`allow_hosts` (or the user's own flag or environment) names it, exactly.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1, ::1, localhost"
# hostnames (RFC 1123 labels) and IP addresses; no wildcard: each host is named in full
HOST = re.compile(r"(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?")
# tracking URI schemes that name a server on the network (MLflow's REST API, its database stores); the
# others name a local file (sqlite, file, a bare path) or the user's own profile (databricks, uc)
NETWORK_SCHEMES = ("http", "https", "postgresql", "mysql", "mssql")


def normal_host(host: str) -> str | None:
    """`host` as allow_hosts compares it (lowercase, an IPv6 address without brackets); None where it
    is neither a hostname nor an IP address."""
    text = host.strip().lower().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.rstrip(".") if HOST.fullmatch(text) else None


def is_loopback(host: str) -> bool:
    text = normal_host(host) or ""
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str | None:
    """The host a URL names (http://HOST:PORT/...), normalised; None where it names none."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return normal_host(host) if host else None


def tracking_host(uri: str) -> str | None:
    """The server a tracking URI reaches over the network; None for a local store or a profile."""
    scheme = urlsplit(uri).scheme.split("+", 1)[0].lower()
    return url_host(uri) if scheme in NETWORK_SCHEMES else None

# Ray's switch for a head it starts itself: "0" makes Ray take 127.0.0.1 as this node's address, so its GCS,
# raylet, object store and workers listen on loopback only (its default on macOS and Windows); Ray's
# default elsewhere is every interface.
RAY_LOOPBACK_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
