"""The optimizer pieces of the time-to-target recipe: Muon's step, the parameter split, the WSD
schedule and auto precision's choice."""

import math

import pytest
import torch

from trainperf.config import load_recipe
from trainperf.model.transformer import Transformer
from trainperf.train.muon import Muon
from trainperf.train.optim import Optimizers, build_optimizer, lr_at, muon_params
from trainperf.train.precision import LOSS_RTOL, choose_precision, pick, probe


def reference_muon_update(grad: torch.Tensor, buf: torch.Tensor, momentum: float, steps: int = 5,
                          schedule: list[tuple[float, float, float]] | None = None,
                          norm: str = "frobenius") -> torch.Tensor:
    """Muon as Jordan et al. (2024) describe it: Nesterov momentum, then the quintic Newton-Schulz
    iteration (a, b, c) = (3.4445, -4.7750, 2.0315) (or one given triple per iteration) on the
    Frobenius-normalised matrix (or, `norm="schatten8"`, the matrix over (sum of sigma^8)^(1/8) from
    its singular values), worked on the wide orientation, scaled to AdamW's update RMS by
    0.2 sqrt(max(rows, cols))."""
    buf.mul_(momentum).add_(grad)
    g = grad + momentum * buf  # nesterov
    x = g / (g.norm() if norm == "frobenius" else torch.linalg.svdvals(g).pow(8).sum().pow(1 / 8)).clamp(min=1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for a, b, c in schedule or [(3.4445, -4.7750, 2.0315)] * steps:
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    if tall:
        x = x.T
    return x * 0.2 * math.sqrt(max(grad.shape))


def test_muon_step_is_torchs_in_bf16_and_the_reference_in_fp32():
    gen = torch.Generator().manual_seed(1)
    w0 = torch.randn(6, 9, generator=gen)
    grads = [torch.randn(6, 9, generator=gen) for _ in range(3)]
    ps = [torch.nn.Parameter(w0.clone()) for _ in range(3)]
    kw = dict(lr=0.05, weight_decay=0.1, momentum=0.95, adjust_lr_fn="match_rms_adamw")
    opts = [torch.optim.Muon([ps[0]], **kw), Muon([ps[1]], ns_dtype=torch.bfloat16, **kw),
            Muon([ps[2]], ns_dtype=torch.float32, **kw)]
    buf, ref = torch.zeros(6, 9, dtype=torch.float64), w0.double()
    for g in grads:
        for p, o in zip(ps, opts):
            p.grad = g.clone()
            o.step()
        ref = ref * (1 - 0.05 * 0.1) - 0.05 * reference_muon_update(g.double(), buf, 0.95)
    assert torch.equal(ps[0].detach(), ps[1].detach())  # same operations as torch's step
    torch.testing.assert_close(ps[2].detach().double(), ref, rtol=0, atol=1e-5)  # fp32: the reference
    assert float((ps[0].detach().double() - ref).abs().max()) > 1e-4  # while bf16 is visibly coarser
    assert set(opts[1].state[ps[1]]) == set(opts[0].state[ps[0]]) == {"momentum_buffer"}
    # the update is near-orthogonal: its singular values lie close together, unlike the gradient's
    u, g = reference_muon_update(grads[0].double(), torch.zeros(6, 9, dtype=torch.float64), 0.0), grads[0]
    assert float(torch.linalg.svdvals(u).max() / torch.linalg.svdvals(u).min()) < 2.0
    assert float(torch.linalg.svdvals(g).max() / torch.linalg.svdvals(g).min()) > 2.0


def test_muon_takes_the_block_matrices_only():
    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.seq_len=16",
                             "train.optimizer=muon", "train.muon_lr=0.02", "model.tie_embeddings=false"])
    model = Transformer(r.model)
    adamw, muon = build_optimizer(model, r, torch.device("cpu"))
    ids = muon_params(model)
    names = {n for n, p in model.named_parameters() if id(p) in ids}
    assert names == {f"layers.{i}.{m}.weight" for i in range(2)
                     for m in ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w1", "mlp.w2", "mlp.w3")}
    in_adamw = {id(p) for g in adamw.param_groups for p in g["params"]}
    assert {"tok_emb.weight", "output.weight", "norm.weight"} <= {n for n, p in model.named_parameters() if id(p) in in_adamw}
    assert not in_adamw & ids and len(in_adamw | ids) == len(list(model.parameters()))
    opts = Optimizers([model], r, torch.device("cpu"))
    opts.set_lr(1e-3)  # one schedule: Muon's LR keeps its ratio to train.lr
    adamw, muon = opts.opts[0]
    assert muon.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.02 / r.train.lr)
    assert adamw.param_groups[0]["lr"] == 1e-3
    r2 = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.seq_len=16",
                                 "train.optimizer=adamw"])
    assert len(build_optimizer(Transformer(r2.model), r2, torch.device("cpu"))) == 1  # adamw: AdamW alone


