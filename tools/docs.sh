#!/usr/bin/env bash
# Builds the documentation site into site/ with `mkdocs build --strict` (mkdocs.yml): a broken link or anchor, a
# page left out of the nav or a warning from the API reference fails the build. The tools live in .venv-docs, made on
# the first run and updated when tools/docs_site/requirements.txt changes; kbert itself is not installed, since the
# reference reads its source. Extra arguments go to `mkdocs build`. Preview: `.venv-docs/bin/mkdocs serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=tools/docs_site/requirements.txt
if [ ! -f .venv-docs/.installed ] || [ "$requirements" -nt .venv-docs/.installed ]; then
  echo "Installing the docs tools into .venv-docs (first run only; a minute)..." >&2
  "${PYTHON:-python3}" -m venv .venv-docs
  .venv-docs/bin/python -m pip install --quiet -r "$requirements"
  touch .venv-docs/.installed
fi
export NO_MKDOCS_2_WARNING=1  # Material's notice about MkDocs 2, printed on every build otherwise
exec .venv-docs/bin/mkdocs build --strict "$@"
