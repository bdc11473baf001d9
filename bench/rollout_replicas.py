"""Rollout throughput with 1 vs 2 Ray engine replicas (memrl.dist.pool.RayEnginePool).

    python bench/rollout_replicas.py                 # CPU, tiny model
    python bench/rollout_replicas.py --device cuda --replica-gpus 0.5

Prints generated tokens/s for each replica count over the same batch of requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--replica-cpus", type=float, default=1.0)
    ap.add_argument("--replica-gpus", type=float, default=0.0)
    args = ap.parse_args()

    import ray

    from memrl.dist.pool import RayEnginePool
    from memrl.dist.ray_support import init_ray
    from memrl.engines.base import SamplingParams

    print(init_ray(None))
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)
    prompt = [5 + (i % 200) for i in range(args.prompt)]
    for r in [int(x) for x in args.replicas.split(",")]:
        pool = RayEnginePool(args.model, r, device=args.device, num_cpus=args.replica_cpus,
                             num_gpus=args.replica_gpus, max_batch_size=32)

        async def run() -> int:
            outs = await asyncio.gather(*(pool.generate(prompt, params.with_(seed=i)) for i in range(args.requests)))
            return sum(len(o.token_ids) for o in outs)

        asyncio.run(run())  # warm-up
        t0 = time.perf_counter()
        tokens = asyncio.run(run())
        dt = time.perf_counter() - t0
        print(f"replicas={r}: {tokens} tokens in {dt:.2f} s = {tokens / dt:.0f} tokens/s "
              f"(requests per replica {pool.served})")
        asyncio.run(pool.close())
    ray.shutdown()


if __name__ == "__main__":
    main()
