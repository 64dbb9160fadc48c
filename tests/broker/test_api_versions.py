"""ApiVersions (key 18): golden bytes for v0 and v3, the v0-form answer to versions we do not know,
and the advertised table built from the handler modules."""
import pytest

from admin_harness import Harness, framed

from kompakt.broker.network.dispatch import Dispatcher
from kompakt.broker.handlers import api_versions, load_handlers, metadata, produce


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    # a fixed handler table so the golden bytes do not depend on which other APIs exist
    harness.broker.dispatcher = Dispatcher(harness.broker, handlers={
        0: produce, 3: metadata, 18: api_versions})
    yield harness
    harness.close()


async def test_golden_v0(h):
    out = await h.send(bytes.fromhex(
        "0012"          # api_key 18
        "0000"          # api_version 0
        "00000007"      # correlation_id 7
        "0001" "61"     # client_id "a"
    ))
    assert out == framed(bytes.fromhex(
        "00000007"      # correlation_id (header v0)
        "0000"          # error_code 0
        "00000003"      # api_keys: 3
        "0000 0000 000c"  # Produce 0-12 (v0-2 advertised, refused when used)
        "0003 0000 000d"  # Metadata 0-13
        "0012 0000 0004"  # ApiVersions 0-4
    ))


async def test_golden_v3_flexible_body_header_v0(h):
    out = await h.send(bytes.fromhex(
        "0012 0003 00000009"   # ApiVersions v3, correlation_id 9
        "ffff"                 # client_id null
        "00"                   # header tagged fields
        "05 6c696221"          # client_software_name "lib!" (compact)
        "02 31"                # client_software_version "1"
        "00"                   # body tagged fields
    ))
    assert out == framed(bytes.fromhex(
        "00000009"      # correlation_id: header v0 even though v3 is flexible (KIP-511)
        "0000"          # error_code
        "04"            # api_keys: compact array of 3
        "0000 0000 000c 00"   # Produce 0-12, tagged fields
        "0003 0000 000d 00"   # Metadata 0-13
        "0012 0000 0004 00"   # ApiVersions 0-4
        "00000000"      # throttle_time_ms
        "03"            # tagged fields: 3 (KIP-584 features, handlers/api_versions.py)
        "00 17"         # tag 0 SupportedFeatures, 23 bytes: compact array of 1 (v3 omits minimum-0 ones)
        "02" "11" + b"metadata.version".hex() + "0007 0019 00"   # 7-25 (Kafka 4.0's IBP_4_0_IV3)
        "01 08"         # tag 1 FinalizedFeaturesEpoch, 8 bytes
        "0000000000000001"
        "02 56"         # tag 2 FinalizedFeatures, 86 bytes: compact array of 4 (name, max, min level)
        "05" "11" + b"metadata.version".hex() + "0019 0019 00"
        "0e" + b"group.version".hex() + "0001 0001 00"
        "14" + b"transaction.version".hex() + "0002 0002 00"   # 2: Kafka 4.0's default (TV_2)
        "0e" + b"kraft.version".hex() + "0001 0001 00"
    ))


async def test_too_new_version_answers_unsupported_version_in_v0_form(h):
    out = await h.send(bytes.fromhex("0012 0063 0000000b ffff 00 00"))   # ApiVersions v99
    assert out == framed(bytes.fromhex(
        "0000000b"      # correlation_id
        "0023"          # error_code 35 UNSUPPORTED_VERSION
        "00000003"      # api_keys (v0 layout: int32 count)
        "0000 0000 000c" "0003 0000 000d" "0012 0000 0004"
    ))


def test_every_listed_module_declares_a_sane_range():
    handlers = load_handlers()
    assert {0, 1, 2, 3, 18} <= set(handlers)
    for key, module in handlers.items():
        assert 0 <= module.MIN_VERSION <= module.MAX_VERSION, module.__name__
    assert (handlers[0].MIN_VERSION, handlers[1].MIN_VERSION, handlers[2].MIN_VERSION) == (0, 4, 1)
