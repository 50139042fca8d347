"""A function that imports NumPy at module level (paid once, in the zygote)
and summarises a random sample per request. Each request's sample differs:
the agent reseeds NumPy's global generator in every child."""
import numpy as np

# Import-time work: done once in the zygote, shared copy-on-write.
WEIGHTS = np.linspace(0.0, 1.0, 1024)


def handler(event, context):
    n = int(event.get("n", 1000))
    sample = np.random.normal(size=n)
    print(f"request {context.request_id}: {n} values, mean {sample.mean():.4f}")  # zygo logs stats
    return {
        "n": n,
        "mean": float(sample.mean()),
        "std": float(sample.std()),
        "weighted": float(np.dot(WEIGHTS[: min(n, 1024)], sample[:1024])),
        "draw": int(np.random.randint(0, 2**62)),
    }
