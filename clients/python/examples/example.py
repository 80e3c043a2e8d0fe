"""A complete tessera_client example: limits, a completion, a stream, a chat, errors, asyncio.

usage: python3 example.py [ENDPOINT ...]   (default tcp://127.0.0.1:8001)
"""
import asyncio
import sys

import tessera_client as tc

endpoints = sys.argv[1:] or ["tcp://127.0.0.1:8001"]

# One connection; several endpoints = failover in that order. Default deadline 30 s per request.
with tc.Client(endpoints, timeout=30.0) as client:
    lim = client.limits()
    print(f"model {lim.model}: context {lim.context_length}, vocab {lim.vocab_size}")

    r = client.complete("Once upon a time", max_tokens=32, temperature=0.0)
    print(repr(r.text), r.finish_reason, r.usage.prompt_tokens, r.usage.completion_tokens,
          r.usage.cached_tokens, f"{r.timings.total_ms:.1f} ms")

    stream = client.stream_complete("Lily and Tom", max_tokens=64, temperature=0.0)
    for ev in stream:
        if isinstance(ev, tc.TokenEvent):
            print(ev.text, end="", flush=True)
            if "dragon" in ev.text:  # any condition: the caller may cancel
                stream.cancel()
        else:  # the last item: the Completion (finish_reason "cancelled" after cancel())
            print(f"\n[{ev.finish_reason}, {ev.usage.completion_tokens} tokens]")

    chat = client.chat([{"role": "user", "content": "Tell me a story"}], max_tokens=16, seed=7)
    print(repr(chat.text))

    try:
        client.complete("Once", max_tokens=0)
    except tc.BadRequest as e:
        print("refused:", e.code, e.name, e.message)
    try:
        client.complete("Once upon a time", max_tokens=400, ignore_eos=True, timeout=0.001)
    except tc.Timeout as e:
        print("deadline:", e.code, e.name)


async def main() -> None:
    async with tc.AsyncClient(endpoints) as ac:
        results = await asyncio.gather(*[ac.complete(f"Once upon a time {i}", max_tokens=8) for i in range(4)])
        print([r.text for r in results])
        async for ev in ac.stream_chat([{"role": "user", "content": "Hi"}], max_tokens=8):
            if isinstance(ev, tc.Completion):
                print(repr(ev.text), ev.finish_reason)

asyncio.run(main())
