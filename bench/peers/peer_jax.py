"""JAX: the HF AdamW loop in jax.numpy under jax.jit, or optax.adamw (decoupled weight
decay, a different update: timed only). Parameters and state are donated, so XLA updates
them in place; the step number is a traced argument, so a new step does not recompile."""
from common import peer_main, time_steps


def run(variant, params, grads, hp, steps, fetch):
    import jax
    import jax.numpy as jnp
    import numpy as np

    b1, b2, lr, eps, wd = hp["beta1"], hp["beta2"], hp["lr"], hp["eps"], hp["weight_decay"]
    ps = [jnp.asarray(p) for p in params]
    gs = [jnp.asarray(g) for g in grads]

    if variant == "hf":
        def hf_step(ps, ms, vs, gs, t):
            t = t.astype(jnp.float32)
            size = lr * jnp.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
            out = ([], [], [])
            for p, m, v, g in zip(ps, ms, vs, gs):
                m = m * b1 + g * (1.0 - b1)
                v = v * b2 + g * g * (1.0 - b2)
                p = p + (-size) * (m / (jnp.sqrt(v) + eps))
                p = p + p * (-lr * wd)
                for lst, x in zip(out, (p, m, v)):
                    lst.append(x)
            return out

        fn = jax.jit(hf_step, donate_argnums=(0, 1, 2))
        state = [ps, [jnp.zeros_like(p) for p in ps], [jnp.zeros_like(p) for p in ps]]

        def step(t):
            state[:] = fn(*state, gs, np.int32(t))
            jax.block_until_ready(state)
    elif variant == "optax":
        import optax

        opt = optax.adamw(learning_rate=lr, b1=b1, b2=b2, eps=eps, weight_decay=wd)

        def optax_step(ps, opt_state, gs):
            updates, opt_state = opt.update(gs, opt_state, ps)
            return optax.apply_updates(ps, updates), opt_state

        fn = jax.jit(optax_step, donate_argnums=(0, 1))
        state = [ps, opt.init(ps)]

        def step(t):
            state[:] = fn(*state, gs)
            jax.block_until_ready(state)
    else:
        raise ValueError(f"unknown variant {variant}")

    def counters():
        # Entries in the jitted function's compile cache (a private but stable method).
        return {"jit_cache_entries": fn._cache_size()}

    seconds, delta = time_steps(step, steps, counters)
    return {"step_seconds": seconds, "version": jax.__version__, "counters": delta,
            "compiles": {"uncached": delta.get("jit_cache_entries", 0), "cached": None},
            "notes": "compiles = new jit cache entries",
            "params": [np.asarray(p) for p in state[0]] if fetch else None}


if __name__ == "__main__":
    peer_main(run)
