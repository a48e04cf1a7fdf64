"""Where the Spark driver lives relative to its executors: loopback for a local session or a cluster
on this host, an address the executors can reach for a cluster elsewhere.

``spark: {spark.master: spark://host:7077, spark.driver.host: <this host's address>,
spark.driver.bindAddress: 0.0.0.0}`` in the config; see docs/deploy.md.
"""

from __future__ import annotations

from urllib.parse import urlsplit

MASTER = "spark.master"
DRIVER_HOST = "spark.driver.host"
BIND_ADDRESS = "spark.driver.bindAddress"
LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", "[::1]"}


def master_hosts(master: str) -> list[str]:
    """The hosts of a ``spark://h1:p1,h2:p2`` or ``k8s://https://h:p`` master; none for ``local[...]``."""
    if master.startswith("local"):
        return []
    if master.startswith("k8s://"):
        return [urlsplit(master.removeprefix("k8s://")).hostname or master]
    if master.startswith("spark://"):
        return [part.rsplit(":", 1)[0] for part in master.removeprefix("spark://").split(",")]
    return [master]  # yarn and the like: the executors are elsewhere


def is_loopback(host: str) -> bool:
    return host in _LOOPBACK_NAMES or host.startswith("127.")


def executors_elsewhere(master: str) -> bool:
    """True when the executors may run on another machine than the driver."""
    hosts = master_hosts(master)
    return bool(hosts) and not all(is_loopback(h) for h in hosts)


def driver_address(settings: dict[str, str]) -> dict[str, str]:
    """The driver's advertised host and bind address for ``settings`` (the config's ``spark:``).

    Loopback unless the executors may be elsewhere; then whatever the config says, else nothing
    (Spark advertises this machine's host name and binds to it).
    """
    master = settings.get(MASTER, "local[*]")
    if executors_elsewhere(master):
        return {k: settings[k] for k in (DRIVER_HOST, BIND_ADDRESS) if k in settings}
    return {DRIVER_HOST: settings.get(DRIVER_HOST, LOOPBACK), BIND_ADDRESS: settings.get(BIND_ADDRESS, LOOPBACK)}


def cluster_problems(settings: dict[str, str]) -> list[str]:
    """A driver on loopback cannot be reached by executors on another machine."""
    master = settings.get(MASTER, "local[*]")
    host = settings.get(DRIVER_HOST)
    if executors_elsewhere(master) and host is not None and is_loopback(host):
        return [
            f'spark.{DRIVER_HOST}: "{host}" is a loopback address, but spark.master "{master}" runs executors on '
            "other machines, which could not reach the driver; set it to an address of this machine they can "
            f"reach (and {BIND_ADDRESS} to 0.0.0.0 or that address)"
        ]
    return []
