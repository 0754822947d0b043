"""World cities and great-circle distances for the fraud generator and its detectors.

The table is deliberately small (42 cities, 6 continents) and fixed: it is part of the
generator's determinism. Cities carry a ``weight`` for picking home cities (Europe is
over-weighted because the showcase bank charges in EUR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EARTH_RADIUS_KM = 6371.0088


@dataclass(frozen=True, slots=True)
class City:
    """A city centre: ``country`` is an ISO 3166 alpha-2 code."""

    name: str
    country: str
    lat: float
    lon: float
    weight: float = 1.0


CITIES: tuple[City, ...] = (
    # Europe
    City("Paris", "FR", 48.8566, 2.3522, 3.0),
    City("London", "GB", 51.5074, -0.1278, 3.0),
    City("Berlin", "DE", 52.5200, 13.4050, 3.0),
    City("Madrid", "ES", 40.4168, -3.7038, 3.0),
    City("Rome", "IT", 41.9028, 12.4964, 3.0),
    City("Amsterdam", "NL", 52.3676, 4.9041, 3.0),
    City("Vienna", "AT", 48.2082, 16.3738, 3.0),
    City("Stockholm", "SE", 59.3293, 18.0686, 3.0),
    City("Warsaw", "PL", 52.2297, 21.0122, 3.0),
    City("Lisbon", "PT", 38.7223, -9.1393, 3.0),
    City("Dublin", "IE", 53.3498, -6.2603, 3.0),
    City("Zurich", "CH", 47.3769, 8.5417, 3.0),
    City("Istanbul", "TR", 41.0082, 28.9784, 2.0),
    City("Athens", "GR", 37.9838, 23.7275, 3.0),
    City("Prague", "CZ", 50.0755, 14.4378, 3.0),
    # Americas
    City("New York", "US", 40.7128, -74.0060),
    City("Los Angeles", "US", 34.0522, -118.2437),
    City("Chicago", "US", 41.8781, -87.6298),
    City("Toronto", "CA", 43.6532, -79.3832),
    City("Mexico City", "MX", 19.4326, -99.1332),
    City("São Paulo", "BR", -23.5505, -46.6333),
    City("Buenos Aires", "AR", -34.6037, -58.3816),
    City("Bogotá", "CO", 4.7110, -74.0721),
    City("Lima", "PE", -12.0464, -77.0428),
    # Asia
    City("Tokyo", "JP", 35.6762, 139.6503),
    City("Seoul", "KR", 37.5665, 126.9780),
    City("Shanghai", "CN", 31.2304, 121.4737),
    City("Hong Kong", "HK", 22.3193, 114.1694),
    City("Singapore", "SG", 1.3521, 103.8198),
    City("Bangkok", "TH", 13.7563, 100.5018),
    City("Mumbai", "IN", 19.0760, 72.8777),
    City("Delhi", "IN", 28.7041, 77.1025),
    City("Dubai", "AE", 25.2048, 55.2708),
    City("Jakarta", "ID", -6.2088, 106.8456),
    City("Manila", "PH", 14.5995, 120.9842),
    # Africa
    City("Cairo", "EG", 30.0444, 31.2357),
    City("Lagos", "NG", 6.5244, 3.3792),
    City("Johannesburg", "ZA", -26.2041, 28.0473),
    City("Nairobi", "KE", -1.2921, 36.8219),
    # Oceania
    City("Sydney", "AU", -33.8688, 151.2093),
    City("Melbourne", "AU", -37.8136, 144.9631),
    City("Auckland", "NZ", -36.8485, 174.7633),
)


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km between two points given in degrees."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


def speed_kmh(lat1: float, lon1: float, t1_ms: int, lat2: float, lon2: float,
              t2_ms: int) -> float:
    """Implied travel speed between two located instants; ``inf`` if they are simultaneous
    and apart, 0.0 if simultaneous and at the same point."""
    if lat1 == lat2 and lon1 == lon2:
        return 0.0  # what the formula gives for one point, without the trigonometry
    km = haversine_km(lat1, lon1, lat2, lon2)
    hours = abs(t2_ms - t1_ms) / 3_600_000
    if hours == 0:
        return math.inf if km > 0 else 0.0
    return km / hours