def test_muon_newton_schulz_steps_come_from_the_recipe():
    """`train.muon_ns_steps` reaches torch's group setting, and the step then matches the reference
    iteration with that many steps (the shipped tiny recipe runs 2, recipes/tiny.toml)."""
    from trainperf.config import ConfigError

    small = ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16", "train.optimizer=muon"]
    r = load_recipe("tiny", small + ["train.muon_ns_steps=2"])
    _, muon = build_optimizer(Transformer(r.model), r, torch.device("cpu"))
    assert muon.param_groups[0]["ns_steps"] == 2
    assert load_recipe("tiny").train.muon_ns_steps == 2
    with pytest.raises(ConfigError, match="train.muon_ns_steps"):
        load_recipe("tiny", ["train.muon_ns_steps=0"])
    gen = torch.Generator().manual_seed(2)
    w0, g = torch.randn(6, 9, generator=gen), torch.randn(6, 9, generator=gen)
    kw = dict(lr=0.05, weight_decay=0.0, momentum=0.95, adjust_lr_fn="match_rms_adamw")
    outs = {}
    for n in (3, 5):
        p = torch.nn.Parameter(w0.clone())
        p.grad = g.clone()
        Muon([p], ns_dtype=torch.float32, ns_steps=n, **kw).step()
        ref = w0.double() - 0.05 * reference_muon_update(g.double(), torch.zeros(6, 9, dtype=torch.float64), 0.95, steps=n)
        torch.testing.assert_close(p.detach().double(), ref, rtol=0, atol=1e-5)
        outs[n] = p.detach()
    assert not torch.allclose(outs[3], outs[5], atol=1e-4)  # the count changes the update


def test_muon_per_iteration_coefficients_come_from_the_recipe():
    """`train.muon_ns_coefficients` gives each iteration its own (a, b, c): the step is the
    reference iteration with that schedule, not torch's repeated triple; the count must be 3 per
    iteration."""
    from trainperf.config import ConfigError

    coef = [7.0, -20.0, 14.0, 3.0, -2.0, 0.4]
    small = ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16", "train.optimizer=muon",
             "train.muon_ns_steps=2"]
    r = load_recipe("tiny", small + ["train.muon_ns_coefficients=" + ",".join(map(str, coef))])
    _, muon = build_optimizer(Transformer(r.model), r, torch.device("cpu"))
    assert muon.ns_schedule == [(7.0, -20.0, 14.0), (3.0, -2.0, 0.4)]
    with pytest.raises(ConfigError, match="train.muon_ns_coefficients"):
        load_recipe("tiny", small + ["train.muon_ns_coefficients=1,2,3"])
    gen = torch.Generator().manual_seed(2)
    w0, g = torch.randn(6, 9, generator=gen), torch.randn(6, 9, generator=gen)
    p = torch.nn.Parameter(w0.clone())
    p.grad = g.clone()
    Muon([p], ns_dtype=torch.float32, ns_schedule=muon.ns_schedule, lr=0.05, weight_decay=0.0, momentum=0.95,
         adjust_lr_fn="match_rms_adamw").step()
    ref = reference_muon_update(g.double(), torch.zeros(6, 9, dtype=torch.float64), 0.95, schedule=muon.ns_schedule)
    torch.testing.assert_close(p.detach().double(), w0.double() - 0.05 * ref, rtol=0, atol=1e-5)
    repeated = reference_muon_update(g.double(), torch.zeros(6, 9, dtype=torch.float64), 0.95, steps=2)
    assert not torch.allclose(ref, repeated, atol=1e-3)  # the schedule, not torch's triple twice


