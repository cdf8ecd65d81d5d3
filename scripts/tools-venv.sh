#!/usr/bin/env bash
# Create (or refresh) the tools venv that every make target runs in.
#
#   scripts/tools-venv.sh DIR
#   BUNDLE=bundle.tar scripts/tools-venv.sh DIR     offline, from the wheels `bootstrap bundle` put in it
#
# py-rattler and conda-lock need Python >= 3.10. If the host's python3 is
# older (a 3.9-only cluster login node), uv — which itself installs on 3.8+ —
# provides a managed 3.11 interpreter instead; that needs python-build-standalone
# downloads or a mirror in UV_PYTHON_INSTALL_MIRROR. No conda is involved.
set -euo pipefail

venv=${1:?usage: tools-venv.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
reqs="$here/requirements-tools.txt"
python=${PYTHON:-python3}

if ! command -v "$python" >/dev/null; then
  echo "tools-venv: '$python' not found; install Python >= 3.9 or set PYTHON=/path/to/python3" >&2
  exit 2
fi

install=(--quiet --disable-pip-version-check --require-hashes -r "$reqs")
if [ -n "${BUNDLE:-}" ]; then
  # The same pinned, hash-checked requirements, from the bundle's wheels for this Python and platform.
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "tools-venv: offline from $BUNDLE needs a python3 >= 3.10 here, not $("$python" -V 2>&1) (set PYTHON=/path/to/python3)" >&2
    exit 2
  fi
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) platform=linux-64 ;;
    Linux-aarch64) platform=linux-aarch64 ;;
    Darwin-arm64) platform=osx-arm64 ;;
    Darwin-x86_64) platform=osx-64 ;;
    *) platform="unsupported-$(uname -s)-$(uname -m)" ;;
  esac
  tag="$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')-$platform"
  if ! tar -tf "$BUNDLE" >/dev/null 2>&1; then
    echo "tools-venv: cannot read $BUNDLE as a tar (no such file, or a damaged or truncated copy: copy it again)" >&2
    exit 2
  fi
  wheels=$(mktemp -d)
  trap 'rm -rf "$wheels"' EXIT
  if ! tar -xf "$BUNDLE" -C "$wheels" "tools/$tag" 2>/dev/null; then
    echo "tools-venv: $BUNDLE holds no tools venv wheels for $tag; make it with \`make bundle BUNDLE_ARGS=\"--tools-python X.Y\"\` for this python3" >&2
    exit 2
  fi
  # Before --clear empties a working venv: do the wheels cover the requirements, hashes included?
  "$python" -m venv "$wheels/probe"
  if ! "$wheels/probe/bin/python" -m pip download --quiet --disable-pip-version-check --require-hashes -r "$reqs" \
      --no-index --find-links "$wheels/tools/$tag" -d "$wheels/checked" >"$wheels/probe.log" 2>&1; then
    echo "tools-venv: the wheels in $BUNDLE for $tag do not install $reqs (made from another checkout, or a truncated copy?): make the bundle again; $venv is unchanged. pip said: $(tail -n 1 "$wheels/probe.log")" >&2
    exit 2
  fi
  install+=(--no-index --find-links "$wheels/tools/$tag")
fi

if "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  "$python" -m venv --clear "$venv"
else
  echo "tools-venv: $("$python" -V 2>&1) is older than 3.10; using a uv-managed Python 3.11" >&2
  seed="$venv.seed"
  "$python" -m venv --clear "$seed"
  "$seed/bin/python" -m pip install --quiet "uv==0.13.9"
  "$seed/bin/uv" venv --quiet --seed --python 3.11 "$venv"
  rm -rf "$seed"
fi

"$venv/bin/python" -m pip install "${install[@]}"
# The stamp is what make compares against the requirements file.
cp "$reqs" "$venv/.requirements-tools.txt"
