"""Which precision float32 matrix products get on this GPU under JAX's default (TF32 or not)."""
import jax, jax.numpy as jnp, numpy as np
a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
exact = a.astype(np.float64) @ a.astype(np.float64)
for prec in ("default", "highest"):
    with jax.default_matmul_precision(None if prec == "default" else prec):
        out = np.asarray(jax.jit(lambda x: x @ x)(jnp.asarray(a)), np.float64)
    print(f"{prec}: relative error {np.abs(out - exact).max() / np.abs(exact).max():.2e}")
print(jax.devices(), jax.__version__)
