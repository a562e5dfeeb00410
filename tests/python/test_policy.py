# SPDX-License-Identifier: MIT
"""nelssa.Router and nelssa.ThresholdCtl against the formulas of
Documentation/policy.rst, computed here in float64."""

import errno
import math

import pytest

import nelssa

LLAMA3_8B = dict(layers=32, kv_heads=8, head_dim=128)
# Documentation/policy.rst's built-in profiles (the values, not the code's).
PROFILES = {"h100-nvl": dict(gpu_bw=3.9e12, pnm_bw=76.8e9, t_base=10e-6, t_dev=1e-6,
                             t_host=2e-6),
            "h200": dict(gpu_bw=4.8e12, pnm_bw=76.8e9, t_base=10e-6, t_dev=1e-6,
                         t_host=2e-6)}


def crossover_ref(p, layers, kv_heads, head_dim, n, C=16.0, S=0.04, elem=2):
    m_kv = 2.0 * layers * kv_heads * head_dim * elem
    t_comm = layers * (p["t_base"] + n * p["t_dev"] + (p["t_host"] if n > 1 else 0.0))
    bracket = (C - 1) / (C * p["gpu_bw"]) - S / (n * p["pnm_bw"])
    return math.inf if bracket <= 0 else t_comm / (m_kv * bracket)


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("devices", [1, 2, 4, 8])
def test_crossover_matches_the_formula(profile, devices):
    r = nelssa.Router(profile, devices=devices, **LLAMA3_8B)
    want = crossover_ref(PROFILES[profile], n=devices, **LLAMA3_8B)
    got = r.crossover()
    assert got == want if math.isinf(want) else got == pytest.approx(want, rel=1e-12)
    assert r.t_input == got and r.profile == profile and r.devices == devices
    assert r.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_documented_crossovers():
    # The table in policy.rst: h100-nvl 35,455 at N = 4, h200 37,500 at N = 8.
    assert round(nelssa.Router("h100-nvl", devices=4, **LLAMA3_8B).crossover()) == 35455
    assert round(nelssa.Router("h200", devices=8, **LLAMA3_8B).crossover()) == 37500


def test_route_by_threshold_and_admission_counts():
    r = nelssa.Router("h100-nvl", devices=4, **LLAMA3_8B)
    r.gpu_kv = 50_000 * r.kv_bytes_per_token
    r.t_input = 10_000
    assert r.route(9_999) == nelssa.ROUTE_GPU
    assert r.pnm_requests == 0
    assert r.route(10_000, 12_000) == nelssa.ROUTE_PNM
    assert (r.pnm_requests, r.pnm_tokens, r.pnm_final) == (1, 10_000, 12_000)
    r.grow(5, 12_000)
    assert r.pnm_tokens == 10_005
    r.leave(10_005, 12_000)
    assert (r.pnm_requests, r.pnm_tokens, r.pnm_final) == (0, 0, 0)
    # Too long for the pool: the PNM tier whatever the threshold.
    r.t_input = 1e9
    assert r.fits(60_000) == nelssa.FITS_PNM
    assert r.route(60_000) == nelssa.ROUTE_PNM
    # Fits neither tier: refused, with the reason.
    assert r.fits(1e12) == 0
    assert r.route(1e12) == nelssa.ROUTE_REFUSE
    assert r.why


def test_pnm_step_of_paces_requests_only_the_tier_holds():
    r = nelssa.Router("h100-nvl", devices=4, **LLAMA3_8B)
    r.gpu_kv = 50_000 * r.kv_bytes_per_token
    r.t_input = 10_000
    assert r.route(20_000, 20_000) == nelssa.ROUTE_PNM
    assert r.route(80_000, 80_000) == nelssa.ROUTE_PNM       # over the pool: the tier only
    t_gpu = (8.03e9 * 2 + r.gpu_kv) / 3.9e12
    held, extra = r.pnm_step_of(20_000, t_gpu), r.pnm_step_of(80_000, t_gpu)
    assert 0 < held < extra
    # A request alone on the tier takes at least the tier's step for its tokens.
    assert held >= r.pnm_step_time(20_000, 1) * (1 - 1e-12)
    with pytest.raises(ValueError):
        r.pnm_step_of(-1, t_gpu)


