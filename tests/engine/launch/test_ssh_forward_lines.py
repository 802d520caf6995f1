"""The ssh reverse forward's command line and its port reader (``engine/launch/ssh_forward.py``),
fed what OpenSSH 9.2 writes on stderr (copied from a run against the suite's sshd), in any
split; the real connection is ``tests/kernel/test_kernel_tools_via_ssh.py``."""

from __future__ import annotations

import asyncio

import pytest

from escouade_nb.engine.launch.ssh_forward import ForwardFailed, ReverseForward, forward_argv

ALLOCATED = (b"Warning: Permanently added '[127.0.0.1]:22401' (ED25519) to the list of known hosts.\r\n"
             b'Authenticated to 127.0.0.1 ([127.0.0.1]:22401) using "publickey".\r\n'
             b"Allocated port 42675 for remote forward to 127.0.0.1:22499\r\n")
REFUSED = (b"Warning: Permanently added '[127.0.0.1]:22402' (ED25519) to the list of known hosts.\r\n"
           b"Warning: remote port forwarding failed for listen port 0\r\n")
REFUSED_TO_A_MUX_CLIENT = (b"mux_client_forward: forwarding request failed: remote port forwarding failed for listen "
                           b"port 0\r\nmuxclient: master forward request failed\r\n")


def test_the_forward_goes_after_the_program_so_that_it_wins_over_the_users_options():
    via = ["/usr/bin/ssh", "-p", "2222", "-o", "LogLevel=ERROR", "me@host", "sh -c 'x'"]
    assert forward_argv(via, 22499) == [
        "/usr/bin/ssh", "-o", "LogLevel=VERBOSE", "-o", "ExitOnForwardFailure=no", "-R", "127.0.0.1:0:127.0.0.1:22499",
        "-p", "2222", "-o", "LogLevel=ERROR", "me@host", "sh -c 'x'"]
    with pytest.raises(ValueError):
        forward_argv(["kubectl", "exec", "-i", "pod", "--"], 22499)
    with pytest.raises(ValueError):
        forward_argv(["ssh", "host"], 0)


@pytest.mark.parametrize("size", [1, 7, 64, len(ALLOCATED)])
def test_the_allocated_port_is_read_in_any_split(size):
    async def go():
        forward = ReverseForward(22499)
        for i in range(0, len(ALLOCATED), size):
            forward.feed(ALLOCATED[i:i + size])
        assert await forward.port(timeout=5) == 42675
        assert forward.url == "http://127.0.0.1:42675/mcp"

    asyncio.run(go())


def test_another_forward_of_the_users_own_is_not_taken_for_ours():
    async def go():
        forward = ReverseForward(22499)
        forward.feed(b"Allocated port 5555 for remote forward to 127.0.0.1:8080\n")  # the user's own -R 0:…:8080
        assert forward.remote_port is None
        forward.feed(b"Allocated port 6666 for remote forward to 127.0.0.1:22499\n")
        assert await forward.port(timeout=5) == 6666

    asyncio.run(go())


@pytest.mark.parametrize("said", [REFUSED, REFUSED_TO_A_MUX_CLIENT])
def test_a_refused_forward_fails_in_one_line(said):
    async def go():
        forward = ReverseForward(22499)
        forward.feed(said)
        with pytest.raises(ForwardFailed) as failed:
            await forward.port(timeout=5)
        assert "\n" not in str(failed.value) and "forbids it (AllowTcpForwarding" in str(failed.value)
        forward.feed(ALLOCATED)  # nothing changes once known
        assert forward.remote_port is None

    asyncio.run(go())


def test_no_report_fails_in_one_line_naming_a_quiet_ssh():
    async def go():
        forward = ReverseForward(22499)
        with pytest.raises(ForwardFailed) as failed:
            await forward.port(timeout=0.05)
        assert "\n" not in str(failed.value) and "-q" in str(failed.value)
        with pytest.raises(RuntimeError):
            _ = forward.url

    asyncio.run(go())