def test_wsd_holds_then_anneals_linearly():
    r = load_recipe("tiny", ["train.schedule=wsd", "train.warmup_steps=10", "train.decay_steps=80",
                             "train.cooldown=0.5", "train.lr=0.01", "train.end_lr=0.001"])
    assert lr_at(4, r) == pytest.approx(0.005)
    assert lr_at(10, r) == lr_at(50, r) == 0.01  # stable until the last half of decay_steps
    assert lr_at(70, r) == pytest.approx(0.0055)  # halfway down the linear anneal
    assert lr_at(90, r) == pytest.approx(0.001) and lr_at(200, r) == pytest.approx(0.001)


def test_auto_precision_keeps_the_faster_sound_format():
    assert pick({"fp32": 1.0, "bf16": 0.4}, {"fp32": 7.0, "bf16": 7.01}).precision == "bf16"
    assert pick({"fp32": 1.0, "bf16": 1.6}, {"fp32": 7.0, "bf16": 7.01}).precision == "fp32"
    unsound = pick({"fp32": 1.0, "bf16": 0.4}, {"fp32": 7.0, "bf16": 7.0 * (1 + 2 * LOSS_RTOL)})
    assert unsound.precision == "fp32" and "off by more" in unsound.reason
    assert pick({"fp32": 1.0, "bf16": 0.4}, {"fp32": 7.0, "bf16": float("nan")}).precision == "fp32"


def test_probe_times_the_model_in_both_formats_and_ranks_agree():
    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16"])
    ticks = iter(range(1000))
    # a fake clock: every interval is 1 tick, so the measured times are equal and the losses decide
    seconds, loss = probe(r.model, 2, 16, torch.device("cpu"), clock=lambda: float(next(ticks)))
    assert seconds == {"fp32": 1.0, "bf16": 1.0}
    assert abs(loss["bf16"] - loss["fp32"]) < LOSS_RTOL * loss["fp32"] and loss["fp32"] > 3.0  # ~ln(64) at init
    # a non-main rank takes the main rank's answer, whatever its own probe said
    main_says_bf16 = choose_precision(r.model, 2, 16, torch.device("cpu"), share=lambda code: 1)
    assert main_says_bf16.precision == "bf16"


def test_probe_takes_turns_so_load_arriving_midway_weighs_on_both_formats():
    """Another process starts halfway through the probe (each tick 10x longer from the 6th clock
    reading on): the formats take turns, so each has one step before it and the best-of times
    stay equal. Probing one format after the other gave every bf16 step to the loaded half."""
    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16"])
    calls = iter(range(1000))

    def clock() -> float:
        n = next(calls)
        return float(n if n <= 5 else 5 + 10 * (n - 5))
    seconds, _ = probe(r.model, 2, 16, torch.device("cpu"), clock=clock)
    assert seconds == {"fp32": 1.0, "bf16": 1.0}


