# SPDX-License-Identifier: MIT
"""Threads: each with its own Client at once, and two sharing one."""

import threading

import numpy as np

from conftest import Req, check_step, open_session, random_items


def test_four_threads_own_clients(daemon):
    errors, done = [], []

    def worker(i):
        try:
            rng = np.random.default_rng(1000 + i)
            with daemon.client() as c:
                s = open_session(c)
                r = Req(rng, c, s, 10 + i, 200 + 50 * i)
                for step in range(6):
                    items, q = random_items(rng, [r], step % 2)
                    o, lse = c.step(s, step % 2, items, q)
                    check_step([r], step % 2, items, q, o, lse)
                c.close_session(s)
            done.append(i)
        except BaseException as e:  # reported below, with the thread's number
            errors.append((i, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(done) == [0, 1, 2, 3]


def test_two_threads_share_one_client(daemon):
    """Not the way to use it, but safe: the Client's lock makes them take turns."""
    errors = []
    with daemon.client() as c:
        rng = np.random.default_rng(5)
        sessions = [open_session(c) for _ in range(2)]
        reqs = [Req(rng, c, s, 1, 200) for s in sessions]

        def worker(i):
            try:
                wrng = np.random.default_rng(50 + i)
                for step in range(20):
                    items, q = random_items(wrng, [reqs[i]], step % 2)
                    o, lse = c.step(sessions[i], step % 2, items, q)
                    check_step([reqs[i]], step % 2, items, q, o, lse)
                    c.stats()
            except BaseException as e:
                errors.append((i, e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors


def test_close_while_another_thread_steps(daemon):
    """close() waits for a call in flight, then the other thread sees 'closed'."""
    c = daemon.client()
    rng = np.random.default_rng(9)
    s = open_session(c)
    r = Req(rng, c, s, 1, 200)
    items, q = random_items(rng, [r], 0)
    outcomes = []
    go = threading.Event()

    def stepper():
        go.set()
        for _ in range(200):
            try:
                c.step(s, 0, items, q)
            except ValueError as e:
                outcomes.append(str(e))
                return
        outcomes.append("finished")

    t = threading.Thread(target=stepper)
    t.start()
    go.wait()
    c.close()
    t.join()
    assert outcomes and (outcomes[0] == "finished" or "closed" in outcomes[0])
    assert c.closed
