"""Bad input on the command line gets one clear message and an exit code, never a traceback
(`kompakt serve`, `kompakt admin`): what a user who mistypes an argument sees."""
from __future__ import annotations

import pytest

from kompakt.cli import main


def run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


def test_serve_with_an_unknown_log_level(capsys):
    code, err = run(capsys, "serve", "--log-level", "LOUD")
    assert code == 2
    assert err.strip() == ("kompakt serve: unknown log level 'LOUD'; "
                           "choose from DEBUG, INFO, WARNING, ERROR, CRITICAL")


@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:9644", "http://"])
def test_admin_with_a_url_that_is_not_one(capsys, url):
    code, err = run(capsys, "admin", "--url", url, "partitions")
    assert code == 2
    assert err.strip() == f"kompakt admin: --url must look like http://host:port or https://host:port, not {url!r}"
    # ready keeps exit 2 for Docker: anything that is not ready is 1
    code, err = run(capsys, "admin", "--url", url, "ready")
    assert code == 1 and "--url must look like" in err


def test_admin_with_a_missing_cacert(capsys, tmp_path):
    code, err = run(capsys, "admin", "--url", "https://127.0.0.1:1", "--cacert", str(tmp_path / "ca.pem"),
                    "partitions")
    assert code == 2
    assert err.startswith(f"kompakt admin: cannot use --cacert {tmp_path}/ca.pem: ") and "No such file" in err
