#!/usr/bin/env bash
# Create (or refresh) the tools venv that every make target runs in.
#
#   scripts/tools-venv.sh DIR
#   BUNDLE=bundle.tar scripts/tools-venv.sh DIR     offline, from the wheels `bootstrap bundle` put in it
#
# py-rattler and conda-lock need Python >= 3.10. If the host's python3 is
# older (a 3.9-only cluster login node), uv — pinned and hash-checked like the
# rest, and itself installable on 3.9 — provides a Python 3.11 instead (one on
# the machine, or a python-build-standalone download; UV_PYTHON_INSTALL_MIRROR
# points it at a mirror). No conda is involved.
#
# A venv hard-codes its own path, so the new one is built where it will live:
# the working one is moved aside first and put back if anything fails (no
# network, a bad hash, Ctrl-C, a closed terminal), so a failed refresh never leaves DIR broken.
# Two runs at once take turns (flock, where the system has it).
set -euo pipefail

venv=${1:?usage: tools-venv.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
reqs="$here/requirements-tools.txt"
script="$here/tools-venv.sh"
python=${PYTHON:-python3}
old="$venv.old"
trash="$venv.trash"
work=$(mktemp -d)

trap 'rm -rf "$work"' EXIT
say() { echo "tools-venv: $*" >&2; }
# Built from these requirements by this script: the stamps hold both as they were, so a checkout or a
# touch that leaves their content as it was needs no rebuild (and none that needs the network).
up_to_date() {
  [ -z "${BUNDLE:-}" ] && cmp -s "$reqs" "$venv/.requirements-tools.txt" && cmp -s "$script" "$venv/.tools-venv.sh" \
    && "$venv/bin/python" -c '' 2>/dev/null
}

if command -v flock >/dev/null; then
  exec 9>"$venv.lock"
  if ! flock -n 9; then
    say "waiting for another tools-venv.sh building $venv ..."
    flock 9
    if up_to_date; then
      exit 0  # the other run just built it from these requirements
    fi
  fi
fi

if ! command -v "$python" >/dev/null; then
  say "'$python' not found; install Python >= 3.9 or set PYTHON=/path/to/python3"
  exit 2
fi
if ! version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>"$work/err"); then
  say "'$python' does not run ($(head -n 1 "$work/err")); set PYTHON=/path/to/python3"
  exit 2
fi
at_least() { "$python" -c "import sys; sys.exit(sys.version_info < ($1, $2))"; }
if ! at_least 3 9; then
  say "'$python' is Python $version; the tools need Python >= 3.9 (set PYTHON=/path/to/python3)"
  exit 2
fi
# Debian and Ubuntu ship python3 without ensurepip: its `-m venv` fails, and not for want of a network.
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  say "'$python' cannot create a venv (no ensurepip: on Debian/Ubuntu \`apt install python3-venv\`, or set PYTHON=/path/to/python3)"
  exit 2
fi

# A run killed before it finished left the last working venv aside: that one is the venv.
# One killed while it removed the replaced venv left what it had not removed yet.
rm -rf "$trash"
if [ -d "$old" ]; then
  rm -rf "$venv"
  mv "$old" "$venv"
fi

if up_to_date; then
  exit 0
fi

# --no-deps: the file pins every package the tools import, each with its hashes, and leaves out on
# purpose the dependencies (most of conda-lock's tree) they never import (scripts/requirements-unused.txt).
# --no-compile: Python writes the bytecode of what is imported on first use; compiling every module
# up front would store it for conda-lock's vendored conda and poetry too, which the tools barely touch.
install=(--quiet --disable-pip-version-check --require-hashes --no-deps --no-compile --retries 2 --timeout 20
  -r "$reqs")