def test_auto_precision_skips_the_probe_on_a_cpu_without_bf16_arithmetic(monkeypatch):
    from trainperf.train import precision

    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16"])
    probed = []
    monkeypatch.setattr(precision, "probe", lambda *a, **k: probed.append(1) or ({"fp32": 1.0, "bf16": 0.5},
                                                                                  {"fp32": 4.0, "bf16": 4.0}))
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: None)
    plain = choose_precision(r.model, 2, 16, torch.device("cpu"))
    assert (plain.precision, probed) == ("fp32", []) and "no bf16 arithmetic" in plain.reason
    # the broadcast still runs: a rank on such a CPU takes the main rank's bf16
    assert choose_precision(r.model, 2, 16, torch.device("cpu"), share=lambda code: 1).precision == "bf16"
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: "AMX")
    assert choose_precision(r.model, 2, 16, torch.device("cpu")).precision == "bf16" and probed == [1]


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_muon_stacks_same_shape_matrices_and_gives_each_its_own_update(dtype, atol):
    """Square, wide and tall matrices (one stack per shape) get the update each would get alone,
    back in their own shape; the Muon step over all of them equals one optimizer per matrix."""
    from trainperf.train.muon import newton_schulz, orthogonalize

    gen = torch.Generator().manual_seed(3)
    shapes = [(8, 8), (8, 20), (20, 8), (8, 8), (20, 8), (5, 7)]
    ups = [torch.randn(s, generator=gen) for s in shapes]
    coef = [(3.4445, -4.7750, 2.0315)] * 3
    got = orthogonalize(ups, coef, 1e-7, dtype, stack=True)
    for u, o in zip(ups, got):
        assert o.shape == u.shape
        torch.testing.assert_close(o.float(), newton_schulz(u, coef, 1e-7, dtype).float(), rtol=0, atol=atol)
    # the Nesterov update made inside the stack is the one made outside it, bit for bit
    bufs = [torch.randn(s, generator=gen) for s in shapes]
    fused = orthogonalize(ups, coef, 1e-7, dtype, stack=True, toward=bufs, weight=0.95)
    outside = orthogonalize(torch._foreach_lerp(ups, bufs, 0.95), coef, 1e-7, dtype, stack=True)
    assert all(torch.equal(a, b) for a, b in zip(fused, outside))
    kw = dict(lr=0.05, weight_decay=0.1, momentum=0.95, adjust_lr_fn="match_rms_adamw", ns_steps=3)
    together = [torch.nn.Parameter(u.clone()) for u in ups]
    alone = [torch.nn.Parameter(u.clone()) for u in ups]
    opt, opts = Muon(together, ns_dtype=dtype, **kw), [Muon([p], ns_dtype=dtype, **kw) for p in alone]
    for _ in range(2):
        grads = [torch.randn(s, generator=gen) for s in shapes]
        for p, q, g in zip(together, alone, grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        for o in opts:
            o.step()
    for p, q in zip(together, alone):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=atol)


@pytest.mark.parametrize("shape", [(6, 20), (20, 6), (3, 6, 20), (3, 20, 6)])
def test_the_gram_form_is_the_same_polynomial_and_is_picked_for_wide_shapes(shape):
    """Newton-Schulz on the m x m side (A <- p A p, Q <- p Q, then Q X) equals the direct iteration
    in exact arithmetic (float64 here), for a tall matrix read in place too; `gram=None` takes it
    only past GRAM_RATIO (fewer products), so a near-square matrix keeps torch's own operations."""
    from trainperf.train.muon import GRAM_RATIO, newton_schulz

    gen = torch.Generator().manual_seed(5)
    coef = [(3.4445, -4.7750, 2.0315)] * 3
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    direct = newton_schulz(x, coef, 1e-7, torch.float64, gram=False)
    torch.testing.assert_close(newton_schulz(x, coef, 1e-7, torch.float64, gram=True), direct, rtol=0, atol=1e-12)
    assert max(shape[-2:]) > GRAM_RATIO * min(shape[-2:])
    xb = x.to(torch.bfloat16)
    assert torch.equal(newton_schulz(xb, coef, 1e-7, torch.bfloat16), newton_schulz(xb, coef, 1e-7, torch.bfloat16, gram=True))
    assert not torch.equal(newton_schulz(xb, coef, 1e-7, torch.bfloat16), newton_schulz(xb, coef, 1e-7, torch.bfloat16, gram=False))
    near = torch.randn(6, 9, generator=gen).to(torch.bfloat16)  # 9 = 1.5 x 6: not past the ratio
    assert torch.equal(newton_schulz(near, coef, 1e-7, torch.bfloat16), newton_schulz(near, coef, 1e-7, torch.bfloat16, gram=False))


