"""A cluster-mode client outside the Kubernetes cluster, for e2e/tests/external_access.rs
(valkey-py, from the client guides' venv). It runs in a network namespace that reaches the
nodes' address and no pod address, seeded with one member's external address only.

It writes <prefix>:<n> = n for n = 0, 1, ... one at a time and prints "ack <n>" once a write
is acknowledged, "fail <error>" for each failed attempt (tried again); every 500 ms it prints
"addr <host>:<port>" for every node the client knows, so the test can check it never learned
a pod address.

Usage: python outside_writer.py <host> <port> <username> <password> <prefix>
"""
import sys
import time

from valkey.cluster import ValkeyCluster

host, port, username, password, prefix = sys.argv[1:6]
client = ValkeyCluster(
    host=host,
    port=int(port),
    username=username,
    password=password,
    socket_timeout=2,
    socket_connect_timeout=2,
    cluster_error_retry_attempts=10,
)
asked = 0.0
n = 0
while True:
    if time.monotonic() - asked >= 0.5:
        asked = time.monotonic()
        for node in client.get_nodes():
            print(f"addr {node.host}:{node.port}", flush=True)
    try:
        client.set(f"{prefix}:{n}", n)
        print(f"ack {n}", flush=True)
        n += 1
    except Exception as e:  # every failure is reported and the write tried again
        print(f"fail {type(e).__name__}: {e}", flush=True)
        time.sleep(0.1)
