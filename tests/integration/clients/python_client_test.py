#!/usr/bin/python3
"""Conformance of clients/python (tessera_client) against a real loopback cluster
(issue 13's shared cases): greedy text equals the HTTP API's on the stories260K cases,
streaming equals non-streaming (sync and asyncio), 32 concurrent requests on one client,
cancel mid-stream frees the request (scheduler's held pages back to baseline), a deadline
raises Timeout, bad requests raise the right typed error, limits() from the heartbeat reply,
and a killed frontend is detected within the documented bound with failover to the second.

usage: python_client_test.py BIN_DIR SHARED_DIR   (plain unittest: no PyPI packages)
"""
import asyncio
import json
import os
import signal
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "clients", "python"))
sys.path.insert(0, HERE)

import tessera_client as tc  # noqa: E402
from cluster import ADMIN_TOKEN, Cluster, wait_until  # noqa: E402

BIN_DIR = SHARED = ""
CLUSTER: Cluster = None  # type: ignore[assignment]


def setUpModule() -> None:
    global CLUSTER
    CLUSTER = Cluster(BIN_DIR, SHARED)


def tearDownModule() -> None:
    if CLUSTER is not None:
        CLUSTER.stop()


def cases():
    with open(os.path.join(SHARED, "models/stories260K/greedy.json")) as f:
        return json.load(f)["cases"]