@pytest.mark.parametrize("shape", [(6, 20), (20, 6), (3, 6, 20), (9, 9)])
@pytest.mark.parametrize("gram", [True, False])
def test_schatten8_normalisation_is_the_reference_in_both_forms(shape, gram):
    """`norm="schatten8"` divides each matrix by (sum sigma^8)^(1/8), taken from its singular values
    in the reference, from (X X^T)^2 inside the iteration: the same iterate, direct or Gram form,
    one matrix or a stack each with its own norm."""
    from trainperf.train.muon import newton_schulz

    gen = torch.Generator().manual_seed(8)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    # the tuned quintic pair, and a cubic (c = 0: no A^2 term in the first iteration)
    for coef in ([(7.9942, -21.9939, 15.5244), (3.5786, -2.4025, 0.4462)], [(1.5, -0.5, 0.0)] * 3):
        got = newton_schulz(x, coef, 1e-7, torch.float64, gram=gram, norm="schatten8")
        for i, m in enumerate(x.reshape(-1, *shape[-2:])):
            want = reference_muon_update(m, torch.zeros_like(m), 0.0, schedule=coef, norm="schatten8")
            torch.testing.assert_close(got.reshape(-1, *shape[-2:])[i], want / (0.2 * math.sqrt(max(m.shape))),
                                       rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="norm"):
        newton_schulz(x, [(3.4445, -4.7750, 2.0315)], 1e-7, torch.float64, gram=gram, norm="spectral")


