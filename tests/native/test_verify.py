"""The cached library's checksum record is checked before every load (quick: no build)."""

from __future__ import annotations

import hashlib
import json

from decentopt import native


def test_a_checksum_record_nested_too_deeply_is_damage_not_a_crash(tmp_path):
    library = tmp_path / "kernels-x.so"
    library.write_bytes(b"\x7fELF not really")
    record = tmp_path / "kernels-x.json"
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    record.write_text(json.dumps({"bytes": library.stat().st_size, "sha256": digest}))
    library.chmod(0o600), record.chmod(0o600), tmp_path.chmod(0o700)
    assert native._verify(library, record) == ""
    record.write_text("[" * 100_000 + "]" * 100_000)
    record.chmod(0o600)
    assert "is damaged" in native._verify(library, record)
