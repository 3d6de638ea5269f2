"""Download one Hugging Face model at image build time, into the directory the image serves.

The GPU images bake their weights in (infra/docker/*-gpu.Dockerfile, stage ``weights``) so a
new replica starts by loading files already on its disk instead of downloading tens of
gigabytes first: the cold-start advice of the serving talk (docs/compliance.md, targets).

    python fetch_weights.py REPO REVISION DEST [--include PATTERN ...]

REVISION is a branch, tag or commit; the commit it resolved to is written to
``DEST/SOURCE.json`` with the repository and the file list, so an image says exactly which
weights it holds (pin the commit in the Dockerfile's build argument for a reproducible build).
Gated models (Gemma, Orpheus) need a Hugging Face token: it is read from the BuildKit secret
``hf_token`` (``docker build --secret id=hf_token,env=HF_TOKEN``), mounted at
``/run/secrets/hf_token`` for that one step, so it is in no layer, no build argument and no
environment variable of the image.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

SECRET_FILE = Path(os.environ.get("HF_TOKEN_FILE", "/run/secrets/hf_token"))


def read_token(path: Path | None = None) -> str | None:
    """The build secret's token, or None (public models) when no secret was mounted."""
    try:
        token = (path or SECRET_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return token or None


def fetch(repo: str, revision: str, dest: Path, include: list[str] | None = None) -> dict:
    """Download ``repo`` at ``revision`` into ``dest``; the provenance written next to it."""
    from huggingface_hub import HfApi, snapshot_download

    token = read_token()
    commit = HfApi(token=token).model_info(repo, revision=revision).sha
    snapshot_download(
        repo_id=repo,
        revision=commit,
        local_dir=str(dest),
        allow_patterns=include or None,
        token=token,
    )
    # huggingface_hub's bookkeeping for local_dir downloads: not needed to serve the model.
    shutil.rmtree(dest / ".cache", ignore_errors=True)
    if not (dest / "config.json").is_file():
        raise SystemExit(f"fetch_weights: {repo}@{commit} has no config.json in {dest}")
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    source = {"repo": repo, "revision": revision, "commit": commit, "files": files}
    (dest / "SOURCE.json").write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
    return source


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Download a Hugging Face model at build time.")
    parser.add_argument("repo", help="the model repository, e.g. openai/whisper-large-v3-turbo")
    parser.add_argument("revision", help="a branch, tag or commit (pin a commit)")
    parser.add_argument("dest", type=Path, help="the directory the image serves it from")
    parser.add_argument(
        "--include", action="append", default=None, help="only files matching (repeatable)"
    )
    args = parser.parse_args(argv)
    source = fetch(args.repo, args.revision, args.dest, args.include)
    sys.stdout.write(
        f"{source['repo']}@{source['commit']}: {len(source['files'])} files in {args.dest}\n"
    )


if __name__ == "__main__":
    main()
