"""Plain per-agent Python loops of every algorithm, written from the update tables.

Each reference keeps one numpy vector per agent and combines with neighbours
through explicit sums ``sum_j w_ij z_j``; the vectorised implementations must
agree with them step by step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

import decentopt as dopt
from decentopt.algorithms.ad_psgd import random_matching

Grad = Callable[[int, np.ndarray], np.ndarray]  # (agent, x_i) -> g_i


def neighbours(W: np.ndarray) -> tuple[tuple[int, ...], ...]:
    n = len(W)
    return tuple(tuple(j for j in range(n) if j != i and W[i, j] != 0) for i in range(n))


def combine(W: np.ndarray, z: list[np.ndarray], i: int) -> np.ndarray:
    return sum(W[i, j] * z[j] for j in range(len(z)) if W[i, j] != 0)


def mom(m: np.ndarray, g: np.ndarray, beta: float, damp: bool, nesterov: bool = False):
    """Heavy ball: returns (new buffer, direction)."""
    s = (1 - beta) if damp else 1.0
    m_new = beta * m + s * g
    return m_new, (beta * m_new + s * g if nesterov else m_new)


def compressed(spec: str, v: np.ndarray, agent: int, round_: int) -> np.ndarray:
    """``Q(v)`` of one agent, through the operator's wire format (encode, then decode)."""
    codec = dopt.compression.parse(spec)
    rows = torch.from_numpy(v).reshape(1, -1)
    data = codec.encode(rows, agent, round_)
    return codec.decode(data, agent, round_, 1, v.size, rows.dtype).numpy().reshape(v.shape)


def choco(W, target, x_hat, s, hp, t):
    """CHOCO-gossip, agent by agent: q_i = Q(target_i - x_hat_i); x_hat += q; s += W q."""
    n = len(target)
    spec, gamma = hp.get("compression", "none"), hp.get("gamma", 1.0)
    q = [compressed(spec, target[i] - x_hat[i], i, t) for i in range(n)]
    x_hat = [x_hat[i] + q[i] for i in range(n)]
    s = [s[i] + combine(W, q, i) for i in range(n)]
    return [target[i] + gamma * (s[i] - x_hat[i]) for i in range(n)], x_hat, s


def relay(W, half, x0, msgs, counts):
    """RelaySum with explicit messages on the edges of the tree of W: returns the new x and
    the messages and counts sent this round, keyed (sender, receiver)."""
    n = len(half)
    nbrs = [[j for j in range(n) if j != i and W[i, j] != 0] for i in range(n)]
    new_msgs, new_counts = {}, {}
    for i in range(n):
        for j in nbrs[i]:
            others = [k for k in nbrs[i] if k != j]
            new_msgs[i, j] = half[i] + sum((msgs.get((k, i), 0.0) for k in others), 0.0)
            new_counts[i, j] = 1 + sum(counts.get((k, i), 0) for k in others)
    x = []
    for i in range(n):
        heard = sum(new_counts[k, i] for k in nbrs[i])
        total = half[i] + sum((new_msgs[k, i] for k in nbrs[i]), 0.0)
        x.append((total + (n - 1 - heard) * x0[i]) / n)
    return x, new_msgs, new_counts


