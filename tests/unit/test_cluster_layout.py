

def test_free_ports_are_outside_the_kernels_ephemeral_range():
    """A stopped node's fixed port must not be handed out to a connection or an ephemeral
    listener before the node restarts: kmon's own picks come from outside that range."""
    import socket

    from infra.cluster_layout import allocate_ports, ephemeral_range, port_is_free

    lo, hi = ephemeral_range()
    groups = allocate_ports(5, 4, 0)
    ports = [p for g in groups for p in g]
    assert len(set(ports)) == 20
    assert all(not lo <= p <= hi and port_is_free(p) for p in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:   # the kernel's own pick
        s.bind(("127.0.0.1", 0))
        assert lo <= s.getsockname()[1] <= hi


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path):
    from infra.cluster_layout import EPHEMERAL_DEFAULT, ephemeral_range

    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_range(str(f)) == (40000, 50000)
    assert ephemeral_range(str(tmp_path / "missing")) == EPHEMERAL_DEFAULT
