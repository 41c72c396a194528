"""Distances on the sphere, for spatial data given as (latitude, longitude) in degrees."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

EARTH_RADIUS_KM = 6371.0  # mean Earth radius
LATITUDES = (-90.0, 90.0)
# Both conventions are in use: east-west in [-180, 180] and eastward in [0, 360].
LONGITUDES = (-180.0, 360.0)


def off_the_globe(lat: npt.ArrayLike, lon: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Which latitudes and longitudes are not degrees on the globe.

    Parameters
    ----------
    lat, lon : array-like
        Latitudes and longitudes, in degrees.

    Returns
    -------
    bad_lat, bad_lon : numpy.ndarray of bool
        True where a latitude is not finite or outside :data:`LATITUDES`, and where a
        longitude is not finite or outside :data:`LONGITUDES` (either convention).

    Examples
    --------
    >>> from efa.geo import off_the_globe
    >>> [m.tolist() for m in off_the_globe([45.0, 130.0], [350.0, 10.0])]
    [[False, True], [False, False]]
    """
    out = []
    for x, (lo, hi) in ((lat, LATITUDES), (lon, LONGITUDES)):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(invalid="ignore"):  # NaN compares False; ~isfinite catches it
            out.append(~np.isfinite(x) | (x < lo) | (x > hi))
    return out[0], out[1]


def haversine_km(lat1: npt.ArrayLike, lon1: npt.ArrayLike, lat2: npt.ArrayLike,
                 lon2: npt.ArrayLike) -> np.ndarray:
    """Great-circle distance in km between points in degrees (numpy broadcasting applies).

    The haversine formula on a sphere of the mean Earth radius, 6371 km.

    Parameters
    ----------
    lat1, lon1 : array-like
        The first points' latitudes and longitudes, in degrees.
    lat2, lon2 : array-like
        The second points' latitudes and longitudes, in degrees.

    Returns
    -------
    numpy.ndarray
        The distances in km, float64, of the four inputs' broadcast shape.

    Examples
    --------
    >>> from efa.geo import haversine_km
    >>> round(float(haversine_km(0, 0, 0, 1)), 1)  # one degree along the equator
    111.2
    """
    phi1, lam1, phi2, lam2 = (
        np.radians(np.asarray(x, dtype=np.float64)) for x in (lat1, lon1, lat2, lon2)
    )
    a = (
        np.sin((phi2 - phi1) / 2) ** 2
        + np.cos(phi1) * np.cos(phi2) * np.sin((lam2 - lam1) / 2) ** 2
    )
    # clip: rounding can push a slightly above 1 for antipodal points.
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def nearest_neighbours(lat: npt.ArrayLike, lon: npt.ArrayLike, k: int) -> np.ndarray:
    """The indices of each site's ``k`` nearest *other* sites, nearest first.

    Distances are great-circle (:func:`haversine_km`); equal distances keep the smaller index
    first.

    Parameters
    ----------
    lat : array-like, shape (n_sites,)
        The sites' latitudes, in degrees.
    lon : array-like, shape (n_sites,)
        The sites' longitudes, in degrees.
    k : int
        The number of neighbours, between 0 and n_sites − 1.

    Returns
    -------
    numpy.ndarray, shape (n_sites, k)
        Row i: the indices of site i's neighbours.

    Raises
    ------
    ValueError
        If ``lat`` and ``lon`` are not 1-d of the same length, a coordinate is missing,
        infinite or off the globe (not degrees), or ``k`` is out of range.
    """
    lat = np.asarray(lat, dtype=np.float64)
    lon = np.asarray(lon, dtype=np.float64)
    if lat.shape != lon.shape or lat.ndim != 1:
        raise ValueError("lat and lon must be 1-d arrays of the same length")
    bad_lat, bad_lon = off_the_globe(lat, lon)
    if (bad_lat | bad_lon).any():
        i = int(np.flatnonzero(bad_lat | bad_lon)[0])
        what = ("a missing or infinite coordinate" if not np.isfinite(lat[i] + lon[i]) else
                "a coordinate off the globe")
        raise ValueError(f"site {i} has {what} (latitude {lat[i]}, longitude {lon[i]}): "
                         f"expected degrees, latitude in {LATITUDES}, longitude in "
                         f"{LONGITUDES}")
    n = lat.size
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k <= n - 1:
        raise ValueError(f"k must be between 0 and n_sites - 1 = {n - 1}, got {k}")
    dist = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    np.fill_diagonal(dist, np.inf)
    # Stable sort: equal distances keep the smaller index first.
    return np.argsort(dist, axis=1, kind="stable")[:, :k]
