"""Victim's direct Embed latency and upload latency, idle vs during the rival's largest Embed calls."""
import asyncio, sys, time
import grpc, httpx, numpy as np
from bench.fairness_bench import Stack, rival_key, big_embeds, upload_once
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc

async def probe(stack, n0):
    out = {"embed": [], "upload": []}
    async with grpc.aio.insecure_channel(stack.address("embedder")) as ch, httpx.AsyncClient(timeout=60) as client:
        embed = embedder_pb2_grpc.EmbedderStub(ch).Embed
        for i in range(20):
            t = time.perf_counter()
            await embed(embedder_pb2.EmbedRequest(texts=[f"probe {i} {n0}"], task=embedder_pb2.DOCUMENT),
                        metadata=(("authorization", f"Bearer {stack.key}"),), timeout=60)
            out["embed"].append(time.perf_counter() - t)
        for i in range(20):
            out["upload"].append(await upload_once(client, stack, n0 + i))
    return {k: (round(np.percentile(v, 50) * 1000, 1), round(np.percentile(v, 99) * 1000, 1)) for k, v in out.items()}

async def main(stack, key):
    print("idle", await probe(stack, 100), flush=True)
    stop, seen = asyncio.Event(), []
    task = asyncio.ensure_future(big_embeds(stack, key, stop, seen))
    await asyncio.sleep(2)
    print("attack", await probe(stack, 200), len(seen), flush=True)
    stop.set(); await task

with Stack() as stack:
    asyncio.run(main(stack, rival_key(stack)))
