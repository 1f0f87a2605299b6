"""The network interface Horovod uses and binds to: loopback unless ROSSMANN_HOROVOD_NICS names the cluster's one.

horovod.spark.run's `nics` only chooses which addresses its services advertise and which interface Gloo's
collectives use: its driver service, the Spark tasks' task services and the Gloo rendezvous (an unauthenticated HTTP
server) still bind every address, because horovod.runner.util.network.find_port binds ('', port). So the train job
also replaces find_port, in the driver and (through the Spark task function) in each executor, with one that binds
the chosen interface's IPv4 address on that host. Gloo itself binds the interface named in HOROVOD_GLOO_IFACE,
which Horovod sets from `nics`.
"""
from __future__ import annotations

import logging
import socket
from typing import Any, Callable

NICS_ENV = "ROSSMANN_HOROVOD_NICS"
LOOPBACK = "loopback"   # the setting's default: this host's loopback interface (embedded stack, one machine)

log = logging.getLogger("rossmann.train")


def interface_addresses() -> dict[str, list[str]]:
    """{interface name: its IPv4 addresses} on this host."""
    import psutil

    return {name: [a.address for a in addresses if a.family == socket.AF_INET]
            for name, addresses in psutil.net_if_addrs().items()}


def resolve_nic(setting: str, interfaces: dict[str, list[str]] | None = None) -> tuple[str, str]:
    """(interface name, its IPv4 address on this host) for a setting: "loopback" or one interface name. One only:
    Gloo uses a single interface, and the services must bind the address Gloo's peers are told."""
    interfaces = interface_addresses() if interfaces is None else interfaces
    name = setting.strip() or LOOPBACK
    if name == LOOPBACK:
        name = next((n for n, addresses in sorted(interfaces.items())
                     if any(address.startswith("127.") for address in addresses)), "")
    if not interfaces.get(name):
        raise ValueError(f"{NICS_ENV}={setting!r}: no interface {name!r} with an IPv4 address on "
                         f"{socket.gethostname()} (interfaces: {sorted(n for n, a in interfaces.items() if a)}); "
                         f"name the private network's interface, or {LOOPBACK!r} on one machine")
    return name, interfaces[name][0]


def bound_find_port(address: str) -> Callable[[Callable], tuple[Any, int]]:
    """horovod.runner.util.network.find_port, binding `address` (port chosen by the OS) instead of every address."""
    def find_port(server_factory):
        server = server_factory((address, 0))
        return server, server.server_address[1]
    return find_port


def bind_horovod_services(address: str) -> None:
    """Make every Horovod service started from this process bind `address` only."""
    import horovod.runner.common.util.network as service_network
    import horovod.runner.http.http_server as http_server
    import horovod.runner.util.network as util_network

    find_port = bound_find_port(address)
    # Both modules imported find_port by name: each keeps its own reference, so each is replaced.
    for module in (util_network, service_network, http_server):
        module.find_port = find_port


def bind_tasks_too(nics_setting: str) -> None:
    """Wrap horovod.spark.run's Spark task function so each task binds its own host's address of the interface
    before Horovod starts its task service there (the wrapper travels to the executors with the task)."""
    import horovod.spark.runner as spark_runner

    make_mapper = getattr(spark_runner._make_mapper, "__wrapped__", spark_runner._make_mapper)

    def make_bound_mapper(*args, **kwargs):
        mapper = make_mapper(*args, **kwargs)

        def bound_mapper(index, iterator):
            from rossmann_jobs.training.network import bind_horovod_services, resolve_nic

            bind_horovod_services(resolve_nic(nics_setting)[1])
            return mapper(index, iterator)
        return bound_mapper

    make_bound_mapper.__wrapped__ = make_mapper
    spark_runner._make_mapper = make_bound_mapper


def restrict_horovod(nics_setting: str) -> set[str]:
    """Bind the driver's and every task's Horovod services to the setting's interface; returns the `nics` to pass
    to horovod.spark.run (which makes Gloo use that interface)."""
    name, address = resolve_nic(nics_setting)
    bind_horovod_services(address)
    bind_tasks_too(nics_setting)
    log.info("Horovod binds interface %s only (%s on the driver; %s=%r)", name, address, NICS_ENV, nics_setting)
    return {name}
