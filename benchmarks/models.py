"""The models behind W8 to W12: a transformer block, an LSTM and a ResNet
block, each a training step written with JAX alone, at any size.

`benchmarks/workloads.py` builds them at the issue's sizes; the tests
(`tests/interpreter/test_optimiser_models.py`) build small ones. Every function returns
(function to `jax.jit`, arguments), the arguments numpy arrays (or pytrees
of them) from the generator it is given, so every process builds the same
inputs. JAX is imported inside the functions: the benchmark's parent
process never imports it.
"""
from __future__ import annotations

import numpy as np


def _normal(rng: np.random.Generator, shape: tuple, scale: float) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


# -------------------------------------------------------------- transformer
def transformer_params(rng: np.random.Generator, d_model: int, mlp: int, vocab: int,
                       seq: int, layers: int = 1) -> dict:
    """Embeddings, `layers` pre-LN blocks and the output projection."""
    def block():
        return {
            "ln1": (np.ones(d_model, np.float32), np.zeros(d_model, np.float32)),
            "qkv": _normal(rng, (d_model, 3 * d_model), d_model ** -0.5),
            "out": _normal(rng, (d_model, d_model), d_model ** -0.5),
            "ln2": (np.ones(d_model, np.float32), np.zeros(d_model, np.float32)),
            "up": (_normal(rng, (d_model, mlp), d_model ** -0.5), np.zeros(mlp, np.float32)),
            "down": (_normal(rng, (mlp, d_model), mlp ** -0.5), np.zeros(d_model, np.float32)),
        }
    return {
        "embed": _normal(rng, (vocab, d_model), 0.02),
        "position": _normal(rng, (seq, d_model), 0.02),
        "blocks": [block() for _ in range(layers)],
        "ln_f": (np.ones(d_model, np.float32), np.zeros(d_model, np.float32)),
        "unembed": _normal(rng, (d_model, vocab), d_model ** -0.5),
    }


def _layer_norm(x, scale_bias):
    import jax.numpy as jnp

    scale, bias = scale_bias
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * (1 / jnp.sqrt(var + 1e-5)) * scale + bias


