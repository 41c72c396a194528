"""Long site × time tables → Sequences (efa.spatial): missing-value sentinels, constant
coordinates, zero scales."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa import spatial
from efa.core.families import Gaussian


def test_constant_coordinates_and_zero_scales(recwarn):
    with pytest.raises(ValueError, match="scale.0. = 0.0 must be positive"):
        efa.Attribute("tau", size=2, scale=[0.0, 1.0])
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        efa.Value("y", Gaussian(), scale=0.0)
    df = pd.DataFrame({"site": [0, 1, 2] * 4, "time": np.repeat(range(4), 3),
                       "lat": 40.0, "lon": [1.0, 2.0, 3.0] * 4, "y": np.arange(12.0)})
    data = spatial.sites_to_sequences(df, site="site", time="time", lat="lat", lon="lon",
                                      value="y")
    with pytest.warns(UserWarning, match=r"coordinate 0 \(lat\) is constant"):
        model = spatial.spatial_efa(data, num_layers=1)
    assert torch.isfinite(model.predict_mean(data)["value"]).all()
    single = spatial.sites_to_sequences(df[df.site == 0], site="site", time="time", lat="lat",
                                        lon="lon", value="y")
    with pytest.warns(UserWarning, match="constant"):
        model = spatial.spatial_efa(single, num_layers=1)
    assert torch.isfinite(model.predict_mean(single)["value"]).all()


def test_missing_value_sentinels():
    df = pd.DataFrame({"site": [0, 1] * 3, "time": np.repeat(range(3), 2), "lat": [1.0, 2.0] * 3,
                       "lon": [3.0, 4.0] * 3, "t": [50.0, -99.0, 51.0, 52.0, 49.0, 50.0]})
    kw = dict(site="site", time="time", lat="lat", lon="lon", value="t")
    with pytest.warns(UserWarning, match="1 values equal to -99.*missing=-99"):
        spatial.sites_to_sequences(df, **kw)
    data = spatial.sites_to_sequences(df, missing=-99, **kw)
    assert not data.observed["value"][0, 1] and data.observed["value"].sum() == 5


def test_spatial_efa_learns_its_noise_by_default():
    """The default learns one σ (a likelihood with meaning), initialised at the values'
    standard deviation; "heteroscedastic" reads out a scale per prediction; "fixed" is the
    paper's."""
    from efa.core.families import Gaussian, HeteroscedasticGaussian, LearnedGaussian

    df = pd.DataFrame({"site": [0, 1, 2] * 4, "time": np.repeat(range(4), 3),
                       "lat": [1.0, 2.0, 3.0] * 4, "lon": [3.0, 4.0, 5.0] * 4,
                       "t": np.arange(12.0)})
    data = spatial.sites_to_sequences(df, site="site", time="time", lat="lat", lon="lon",
                                      value="t")
    kinds = {noise: type(spatial.spatial_efa(data, num_layers=1, noise=noise).field(
        "value").family) for noise in ("heteroscedastic", "learned", "fixed")}
    assert kinds == {"heteroscedastic": HeteroscedasticGaussian, "learned": LearnedGaussian,
                     "fixed": Gaussian}
    assert type(spatial.spatial_efa(data, num_layers=1).field("value").family) is \
        LearnedGaussian
    learned = spatial.spatial_efa(data, num_layers=1, noise="learned").field("value").family
    assert float(learned.sigma) == pytest.approx(float(data.fields["value"].std()), rel=1e-6)
    with pytest.raises(ValueError, match="noise must be"):
        spatial.spatial_efa(data, noise="none")