def test_pick_migration_largest_past_the_threshold():
    r = nelssa.Router("h100-nvl", devices=4, **LLAMA3_8B)
    r.t_input = 1_000
    ctx = [500, 4_000, 2_000, 8_000, 900]
    assert r.pick_migration(ctx, None, 0.95, 0.9) == 3
    assert r.pick_migration(ctx, None, 0.5, 0.9) == -1          # below the watermark
    assert r.pick_migration([10, 20], None, 0.95, 0.9) == -1    # none past t_input
    assert r.pick_migration(ctx, [c + 100 for c in ctx], 0.95, 0.9) in (-1, 1, 2, 3)
    with pytest.raises(ValueError):
        r.pick_migration(ctx, [1, 2], 0.95, 0.9)


def test_profile_file(tmp_path):
    f = tmp_path / "node7.profile"
    f.write_text("# measured\nbase = h200\nname = node7\npnm_bw = 5.5e10\nt_base = 12e-6\n")
    r = nelssa.Router(str(f), devices=8, **LLAMA3_8B)
    p = dict(PROFILES["h200"], pnm_bw=5.5e10, t_base=12e-6)
    assert r.profile == "node7"
    assert r.crossover() == pytest.approx(crossover_ref(p, n=8, **LLAMA3_8B), rel=1e-12)


def test_bad_input(tmp_path):
    with pytest.raises(nelssa.Error) as e:
        nelssa.Router("no-such-profile", **LLAMA3_8B)
    assert e.value.errno == errno.ENOENT and "no-such-profile" in str(e.value)
    bad = tmp_path / "bad.profile"
    bad.write_text("gpu_bw = fast\n")
    with pytest.raises(nelssa.Error) as e:
        nelssa.Router(str(bad), **LLAMA3_8B)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(nelssa.Error) as e:
        nelssa.Router("h200", layers=0, kv_heads=8, head_dim=128)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(nelssa.Error):
        nelssa.Router("h200", select=1.5, **LLAMA3_8B)
    r = nelssa.Router("h200", **LLAMA3_8B)
    with pytest.raises(ValueError):
        r.route(-1)
    with pytest.raises(ValueError):
        r.route(10, prev=7)
    with pytest.raises(OverflowError):
        nelssa.Router("h200", layers=-1, kv_heads=8, head_dim=128)
    with pytest.raises(TypeError):
        r.pick_migration(7, None, 0.9, 0.9)
    with pytest.raises(TypeError):
        r.pick_migration(["x"], None, 0.9, 0.9)
    with pytest.raises(ValueError):
        r.grow(float("nan"), 10)
    with pytest.raises(ValueError):
        r.leave(-5)
    assert r.pnm_tokens == 0

    class Shrinking:
        """A number whose conversion empties the list being read."""
        def __float__(self):
            ctx.clear()
            return 1.0

    ctx = [Shrinking(), 2.0, 3.0, 4.0]
    assert r.pick_migration(ctx, None, 0.1, 0.9) == -1


def test_threshold_controller_follows_the_control_law():
    base = 40_000.0
    c = nelssa.ThresholdCtl(base)
    assert (c.base, c.x, c.period, c.gain, c.max_step) == (base, 0.0, 60.0, 0.2, 0.25)
    # Less than a period of samples: nothing moves.
    assert c.update(1.0, 0.0, 30.0) == base
    # A full period with the GPU busier by 1: x -= min(gain * 1, max_step).
    assert c.update(1.0, 0.0, 30.0) == pytest.approx(base * 2 ** -0.2)
    assert c.x == pytest.approx(-0.2)
    # Inside the deadband: x holds.
    t = c.update(0.1, 0.0, 60.0)
    assert t == pytest.approx(base * 2 ** -0.2)
    # Never below base * 2^x_min.
    for _ in range(50):
        t = c.update(5.0, 0.0, 60.0)
    assert t == pytest.approx(base * 2 ** c.x_min)
    with pytest.raises(ValueError):
        c.update(1.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        nelssa.ThresholdCtl(0.0)
