"""The name server's key file (brokergroup_remoting.keys, the one reader) and its place in the controller's start-up.

A key file that is not JSON, lacks a key or holds a short one stops the controller at
configuration time with a message naming the file and the field, never the secret.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokergroup_controller.config import load_config
from brokergroup_remoting.keys import read_key_file
from brokergroup_remoting.net import Credentials

SECRET = "the-secret-key-value"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ('["nsAccessKey"]', "must hold a JSON object"),
        (json.dumps({"secretKey": SECRET}), "accessKey must be a string"),
        ('{"accessKey": "nsAccessKey"}', "secretKey must be a string"),
        ('{"accessKey": "nsAccessKey", "secretKey": "short"}', "secretKey must be a string"),
        (json.dumps({"accessKey": 12345678, "secretKey": SECRET}), "accessKey must be a string"),
    ],
)
def test_a_bad_key_file_is_refused_without_showing_the_secret(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as caught:
        read_key_file(str(path))
    assert SECRET not in str(caught.value)
    with pytest.raises(ValueError, match=message):
        load_config(
            config_path=None,
            node_id=1,
            peers="127.0.2.1:9880",
            data_dir=str(tmp_path / "data"),
            insecure_no_auth=True,
            namesrv_key_file=str(path),
        )


def test_the_key_pair_and_the_port_reach_the_config(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"accessKey": "nsAccessKey", "secretKey": SECRET}))
    assert read_key_file(str(path)) == Credentials("nsAccessKey", SECRET)
    config = load_config(
        config_path=None,
        node_id=1,
        peers="127.0.2.1:9880",
        data_dir=str(tmp_path / "data"),
        insecure_no_auth=True,
        namesrv_key_file=str(path),
        namesrv_port=19876,
    )
    assert (config.namesrv_key_file, config.namesrv_port) == (str(path), 19876)
    with pytest.raises(ValueError, match="namesrvPort 70000 is not a TCP port"):
        load_config(
            config_path=None,
            node_id=1,
            peers="127.0.2.1:9880",
            data_dir=str(tmp_path / "data"),
            insecure_no_auth=True,
            namesrv_port=70000,
        )