def _block(x, p, heads: int):
    """One pre-LN transformer block: causal self-attention, then a GELU MLP."""
    import jax

    batch, seq, d_model = x.shape
    q, k, v = jax.numpy.split(_layer_norm(x, p["ln1"]) @ p["qkv"], 3, axis=-1)
    shape = (batch, seq, heads, d_model // heads)
    attended = jax.nn.dot_product_attention(q.reshape(shape), k.reshape(shape), v.reshape(shape),
                                            is_causal=True)
    x = x + attended.reshape(x.shape) @ p["out"]
    w_up, b_up = p["up"]
    w_down, b_down = p["down"]
    return x + jax.nn.gelu(_layer_norm(x, p["ln2"]) @ w_up + b_up) @ w_down + b_down


def transformer_logits(params, tokens, heads: int):
    x = params["embed"][tokens] + params["position"]
    for block in params["blocks"]:
        x = _block(x, block, heads)
    return _layer_norm(x, params["ln_f"]) @ params["unembed"]


def _cross_entropy(logits, labels):
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def adamw(params, grads, state, learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
    """One AdamW step (decoupled weight decay), written in jnp."""
    import jax
    import jax.numpy as jnp

    step, m, v = state
    step = step + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    m_hat_scale = 1 / (1 - b1 ** step)
    v_hat_scale = 1 / (1 - b2 ** step)

    def update(p, m, v):
        return p - learning_rate * (m * m_hat_scale / (jnp.sqrt(v * v_hat_scale) + eps) + weight_decay * p)

    return jax.tree_util.tree_map(update, params, m, v), (step, m, v)


def transformer_train_step(rng: np.random.Generator, d_model=256, heads=4, mlp=1024, batch=8,
                           seq=128, vocab=1000):
    """W8: loss and AdamW update of a one-block transformer on next-token prediction."""
    import jax

    params = transformer_params(rng, d_model, mlp, vocab, seq)
    tokens = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int32)
    zeros = jax.tree_util.tree_map(np.zeros_like, params)
    state = (np.float32(0), zeros, zeros)

    def loss(params, tokens):
        return _cross_entropy(transformer_logits(params, tokens[:, :-1], heads), tokens[:, 1:])

    def step(params, state, tokens):
        value, grads = jax.value_and_grad(loss)(params, tokens)
        params, state = adamw(params, grads, state)
        return value, params, state

    return step, (params, state, tokens)


def transformer_forward(rng: np.random.Generator, layers=12, d_model=256, heads=4, mlp=1024,
                        batch=8, seq=128, vocab=1000):
    """W11: the logits of a `layers`-block transformer (W8's block)."""
    params = transformer_params(rng, d_model, mlp, vocab, seq, layers)
    tokens = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    return (lambda params, tokens: transformer_logits(params, tokens, heads)), (params, tokens)


# --------------------------------------------------------------------- LSTM
def lstm_train_step(rng: np.random.Generator, steps=64, hidden=256, batch=32, features=256):
    """W9: loss and gradients of an LSTM run by `lax.scan` over `steps` inputs."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    params = {
        "w_x": _normal(rng, (features, 4 * hidden), features ** -0.5),
        "w_h": _normal(rng, (hidden, 4 * hidden), hidden ** -0.5),
        "b": np.zeros(4 * hidden, np.float32),
        "w_out": _normal(rng, (hidden, 1), hidden ** -0.5),
    }
    xs = rng.standard_normal((steps, batch, features), dtype=np.float32)
    targets = rng.standard_normal((steps, batch, 1), dtype=np.float32)

    def cell(p, carry, x):
        h, c = carry
        i, f, g, o = jnp.split(x @ p["w_x"] + h @ p["w_h"] + p["b"], 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h @ p["w_out"]

    def loss(p, xs, targets):
        start = (jnp.zeros((batch, hidden), jnp.float32),) * 2
        _, ys = lax.scan(lambda carry, x: cell(p, carry, x), start, xs)
        return jnp.mean(jnp.square(ys - targets))

    return jax.value_and_grad(loss), (params, xs, targets)


# ------------------------------------------------------------------- ResNet
def resnet_block_train_step(rng: np.random.Generator, batch=16, size=32, channels=64, classes=10):
    """W10: a ResNet basic block (conv-BN-relu-conv-BN + x, relu), global
    pooling and a linear classifier; batch norm in training mode (batch
    statistics, running averages returned); SGD with momentum."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def kernel():
        return _normal(rng, (3, 3, channels, channels), (9 * channels) ** -0.5)

    ones, zeros = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    params = {"conv1": kernel(), "bn1": (ones, zeros), "conv2": kernel(), "bn2": (ones, zeros),
              "head": (_normal(rng, (channels, classes), channels ** -0.5),
                       np.zeros(classes, np.float32))}
    running = {"bn1": (zeros, ones), "bn2": (zeros, ones)}
    x = rng.standard_normal((batch, size, size, channels), dtype=np.float32)
    labels = rng.integers(0, classes, batch).astype(np.int32)
    velocity = jax.tree_util.tree_map(np.zeros_like, params)

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def batch_norm(x, scale_bias, running_stats):
        mean = jnp.mean(x, axis=(0, 1, 2))
        var = jnp.var(x, axis=(0, 1, 2))
        scale, bias = scale_bias
        old_mean, old_var = running_stats
        y = (x - mean) * lax.rsqrt(var + 1e-5) * scale + bias
        return y, (0.9 * old_mean + 0.1 * mean, 0.9 * old_var + 0.1 * var)

    def loss(params, running, x, labels):
        h, stats1 = batch_norm(conv(x, params["conv1"]), params["bn1"], running["bn1"])
        h, stats2 = batch_norm(conv(jax.nn.relu(h), params["conv2"]), params["bn2"], running["bn2"])
        h = jax.nn.relu(h + x)
        w, b = params["head"]
        value = _cross_entropy(jnp.mean(h, axis=(1, 2)) @ w + b, labels)
        return value, {"bn1": stats1, "bn2": stats2}

    def step(params, velocity, running, x, labels):
        (value, running), grads = jax.value_and_grad(loss, has_aux=True)(params, running, x, labels)
        velocity = jax.tree_util.tree_map(lambda v, g: 0.9 * v + g, velocity, grads)
        params = jax.tree_util.tree_map(lambda p, v: p - 0.01 * v, params, velocity)
        return value, params, velocity, running

    return step, (params, velocity, running, x, labels)


# --------------------------------------------------------- many small programs
def _small_ops():
    """(name, function of one array) pairs: what a test suite jits, one op or a few."""
    import jax
    import jax.numpy as jnp

    return [
        ("add", lambda x: x + 1), ("mul", lambda x: x * x), ("sub", lambda x: 3 - x),
        ("div", lambda x: x / 7), ("tanh", jnp.tanh), ("exp", jnp.exp), ("log1p_abs", lambda x: jnp.log1p(jnp.abs(x))),
        ("sin", jnp.sin), ("sqrt_abs", lambda x: jnp.sqrt(jnp.abs(x))), ("relu", jax.nn.relu),
        ("sigmoid", jax.nn.sigmoid), ("gelu", jax.nn.gelu), ("clip", lambda x: jnp.clip(x, -0.5, 0.5)),
        ("where", lambda x: jnp.where(x > 0, x, 0.1 * x)), ("sum", jnp.sum),
        ("mean_0", lambda x: jnp.mean(x, axis=0)), ("max_last", lambda x: jnp.max(x, axis=-1)),
        ("argmax", lambda x: jnp.argmax(x, axis=-1)), ("cumsum", lambda x: jnp.cumsum(x, axis=0)),
        ("softmax", jax.nn.softmax), ("logsumexp", jax.nn.logsumexp),
        ("transpose", lambda x: x.T * 2), ("reshape", lambda x: x.reshape(-1)[::2]),
        ("flip", lambda x: jnp.flip(x, axis=0) + x), ("concat", lambda x: jnp.concatenate([x, -x], axis=0)),
        ("slice", lambda x: x[1:, ...] - x[:-1, ...]), ("pad", lambda x: jnp.pad(x, 1)),
        ("sort", lambda x: jnp.sort(x, axis=-1)), ("matmul_t", lambda x: x @ x.T),
        ("norm", lambda x: x / (jnp.linalg.norm(x) + 1)),
    ]


SMALL_SHAPES = ((3, 4), (8, 8), (16, 5), (2, 3), (32, 16), (7, 9), (64, 8), (5, 5), (12, 20), (4, 128))


def small_programs(rng: np.random.Generator, shapes=SMALL_SHAPES):
    """W12: each small function on each shape (30 x 10: 300 distinct
    programs), with its argument: [(name, function, argument)]. The harness
    jits, compiles and runs each once, as a test suite does."""
    return [(f"{name}{list(shape)}", function, rng.standard_normal(shape, dtype=np.float32))
            for shape in shapes for name, function in _small_ops()]
