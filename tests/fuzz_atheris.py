"""Coverage-guided fuzzing (atheris, i.e. libFuzzer) of the SIP, SDP, digest and DTMF parsers.

    .venv/bin/python -m tests.fuzz_atheris -max_total_time=300 [CORPUS_DIR ...]

from the repository root; any libFuzzer flag works. The first input byte picks the parser, the
rest is its input; the oracles are tests/test_fuzz.py's, so a finding here is a failure there
too. A crash leaves ``crash-*`` (the input) where ``-artifact_prefix`` points: replay it with
``python -m tests.fuzz_atheris crash-...`` and pin it in tests/test_fuzz.py. The seeds are the
Hypothesis module's real messages, written to the corpus directory when it is empty (to a
temporary one when none is named).
tests/test_fuzz.py runs this for a few seconds where atheris is installed (it has wheels for
x86-64 Linux only).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["telephony"]):
    import telephony.rtp.dtmf
    import telephony.sip.auth
    import telephony.sip.message
    import telephony.sip.sdp  # noqa: F401  (instrumented before the oracles import them)

from tests.test_fuzz import (  # noqa: E402
    OFFER,
    TEMPLATES,
    check_digest_header,
    check_sdp_body,
    check_sip_datagram,
    check_telephone_event,
)

TARGETS = (
    check_sip_datagram,
    check_sdp_body,
    lambda data: check_digest_header(data.decode("utf-8", "replace")),
    check_telephone_event,
)


def one_input(data: bytes) -> None:
    if data:
        TARGETS[data[0] % len(TARGETS)](data[1:])


def seed_corpus() -> list[bytes]:
    auth = b'Digest realm="r", nonce="1.ab", qop="auth", algorithm=MD5, opaque="x"'
    return [b"\x00" + t for t in TEMPLATES] + [b"\x01" + OFFER, b"\x02" + auth, b"\x03\x05\x8a"]


def main(argv: list[str]) -> None:
    corpora = [arg for arg in argv[1:] if not arg.startswith("-")]
    if not corpora:  # none named: a temporary one
        corpora = [tempfile.mkdtemp(prefix="sip-fuzz-corpus-")]
        argv = [*argv, corpora[0]]
    corpus = Path(corpora[0])
    if corpus.is_dir() and not any(corpus.iterdir()):  # an empty corpus starts from the seeds
        for i, seed in enumerate(seed_corpus()):
            (corpus / f"seed-{i}").write_bytes(seed)
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