def test_schatten8_takes_a_dominated_spectrum_further_in_the_same_iterations():
    """What the tighter bound is for: a momentum whose top direction dominates (a small batch's) enters
    the iteration larger under Schatten-8 than under Frobenius, so after the same two iterations its
    other directions sit nearer 1, while the top one stays bounded; the recipe key reaches Muon."""
    from trainperf.config import ConfigError
    from trainperf.train.muon import newton_schulz

    gen = torch.Generator().manual_seed(9)
    u, _ = torch.linalg.qr(torch.randn(128, 128, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(256, 128, generator=gen, dtype=torch.float64))
    sv = torch.cat([torch.tensor([1.0], dtype=torch.float64), torch.full((127,), 0.07, dtype=torch.float64)])
    x = (u * sv) @ v.T  # top singular value 1, the rest 0.07: Frobenius norm 1.27, Schatten-8 1.00
    coef = [(3.4445, -4.7750, 2.0315)] * 2
    out = {n: torch.linalg.svdvals(newton_schulz(x, coef, 1e-7, torch.float64, norm=n)) for n in ("frobenius", "schatten8")}
    assert out["schatten8"][1:].min() > 1.2 * out["frobenius"][1:].max()
    assert out["schatten8"].max() < 1.2
    small = ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16", "train.optimizer=muon"]
    r = load_recipe("tiny", small + ["train.muon_ns_norm=schatten8"])
    assert build_optimizer(Transformer(r.model), r, torch.device("cpu"))[1].form["norm"] == "schatten8"
    assert load_recipe("tiny").train.muon_ns_norm == "schatten8"
    with pytest.raises(ConfigError, match="train.muon_ns_norm"):
        load_recipe("tiny", ["train.muon_ns_norm=spectral"])


def _as_wanted_and_nesterov_inside(ups, want, coef, dtype, atol, gen, **kw) -> None:
    """`orthogonalize(ups, **kw)` gives `want`, stacked or one unit at a time, each in its update's
    shape; the Nesterov update made inside the stack is the one made outside it, bit for bit."""
    from trainperf.train.muon import orthogonalize

    for stack in (True, False):
        got = orthogonalize(ups, coef, 1e-7, dtype, stack=stack, **kw)
        for g, w, u in zip(got, want, ups):
            assert g.shape == u.shape
            torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=atol)
    bufs = [torch.randn(u.shape, generator=gen) for u in ups]
    fused = orthogonalize(ups, coef, 1e-7, dtype, stack=True, toward=bufs, weight=0.95, **kw)
    outside = orthogonalize(torch._foreach_lerp(ups, bufs, 0.95), coef, 1e-7, dtype, stack=True, **kw)
    assert all(torch.equal(a, b) for a, b in zip(fused, outside))


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_head_blocks_are_orthogonalised_each_on_its_own(dtype, atol):
    """A matrix split into head blocks (rows as wq's heads, columns as wo's) gets each block's own
    update, put back in place, stacked with other matrices' blocks or one matrix at a time; the
    Nesterov update made inside the stack is the one made outside it."""
    from trainperf.train.muon import newton_schulz, orthogonalize

    gen = torch.Generator().manual_seed(4)
    coef = [(3.4445, -4.7750, 2.0315)] * 3
    ups = [torch.randn(16, 12, generator=gen), torch.randn(12, 16, generator=gen), torch.randn(16, 12, generator=gen),
           torch.randn(12, 12, generator=gen)]
    blocks = [(0, 4), (1, 4), (0, 4), None]
    want = [torch.cat([newton_schulz(b, coef, 1e-7, dtype) for b in ups[0].chunk(4, 0)], 0),
            torch.cat([newton_schulz(b, coef, 1e-7, dtype) for b in ups[1].chunk(4, 1)], 1),
            torch.cat([newton_schulz(b, coef, 1e-7, dtype) for b in ups[2].chunk(4, 0)], 0),
            newton_schulz(ups[3], coef, 1e-7, dtype)]
    whole = orthogonalize(ups, coef, 1e-7, dtype, stack=True)
    assert not torch.allclose(whole[0].float(), want[0].float(), atol=0.1)  # blocks are not the whole
    _as_wanted_and_nesterov_inside(ups, want, coef, dtype, atol, gen, blocks=blocks)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_joint_updates_are_one_matrix_and_step_at_its_size(dtype, atol):
    """Joint updates (a gate and an up projection) are orthogonalised as their rows stacked into
    one matrix, stacked with another pair or one unit at a time, and come back each in its own
    shape; the Nesterov update made inside is the one made outside; Muon steps them at the joint
    matrix's size (match_rms_adamw: 0.2 sqrt(max(rows, cols)) of the joint shape)."""
    from trainperf.train.muon import _adjust_lr, newton_schulz, orthogonalize

    gen = torch.Generator().manual_seed(6)
    coef = [(3.4445, -4.7750, 2.0315)] * 3
    ups = [torch.randn(10, 8, generator=gen) for _ in range(4)] + [torch.randn(8, 10, generator=gen)]
    joint = [[0, 1], [2, 3]]
    want = [torch.cat([ups[0], ups[1]]), torch.cat([ups[2], ups[3]])]
    want = [o for w in want for o in newton_schulz(w, coef, 1e-7, dtype).split(10)] + [newton_schulz(ups[4], coef, 1e-7, dtype)]
    alone = orthogonalize(ups, coef, 1e-7, dtype, stack=True)
    assert not torch.allclose(alone[0].float(), want[0].float(), atol=0.05)  # joint is not each alone
    _as_wanted_and_nesterov_inside(ups, want, coef, dtype, atol, gen, joint=joint)
    with pytest.raises(ValueError, match="cannot stack"):
        orthogonalize(ups, coef, 1e-7, dtype, joint=[[0, 4]])

    params = [torch.nn.Parameter(u.clone()) for u in ups[:2]]
    kw = dict(lr=0.05, weight_decay=0.1, momentum=0.95, adjust_lr_fn="match_rms_adamw", ns_steps=3, nesterov=False)
    opt = Muon(params, ns_dtype=dtype, joint=[tuple(params)], **kw)
    grads = [torch.randn(u.shape, generator=gen) for u in ups[:2]]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    bufs = [0.05 * g for g in grads]  # the first momentum step: lerp(0, g, 1 - 0.95)
    ortho = newton_schulz(torch.cat(bufs), coef, 1e-7, dtype).float().split(10)
    step = _adjust_lr(0.05, "match_rms_adamw", torch.Size((20, 8)))
    for p, u, o in zip(params, ups, ortho):
        torch.testing.assert_close(p.detach(), u * (1 - 0.05 * 0.1) - step * o, rtol=0, atol=1e-6)


