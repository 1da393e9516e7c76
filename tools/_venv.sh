# Sourced by tools/test.sh and tools/demo.sh: makes .venv if absent and installs kbert (editable) with the given
# extras once, again only when setup.cfg changes. Usage: source tools/_venv.sh; kbert_venv test
kbert_venv() {
  local extras=$1 py=${PYTHON:-python3}
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv || {
      rm -rf .venv  # half-made (Debian without python3-venv leaves one without pip); the next run starts clean
      echo "Could not create .venv with $py; install Python 3.11 with its venv module (Debian/Ubuntu:" \
           "apt-get install python3-venv) or point PYTHON at one." >&2
      return 1
    }
  fi
  local stamp=.venv/.kbert-installed-$extras
  if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
    echo "Installing kbert[$extras] into .venv (first run only; a few minutes)..." >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
    touch "$stamp"
  fi
}
