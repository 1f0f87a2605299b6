"""Horovod's services bind one interface: the choice of interface, and Horovod's own servers before and after."""
from __future__ import annotations

import os

import pytest

from listeners import listening, reachable_from_outside
from rossmann_jobs.training import network

INTERFACES = {"lo": ["127.0.0.1"], "eth0": ["10.0.3.7"], "docker0": []}


def test_the_setting_names_one_interface_and_loopback_is_the_default():
    assert network.resolve_nic("loopback", INTERFACES) == ("lo", "127.0.0.1")
    assert network.resolve_nic("", INTERFACES) == ("lo", "127.0.0.1")
    assert network.resolve_nic("eth0", INTERFACES) == ("eth0", "10.0.3.7")
    for bad in ("wlan0", "docker0", "eth0,lo"):   # unknown, no IPv4 address, more than one
        with pytest.raises(ValueError, match="ROSSMANN_HOROVOD_NICS"):
            network.resolve_nic(bad, INTERFACES)


def start_services():
    """A Horovod service (as the driver and each task start) and the Gloo rendezvous server; returns a stopper."""
    from horovod.runner.common.util import secret
    from horovod.runner.common.util.network import BasicService
    from horovod.runner.http.http_server import RendezvousServer

    service = BasicService("probe", secret.make_secret_key(), None)
    rendezvous = RendezvousServer()
    port = rendezvous.start()

    def stop():
        service.shutdown()
        rendezvous.stop()
    return {service.get_port(), port}, stop


def test_horovods_servers_listen_on_every_address_unless_bound(horovod_binding_restored):
    # Negative control: as horovod.spark.run starts them, they listen on every address, and the check sees it.
    ports, stop = start_services()
    try:
        exposed = {port for _, port, _ in reachable_from_outside(listening(os.getpid()))}
        assert ports <= exposed
    finally:
        stop()
    network.bind_horovod_services("127.0.0.1")
    ports, stop = start_services()
    try:
        mine = [s for s in listening(os.getpid()) if s[1] in ports]
        assert {s[1] for s in mine} == ports and not reachable_from_outside(mine)
    finally:
        stop()