count=$(grep -c '^[A-Za-z0-9]' "$reqs" || true)
if [ -n "${BUNDLE:-}" ]; then
  # The same pinned, hash-checked requirements, from the bundle's wheels for this Python and platform.
  if ! at_least 3 10; then
    say "offline from $BUNDLE needs a python3 >= 3.10 here, not Python $version (set PYTHON=/path/to/python3)"
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
    say "cannot read $BUNDLE as a tar (no such file, or a damaged or truncated copy: copy it again)"
    exit 2
  fi
  if ! tar -xf "$BUNDLE" -C "$work" "tools/$tag" 2>/dev/null; then
    say "$BUNDLE holds no tools venv wheels for $tag; make it with \`make bundle BUNDLE_ARGS=\"--tools-python X.Y\"\` for this python3"
    exit 2
  fi
  # Before the working venv is moved aside: do the wheels cover the requirements, hashes included?
  "$python" -m venv "$work/probe"
  if ! "$work/probe/bin/python" -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps -r "$reqs" \
      --no-index --find-links "$work/tools/$tag" -d "$work/checked" >"$work/probe.log" 2>&1; then
    say "the wheels in $BUNDLE for $tag do not install $reqs (made from another checkout, or a truncated copy?): make the bundle again; $venv is unchanged. pip said: $(tail -n 1 "$work/probe.log")"
    exit 2
  fi
  install+=(--no-index --find-links "$work/tools/$tag")
fi

# From here on a failure puts the working venv back.
if [ -d "$venv" ]; then
  mv "$venv" "$old"
fi
# What to try when a step fails: the network behind each step is a different one.
hint="offline? BUNDLE=FILE from \`make bundle\`, or a PyPI mirror in PIP_INDEX_URL"
finish() {
  status=$?
  if [ "$status" -ne 0 ] && [ -z "${built:-}" ]; then
    rm -rf "$venv"
    if [ -d "$old" ]; then
      mv "$old" "$venv"
      say "could not build the tools venv; the previous $venv is back as it was ($hint)"
    else
      say "could not build the tools venv ($hint)"
    fi
  fi
  rm -rf "$work"
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP  # the terminal closed (an ssh connection dropped)

if at_least 3 10; then
  say "creating the venv $venv (Python $version)"
  "$python" -m venv "$venv"
else
  say "Python $version is older than 3.10; asking uv for a Python 3.11"
  hint="offline? a PyPI mirror in PIP_INDEX_URL"  # no bundle: it needs a python3 >= 3.10 here
  "$python" -m venv "$work/seed"
  # uv's own pins and hashes, from the same requirements file.
  awk '/^uv==/ { keep = 1 } keep { print } keep && !/\\$/ { exit }' "$reqs" >"$work/uv.txt"
  say "installing uv into a seed venv"
  "$work/seed/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$work/uv.txt"
  hint="uv found no Python 3.11 here and could not download one: offline? UV_PYTHON_INSTALL_MIRROR=URL of a python-build-standalone mirror, or PYTHON=/path/to/python3.10-or-newer"
  say "creating the venv $venv (Python 3.11, from uv)"
  "$work/seed/bin/uv" venv --quiet --seed --python 3.11 "$venv"
  hint="offline? a PyPI mirror in PIP_INDEX_URL"
fi

# The venv module seeds setuptools up to Python 3.11; nothing in the tools imports it.
"$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check --yes setuptools 2>/dev/null || true
say "installing $count pinned, hash-checked packages from ${reqs#"$here/"}${BUNDLE:+ (the wheels in $BUNDLE)}"
"$venv/bin/python" -m pip install "${install[@]}"
# The stamps make compares, by content, with the requirements and this script (see the Makefile).
cp "$script" "$venv/.tools-venv.sh"
cp "$reqs" "$venv/.requirements-tools.txt"
# The new venv is the venv now, whatever interrupts what follows: the replaced one leaves the
# name `.old` in one rename before its removal starts, so no half-removed copy of it is ever put back.
built=1
if [ -d "$old" ]; then
  mv "$old" "$trash"
fi
rm -rf "$trash"
