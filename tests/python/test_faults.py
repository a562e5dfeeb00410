# SPDX-License-Identifier: MIT
"""A daemon that dies or stops under a client: an Error with an errno,
within the client's timeout, never a hang."""

import errno
import signal
import threading

import pytest

import nelssa
from conftest import Req, check_step, open_session, random_items

HOLD = 77  # nelssad with NELSSAD_TEST_HOLD_TENANT=77 answers no step of this tenant
GONE = {errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECONNABORTED, errno.EIO,
        errno.ENOTCONN}


def held_setup(make_daemon, rng):
    d = make_daemon(env={"NELSSAD_TEST_HOLD_TENANT": str(HOLD)})
    c = d.client(timeout_ms=3000)
    s = open_session(c, tenant=HOLD)
    r = Req(rng, c, s, 1, 200)
    return d, c, s, r


def test_killed_mid_step_send(make_daemon, rng):
    d, c, s, r = held_setup(make_daemon, rng)
    items, q = random_items(rng, [r], 0)
    p = c.step_send(s, 0, items, q)
    # Held on the daemon: not back...
    assert p.poll() is False
    d.kill(signal.SIGKILL)
    d.proc.wait()
    # ...and once the daemon is gone the poll fails, with an errno.
    with pytest.raises(nelssa.Error) as e:
        while not p.poll(timeout_ms=1000):
            pass
    assert e.value.errno in GONE, e.value
    assert p.state == "failed"
    with pytest.raises(nelssa.Error):  # and again on a later poll
        p.poll()
    for call in (lambda: c.step(s, 0, items, q), lambda: c.stats(),
                 lambda: c.open_session(2, 8, 2, 64)):
        with pytest.raises(nelssa.Error) as e:
            call()
        assert e.value.errno in GONE, e.value
    c.close()


def test_killed_during_blocking_step(make_daemon, rng):
    """The step blocks in one thread (GIL released) while this one kills the daemon."""
    d, c, s, r = held_setup(make_daemon, rng)
    c.set_timeout(20000)
    items, q = random_items(rng, [r], 1)
    started, result = threading.Event(), {}

    def run():
        started.set()
        try:
            c.step(s, 1, items, q)
            result["ok"] = True
        except nelssa.Error as ex:
            result["err"] = ex

    t = threading.Thread(target=run)
    t.start()
    started.wait()
    d.kill(signal.SIGKILL)
    t.join()
    assert "err" in result, result
    # Had the step held the GIL, this thread could not have killed the
    # daemon before the 20 s timeout: ETIMEDOUT.  It ran: the connection broke.
    assert result["err"].errno in GONE - {errno.ETIMEDOUT}, result["err"]
    c.close()


def test_stopped_daemon_times_out_then_serves(make_daemon, rng):
    d = make_daemon()
    c = d.client(timeout_ms=1000)
    s = open_session(c)
    r = Req(rng, c, s, 1, 200)
    items, q = random_items(rng, [r], 0)
    d.pause()
    try:
        with pytest.raises(nelssa.Error) as e:
            c.step(s, 0, items, q)
        assert e.value.errno == errno.ETIMEDOUT
        with pytest.raises(nelssa.Error) as e:
            c.stats()
        assert e.value.errno == errno.ETIMEDOUT
    finally:
        d.kill(signal.SIGCONT)
    c.set_timeout(10000)
    # The late reply is dropped; the daemon may still be busy with the old step.
    for _ in range(500):
        try:
            o, lse = c.step(s, 0, items, q)
            break
        except nelssa.Error as ex:
            assert ex.errno == errno.EBUSY
            threading.Event().wait(0.01)
    check_step([r], 0, items, q, o, lse)
    c.close()