def test_muon_joint_gate_up_pairs_each_gated_mlp():
    """`train.muon_joint_gate_up`: each layer's w1 and w3 one unit; off, none; a plain MLP has none."""
    from trainperf.train.optim import gate_up_pairs

    sets = ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "train.precision=fp32"]
    r = load_recipe("tiny", sets + ["train.muon_joint_gate_up=true"])
    model = Transformer(r.model)
    pairs = gate_up_pairs(model)
    assert [(a is m.mlp.w1.weight, b is m.mlp.w3.weight) for (a, b), m in zip(pairs, model.layers.values())] == [(True, True)] * 2
    assert build_optimizer(model, r, torch.device("cpu"))[1].joint == pairs
    off = load_recipe("tiny", sets + ["train.muon_joint_gate_up=false"])
    assert build_optimizer(Transformer(off.model), off, torch.device("cpu"))[1].joint == []
    gpt = load_recipe("tiny", sets + ["model.family=gpt", "train.muon_joint_gate_up=true"])
    assert gate_up_pairs(Transformer(gpt.model)) == []


def test_muon_per_head_splits_the_attention_projections_by_head():
    """`train.muon_per_head`: wq, wk, wv by rows (wk and wv by the key/value heads under GQA), wo by
    columns, the MLP's matrices whole; off, every matrix is whole."""
    from trainperf.train.optim import attention_heads

    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "model.n_head=4",
                             "model.n_kv_head=2", "train.precision=fp32", "train.muon_per_head=true"])
    model = Transformer(r.model)
    a = model.layers["0"].attn
    heads = attention_heads(model)
    assert heads[a.wq.weight] == (0, 4) and heads[a.wk.weight] == heads[a.wv.weight] == (0, 2)
    assert heads[a.wo.weight] == (1, 4) and len(heads) == 8
    muon = build_optimizer(model, r, torch.device("cpu"))[1]
    assert muon.blocks == heads
    off = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=2", "model.d_model=32", "train.precision=fp32",
                               "train.muon_per_head=false"])
    assert build_optimizer(Transformer(off.model), off, torch.device("cpu"))[1].blocks == {}


def test_a_decisive_probe_verdict_is_kept_for_the_next_run_of_the_same_shape(monkeypatch, tmp_path):
    """The second run on this machine takes the first one's verdict without probing; another model
    shape probes anew; a close call (bf16 within DECISIVE of fp32) is never kept."""
    from trainperf.train import precision

    r = load_recipe("tiny", ["model.vocab_size=64", "model.n_layer=1", "model.d_model=32", "model.seq_len=16"])
    timed = {"fp32": 1.0, "bf16": 0.5}
    probed = []
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: "AVX512-BF16")
    monkeypatch.setattr(precision, "probe", lambda *a, **k: probed.append(1) or (dict(timed), {"fp32": 4.0, "bf16": 4.0}))
    first = choose_precision(r.model, 2, 16, torch.device("cpu"), cache=tmp_path)
    again = choose_precision(r.model, 2, 16, torch.device("cpu"), cache=tmp_path)
    assert first.precision == again.precision == "bf16" and len(probed) == 1
    assert "earlier run" in again.reason and again.seconds_per_step == first.seconds_per_step
    choose_precision(r.model, 4, 16, torch.device("cpu"), cache=tmp_path)  # another micro-batch: its own probe
    assert len(probed) == 2
    timed["bf16"] = 1.0 / (0.9 * precision.DECISIVE)  # bf16 faster, but not by DECISIVE
    for _ in range(2):
        assert choose_precision(r.model, 8, 16, torch.device("cpu"), cache=tmp_path).precision == "bf16"
    assert len(probed) == 4
