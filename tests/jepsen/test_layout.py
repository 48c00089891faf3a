"""The run's layout without starting anything: three etcd members, each in a namespace of
its own, and every nsqd and nsqlookupd told of all three."""

from __future__ import annotations

from pathlib import Path

from nsqpy.jepsen.etcd import CLIENT_PORT, PEER_PORT, EtcdMembers
from nsqpy.jepsen.layout import ETCD_HOSTS, R2_REPLICAS, hosts_for, server_hosts
from nsqpy.jepsen.netns import Network
from nsqpy.jepsen.servers import Cluster
from nsqpy.jepsen.worker import parse


def test_a_run_has_three_etcd_hosts_each_with_an_address_of_its_own() -> None:
    hosts = hosts_for(3)
    assert [h for h in hosts if h.startswith("e")] == ["e1", "e2", "e3"] == list(ETCD_HOSTS)
    assert hosts[-1] == "c" and set(server_hosts(3)) == set(hosts) - {"c"}
    net = Network(hosts, prefix="nsqpyjtest-")  # names and addresses only: nothing is made
    addresses = [net.address(h) for h in hosts]
    assert len(set(addresses)) == len(hosts)


def test_each_etcd_member_runs_in_its_own_namespace_and_knows_the_other_two(
    tmp_path: Path,
) -> None:
    net = Network(hosts_for(3), prefix="nsqpyjtest-")
    etcd = EtcdMembers(ETCD_HOSTS, net.address, net.exec_prefix, tmp_path)
    assert etcd.endpoints == [f"{net.address(h)}:{CLIENT_PORT}" for h in ETCD_HOSTS]
    cluster = ",".join(f"{h}=http://{net.address(h)}:{PEER_PORT}" for h in ETCD_HOSTS)
    for host in ETCD_HOSTS:
        argv = etcd.argv(host)
        assert argv[:4] == ["ip", "netns", "exec", f"nsqpyjtest-{host}"]
        me = net.address(host)
        assert f"--listen-client-urls=http://{me}:{CLIENT_PORT}" in argv
        assert f"--listen-peer-urls=http://{me}:{PEER_PORT}" in argv
        assert f"--initial-cluster={cluster}" in argv
        assert f"--data-dir={tmp_path / host}" in argv


def test_every_daemon_is_given_all_three_etcd_members(tmp_path: Path) -> None:
    net = Network(hosts_for(3), prefix="nsqpyjtest-")
    cluster = Cluster(net.hosts, net, tmp_path)
    members = ",".join(f"{net.address(h)}:{CLIENT_PORT}" for h in ETCD_HOSTS)
    daemons = [cluster._nsqd_process("n1"), cluster._lookupd_process("l2")]
    for daemon in daemons:
        assert f"--etcd-endpoints={members}" in daemon.args
    assert R2_REPLICAS == 2  # the topic the leader-and-follower-down nemesis needs


def test_a_consumer_worker_reads_every_topic_it_is_given() -> None:
    args = parse(["plain-consumer", "--id=0", "--name=c", "--lookupd=x:1", "--topic=a",
                  "--topic=b", "--history=h", "--origin=0"])  # fmt: skip
    assert args.topic == ["a", "b"]
