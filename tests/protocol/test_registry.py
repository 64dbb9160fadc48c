"""The API table: keys, flexible versions, header versions, warm-up."""
from kompakt.protocol import registry


def test_every_entry_is_keyed_by_its_request_and_response():
    for key, api in registry.API.items():
        assert api.request.API_KEY == key == api.response.API_KEY
        assert api.schema_min <= api.schema_max


def test_flexible_versions_from_the_schemas():
    assert not registry.is_flexible(0, 8) and registry.is_flexible(0, 9)      # Produce 9+
    assert not registry.is_flexible(1, 11) and registry.is_flexible(1, 12)    # Fetch 12+
    assert not registry.is_flexible(3, 8) and registry.is_flexible(3, 9)      # Metadata 9+
    assert not registry.is_flexible(18, 2) and registry.is_flexible(18, 3)    # ApiVersions 3+
    assert not registry.is_flexible(9999, 0)                                  # unknown key
    assert not registry.is_flexible(47, 0)      # OffsetDelete: flexibleVersions "none" -> never


def test_header_versions():
    assert registry.request_header_version(3, 8) == 1
    assert registry.request_header_version(3, 12) == 2
    assert registry.response_header_version(3, 8) == 0
    assert registry.response_header_version(3, 12) == 1
    # ApiVersions answers with header v0 even when its body is flexible (KIP-511)
    assert registry.response_header_version(18, 4) == 0


def test_warm_compiles_each_served_version_once_per_direction():
    assert registry.warm({2: (1, 11), 9999: (0, 3)}) == 2 * 11
    assert registry.decoder(2, 5) is registry.decoder(2, 5)