def run_reference(name: str, hp: dict, W: np.ndarray, x0: list[np.ndarray], grad_fn, steps: int):
    """Returns the list of iterates (one list of agent vectors per step, after the step)."""
    n = len(x0)
    alpha = hp["lr"]
    beta = hp.get("beta", 0.0)
    damp = hp.get("dampening", True)
    nest = hp.get("nesterov", False)
    x = [v.copy() for v in x0]
    zeros = [np.zeros_like(v) for v in x0]
    m = [v.copy() for v in zeros]
    psi = [v.copy() for v in x0]
    y = [v.copy() for v in zeros]
    u = [v.copy() for v in zeros]
    g_prev = [v.copy() for v in zeros]
    x_prev, step_prev = [v.copy() for v in x0], [v.copy() for v in zeros]
    d, q = [v.copy() for v in zeros], [v.copy() for v in zeros]
    x_hat, s = [v.copy() for v in zeros], [v.copy() for v in zeros]
    w = [1.0] * n  # push-sum weights
    msgs, counts = {}, {}
    sent_late: tuple[list, list] = ([], [])
    out = []
    for t in range(steps):
        g = [grad_fn(t, i, x[i]) for i in range(n)]
        if name == "dsgd":
            z = [x[i] - alpha * g[i] for i in range(n)]
            x = [combine(W, z, i) for i in range(n)]
        elif name == "dmsgd":
            md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
            m = [a for a, _ in md]
            z = [x[i] - alpha * d for i, (_, d) in enumerate(md)]
            x = [combine(W, z, i) for i in range(n)]
        elif name == "decentlam":
            z = [x[i] - alpha * g[i] for i in range(n)]
            gt = [(x[i] - combine(W, z, i)) / alpha for i in range(n)]
            md = [mom(m[i], gt[i], beta, damp, nest) for i in range(n)]
            m = [a for a, _ in md]
            x = [x[i] - alpha * d for i, (_, d) in enumerate(md)]
        elif name == "qg_dsgdm":
            mu = hp.get("mu") or beta
            d = [mom(m[i], g[i], beta, damp, nest)[1] for i in range(n)]
            z = [x[i] - alpha * d[i] for i in range(n)]
            x_new = [combine(W, z, i) for i in range(n)]
            m = [mu * m[i] + (1 - mu) * (x[i] - x_new[i]) / alpha for i in range(n)]
            x = x_new
        elif name in ("dsgt", "dsgt_hb"):
            if t == 0:
                y = [gi.copy() for gi in g]
            elif hp.get("atc", True):
                z = [y[i] + g[i] - g_prev[i] for i in range(n)]
                y = [combine(W, z, i) for i in range(n)]
            else:  # Pu & Nedic: y+ = W y + g+ - g
                y = [combine(W, y, i) + g[i] - g_prev[i] for i in range(n)]
            if name == "dsgt":
                direction = y
            else:
                md = [mom(u[i], y[i], beta, damp, nest) for i in range(n)]
                u = [a for a, _ in md]
                direction = [d for _, d in md]
            z = [x[i] - alpha * direction[i] for i in range(n)]
            x = [combine(W, z, i) for i in range(n)]
            g_prev = g
        elif name in ("ed", "edm"):
            if name == "edm":
                md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
                m = [a for a, _ in md]
                direction = [d for _, d in md]
            else:
                direction = g
            psi_new = [x[i] - alpha * direction[i] for i in range(n)]
            phi = [psi_new[i] + x[i] - psi[i] for i in range(n)]
            psi = psi_new
            x = [combine(W, phi, i) for i in range(n)]
        elif name == "extra":
            step = [alpha * g[i] for i in range(n)]
            if t == 0:
                x_new = [combine(W, x, i) - step[i] for i in range(n)]
            else:  # X+ = (I + W) X - (I + W)/2 X_prev - (alpha G - alpha G_prev)
                wx, wp = (
                    [combine(W, x, i) for i in range(n)],
                    [combine(W, x_prev, i) for i in range(n)],
                )
                x_new = [
                    x[i] + wx[i] - (x_prev[i] + wp[i]) / 2 - step[i] + step_prev[i]
                    for i in range(n)
                ]
            x_prev, step_prev, x = x, step, x_new
        elif name == "nids":
            c = hp.get("c", 0.5)
            psi_new = [x[i] - alpha * g[i] for i in range(n)]
            phi = [psi_new[i] + x[i] - psi[i] for i in range(n)]
            psi = psi_new
            x = [(1 - c) * phi[i] + c * combine(W, phi, i) for i in range(n)]
        elif name == "mt":
            s = (1 - beta) if damp else 1.0
            if t == 0:
                gbar = sum(g) / n
                m = [s * (g[i] - gbar) / (1 - beta) for i in range(n)]
            md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
            q_new = [q for _, q in md]
            m = [a for a, _ in md]
            if t == 0:
                d = [sum(q_new) / n for _ in range(n)]
            else:
                d = [combine(W, d, i) + q_new[i] - q[i] for i in range(n)]
            x = [combine(W, x, i) - alpha * d[i] for i in range(n)]
            q = q_new
        elif name == "choco_dsgd":
            half = [x[i] - alpha * g[i] for i in range(n)]
            x, x_hat, s = choco(W, half, x_hat, s, hp, t)
        elif name in ("choco_ed", "choco_edm"):
            if name == "choco_edm":
                md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
                m = [a for a, _ in md]
                direction = [d for _, d in md]
            else:
                direction = g
            psi_new = [x[i] - alpha * direction[i] for i in range(n)]
            phi = [psi_new[i] + x[i] - psi[i] for i in range(n)]
            psi = psi_new
            x, x_hat, s = choco(W, phi, x_hat, s, hp, t)
        elif name == "sgp":  # push-sum of numerators u = x w and weights w
            md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
            m = [a for a, _ in md]
            u = [x[i] * w[i] - alpha * md[i][1] for i in range(n)]
            u, w = [combine(W, u, i) for i in range(n)], [combine(W, w, i) for i in range(n)]
            x = [u[i] / w[i] for i in range(n)]
        elif name == "push_diging":  # Nedic, Olshevsky & Shi's recursion, as printed
            if t == 0:
                y = [gi.copy() for gi in g]
            else:
                y = [combine(W, y, i) + g[i] - g_prev[i] for i in range(n)]
            u = [x[i] * w[i] - alpha * y[i] for i in range(n)]
            u, w = [combine(W, u, i) for i in range(n)], [combine(W, w, i) for i in range(n)]
            x = [u[i] / w[i] for i in range(n)]
            g_prev = g
        elif name == "relaysgd":
            md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
            m = [a for a, _ in md]
            half = [x[i] - alpha * md[i][1] for i in range(n)]
            x, msgs, counts = relay(W, half, x0, msgs, counts)
        elif name == "osgp":  # SGP whose neighbours' messages arrive tau = 1 late
            md = [mom(m[i], g[i], beta, damp, nest) for i in range(n)]
            m = [a for a, _ in md]
            u = [x[i] * w[i] - alpha * md[i][1] for i in range(n)]
            late_u, late_w = sent_late if t else (list(x0), [1.0] * n)
            sent_late = (u, w)
            mixed = [
                (
                    W[i, i] * u[i] + sum(W[i, j] * late_u[j] for j in range(n) if j != i),
                    W[i, i] * w[i] + sum(W[i, j] * late_w[j] for j in range(n) if j != i),
                )
                for i in range(n)
            ]
            w = [b for _, b in mixed]
            x = [a / b for a, b in mixed]
        elif name == "ad_psgd":  # pairs of a random matching average, then step
            partner = random_matching(neighbours(W), hp.get("seed", 0), t)
            x = [
                (x[i] + x[partner[i]]) / 2 - alpha * g[i] if partner[i] >= 0
                else x[i] - alpha * g[i]
                for i in range(n)
            ]  # fmt: skip
        elif name == "k_gt":  # K local steps corrected by c (here in m), then one round
            K, server = hp.get("local_steps", 4), hp.get("server_lr", 1.0)
            x = [x[i] - alpha * (g[i] + m[i]) for i in range(n)]
            if (t + 1) % K == 0:
                delta = [x[i] - psi[i] for i in range(n)]
                sent = [psi[i] + server * delta[i] for i in range(n)]
                mixed = [combine(W, delta, i) for i in range(n)]
                m = [m[i] + (delta[i] - mixed[i]) / (K * alpha) for i in range(n)]
                x = [combine(W, sent, i) for i in range(n)]
                psi = [v.copy() for v in x]  # the round's starting point
        elif name == "led":  # tau local steps corrected by y, then one round
            tau = hp.get("local_steps", 4)
            dual = hp.get("dual") or 1.0 / tau
            x = [x[i] - alpha * g[i] - dual * y[i] for i in range(n)]
            if (t + 1) % tau == 0:
                mixed = [combine(W, x, i) for i in range(n)]
                y = [y[i] + x[i] - mixed[i] for i in range(n)]
                x = mixed
        else:
            raise KeyError(name)
        out.append([v.copy() for v in x])
    return out