class Conformance(unittest.TestCase):
    # unittest runs methods in name order; the failover test kills frontend 0, so it is last.
    def setUp(self) -> None:
        self.client = tc.Client(CLUSTER.zmq[0])

    def tearDown(self) -> None:
        self.client.close()

    def held_pages(self) -> float:
        return CLUSTER.metric("tessera_scheduler_pages", 'state="held"') or 0.0

    def test_a_greedy_equals_http(self) -> None:
        for c in cases():
            with self.subTest(prompt=c["prompt"], steps=c["steps"]):
                http = CLUSTER.post(CLUSTER.http[0], "/v1/completions",
                                    {"prompt": c["prompt"], "max_tokens": c["steps"], "temperature": 0,
                                     "ignore_eos": True})["choices"][0]["text"]
                r = self.client.complete(c["prompt"], max_tokens=c["steps"], temperature=0.0, ignore_eos=True)
                self.assertEqual(r.text, http)
                self.assertTrue(r.text.startswith(c["completion"]))
                self.assertEqual(r.finish_reason, "length")
                self.assertEqual(r.usage.completion_tokens, c["steps"])
                self.assertEqual(len(r.tokens), c["steps"])
                self.assertGreater(r.usage.prompt_tokens, 0)
                self.assertGreaterEqual(r.timings.total_ms, 0.0)

    def test_b_streaming_equals_non_streaming(self) -> None:
        for c in cases():
            with self.subTest(prompt=c["prompt"], steps=c["steps"]):
                kw = dict(max_tokens=c["steps"], temperature=0.0, ignore_eos=True, logprobs=True)
                whole = self.client.complete(c["prompt"], **kw)
                events = list(self.client.stream_complete(c["prompt"], **kw))
                final = events[-1]
                self.assertIsInstance(final, tc.Completion)
                self.assertTrue(all(isinstance(e, tc.TokenEvent) for e in events[:-1]))
                self.assertEqual(final.text, whole.text)
                self.assertEqual(final.tokens, whole.tokens)
                self.assertEqual(final.usage.completion_tokens, whole.usage.completion_tokens)
                self.assertEqual(len(final.logprobs or []), c["steps"])
                self.assertEqual(len(whole.logprobs or []), c["steps"])

                async def run_async():
                    async with tc.AsyncClient(CLUSTER.zmq[0]) as ac:
                        s = ac.stream_complete(c["prompt"], **kw)
                        streamed = [e async for e in s]
                        return streamed[-1], await ac.complete(c["prompt"], **kw)
                a_stream, a_whole = asyncio.run(run_async())
                self.assertEqual(a_stream.text, whole.text)
                self.assertEqual(a_whole.text, whole.text)
        # Without logprobs asked, none come back (docs/protocol.md).
        self.assertIsNone(self.client.complete("Once", max_tokens=2).logprobs)

    def test_c_chat(self) -> None:
        msgs = [{"role": "user", "content": "Once upon a time"}]
        whole = self.client.chat(msgs, max_tokens=16, temperature=0.0)
        streamed = self.client.stream_chat(msgs, max_tokens=16, temperature=0.0).result()
        self.assertEqual(whole.text, streamed.text)
        self.assertIn(whole.finish_reason, ("stop", "length"))

    def test_d_32_concurrent_on_one_client(self) -> None:
        prompts = [f"Lily and Tom {i}" if i % 2 else f"Once upon a time {i}" for i in range(32)]
        ref = {p: self.client.complete(p, max_tokens=48, temperature=0.0, ignore_eos=True).text for p in prompts[:4]}
        got = [None] * 32
        errors = []

        def one(i: int) -> None:
            try:
                got[i] = self.client.stream_complete(prompts[i], max_tokens=48, temperature=0.0,
                                                     ignore_eos=True).result().text
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        for p in prompts[:4]:
            self.assertEqual(got[prompts.index(p)], ref[p])
        self.assertTrue(all(g for g in got))

        async def run_async():
            async with tc.AsyncClient(CLUSTER.zmq[0]) as ac:
                return await asyncio.gather(*[ac.complete(p, max_tokens=48, temperature=0.0, ignore_eos=True)
                                              for p in prompts])
        self.assertEqual([r.text for r in asyncio.run(run_async())], got)

    def test_e_cancel_mid_stream_frees_the_request(self) -> None:
        self.assertTrue(wait_until(lambda: self.held_pages() == 0.0, 10))
        s = self.client.stream_complete("Once upon a time", max_tokens=400, temperature=0.0, ignore_eos=True)
        it = iter(s)
        first = next(it)
        self.assertIsInstance(first, tc.TokenEvent)
        s.cancel()
        final = s.result()
        self.assertEqual(final.finish_reason, "cancelled")
        self.assertLess(final.usage.completion_tokens, 400)
        self.assertTrue(wait_until(lambda: self.held_pages() == 0.0, 10), "pages not freed after cancel")

    def test_f_deadline_raises_timeout(self) -> None:
        t0 = time.monotonic()
        with self.assertRaises(tc.Timeout) as cm:
            for _ in self.client.stream_complete("Once upon a time", max_tokens=400, temperature=0.0,
                                                 ignore_eos=True, timeout=0.005):
                pass
        self.assertEqual(cm.exception.code, 203)
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertTrue(wait_until(lambda: self.held_pages() == 0.0, 10), "pages not freed after a deadline")
        with tc.Client(CLUSTER.zmq[0], timeout=0.005) as short:  # the client-wide default deadline
            with self.assertRaises(tc.Timeout):
                short.complete("Once upon a time", max_tokens=400, ignore_eos=True)
        # The connection keeps serving after timeouts.
        self.assertEqual(self.client.complete("Once", max_tokens=3).usage.completion_tokens, 3)

    def test_g_bad_requests_raise_typed_errors(self) -> None:
        checks = [
            (dict(prompt="Once", max_tokens=0), tc.BadRequest, 103),
            (dict(prompt="Once", temperature=5.0), tc.BadRequest, 103),
            (dict(prompt=""), tc.BadRequest, 100),
            (dict(prompt="Once", model="no-such-model"), tc.NotFound, 104),
            (dict(prompt="Once", max_tokens=100000), tc.BadRequest, 105),
            (dict(prompt=[100000]), tc.BadRequest, 103),
        ]
        for kw, cls, code in checks:
            with self.subTest(kw=kw):
                prompt = kw.pop("prompt")
                with self.assertRaises(cls) as cm:
                    self.client.complete(prompt, **kw)
                self.assertEqual(cm.exception.code, code, cm.exception.message)
                self.assertTrue(cm.exception.message)
                with self.assertRaises(cls):
                    list(self.client.stream_complete(prompt, **kw))
        with self.assertRaises(tc.BadRequest):
            self.client.complete("Once", no_such_option=1)
        with self.assertRaises(tc.BadRequest):
            self.client.chat([{"role": "robot", "content": "hi"}])

    def test_g2_kv_policy_typed_fields(self) -> None:
        # The typed policies' wire maps carry the HTTP API's defaults explicitly.
        self.assertEqual(tc.StreamingPolicy(32).to_wire(), {"type": "streaming", "sinks": 4, "window": 32})
        self.assertEqual(tc.H2OPolicy(40).to_wire(), {"type": "h2o", "budget": 40, "recent": 20})
        self.assertEqual(tc.H2OPolicy(40, recent=0).to_wire(), {"type": "h2o", "budget": 40, "recent": 0})
        self.assertEqual(tc.FullAttention().to_wire(), {"type": "none"})
        prompt = "Once upon a time"
        for typed, http in [(tc.StreamingPolicy(window=24), {"type": "streaming", "window": 24}),
                            (tc.H2OPolicy(budget=24), {"type": "h2o", "budget": 24}),
                            (tc.FullAttention(), {"type": "none"})]:
            with self.subTest(policy=typed):
                # Greedy past the policy's cap: the same tokens as the HTTP API with the JSON form.
                want = CLUSTER.post(CLUSTER.http[0], "/v1/completions",
                                    {"prompt": prompt, "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                                     "kv_policy": http})["choices"][0]["text"]
                r = self.client.complete(prompt, max_tokens=48, temperature=0.0, ignore_eos=True, kv_policy=typed)
                self.assertEqual(r.text, want)
                self.assertEqual(r.usage.completion_tokens, 48)
                streamed = list(self.client.stream_complete(prompt, max_tokens=48, temperature=0.0, ignore_eos=True,
                                                            kv_policy=typed))[-1]
                self.assertEqual(streamed.text, want)
        full = self.client.complete(prompt, max_tokens=48, temperature=0.0, ignore_eos=True)
        window = self.client.complete(prompt, max_tokens=48, temperature=0.0, ignore_eos=True,
                                      kv_policy=tc.StreamingPolicy(window=8, sinks=1))
        self.assertNotEqual(window.tokens, full.tokens)  # the policy took effect
        # Out of range (sinks + window beyond the context) and bad types: typed errors.
        with self.assertRaises(tc.BadRequest) as cm:
            self.client.complete(prompt, max_tokens=4, kv_policy=tc.StreamingPolicy(window=100000))
        self.assertEqual(cm.exception.code, 103, cm.exception.message)  # out_of_range
        self.assertIn("kv_policy", cm.exception.message)
        with self.assertRaises(tc.BadRequest) as cm:
            self.client.complete(prompt, max_tokens=4, kv_policy="streaming")
        self.assertEqual(cm.exception.code, 100)
        # The connection keeps serving.
        self.assertEqual(self.client.complete("Once", max_tokens=3).usage.completion_tokens, 3)

    def test_h_limits_from_heartbeat(self) -> None:
        lim = self.client.limits()
        self.assertEqual(lim.protocol_version, 1)
        self.assertEqual(lim.vocab_size, 512)
        self.assertGreater(lim.context_length or 0, 0)
        self.assertGreater(lim.page_size or 0, 0)
        self.assertGreater(lim.default_max_tokens or 0, 0)
        self.assertGreater(lim.live_workers, 0)

    def test_i_readme_example_runs(self) -> None:
        import subprocess
        ex = os.path.join(HERE, "..", "..", "..", "clients", "python", "examples", "example.py")
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "..", "clients", "python"))
        out = subprocess.run([sys.executable, ex, CLUSTER.zmq[0]], env=env, capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("refused: 103 out_of_range", out.stdout)
        self.assertIn("deadline: 203 deadline_exceeded", out.stdout)

    def test_j_no_frontend_never_hangs(self) -> None:
        import socket
        with socket.socket() as probe:  # a port with nothing listening
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        bound = tc.DEFAULT_DEAD_AFTER + tc.DEFAULT_HEARTBEAT_INTERVAL
        t0 = time.monotonic()
        with tc.Client(f"tcp://127.0.0.1:{port}") as c:
            with self.assertRaises(tc.PeerDead):
                c.complete("Once", max_tokens=4)
            with self.assertRaises(tc.Unavailable):
                c.limits(timeout=0.2)
        self.assertLess(time.monotonic() - t0, bound + 1.0)

        async def run_async():
            async with tc.AsyncClient(f"tcp://127.0.0.1:{port}") as ac:
                with self.assertRaises(tc.PeerDead):
                    async for _ in ac.stream_complete("Once", max_tokens=4):
                        pass
        asyncio.run(run_async())

    def test_k_admin_operations_and_preference_provenance(self) -> None:
        admin = tc.AdminClient(f"http://127.0.0.1:{CLUSTER.http[0]}", token=ADMIN_TOKEN)
        user = f"py-user-{os.getpid()}"
        pref = "Alice likes short stories about dragons."
        put = admin.set_preference(user, pref, 0.25)
        self.assertEqual((put.user, put.preference, put.alpha), (user, pref, 0.25))
        self.assertIsNotNone(put.stored)
        self.assertEqual(admin.get_preference(user), tc.StoredPreference(user, pref, 0.25))
        # A request with the user and no preference uses the stored one: its provenance is in usage.
        r = self.client.complete("Once upon a time", max_tokens=4, temperature=0.0, user=user)
        self.assertIn(r.usage.preference_source, ("compute", "kvstore", "redis", "memory"), r.usage)
        self.assertIsInstance(r.usage.preference_kv_bytes, int)
        self.assertGreater(r.usage.preference_kv_bytes, 0)
        self.assertIsInstance(r.usage.preference_transfer_ms, (int, float))
        plain = self.client.complete("Once upon a time", max_tokens=4, temperature=0.0)
        self.assertIsNone(plain.usage.preference_source)
        inv = admin.invalidate(user)
        self.assertEqual(inv.user, user)
        self.assertGreaterEqual(inv.kvstore_l1, 1)  # at least the stored-preference entry
        self.assertEqual(inv.schedulers_notified, 1)
        # docs/api.md: after invalidate the next request of the user computes its preference.
        again = self.client.complete("Once upon a time", max_tokens=4, temperature=0.0, user=user)
        self.assertEqual(again.usage.preference_source, "compute")
        self.assertEqual(admin.get_preference(user).preference, pref)  # the text is kept
        self.assertTrue(admin.delete_preference(user))
        self.assertFalse(admin.delete_preference(user))
        with self.assertRaises(tc.NotFound) as nf:
            admin.get_preference(user)
        self.assertEqual((nf.exception.code, nf.exception.name), (104, "not_found"))
        self.assertTrue(nf.exception.message)
        checks = [
            (lambda: tc.AdminClient(admin.base_url, token="wrong").invalidate(user), tc.PermissionDenied, 106),
            (lambda: tc.AdminClient(admin.base_url).get_preference(user), tc.PermissionDenied, 106),
            # frontend 1 has no --admin-token: admin routes are disabled (403)
            (lambda: tc.AdminClient(f"http://127.0.0.1:{CLUSTER.http[1]}", token=ADMIN_TOKEN).get_preference(user),
             tc.PermissionDenied, 106),
            (lambda: admin.set_preference(user, pref, 2.0), tc.BadRequest, 103),
            (lambda: admin.set_preference(user, "", 0.5), tc.BadRequest, 100),
        ]
        for call, cls, code in checks:
            with self.assertRaises(cls) as cm:
                call()
            if code is not None:
                self.assertEqual(cm.exception.code, code, cm.exception.message)
            self.assertTrue(cm.exception.message)
        import socket
        with socket.socket() as probe:  # a port with nothing listening
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with self.assertRaises(tc.Unavailable) as un:
            tc.AdminClient(f"http://127.0.0.1:{port}", token=ADMIN_TOKEN, timeout=2.0).get_preference(user)
        self.assertEqual(un.exception.code, 400)
        with self.assertRaises(tc.BadRequest):
            tc.AdminClient("tcp://127.0.0.1:1")

        async def run_async() -> None:
            aadmin = tc.AsyncAdminClient(admin.base_url, token=ADMIN_TOKEN)
            await aadmin.set_preference(user, "Bob likes cats.", 0.5)
            got, inv2 = await asyncio.gather(aadmin.get_preference(user), aadmin.invalidate(user))
            self.assertEqual(got, tc.StoredPreference(user, "Bob likes cats.", 0.5))
            self.assertEqual(inv2.schedulers_notified, 1)
            self.assertTrue(await aadmin.delete_preference(user))
            with self.assertRaises(tc.NotFound):
                await aadmin.get_preference(user)
        asyncio.run(run_async())

    def test_z_killed_frontend_detected_and_failover(self) -> None:
        c = tc.Client([CLUSTER.zmq[0], CLUSTER.zmq[1]])
        try:
            self.assertEqual(c.complete("Once", max_tokens=4).usage.completion_tokens, 4)
            self.assertEqual(c.endpoint, CLUSTER.zmq[0])
            bound = tc.DEFAULT_DEAD_AFTER + tc.DEFAULT_HEARTBEAT_INTERVAL
            CLUSTER.frontends[0].kill(signal.SIGKILL)
            t0 = time.monotonic()
            with self.assertRaises(tc.PeerDead) as cm:
                c.complete("Once upon a time", max_tokens=8)
            waited = time.monotonic() - t0
            self.assertEqual(cm.exception.code, 401)
            self.assertLessEqual(waited, bound + 0.5, "dead frontend noticed too late")
            self.assertTrue(wait_until(lambda: c.failovers >= 1, bound))
            self.assertEqual(c.endpoint, CLUSTER.zmq[1])
            r = c.complete("Once upon a time", max_tokens=64, temperature=0.0, ignore_eos=True)
            self.assertTrue(r.text.startswith(cases()[0]["completion"][:40]))
        finally:
            c.close()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    BIN_DIR, SHARED = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
